// Reductions: tests/specs/reduction_mix.yaml uses every reduction, over tensors and over the group,
// in three reduce stages. The CPU reference against the same arithmetic written out by hand; on a
// GPU the kernels against the reference (many groups, zero norms, empty and one-element tensors,
// misaligned tensors, thousands of chunks per tensor, 10,000 tensors), and bit-identical results run
// to run and between eager steps and graph replays.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>

#include "capture.h"
#include "optimizer_harness.h"
#include "optimizer_impl.h"
#include "reduction_mix.h"
#include "reduction_mix_reference.h"

using namespace optgen_test;

namespace {

/// One step of reduction_mix.yaml for one group, in double, as its statements read.
void mix_by_hand(double lr, double max_norm, std::vector<std::vector<double>>& params,
                 const std::vector<std::vector<double>>& grads, std::vector<std::vector<double>>& ms) {
  double group_sq = 0, group_max_abs_param = -INFINITY;
  for (size_t t = 0; t < params.size(); ++t)
    for (size_t i = 0; i < params[t].size(); ++i) {
      group_sq += grads[t][i] * grads[t][i];
      group_max_abs_param = std::max(group_max_abs_param, std::fabs(params[t][i]));
    }
  const double clip = std::min(1.0, max_norm / (std::sqrt(group_sq) + 1e-6));
  double group_sum_g = 0;
  for (const auto& g : grads)
    for (double x : g) group_sum_g += x * clip;
  for (size_t t = 0; t < params.size(); ++t) {
    const size_t n = params[t].size();
    std::vector<double> m(n);
    double sum_m = 0, sum_g = 0, max_abs_g = -INFINITY;
    for (size_t i = 0; i < n; ++i) {
      const double g = grads[t][i] * clip;
      m[i] = 0.9 * ms[t][i] + g;
      sum_m += m[i];
      sum_g += g;
      max_abs_g = std::max(max_abs_g, std::fabs(g));
    }
    const double mean = sum_m / static_cast<double>(n);
    double sq = 0;
    for (size_t i = 0; i < n; ++i) sq += (m[i] - mean) * (m[i] - mean);
    const double scale = std::sqrt(sq);
    const double peak = max_abs_g + group_max_abs_param, total = sum_g + group_sum_g;
    for (size_t i = 0; i < n; ++i) {
      const double centered = m[i] - mean;
      params[t][i] -=
          lr * (scale > 0 ? centered / scale : centered) + lr * 0.01 * peak * total / static_cast<double>(n);
    }
    ms[t] = m;
  }
}

/// `sizes` tensors of random values, or zeros.
std::vector<std::vector<double>> values(const std::vector<size_t>& sizes, std::mt19937& rng, bool zeros = false) {
  std::uniform_real_distribution<double> uniform(-1, 1);
  std::vector<std::vector<double>> v;
  for (size_t n : sizes) {
    v.emplace_back(n);
    for (double& x : v.back()) x = zeros ? 0 : uniform(rng);
  }
  return v;
}

/// A multi-group optimizer of `info` stepped on the GPU and checked against the CPU reference after
/// every step.
struct MultiGroupRun {
  optgen::FusedOptimizer opt;
  const optgen::reference::Optimizer& ref;
  std::vector<std::unique_ptr<DeviceGroup>> groups;
  std::vector<std::vector<double>> scalar_states;
  Comparison result;

  MultiGroupRun(const optgen::OptimizerInfo& info, const optgen::reference::Optimizer& reference)
      : opt(info, optgen::default_hyperparameters(info)), ref(reference) {}

  DeviceGroup& add(std::unique_ptr<DeviceGroup> g, const std::vector<double>& h) {
    opt.add_param_group(g->tensors, h);
    scalar_states.push_back(initial_scalar_state(opt.info(), h));
    groups.push_back(std::move(g));
    return *groups.back();
  }

  void step(std::int64_t step, std::mt19937& rng, const std::vector<float>& gradient_scales) {
    std::vector<StateSnapshot> states;
    for (size_t g = 0; g < groups.size(); ++g) {
      groups[g]->new_gradients(rng, gradient_scales[g]);
      states.push_back(snapshot_states(opt, ref, g, *groups[g]));
    }
    opt.step();
    synchronize();
    for (size_t g = 0; g < groups.size(); ++g)
      check_group(opt, ref, g, *groups[g], states[g], scalar_states[g], step, result);
  }
};

/// Zeroes a group's parameters, on the device and in its host copy.
void zero_params(DeviceGroup& g) {
  for (size_t t = 0; t < g.sizes.size(); ++t) {
    std::fill(g.params[t].begin(), g.params[t].end(), 0.0f);
    upload(g.dtype, g.tensors[t].param, g.params[t]);
  }
}

}  // namespace

