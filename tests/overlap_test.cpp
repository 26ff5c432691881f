// Stages and steps overlap (docs/DESIGN.md, "Stages and steps overlap"): every stage is launched
// early, under the tail of the kernel before it. Steps enqueued back to back, so that each one's
// stages start under the last one's, give bit for bit what the same steps give when the host waits
// for each before it enqueues the next, for every built-in kernel set.
#include <catch2/catch.hpp>

#include <random>

#include "capture.h"
#include "optimizer_harness.h"

using namespace optgen_test;

namespace {

/// Every param, master copy and state of `opt`'s one group, as the device holds them.
std::vector<std::vector<unsigned char>> everything(const optgen::FusedOptimizer& opt, const DeviceGroup& group) {
  std::vector<std::vector<unsigned char>> bytes = group.device_bytes();
  for (auto& state : state_bytes(opt)) bytes.push_back(std::move(state));
  for (std::size_t t = 0; t < group.tensors.size(); ++t) bytes.push_back(master_bytes(opt, 0, t));
  return bytes;
}

}  // namespace

TEST_CASE("steps enqueued back to back equal steps waited for one by one, for every built-in kernel set", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  constexpr int kSteps = 6;
  // Many tensors, large and small, so that a step's last blocks run beside the next one's first.
  std::vector<std::int64_t> sizes;
  std::vector<bool> misaligned;
  for (int i = 0; i < 48; ++i) {
    sizes.push_back(i % 3 == 0 ? 150001 + 97 * i : i % 3 == 1 ? 4096 * (1 + i % 5) : 3 + 31 * i);
    misaligned.push_back(i % 7 == 5);
  }
  int sets = 0;
  for (const auto& [name, info] : optgen::builtin_launchers()) {
    for (int k = 0; k < info->num_kernels; ++k, ++sets) {
      const optgen::KernelInfo& kernel = info->kernels[k];
      DYNAMIC_SECTION(kernel.stages[0]) {
        const std::vector<double> h = hyperparameters_for(*info, kernel.variant);
        std::mt19937 rng(500 + sets), same(500 + sets);
        DeviceGroup overlapped_group(kernel.param, shapes_for(*info, sizes), misaligned, rng);
        DeviceGroup waited_group(kernel.param, shapes_for(*info, sizes), misaligned, same);  // the same values
        optgen::FusedOptimizer overlapped(*info, h, storage_of(*info, kernel));
        optgen::FusedOptimizer waited(*info, h, storage_of(*info, kernel));
        overlapped.add_param_group(overlapped_group.tensors, h);
        waited.add_param_group(waited_group.tensors, h);
        REQUIRE(&overlapped.kernel_set(0) == &kernel);

        Stream stream;
        overlapped.prepare(stream.get());
        waited.prepare(stream.get());
        stream.synchronize();
        for (int step = 0; step < kSteps; ++step) overlapped.step(stream.get());
        for (int step = 0; step < kSteps; ++step) {
          waited.step(stream.get());
          stream.synchronize();
        }
        synchronize();
        CHECK(overlapped.step_count(0) == kSteps);
        CHECK(everything(overlapped, overlapped_group) == everything(waited, waited_group));
      }
    }
  }
  CHECK(sets >= 100);
}
