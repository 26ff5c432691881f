// CUDA-graph capture: a step captured once and replayed gives, bit for bit, what the same number of
// eager steps gives, for every built-in spec and variant, with the learning rate changed between
// replays; and the eager steps match the CPU reference all along (scalar state, RAdam's
// rectification switching, ASGD's eta and mu included).
#include <catch2/catch.hpp>

#include <random>

#include "capture.h"
#include "optimizer_harness.h"

using namespace optgen_test;

namespace {

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
        const TensorShapes shapes = shapes_for(*info, sizes);
        DeviceGroup eager_group(DType::F32, shapes, misaligned, rng);
        std::mt19937 same(1000 + variants);
        DeviceGroup graph_group(DType::F32, shapes, misaligned, same);  // the same values
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
          compare_step(eager, ref, eager_group, scalar_state, step, result);
        }
        INFO("eager against the CPU reference: worst relative error " << result.worst << " in " << result.where);
        // Muon: each step from the device's values, at most the last step's lr, matrices no taller than wide.
        const double last_lr = h[lr] * (1.0 + 0.25 * kSteps);
        CHECK(result.worst <=
              (steps_matrices(*info) ? matrix_tolerance(*info, info->kernels[0], last_lr, 1.0, 1) : 1e-5));
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
  CHECK(variants >= 2 * 18);  // the 18 variants of the torch.optim specs, clipping or not, and more
}

TEST_CASE("a step cannot be prepared inside a capture, but a prepared one can be captured", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  std::mt19937 rng(5);
  DeviceGroup group(DType::F32, {1000}, {false}, rng);
  optgen::Adam adam;
  adam.add_param_group(group.tensors);
  Capture capture;
  capture.begin();
  CHECK_THAT(
      error_of([&] { adam.step(capture.stream()); }),
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

TEST_CASE("a step captured on a side stream replays on the optimizer's stream, where setters and getters stay",
          "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  std::mt19937 rng(21), same(21);
  DeviceGroup graphed_group(DType::F32, {3000, 17}, {false, true}, rng),
      eager_group(DType::F32, {3000, 17}, {false, true}, same);
  optgen::Adam graphed, eager;
  graphed.add_param_group(graphed_group.tensors);
  eager.add_param_group(eager_group.tensors);
  Capture replay_stream, side;  // two streams: replays run on the first, the capture on the second
  graphed.prepare(replay_stream.stream());
  side.begin();
  graphed.step(side.stream());
  side.end();
  std::mt19937 gradients(5), again(5);
  graphed_group.new_gradients(gradients);
  eager_group.new_gradients(again);
  synchronize();
  for (int step = 1; step <= 50; ++step) {
    const double lr = 1e-3 * (1 + step % 7);
    graphed.set_lr(lr);  // enqueued on the replay stream, between replays
    eager.set_lr(lr);
    optgen::driver::check(optgen::driver::api().cuGraphLaunch(side.exec(), replay_stream.stream()), "cuGraphLaunch");
    eager.step();
  }
  CHECK(graphed.step_count(0) == 50);  // synchronizes the replay stream, no more
  synchronize();
  CHECK(graphed_group.device_bytes() == eager_group.device_bytes());
  CHECK(state_bytes(graphed.engine()) == state_bytes(eager.engine()));
}

TEST_CASE("several kernels and an empty group in one graph, with setters, checkpoints and restores in place under it",
          "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const auto& ref = reference_of("nadam");
  std::mt19937 rng(8);
  DeviceGroup f32(DType::F32, {1000, 3}, {false, true}, rng), bf16(DType::BF16, {500}, {false}, rng);
  optgen::NAdam nadam;
  nadam.add_param_group(f32.tensors);
  nadam.add_param_group({});  // a group with no tensors still steps
  nadam.add_param_group(bf16.tensors);
  f32.new_gradients(rng);
  bf16.new_gradients(rng);
  synchronize();
  Capture capture;
  nadam.prepare(capture.stream());
  capture.begin();
  nadam.step(capture.stream());
  capture.end();
  CHECK(nadam.engine().launches_last_step() == 2);  // f32 and bf16 params: two kernels
  for (int i = 0; i < 3; ++i) capture.replay();
  for (std::size_t g = 0; g < 3; ++g) CHECK(nadam.step_count(g) == 3);

  // Setters on the prepared optimizer write the current slot; the next replay continues from there.
  nadam.set_step_count(10, 0);
  nadam.set_mu_product(0.5, 2);
  capture.replay();
  CHECK(nadam.step_count(0) == 11);
  CHECK(nadam.step_count(1) == 4);
  CHECK(nadam.step_count(2) == 4);
  std::vector<double> h = nadam.engine().hyperparameters(2), state = {0.5, 0};
  std::vector<double> values(ref.variants[0].num_group_values + 1);
  ref.variants[0].per_step(h.data(), state.data(), 4, values.data());  // what step 4 makes of mu_product 0.5
  CHECK(nadam.mu_product(2) == Approx(state[0]).epsilon(1e-12));

  // A checkpoint, two more replays, a restore in place (and the params put back, which a
  // checkpoint of the optimizer does not hold), two more replays: the same as the first two.
  const optgen::Checkpoint saved = nadam.engine().checkpoint();
  const auto f32_saved = f32.device_bytes(), bf16_saved = bf16.device_bytes();
  capture.replay();
  capture.replay();
  capture.synchronize();
  const auto f32_after = f32.device_bytes(), bf16_after = bf16.device_bytes();
  const auto states_after = state_bytes(nadam.engine());
  CHECK(states_after != state_bytes_of(saved));
  nadam.engine().restore(saved);
  f32.set_device_bytes(f32_saved);
  bf16.set_device_bytes(bf16_saved);
  CHECK(nadam.step_count(0) == 11);
  CHECK(nadam.mu_product(2) == Approx(state[0]).epsilon(1e-12));
  capture.replay();
  capture.replay();
  capture.synchronize();
  CHECK(nadam.step_count(0) == 13);
  CHECK(nadam.step_count(1) == 6);
  CHECK(f32.device_bytes() == f32_after);
  CHECK(bf16.device_bytes() == bf16_after);
  CHECK(state_bytes(nadam.engine()) == states_after);
}
