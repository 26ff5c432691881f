// Spec names against the identifiers of generated code: every name C++ or the generated code keeps
// for itself is refused where a spec would put it, with a located error that says why; and a spec
// that takes the names the generated code uses internally (k, v, h, T, i, result, ...) and CUDA's
// function names as locals gets them mangled: its code compiles (built by tests/CMakeLists.txt
// through optgen_add_optimizer: NVRTC and the host compiler) and computes what the spec says.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "check.h"
#include "generated_names.h"
#include "generated_names_reference.h"
#include "optimizer_harness.h"

using namespace optgen_test;

namespace {

/// A spec that puts `name` in one place a spec can put a name.
struct Placement {
  const char* where;
  std::string (*spec)(const std::string& name);
};

const Placement kPlacements[] = {
    {"hyperparameter",
     [](const std::string& n) {
       return "hyperparameters:\n  " + n + ": {type: float, default: 1}\nupdate:\n  - param = param - grad\n";
     }},
    {"flag",
     [](const std::string& n) {
       return "hyperparameters:\n  " + n +
              ": {type: bool, default: false, specialize: true}\nupdate:\n  - param = param - grad\n";
     }},
    {"state",
     [](const std::string& n) { return "state:\n  " + n + ": {init: zeros}\nupdate:\n  - param = param - grad\n"; }},
    {"scalar state",
     [](const std::string& n) {
       return "scalar_state:\n  " + n + ": {init: 1.0}\nupdate:\n  - param = param - grad\n";
     }},
    {"per-step value",
     [](const std::string& n) { return "per_step:\n  - " + n + " = step * 2\nupdate:\n  - param = param - grad\n"; }},
    {"update local",
     [](const std::string& n) { return "update:\n  - " + n + " = grad * 2\n  - param = param - grad\n"; }},
};

}  // namespace

TEST_CASE("names C++ and the generated code keep are refused wherever a spec puts them, saying why", "[errors]") {
  const std::vector<std::string> everywhere = {"int",          "auto",          "class",
                                               "return",       "namespace",     "new",
                                               "delete",       "this",          "template",
                                               "typename",     "sizeof",        "and",
                                               "xor",          "not_eq",        "static_cast",
                                               "co_await",     "NULL",          "INFINITY",
                                               "NAN",          "assert",        "errno",
                                               "offsetof",     "EOF",           "stdin",
                                               "linux",        "unix",          "INT_MAX",
                                               "SIZE_MAX",     "INT64_C",       "CU_LAUNCH_PARAM_END",
                                               "CUDA_SUCCESS", "NVRTC_SUCCESS", "OPTGEN_BLOCK_SIZE",
                                               "GroupValues",  "TensorValues",  "Math",
                                               "_x",           "x__y",          "lr_",
                                               "exp_avg_data_"};
  int refused = 0;
  for (const auto& name : everywhere)
    for (const auto& place : kPlacements) {
      INFO(name << " as a " << place.where);
      const std::string error = optgen::test::spec_error("test.yaml", optgen::test::spec_text(place.spec(name)));
      CHECK_THAT(error, Catch::StartsWith("test.yaml:") && Catch::Contains("error:"));
      ++refused;
    }
  CHECK(refused == static_cast<int>(everywhere.size() * std::size(kPlacements)));

  // Where the name also names part of the launcher, or of namespace optgen.
  using optgen::test::spec_error;
  using optgen::test::spec_text;
  CHECK_THAT(
      spec_error("test.yaml",
                 spec_text("state:\n  save: {init: zeros}\nupdate:\n  - save = grad\n  - param = param - save\n")),
      Catch::Contains("'save' cannot be used for a state buffer") &&
          Catch::Contains("note: the launcher class already has a member or type 'save'"));
  CHECK_THAT(
      spec_error(
          "test.yaml",
          spec_text("hyperparameters:\n  step_count: {type: float, default: 1}\nupdate:\n  - param = param - grad\n")),
      Catch::Contains("note: its setter set_step_count would collide with the launcher's own set_step_count"));
  CHECK_THAT(spec_error("test.yaml",
                        spec_text("hyperparameters:\n  lr: {type: float, default: 1}\nstate:\n  set_lr: {init: zeros}\n"
                                  "update:\n  - set_lr = grad\n  - param = param - lr * set_lr\n")),
             Catch::Contains("state 'set_lr' would collide with the launcher's setter of hyperparameter 'lr'"));
  CHECK_THAT(spec_error("test.yaml", "optimizer: Tensor\nsummary: s\nupdate:\n  - param = param - grad\n"),
             Catch::Contains("optimizer name 'Tensor' cannot name the launcher's C++ class") &&
                 Catch::Contains("note: namespace optgen already has 'Tensor' (optgen's runtime)"));
  // Names the launcher template declares in namespace optgen (found in the templates' text): the
  // launcher did not compile.
  for (const char* name : {"values_of", "kVariants", "kKernels", "spec_reference"}) {
    INFO("optimizer " << name);
    CHECK_THAT(
        spec_error("test.yaml",
                   "optimizer: " + std::string(name) + "\nsummary: s\nupdate:\n  - param = param - grad\n"),
        Catch::Contains("optimizer name '" + std::string(name) + "' cannot name the launcher's C++ class") &&
            Catch::Contains("note: the generated code already declares '" + std::string(name) + "' (templates/)"));
  }
  // The launcher class's members, found in the template's text.
  for (const char* name : {"prepare", "engine", "info", "load", "Options", "CUstream", "AmpInputs", "StorageOptions"}) {
    INFO("state " << name);
    CHECK_THAT(spec_error("test.yaml", spec_text("state:\n  " + std::string(name) + ": {init: zeros}\nupdate:\n  - " +
                                                 name + " = grad\n  - param = param - grad\n")),
               Catch::Contains("note: the launcher class already has a member or type '" + std::string(name) + "'"));
  }
  CHECK_THAT(spec_error("test.yaml",
                        "optimizer: Test\nsummary: s\nstate:\n  Test: {init: zeros}\nupdate:\n  - Test = grad\n  - "
                        "param = param - Test\n"),
             Catch::Contains("state 'Test' would collide with the launcher's class Test"));
  // And what the generated code names inside the namespace a stem makes (variants::<stem>).
  for (const char* stem :
       {"int", "NULL", "lerp", "Optimizer", "x_", "optgen", "Domain", "StageKind", "ReductionSlot"}) {
    INFO("spec file " << stem << ".yaml");
    CHECK_THAT(spec_error(std::string(stem) + ".yaml", spec_text("update:\n  - param = param - grad\n")),
               Catch::Contains(std::string(stem) + ".yaml: error: the spec's file name"));
  }
  CHECK_THAT(spec_error("Domain.yaml", spec_text("update:\n  - param = param - grad\n")),
             Catch::Contains("note: the generated code names optgen's 'Domain' inside namespace variants::Domain"));
  CHECK_THAT(spec_error("test.yaml", spec_text("update:\n  - true = 1\n  - param = param - grad\n")),
             Catch::Contains("cannot assign to 'true': it is a reserved name of the spec language"));
}

