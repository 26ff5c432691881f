// States of one value per tensor (`shape: tensor`; tests/specs/tensor_state.yaml, NovoGrad's
// layer-wise second moment and a per-tensor step count). The CPU reference against the spec's
// statements written out by hand; on a GPU the kernels against the reference: tensors of one chunk
// and of many, empty ones, f32 and bf16 params, the variant with Reduce stages and the one without,
// the old value read in a Reduce stage and the new one in the Update stage; and what the runtime
// says of such a state (one value, a checkpoint's round trip).
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "optimizer_harness.h"
#include "tensor_state.h"
#include "tensor_state_reference.h"

using namespace optgen_test;

namespace {

// Hyperparameters in declaration order (then clipping's).
enum { kLr, kBeta1, kBeta2, kEps, kWd, kNormalized };

struct HostTensor {
  std::vector<double> param, grad, m;
  double v = 0, steps = 0;
};

/// One step of tensor_state.yaml over one tensor, in double, as its statements read.
void step_by_hand(HostTensor& t, const std::vector<double>& h, bool normalized) {
  t.steps += 1;
  double agree = 0, n2 = 0;
  if (normalized) {
    for (size_t i = 0; i < t.param.size(); ++i) {
      agree += t.m[i] * t.grad[i] / (std::sqrt(t.v) + h[kEps]);
      n2 += t.grad[i] * t.grad[i];
    }
    t.v = t.steps == 1 ? n2 : h[kBeta2] * t.v + (1 - h[kBeta2]) * n2;
  }
  for (size_t i = 0; i < t.param.size(); ++i) {
    double g = t.grad[i];
    if (normalized) g = t.grad[i] / (std::sqrt(t.v) + h[kEps]) + 1.0e-3 * agree / (1 + std::fabs(agree)) * t.param[i];
    t.m[i] = h[kBeta1] * t.m[i] + g + h[kWd] * t.param[i];
    t.param[i] -= h[kLr] / std::sqrt(t.steps) * t.m[i];
  }
}

std::vector<double> hyperparameters(const optgen::reference::Optimizer& ref, bool normalized) {
  std::vector<double> h;
  for (int i = 0; i < ref.num_hyperparameters; ++i) h.push_back(ref.hyperparameters[i].default_value);
  h[kLr] = 0.05, h[kWd] = 0.01, h[kBeta2] = 0.9, h[kNormalized] = normalized ? 1 : 0;
  ref.derive_flags(h.data());
  return h;
}

}  // namespace

TEST_CASE("the reference keeps one value per tensor, old and new read as the spec's statements say", "[reference]") {
  const auto& ref = optgen::reference::tensor_state::optimizer();
  CHECK(ref.states[1].shape == optgen::StateShape::Tensor);
  CHECK(ref.states[2].shape == optgen::StateShape::Tensor);
  for (const bool normalized : {true, false}) {
    INFO("normalized " << normalized);
    const std::vector<double> h = hyperparameters(ref, normalized);
    std::mt19937 rng(11);
    std::uniform_real_distribution<double> uniform(-1, 1);
    std::vector<HostTensor> expected(3), ours;
    const size_t sizes[] = {1, 40, 300};
    for (size_t t = 0; t < expected.size(); ++t) {
      expected[t].param.resize(sizes[t]);
      for (double& x : expected[t].param) x = uniform(rng);
      expected[t].m.assign(sizes[t], 0.0);
    }
    ours = expected;
    for (std::int64_t step = 1; step <= 4; ++step) {
      std::vector<std::vector<double*>> states;
      std::vector<optgen::reference::Tensor<double>> tensors;
      for (size_t t = 0; t < ours.size(); ++t) {
        expected[t].grad.resize(sizes[t]);
        for (double& x : expected[t].grad) x = uniform(rng);
        ours[t].grad = expected[t].grad;
        states.push_back({ours[t].m.data(), normalized ? &ours[t].v : nullptr, &ours[t].steps});
      }
      for (size_t t = 0; t < ours.size(); ++t)
        tensors.push_back({sizes[t], ours[t].param.data(), ours[t].grad.data(), states[t].data()});
      ref.step_double(h.data(), nullptr, step, tensors.data(), tensors.size(), 1.0, nullptr);
      for (HostTensor& t : expected) step_by_hand(t, h, normalized);
      for (size_t t = 0; t < ours.size(); ++t) {
        INFO("step " << step << ", tensor " << t);
        CHECK(ours[t].steps == step);
        CHECK(ours[t].v == Approx(expected[t].v).epsilon(1e-12));
        for (size_t i = 0; i < sizes[t]; ++i) {
          REQUIRE(ours[t].param[i] == Approx(expected[t].param[i]).epsilon(1e-12).margin(1e-14));
          REQUIRE(ours[t].m[i] == Approx(expected[t].m[i]).epsilon(1e-12).margin(1e-14));
        }
      }
    }
  }
}

