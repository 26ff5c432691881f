// A spec's programs beside the step (`programs:`; specs/adamw_schedule_free.yaml's eval and train):
// the launcher's tables, run()'s errors, and on the GPU the program kernels against the CPU
// reference between steps and before the first one, in every storage, and captured in a CUDA graph.
#include <catch2/catch.hpp>

#include <random>
#include <string>

#include "capture.h"
#include "check.h"
#include "optimizer_harness.h"
#include "pipeline.h"
#include "spec.h"

using namespace optgen_test;

namespace {

int program_index(const optgen::reference::Optimizer& ref, const std::string& name) {
  for (int p = 0; p < ref.num_programs; ++p)
    if (name == ref.programs[p]) return p;
  FAIL("no program " << name);
  return -1;
}

}  // namespace

TEST_CASE("a spec's programs are in the launcher's tables, a kernel each per kernel set", "[launcher]") {
  const auto& info = launcher("adamw_schedule_free");
  REQUIRE(info.num_programs == 2);
  CHECK(std::string(info.programs[0]) == "eval");
  CHECK(std::string(info.programs[1]) == "train");
  REQUIRE(info.num_kernels > 0);
  for (int k = 0; k < info.num_kernels; ++k) {
    const optgen::KernelInfo& kernel = info.kernels[k];
    REQUIRE(kernel.programs != nullptr);
    // <variant>_<storage>_<program>, beside the step's <variant>_<storage>_update.
    const std::string update = kernel.stages[0];
    const std::string prefix = update.substr(0, update.size() - std::string("update").size());
    CHECK(std::string(kernel.programs[0]) == prefix + "eval");
    CHECK(std::string(kernel.programs[1]) == prefix + "train");
  }
  const auto& adamw = launcher("adamw");
  CHECK(adamw.num_programs == 0);
  CHECK(adamw.kernels[0].programs == nullptr);
}

TEST_CASE("a program touches a state of a flag's variants, and not one of factored tensors only", "[spec]") {
  const std::string head = R"(optimizer: Reset
summary: a program that clears a buffer
hyperparameters:
  lr: {type: float, default: 0.1}
  momentum: {type: float, default: 0.0}
  use_momentum: {type: bool, specialize: true, derived: momentum != 0}
state:
  buf: {init: zeros, when: use_momentum}
  v: {init: zeros, when: "!factored"}
update:
  - when: use_momentum
    do:
      - buf = momentum * buf + grad
  - when: "!factored"
    do:
      - v = v + grad * grad
  - param = param - lr * grad
programs:
  reset:
)";
  // Every tensor of the variants with momentum has buf: the program clears it there.
  const optgen::Spec flag = optgen::load_spec_text("reset.yaml", head + R"(    - when: use_momentum
      do:
        - buf = 0 * buf
)");
  const auto variants = optgen::compile_spec(flag);
  CHECK(variants.size() == 4);  // with momentum or not, clipped or not
  for (const auto& v : variants) CHECK(v.programs.size() == 1);
  CHECK_THAT(optgen::test::spec_error("reset.yaml", head + "    - v = 0 * v\n"),
             Catch::Contains("state 'v' exists for some tensors only (its 'when' reads 'factored')"));
}

TEST_CASE("run() names the spec's programs when asked for another", "[launcher]") {
  const auto& info = launcher("adamw_schedule_free");
  optgen::FusedOptimizer opt(info, optgen::default_hyperparameters(info));
  CHECK_THAT(error_of([&] { opt.run("evaluate"); }), Catch::Contains("AdamWScheduleFree has no program 'evaluate'") &&
                                                         Catch::Contains("its programs: eval, train"));
  const auto& adamw = launcher("adamw");
  optgen::FusedOptimizer other(adamw, optgen::default_hyperparameters(adamw));
  CHECK_THAT(error_of([&] { other.run("eval"); }), Catch::Contains("its spec declares no programs"));
}

TEST_CASE("a spec's programs match the CPU reference between steps and before the first, in every storage", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const auto& info = launcher("adamw_schedule_free");
  const auto& ref = reference_of("adamw_schedule_free");
  const int eval = program_index(ref, "eval"), train = program_index(ref, "train");
  for (int k = 0; k < info.num_kernels; ++k) {
    const optgen::KernelInfo& kernel = info.kernels[k];
    INFO("kernel set " << kernel.stages[0]);
    // weight_decay 0.1, warmup_steps 3, r 0.1 (hyperparameters_for): every term of the step.
    std::vector<double> h = hyperparameters_for(info, kernel.variant);
    std::mt19937 rng(static_cast<unsigned>(k));
    DeviceGroup group(kernel.param, {1, 7, 4097, 70000}, {false, true, false, false}, rng);
    optgen::FusedOptimizer opt(info, h, storage_of(info, kernel));
    opt.add_param_group(group.tensors, h);
    std::vector<double> scalar_state = initial_scalar_state(info, h);
    Comparison result;
    // Before the first step z reads as the parameter: eval and train move nothing.
    const std::vector<std::vector<float>> params0 = group.params;
    compare_program(opt, ref, group, scalar_state, 0, eval, result);
    compare_program(opt, ref, group, scalar_state, 0, train, result);
    CHECK(group.params == params0);
    for (std::int64_t step = 1; step <= 6; ++step) {
      group.new_gradients(rng);
      compare_step(opt, ref, group, scalar_state, step, result);
      if (step % 3 != 0) continue;
      compare_program(opt, ref, group, scalar_state, step, eval, result);
      compare_program(opt, ref, group, scalar_state, step, train, result);
    }
    CHECK(opt.step_count(0) == 6);  // programs count no step
    INFO("worst relative error " << result.worst << " in " << result.where);
    CHECK(result.worst <= tolerance(info, kernel));
  }
}

TEST_CASE("a spec's program captured in a CUDA graph does what it does eagerly", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const auto& info = launcher("adamw_schedule_free");
  const std::vector<double> h = optgen::default_hyperparameters(info);
  // Two optimizers over the same values: one runs eval eagerly, the other replays it from a graph.
  std::mt19937 rng_a(5), rng_b(5);
  DeviceGroup a(DType::F32, {3, 4097, 70000}, {false, true, false}, rng_a);
  DeviceGroup b(DType::F32, {3, 4097, 70000}, {false, true, false}, rng_b);
  optgen::FusedOptimizer eager(info, h), replayed(info, h);
  eager.add_param_group(a.tensors, h);
  replayed.add_param_group(b.tensors, h);
  Capture capture;
  for (int step = 0; step < 2; ++step) {
    a.new_gradients(rng_a);
    b.new_gradients(rng_b);
    eager.step();
    replayed.step(capture.stream());
  }
  synchronize();
  capture.synchronize();
  replayed.prepare(capture.stream());
  capture.begin();
  replayed.run("eval", capture.stream());
  capture.end();
  eager.run("eval");
  capture.replay();
  synchronize();
  capture.synchronize();
  for (std::size_t t = 0; t < a.tensors.size(); ++t) {
    INFO("tensor " << t);
    const auto moved = download(DType::F32, a.tensors[t].param, a.params[t].size());
    CHECK(moved != a.params[t]);  // eval moved the parameters
    CHECK(download(DType::F32, b.tensors[t].param, b.params[t].size()) == moved);
  }
}
