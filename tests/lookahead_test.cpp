// The remainder operator (`%`): tests/specs/lookahead.yaml, SGD with momentum inside Lookahead,
// takes a slow step when `step % k == 0`. Its CPU reference against the rule written out by hand,
// and on a GPU its kernels against the reference, across the steps where it syncs and where not.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "check.h"
#include "lookahead.h"
#include "lookahead_reference.h"
#include "optimizer_harness.h"

using namespace optgen_test;

TEST_CASE("step % k: Lookahead's reference syncs at every k-th step", "[reference]") {
  const auto& info = optgen::Lookahead::info();
  const auto& ref = optgen::reference::lookahead::optimizer();
  std::vector<double> h = optgen::default_hyperparameters(info);
  const double lr = 0.1, momentum = 0.9, alpha = 0.5;
  h[static_cast<std::size_t>(hyperparameter_index(info, "k"))] = 3;
  double p = 1.0, buf = 0.0, slow = 0.0;  // slow's memory is read only from step 2 on (init: param)
  double* states[] = {&buf, &slow};
  double p_expected = 1.0, buf_expected = 0.0, slow_expected = 1.0;
  int syncs = 0;
  for (std::int64_t step = 1; step <= 7; ++step) {
    double g = 0.25 * static_cast<double>(step) - 1.0;
    buf_expected = momentum * buf_expected + g;
    const double fast = p_expected - lr * buf_expected;
    if (step % 3 == 0) {
      slow_expected += alpha * (fast - slow_expected);
      p_expected = slow_expected;
      ++syncs;
    } else {
      p_expected = fast;
    }
    optgen::reference::Tensor<double> t{1, &p, &g, states};
    ref.step_double(h.data(), nullptr, step, &t, 1, 1.0, nullptr);
    INFO("step " << step);
    CHECK(p == p_expected);
    CHECK(buf == buf_expected);
    CHECK(slow == slow_expected);
  }
  CHECK(syncs == 2);
}

TEST_CASE("step % k: Lookahead's kernels match the reference", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const auto& info = optgen::Lookahead::info();
  const auto& ref = optgen::reference::lookahead::optimizer();
  for (int k = 0; k < info.num_kernels; ++k) {  // f32 and bf16 params, without and with clipping
    const optgen::KernelInfo& kernel = info.kernels[k];
    INFO("kernel set " << kernel.stages[0]);
    std::mt19937 rng(17);
    DeviceGroup group(kernel.param, {1, 7, 4097, 70000}, {false, true, false, false}, rng);
    std::vector<double> h = hyperparameters_for(info, kernel.variant);
    h[static_cast<std::size_t>(hyperparameter_index(info, "k"))] = 3;
    optgen::FusedOptimizer opt(info, h, storage_of(info, kernel));
    opt.add_param_group(group.tensors, h);
    const Comparison result = compare_steps(opt, ref, group, 7, rng);  // syncs at steps 3 and 6
    INFO("worst relative error " << result.worst << " in " << result.where);
    CHECK(result.worst <= 1e-5);
  }
}

TEST_CASE("an int hyperparameter is a whole number where it is given or set", "[launcher]") {
  // k = 2.5 would have stepped as step % 2.5, which no int is.
  const auto& info = optgen::Lookahead::info();
  optgen::FusedOptimizer opt(info, optgen::default_hyperparameters(info));
  std::vector<double> h = optgen::default_hyperparameters(info);
  h[static_cast<std::size_t>(hyperparameter_index(info, "k"))] = 2.5;
  CHECK_THAT(error_of([&] { opt.states_used(h); }),
             Catch::Contains("k is an int; got 2.5") && Catch::Contains("give a whole number"));
  CHECK_THAT(error_of([&] { opt.set("k", 2.5); }), Catch::Contains("k is an int; got 2.5"));
  CHECK(error_of([&] { opt.set("k", 4); }) == "(no error)");
}
