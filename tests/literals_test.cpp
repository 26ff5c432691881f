// Literals and text that once broke generated code: infinities as defaults, inits and literals,
// literals beyond float's range, a summary on several lines, and backslashes at the ends of a
// summary, a doc and a spec line's YAML comment (tests/specs/literals_and_text.yaml, built by
// tests/CMakeLists.txt through optgen_add_optimizer: NVRTC and the host compiler compile it).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>

#include "check.h"
#include "emit_common.h"
#include "literals_and_text.h"
#include "literals_and_text_reference.h"
#include "optimizer_harness.h"
#include "spec.h"

using namespace optgen_test;

TEST_CASE("literals print as C++ and CUDA read them", "[emit]") {
  CHECK(optgen::cpp_double_literal(0.9) == "0.9");
  CHECK(optgen::cpp_double_literal(2) == "2.0");
  CHECK(optgen::cpp_double_literal(INFINITY) == "::std::numeric_limits<double>::infinity()");
  CHECK(optgen::cpp_double_literal(-INFINITY) == "-::std::numeric_limits<double>::infinity()");
  CHECK(optgen::cuda_float_literal(0.9) == "0.9f");
  CHECK(optgen::cuda_float_literal(1e39) == "__int_as_float(0x7f800000)");  // beyond float: as T_(1e39) is
  CHECK(optgen::cuda_float_literal(-1e39) == "__int_as_float(0xff800000)");
  CHECK(optgen::cuda_float_literal(1e-50) == "0.0f");
  CHECK(optgen::cuda_float_literal(3.4028234663852886e38) == "3.4028235e+38f");  // FLT_MAX, in 8 digits
  CHECK(optgen::cuda_double_literal(1e39) == "1e+39");
  CHECK(optgen::comment_text("two\nlines \\") == "two lines");
  CHECK(optgen::comment_text("ends in \\\\ \t") == "ends in");
  // Control characters and bytes that are not UTF-8 become ?: NVRTC reads 0xFF as the end of the source (a
  // fuzzing finding); well-formed UTF-8 stays.
  CHECK(optgen::comment_text("a\xff b\x01 c\xc3\xa9 d\xc3") == "a? b? c\xc3\xa9 d?");
}

TEST_CASE("infinite defaults and inits, and literals beyond float, in the CPU reference", "[reference]") {
  const auto& ref = optgen::reference::literals_and_text::optimizer();
  CHECK(std::isinf(ref.hyperparameters[1].default_value));             // clip
  CHECK(std::isinf(ref.states[0].init.value));                         // m
  std::vector<double> h = {0.01, INFINITY, 9007199254740992.0, 0, 0};  // no clipping
  double scalar_state[1] = {0};
  float param = 1.0f, grad = 0.5f, m = std::numeric_limits<float>::infinity();
  float* states[] = {&m};
  optgen::reference::Tensor<float> t{1, &param, &grad, states};
  ref.step_float(h.data(), scalar_state, 1, &t, 1, 1.0f, nullptr);
  // huge = min(1e39, 2) is 2 (1e39 is inf in float); g = 0.5; m = min(inf, min(inf, 1.5)) = 1.5
  CHECK(m == 1.5f);
  CHECK(param == Approx(1.0f - 0.01f * 2.0f * 0.5f / 1.5f).epsilon(1e-6));
}

TEST_CASE("infinities of either sign, as YAML and C write them, are inits and defaults", "[spec]") {
  const optgen::Spec spec = optgen::load_spec_text("running_max.yaml", R"(optimizer: RunningMax
summary: a running maximum that starts at minus infinity
hyperparameters:
  floor:   {type: float, default: -.inf}
  ceiling: {type: float, default: +.Inf}
state:
  peak: {init: -inf}
update:
  - peak = clamp(max(peak, abs(grad)), floor, ceiling)
  - param = param - 0.01 * grad / (peak + 1)
)");
  CHECK(spec.hyperparameters[0].default_value == -INFINITY);
  CHECK(spec.hyperparameters[1].default_value == INFINITY);
  CHECK(spec.states[0].init.value == -INFINITY);
  // A number in digits beyond double's range is an error, not infinity.
  const std::string beyond = optgen::test::spec_error("beyond.yaml", R"(optimizer: Beyond
summary: s
hyperparameters:
  lr: {type: float, default: -1e999}
update:
  - param = param - lr * grad
)");
  CHECK_THAT(beyond, Catch::Contains("default '-1e999' of 'lr' is a number beyond double's range"));
}

TEST_CASE("literals and text: the kernels match the reference", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const auto& info = optgen::LiteralsAndText::info();
  const auto& ref = optgen::reference::literals_and_text::optimizer();
  std::mt19937 rng(6);
  DeviceGroup group(DType::F32, {7, 4097}, {false, true}, rng);
  std::vector<double> h = optgen::default_hyperparameters(info);
  optgen::FusedOptimizer opt(info, h);
  opt.add_param_group(group.tensors, h);
  const Comparison result = compare_steps(opt, ref, group, 3, rng);
  INFO("worst relative error " << result.worst << " in " << result.where);
  CHECK(result.worst <= 1e-5);
}