TEST_CASE("names the generated code uses for itself are mangled there: the reference computes what the spec says",
          "[reference]") {
  // tests/specs/generated_names.yaml by hand, in double, for one element over two steps.
  const auto& ref = optgen::reference::generated_names::optimizer();
  // k v h T i tv result values, then max_grad_norm and clip_grad_norm: no clipping
  std::vector<double> h = {0.05, 0.9, 0.001, 2.0, 3, 1, 0.5, 0.25, 0, 0};
  std::vector<double> scalar_state = {1.0, 0.5};  // count tensors
  double param = 0.7, out = 0, index = 0.1, std_state = 0;
  double* states[] = {&out, &index, &std_state};
  double count = 1.0, tensors = 0.5, expected = param, out_e = 0, index_e = 0.1;
  for (int step = 1; step <= 2; ++step) {
    const double grad = step == 1 ? 0.3 : -0.2;
    optgen::reference::Tensor<double> t{1, &param, &grad, states};
    ref.step_double(h.data(), scalar_state.data(), step, &t, 1, 1.0, nullptr);
    const double sqrtf_ = std::sqrt(static_cast<double>(step)), powf_ = 0.001 * std::pow(3.0, 2.0);
    count *= 0.9;
    tensors += 0.05;
    const double optgen_ = powf_ / sqrtf_, expf_ = grad * 2.0, grad_scale = expf_ / (1 + std::fabs(grad));
    const double param_data = expected - optgen_ * grad_scale;
    out_e = 0.9 * out_e + (1 - 0.9) * grad_scale;
    index_e = index_e + grad * grad;
    const double std_e = std::sqrt(index_e) + 0.5;
    expected = param_data - 0.001 * out_e / std_e * (count * tensors) + 0.25 * 0.05 * expected;
    INFO("step " << step);
    CHECK(param == Approx(expected).epsilon(1e-14));
    CHECK(out == Approx(out_e).epsilon(1e-14));
    CHECK(scalar_state[0] == Approx(count).epsilon(1e-14));
  }
}

TEST_CASE("names the generated code uses for itself: the kernels match the reference", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const auto& info = optgen::GeneratedNames::info();
  const auto& ref = optgen::reference::generated_names::optimizer();
  std::mt19937 rng(4);
  DeviceGroup group(DType::F32, {1, 4097, 30001}, {false, true, false}, rng);
  std::vector<double> h = optgen::default_hyperparameters(info);
  optgen::FusedOptimizer opt(info, h);
  opt.add_param_group(group.tensors, h);
  const Comparison result = compare_steps(opt, ref, group, 3, rng);
  INFO("worst relative error " << result.worst << " in " << result.where);
  CHECK(result.worst <= 1e-5);
}