TEST_CASE("the reference's reductions compute what the spec's statements say", "[reference]") {
  const auto& ref = optgen::reference::reduction_mix::optimizer();
  std::mt19937 rng(3);
  const std::vector<size_t> sizes = {1, 7, 300, 1000};
  auto params = values(sizes, rng), grads = values(sizes, rng), ms = values(sizes, rng, true);
  auto expected_params = params, expected_ms = ms;
  std::vector<double> h = {0.1, 0.5, 0, 0};  // lr, max_norm: the clip is active; no global clipping
  double scalar_state[1] = {0};
  for (std::int64_t step = 1; step <= 3; ++step) {
    std::vector<std::vector<double*>> states(sizes.size());
    std::vector<optgen::reference::Tensor<double>> tensors;
    for (size_t t = 0; t < sizes.size(); ++t) {
      states[t] = {ms[t].data()};
      tensors.push_back({sizes[t], params[t].data(), grads[t].data(), states[t].data()});
    }
    ref.step_double(h.data(), scalar_state, step, tensors.data(), tensors.size(), 1.0, nullptr);
    mix_by_hand(0.1, 0.5, expected_params, grads, expected_ms);
    for (size_t t = 0; t < sizes.size(); ++t)
      for (size_t i = 0; i < sizes[t]; ++i) {
        INFO("step " << step << ", tensor " << t << ", element " << i);
        REQUIRE(params[t][i] == Approx(expected_params[t][i]).epsilon(1e-12).margin(1e-14));
        REQUIRE(ms[t][i] == Approx(expected_ms[t][i]).epsilon(1e-12).margin(1e-14));
      }
  }
}

TEST_CASE("a Reduce stage's block takes as many chunks as fill the GPU's last wave of blocks", "[runtime]") {
  using optgen::reduce_chunks_per_block;
  // gpt2's Muon on an H200: 10,460 chunks, 1,056 blocks at once. 8 a block make 1.24 waves, 7
  // 1.42, 6 1.65; 5 make 2,092 blocks, 1.98 waves.
  CHECK(reduce_chunks_per_block(10460, 1056, true) == 5);
  // Whole waves at 8: 8 * 1056 * 3 chunks.
  CHECK(reduce_chunks_per_block(8 * 1056 * 3, 1056, true) == 8);
  // llama-1b's 150,000 chunks: 17.8 waves at 8.
  CHECK(reduce_chunks_per_block(150000, 1056, true) == 8);
  // No count fills the last wave to 90%: the best (3,100 chunks, 1,000 at once: 1 and 2 a block
  // both fill it to 78%, 3 to 52%).
  CHECK(reduce_chunks_per_block(3100, 1000, true) == 2);
  // Fewer chunks than two blocks' worth a wave: a chunk a block.
  CHECK(reduce_chunks_per_block(1500, 1056, true) == 1);
  CHECK(reduce_chunks_per_block(0, 1056, true) == 1);
  CHECK(reduce_chunks_per_block(100, 0, true) == 1);
  // Without filling the wave: as many as keep the blocks busy.
  CHECK(reduce_chunks_per_block(10460, 1056, false) == 8);
  CHECK(reduce_chunks_per_block(6334, 1056, false) == 5);
  CHECK(reduce_chunks_per_block(1500, 1056, false) == 1);
}

TEST_CASE("reductions on the GPU match the CPU reference: groups, zero norms, odd and empty tensors, many chunks",
          "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const auto& info = optgen::ReductionMix::info();
  const auto& ref = optgen::reference::reduction_mix::optimizer();
  for (long long chunk_size : {2048LL, 64LL}) {  // 64: thousands of partials per tensor to finish
    DYNAMIC_SECTION("chunks of " << chunk_size) {
      std::mt19937 rng(7);
      MultiGroupRun run(info, ref);
      run.opt.set_chunk_size(chunk_size);
      std::vector<double> h = optgen::default_hyperparameters(info);
      run.add(std::make_unique<DeviceGroup>(DType::F32, std::vector<std::int64_t>{1, 17, 0, 4097, 70001},
                                            std::vector<bool>{false, true, false, true, false}, rng),
              h);
      // A group whose params and gradients are all zero: every norm is zero.
      DeviceGroup& zeros = run.add(std::make_unique<DeviceGroup>(DType::F32, std::vector<std::int64_t>{5, 300},
                                                                 std::vector<bool>{true, false}, rng),
                                   h);
      zero_params(zeros);
      h[1] = 100.0;  // max_norm: this group's gradients are not clipped
      run.add(
          std::make_unique<DeviceGroup>(DType::F32, std::vector<std::int64_t>{300001}, std::vector<bool>{false}, rng),
          h);
      run.add(std::make_unique<DeviceGroup>(DType::F32, std::vector<std::int64_t>{}, std::vector<bool>{}, rng), h);
      for (std::int64_t step = 1; step <= 4; ++step) run.step(step, rng, {1.0f, 0.0f, 1.0f, 1.0f});
      INFO("worst relative error " << run.result.worst << " in " << run.result.where);
      CHECK(run.result.worst <= 1e-5);
      CHECK(run.opt.launches_last_step() == 4);  // three reduce stages and the update, for four groups
    }
  }
}

