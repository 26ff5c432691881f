// AMP: every generated optimizer takes torch.amp.GradScaler's device-side grad_scale and found_inf.
// A nonzero found_inf skips the whole step (params, states, scalar state and step count stay bit
// for bit as they were); grad_scale divides the gradients in registers, so that scaled gradients
// give what unscaled ones give the CPU reference. The torch side is checked by torch_amp_test.cpp
// against trajectories recorded from torch's fused optimizers.
#include <catch2/catch.hpp>

#include <random>

#include "optimizer_harness.h"

using namespace optgen_test;

namespace {

/// One float in device memory.
class DeviceFloat {
 public:
  explicit DeviceFloat(float value) : memory_(sizeof(float)) { set(value); }
  void set(float value) { memory_.upload(std::vector<float>{value}); }
  const float* get() const { return reinterpret_cast<const float*>(memory_.get()); }

 private:
  DeviceMemory memory_;
};

}  // namespace

TEST_CASE("found_inf skips the whole step on the device, and grad_scale unscales in registers", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const std::vector<std::int64_t> sizes = {3, 4097, 65539};
  const std::vector<bool> misaligned = {false, true, false};
  constexpr float kScale = 3000.0f;  // not a power of two: the division rounds
  DeviceFloat grad_scale(kScale), found_inf(0.0f);
  int variants = 0;
  for (const auto& [name, info] : optgen::builtin_launchers()) {
    const auto& ref = reference_of(name);
    for (int v = 0; v < info->num_variants; ++v, ++variants) {
      DYNAMIC_SECTION(info->variants[v].name) {
        const std::vector<double> h = hyperparameters_for(*info, v);
        std::mt19937 rng(77 + variants);
        DeviceGroup group(DType::F32, shapes_for(*info, sizes), misaligned, rng);
        optgen::FusedOptimizer opt(*info, h);
        opt.add_param_group(group.tensors, h);
        auto scalar_state = initial_scalar_state(*info, opt.hyperparameters(0));
        Comparison result;
        std::int64_t steps = 0;
        for (int call = 1; call <= 5; ++call) {
          group.new_gradients(rng, kScale);
          const bool overflow = call == 2 || call == 4;
          found_inf.set(overflow ? 1.0f : 0.0f);
          if (overflow) {
            opt.prepare();
            const auto params = group.device_bytes();
            const auto states = state_bytes(opt);
            std::vector<double> scalars;
            for (int s = 0; s < info->num_scalar_states; ++s)
              scalars.push_back(opt.scalar_state(info->scalar_states[s].name, 0));
            opt.step(nullptr, {grad_scale.get(), found_inf.get()});
            synchronize();
            CHECK(group.device_bytes() == params);
            CHECK(state_bytes(opt) == states);
            CHECK(opt.step_count(0) == steps);
            for (int s = 0; s < info->num_scalar_states; ++s)
              CHECK(opt.scalar_state(info->scalar_states[s].name, 0) == scalars[s]);
            continue;
          }
          ++steps;
          StateSnapshot before = snapshot_states(opt, ref, 0, group);
          opt.step(nullptr, {grad_scale.get(), found_inf.get()});
          synchronize();
          check_group(opt, ref, 0, group, before, scalar_state, steps, result, kScale);
          CHECK(opt.step_count(0) == steps);
        }
        INFO("worst relative error against the reference, unscaling by " << kScale << ": " << result.worst << " in "
                                                                         << result.where);
        // Muon: one step at a time from the device's values, its matrices no taller than wide (scale 1).
        CHECK(result.worst <= (steps_matrices(*info)
                                   ? matrix_tolerance(*info, info->kernels[0], hyperparameter(*info, h, "lr"), 1.0, 1)
                                   : 1e-5));
      }
    }
  }
  CHECK(variants >= 2 * 18);  // the 18 variants of the torch.optim specs, clipping or not, and more
}

TEST_CASE("AMP inputs cost one launch like any step, and a null found_inf or grad_scale is ignored", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  std::mt19937 rng(9);
  DeviceGroup group(DType::BF16, {100000}, {false}, rng);
  DeviceFloat grad_scale(1.0f);
  optgen::AdamW adamw;
  adamw.add_param_group(group.tensors);
  adamw.step(nullptr, {grad_scale.get(), nullptr});
  CHECK(adamw.engine().launches_last_step() == 1);
  adamw.step(nullptr, {nullptr, nullptr});
  synchronize();
  CHECK(adamw.step_count(0) == 2);
}
