// CUDA-graph capture: a step captured once and replayed gives, bit for bit, what the same number of
// eager steps gives, for every built-in spec and variant, with the learning rate changed between
// replays; and the eager steps match the CPU reference all along (scalar state, RAdam's
// rectification switching, ASGD's eta and mu included).
#include <catch2/catch.hpp>

#include <random>

#include "optimizer_harness.h"

using namespace optgen_test;

namespace {

/// A stream, and a graph of what was enqueued on it between begin() and end().
class Capture {
 public:
  Capture() { optgen::driver::check(api().cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate"); }
  ~Capture() {
    if (exec_) api().cuGraphExecDestroy(exec_);
    if (graph_) api().cuGraphDestroy(graph_);
    api().cuStreamDestroy(stream_);
  }
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;

  CUstream stream() const { return stream_; }
  void begin() { optgen::driver::check(api().cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture"); }
  void end() {
    optgen::driver::check(api().cuStreamEndCapture(stream_, &graph_), "cuStreamEndCapture");
    optgen::driver::check(api().cuGraphInstantiate(&exec_, graph_, 0), "cuGraphInstantiate");
  }
  void replay() { optgen::driver::check(api().cuGraphLaunch(exec_, stream_), "cuGraphLaunch"); }
  void synchronize() { optgen::driver::check(api().cuStreamSynchronize(stream_), "cuStreamSynchronize"); }

 private:
  static const optgen::driver::Api& api() { return optgen::driver::api(); }
  CUstream stream_ = nullptr;
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
};

/// Hyperparameters that reach every branch within a few steps: ASGD's averaging starts at t0 = 3.
std::vector<double> graph_hyperparameters(const optgen::OptimizerInfo& info, int variant) {
  std::vector<double> h = hyperparameters_for(info, variant);
  for (int i = 0; i < info.num_hyperparameters; ++i)
    if (std::string(info.hyperparameters[i].name) == "t0") h[i] = 3;
  return h;
}

}  // namespace

TEST_CASE("a captured step replayed N times equals N eager steps, with lr changed between replays", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  constexpr int kSteps = 8;  // past RAdam's switch to the rectified update (step 6 at beta2 0.999)
  const std::vector<std::int64_t> sizes = {1, 17, 4097, 70001};
  const std::vector<bool> misaligned = {false, true, false, true};
  int variants = 0;
  for (const auto& [name, info] : optgen::builtin_launchers()) {
    const auto& ref = reference_of(name);
    for (int v = 0; v < info->num_variants; ++v, ++variants) {
      DYNAMIC_SECTION(info->variants[v].name) {
        const std::vector<double> h = graph_hyperparameters(*info, v);
        std::mt19937 rng(1000 + variants);
        DeviceGroup eager_group(DType::F32, sizes, misaligned, rng);
        std::mt19937 same(1000 + variants);
        DeviceGroup graph_group(DType::F32, sizes, misaligned, same);  // the same values
        optgen::FusedOptimizer eager(*info, h), graphed(*info, h);
        eager.add_param_group(eager_group.tensors, h);
        graphed.add_param_group(graph_group.tensors, h);

        Capture capture;
        graphed.prepare(capture.stream());
        capture.begin();
        graphed.step(capture.stream());
        capture.end();

        auto scalar_state = initial_scalar_state(*info, eager.hyperparameters(0));
        Comparison result;
        const int lr = [&] {
          for (int i = 0; i < info->num_hyperparameters; ++i)
            if (std::string(info->hyperparameters[i].name) == "lr") return i;
          return -1;
        }();
        REQUIRE(lr >= 0);
        for (std::int64_t step = 1; step <= kSteps; ++step) {
          std::mt19937 gradients(step);
          eager_group.new_gradients(gradients);
          std::mt19937 again(step);
          graph_group.new_gradients(again);
          synchronize();  // a copy from pageable memory may still be in flight when it returns
          const double new_lr = h[lr] * (1.0 + 0.25 * static_cast<double>(step));
          eager.set("lr", new_lr);
          graphed.set("lr", new_lr);  // enqueued on the capture's stream, between replays
          capture.replay();
          capture.synchronize();
          compare_step(eager, ref, eager_group, scalar_state, step, DType::F32, result);
        }
        INFO("eager against the CPU reference: worst relative error " << result.worst << " in " << result.where);
        CHECK(result.worst <= 1e-5);
        CHECK(graph_group.device_bytes() == eager_group.device_bytes());
        CHECK(state_bytes(graphed) == state_bytes(eager));
        CHECK(graphed.step_count(0) == kSteps);
        CHECK(eager.step_count(0) == kSteps);
        for (int s = 0; s < info->num_scalar_states; ++s) {
          const char* state = info->scalar_states[s].name;
          CHECK(graphed.scalar_state(state, 0) == eager.scalar_state(state, 0));
          CHECK(eager.scalar_state(state, 0) == Approx(scalar_state[s]).epsilon(1e-12));
        }
      }
    }
  }
  CHECK(variants == 18);
}

TEST_CASE("a step cannot be prepared inside a capture; a prepared one can be captured", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  std::mt19937 rng(5);
  DeviceGroup group(DType::F32, {1000}, {false}, rng);
  optgen::Adam adam;
  adam.add_param_group(group.tensors);
  Capture capture;
  capture.begin();
  CHECK_THAT(error_of([&] { adam.step(capture.stream()); }),
             Catch::Contains("Adam::prepare failed: the stream is being captured") && Catch::Contains("call prepare()"));
  capture.end();  // the failed step enqueued nothing: the capture is still valid
  adam.prepare(capture.stream());
  Capture second;
  second.begin();
  adam.step(second.stream());
  second.end();
  second.replay();
  second.synchronize();
  CHECK(adam.step_count(0) == 1);
}