TEST_CASE("states of one value per tensor on the GPU match the CPU reference", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const auto& ref = optgen::reference::tensor_state::optimizer();
  for (const bool normalized : {true, false}) {
    for (const DType dtype : {DType::F32, DType::BF16}) {
      DYNAMIC_SECTION((normalized ? "with Reduce stages, " : "an Update stage alone, ") << optgen::to_string(dtype)) {
        std::mt19937 rng(21);
        const std::vector<double> h = hyperparameters(ref, normalized);
        // One element, an empty tensor, one chunk, several chunks, a misaligned tensor; a second
        // group of other hyperparameters; a third of none.
        optgen::FusedOptimizer opt(optgen::TensorState::info(),
                                   optgen::default_hyperparameters(optgen::TensorState::info()));
        DeviceGroup a(dtype, {1, 0, 4097, 300001, 77}, {false, false, false, false, true}, rng);
        DeviceGroup b(dtype, {70001, 5}, {false, false}, rng);
        std::vector<double> h2 = h;
        h2[kLr] = 0.01, h2[kBeta2] = 0.5;
        opt.add_param_group(a.tensors, h);
        opt.add_param_group(b.tensors, h2);
        opt.add_param_group({}, h);  // a group of no tensors steps a placeholder, without buffers
        const Comparison result = step_two_groups(opt, ref, a, b, h, h2, 4, rng);
        INFO("worst relative error " << result.worst << " in " << result.where);
        CHECK(result.worst <= tolerance(dtype, {DType::F32}));
        // Each tensor's count is one value, its group's steps: every block of a tensor read the
        // old one before its last block stored the new.
        for (size_t t = 0; t < a.tensors.size(); ++t) {
          const optgen::StateBuffer s = opt.state("steps", 0, t);
          REQUIRE(s.numel == 1);
          CHECK(download(DType::F32, s.data, 1)[0] == 4.0f);
        }
        if (normalized)
          CHECK(opt.state("v", 0, 0).numel == 1);
        else  // the variant without Reduce stages has no second moment
          CHECK_THROWS_WITH(opt.state("v", 0, 0), Catch::Contains("has no 'v'"));
      }
    }
  }
}

TEST_CASE("steps back to back store a tensor's value as steps one at a time do, bit for bit", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  // Each step's kernels may start under the last one's tail: the value the Update stage's last
  // block stores must be the one the next step's stages read, with no host wait between steps.
  const auto& info = optgen::TensorState::info();
  for (const bool normalized : {true, false}) {
    INFO("normalized " << normalized);
    std::vector<double> h = optgen::default_hyperparameters(info);
    h[kNormalized] = normalized ? 1 : 0;
    std::vector<std::vector<std::vector<unsigned char>>> after;
    for (const bool wait : {true, false}) {
      std::mt19937 rng(8);
      optgen::FusedOptimizer opt(info, h);
      DeviceGroup g(DType::F32, {4097, 300001, 1, 70001}, {false, false, false, false}, rng);
      opt.add_param_group(g.tensors, h);
      g.new_gradients(rng);
      for (int step = 0; step < 6; ++step) {
        opt.step();
        if (wait) synchronize();
      }
      synchronize();
      after.push_back(g.device_bytes());
      for (const auto& s : state_bytes(opt)) after.back().push_back(s);
    }
    CHECK(after[0] == after[1]);
  }
}

TEST_CASE("a checkpoint carries states of one value per tensor", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  std::mt19937 rng(4);
  const auto& info = optgen::TensorState::info();
  optgen::FusedOptimizer opt(info, optgen::default_hyperparameters(info));
  DeviceGroup g(DType::F32, {3, 5000}, {false, false}, rng);
  opt.add_param_group(g.tensors, optgen::default_hyperparameters(info));
  for (int step = 0; step < 3; ++step) {
    g.new_gradients(rng);
    opt.step();
  }
  synchronize();
  const optgen::Checkpoint saved = opt.checkpoint();
  const auto before = state_bytes(opt);
  g.new_gradients(rng);
  opt.step();
  synchronize();
  CHECK(state_bytes(opt) != before);
  opt.restore(saved);
  synchronize();
  CHECK(state_bytes(opt) == before);
  CHECK(download(DType::F32, opt.state("steps", 0, 1).data, 1)[0] == 3.0f);
}