TEST_CASE("reductions over 10,000 tensors in two groups match the CPU reference", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const auto& info = optgen::ReductionMix::info();
  const auto& ref = optgen::reference::reduction_mix::optimizer();
  std::mt19937 rng(11);
  std::uniform_int_distribution<std::int64_t> size(1, 600);
  MultiGroupRun run(info, ref);
  const std::vector<double> h = optgen::default_hyperparameters(info);
  for (int g = 0; g < 2; ++g) {
    std::vector<std::int64_t> sizes(5000);
    for (auto& n : sizes) n = size(rng);
    run.add(std::make_unique<DeviceGroup>(DType::F32, sizes, std::vector<bool>(sizes.size(), false), rng), h);
  }
  for (std::int64_t step = 1; step <= 2; ++step) run.step(step, rng, {1.0f, 1.0f});
  INFO("worst relative error " << run.result.worst << " in " << run.result.where);
  CHECK(run.result.worst <= 1e-5);
}

TEST_CASE("reductions are deterministic: the same inputs give the same bits, eager or replayed from a graph", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const auto& info = optgen::ReductionMix::info();
  const std::vector<std::int64_t> sizes = {3, 4097, 1 << 20, 70001};
  const std::vector<bool> misaligned = {false, true, false, true};
  const std::vector<double> h = optgen::default_hyperparameters(info);
  // Three optimizers on the same values: two eager, one a captured step replayed.
  std::vector<std::unique_ptr<DeviceGroup>> groups;
  std::vector<std::unique_ptr<optgen::FusedOptimizer>> opts;
  for (int i = 0; i < 3; ++i) {
    std::mt19937 rng(5);
    groups.push_back(std::make_unique<DeviceGroup>(DType::F32, sizes, misaligned, rng));
    opts.push_back(std::make_unique<optgen::FusedOptimizer>(info, h));
    opts.back()->set_chunk_size(256);  // many blocks per tensor finish in whatever order they run
    opts.back()->add_param_group(groups.back()->tensors, h);
  }
  Capture capture;
  opts[2]->prepare(capture.stream());
  capture.begin();
  opts[2]->step(capture.stream());
  capture.end();
  for (int step = 1; step <= 5; ++step) {
    for (int i = 0; i < 3; ++i) {
      std::mt19937 gradients(100 + step);
      groups[i]->new_gradients(gradients);
    }
    opts[0]->step();
    opts[1]->step();
    capture.replay();
    capture.synchronize();
    synchronize();
    const auto first = groups[0]->device_bytes();
    INFO("step " << step);
    CHECK(groups[1]->device_bytes() == first);
    CHECK(groups[2]->device_bytes() == first);
    CHECK(state_bytes(*opts[1]) == state_bytes(*opts[0]));
    CHECK(state_bytes(*opts[2]) == state_bytes(*opts[0]));
  }
}

TEST_CASE("a plan's chunks fit the GPU when nothing chose their size", "[runtime]") {
  using optgen::fitted_chunk_size;
  constexpr long long kSMs = 132;  // an H200
  // ghostnet_100's 5,182,508 parameters: an element-wise set's 2048 stays (2,530 chunks), the 8-bit
  // sets' 32768 halves once (158 chunks' worth, fewer than two a multiprocessor) and no further.
  CHECK(fitted_chunk_size(2048, 5182508, kSMs, false, 64) == 2048);
  CHECK(fitted_chunk_size(32768, 5182508, kSMs, false, 256) == 16384);
  // A set of rows and columns wants 32 a multiprocessor: ghostnet_100's 8192 becomes 2048 (the
  // smallest it fits to), resnet50's 25,557,032 parameters 4096 (3,120 chunks at 8192, 23.6 a
  // multiprocessor; 6,240 at 4096, 47), gpt2's 124,439,808 keep 8192 (115 a multiprocessor).
  CHECK(fitted_chunk_size(8192, 5182508, kSMs, true, 64) == 2048);
  CHECK(fitted_chunk_size(8192, 25557032, kSMs, true, 64) == 4096);
  CHECK(fitted_chunk_size(8192, 124439808, kSMs, true, 64) == 8192);
  // The same elements without rows and columns keep 8192 past two a multiprocessor.
  CHECK(fitted_chunk_size(8192, 5182508, kSMs, false, 64) == 8192);
  // A half that is not a multiple of the set's (a compiled-in 8256 = 129 x 64: its half is not
  // a multiple of 64) stops the halving; so does a half below 2048 (3072's 1536).
  CHECK(fitted_chunk_size(8256, 1000, kSMs, true, 64) == 8256);
  CHECK(fitted_chunk_size(3072, 1000, kSMs, true, 64) == 3072);
  CHECK(fitted_chunk_size(1024, 1000, kSMs, true, 64) == 1024);
  // An empty plan, or a device of no multiprocessors reported: nothing to fill.
  CHECK(fitted_chunk_size(8192, 0, kSMs, true, 64) == 2048);
  CHECK(fitted_chunk_size(8192, 1000000, 0, true, 64) == 8192);
}
