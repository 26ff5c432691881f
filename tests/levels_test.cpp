// Per-tensor values: tests/specs/numel_sgd.yaml scales each tensor's step by 1 / sqrt(numel) once
// the tensor has more than `large` elements. The CPU reference against the arithmetic by hand, and
// on a GPU the kernels (which compute tensor values once per block) against the reference, on sizes
// on both sides of the threshold.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "numel_sgd.h"
#include "numel_sgd_reference.h"
#include "optimizer_harness.h"

using namespace optgen_test;

TEST_CASE("per-tensor values follow each tensor's numel in the CPU reference", "[reference]") {
  const auto& ref = optgen::reference::numel_sgd::optimizer();
  std::vector<double> h = {0.1, 0.0, 1000, 0.0, 0.0};  // lr, momentum, large; max_grad_norm, clip_grad_norm: off
  double scalar_state[1] = {0};
  for (std::size_t n : {std::size_t{10}, std::size_t{1000}, std::size_t{2000}}) {
    std::vector<double> param(n, 1.0), grad(n, 0.5), buf(n, 0.0);
    double* states[] = {buf.data()};
    optgen::reference::Tensor<double> t{n, param.data(), grad.data(), states};
    ref.step_double(h.data(), scalar_state, 1, &t, 1, 1.0, nullptr);
    const double warmup = 1.0 / 3.0;  // min(1, step / 3) at step 1
    const double scale = n > 1000 ? 0.1 * warmup / std::sqrt(static_cast<double>(n)) : 0.1 * warmup;
    INFO(n << " elements");
    CHECK(param[n - 1] == Approx(1.0 - scale * 0.5).epsilon(1e-14));
  }
}

TEST_CASE("per-tensor values on the GPU match the CPU reference", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const auto& info = optgen::NumelSgd::info();
  const auto& ref = optgen::reference::numel_sgd::optimizer();
  std::mt19937 rng(12);
  DeviceGroup group(DType::F32, {1, 999, 1000, 1001, 4097, 70001}, {false, true, false, true, false, false}, rng);
  std::vector<double> h = optgen::default_hyperparameters(info);
  optgen::FusedOptimizer opt(info, h);
  opt.add_param_group(group.tensors, h);
  const Comparison result = compare_steps(opt, ref, group, 4, rng);
  INFO("worst relative error " << result.worst << " in " << result.where);
  CHECK(result.worst <= 1e-5);
}
