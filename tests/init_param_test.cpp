// A state that starts as the parameter (`init: param`; tests/specs/init_param.yaml, schedule-free
// SGD's averaging): the step reads the parameter in the state's place at the group's first step,
// whatever the state's memory holds (NaN here), on the CPU reference and on the GPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>

#include "check.h"
#include "init_param.h"
#include "init_param_reference.h"
#include "optimizer_harness.h"

using namespace optgen_test;

TEST_CASE("a state with init: param reads the parameter at step 1, in the CPU reference", "[reference]") {
  const auto& ref = optgen::reference::init_param::optimizer();
  REQUIRE(ref.num_states == 1);
  CHECK(ref.states[0].init.param);
  std::vector<double> h = {0.1, 0, 0};  // lr, max_grad_norm (off), clip_grad_norm
  double p = 1.0, z = std::numeric_limits<double>::quiet_NaN();
  double* states[] = {&z};
  for (std::int64_t step = 1; step <= 3; ++step) {
    double g = 0.5 * static_cast<double>(step);
    const double z_expected = (step == 1 ? p : z) - 0.1 * g;
    const double c = 1.0 / static_cast<double>(step);
    const double p_expected = (1 - c) * p + c * z_expected;
    optgen::reference::Tensor<double> t{1, &p, &g, states};
    ref.step_double(h.data(), nullptr, step, &t, 1, 1.0, nullptr);
    CHECK(z == z_expected);
    CHECK(p == p_expected);
  }
}

TEST_CASE("a state with init: param: the kernels match the reference from NaN memory", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const auto& info = optgen::InitParam::info();
  const auto& ref = optgen::reference::init_param::optimizer();
  std::mt19937 rng(11);
  DeviceGroup group(DType::F32, {1, 7, 4097, 70000}, {false, true, false, false}, rng);
  std::vector<double> h = optgen::default_hyperparameters(info);
  optgen::FusedOptimizer opt(info, h);
  opt.add_param_group(group.tensors, h);
  const auto& api = optgen::driver::api();
  for (std::size_t t = 0; t < group.tensors.size(); ++t) {
    const optgen::StateBuffer z = opt.state("z", 0, t);
    optgen::driver::check(
        api.cuMemsetD32(reinterpret_cast<CUdeviceptr>(z.data), 0x7fc00000u, static_cast<size_t>(z.numel)),
        "cuMemsetD32");  // float NaN
  }
  synchronize();
  const Comparison result = compare_steps(opt, ref, group, 3, rng);
  std::size_t not_finite = 0;
  for (const auto& p : group.params)
    for (float x : p) not_finite += std::isfinite(x) ? 0 : 1;
  CHECK(not_finite == 0);
  INFO("worst relative error " << result.worst << " in " << result.where);
  CHECK(result.worst <= 1e-5);
}

TEST_CASE("a state with init: param present under a flag, written only under it, is accepted", "[errors]") {
  // Its unwritten value (`step == 1 ? param : z`) was taken for a write in the variants without it,
  // and refused with a hint to guard the statement that was guarded (`init: zeros` was accepted).
  const std::string body = R"(hyperparameters:
  lr: {type: float, default: 0.1}
  f:  {type: bool, default: false, specialize: true}
state:
  z: {init: param, when: f}
update:
  - when: f
    do:
      - z = lerp(z, param, 0.5)
  - param = param - lr * grad
)";
  CHECK(optgen::test::spec_error("flagged.yaml", optgen::test::spec_text(body)) == "");
  CHECK(optgen::test::ir_after("verify_states", body, {{"f", false}}).find("z <-") == std::string::npos);
  CHECK(optgen::test::ir_after("verify_states", body, {{"f", true}}).find("z <-") != std::string::npos);
  // A write where it is absent is still one.
  std::string unguarded = body;
  unguarded.replace(unguarded.find("  - when: f\n    do:\n      - z"),
                    std::string("  - when: f\n    do:\n      - z").size(), "  - z");
  CHECK_THAT(optgen::test::spec_error("flagged.yaml", optgen::test::spec_text(unguarded)),
             Catch::Contains("state 'z' is written here, but it is absent in variant flagged") &&
                 Catch::Contains("guard the statement with `when: f`"));
}
