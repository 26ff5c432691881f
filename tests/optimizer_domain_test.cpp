// The optimizer domain: reductions over every param group (optimizer_sum, optimizer_norm,
// optimizer_max) and scalar state of `scope: optimizer`, one value the groups share
// (tests/specs/optimizer_sum.yaml). The CPU reference's two passes (reference::step_groups) against
// the spec's statements written out by hand; on a GPU the kernels against the reference over
// groups of different learning rates and weight decays, with and without a stage before, and the
// runtime's rules: one kernel set, the hyperparameters shared values read alike in every group, a
// group added later taking the optimizer's copy, a setter that sets every group's.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>

#include "optimizer_harness.h"
#include "optimizer_sum.h"
#include "optimizer_sum_reference.h"

using namespace optgen_test;

namespace {

// Hyperparameters in declaration order: lr, wd, beta, floor, clip.
enum { kLr, kWd, kBeta, kFloor, kClip };

struct HostGroup {
  double lr, wd;
  std::vector<std::vector<double>> params, grads, ms;
  double calls = 0;
};

/// One step of optimizer_sum.yaml (clip false) over every group, in double, as its statements read.
void step_by_hand(std::vector<HostGroup>& groups, double beta, double floor, double& avg) {
  double squares = 0, biggest = -INFINITY, moved = 0;
  for (const HostGroup& g : groups)
    for (size_t t = 0; t < g.params.size(); ++t)
      for (size_t i = 0; i < g.params[t].size(); ++i) {
        const double g2 = g.grads[t][i] + g.wd * g.params[t][i];
        squares += g2 * g2;
        biggest = std::max(biggest, std::fabs(g2));
        moved += g.ms[t][i] * g2;
      }
  const double total = std::sqrt(squares);
  avg = beta * avg + (1 - beta) * total;
  for (HostGroup& g : groups) {
    g.calls += total > 0 ? 1 : 0;
    for (size_t t = 0; t < g.params.size(); ++t)
      for (size_t i = 0; i < g.params[t].size(); ++i) {
        const double g2 = g.grads[t][i] + g.wd * g.params[t][i];
        const double m = beta * g.ms[t][i] + g2;
        g.params[t][i] -= g.lr * m / (avg + biggest + floor) + g.lr * 1.0e-3 * moved / (1 + std::fabs(moved));
        g.ms[t][i] = m;
      }
  }
}

/// Every hyperparameter of the reference (its defaults, max_grad_norm's among them), these set, the
/// derived flags filled in.
std::vector<double> hyperparameters(const optgen::reference::Optimizer& ref, double lr, double wd, double beta,
                                    double floor, bool clip) {
  std::vector<double> h;
  for (int i = 0; i < ref.num_hyperparameters; ++i) h.push_back(ref.hyperparameters[i].default_value);
  h[kLr] = lr, h[kWd] = wd, h[kBeta] = beta, h[kFloor] = floor, h[kClip] = clip ? 1 : 0;
  ref.derive_flags(h.data());
  return h;
}

std::vector<std::vector<double>> random_values(const std::vector<size_t>& sizes, std::mt19937& rng) {
  std::uniform_real_distribution<double> uniform(-1, 1);
  std::vector<std::vector<double>> v;
  for (size_t n : sizes) {
    v.emplace_back(n);
    for (double& x : v.back()) x = uniform(rng);
  }
  return v;
}

/// Optimizers of optimizer_sum.yaml stepped on the GPU, every group checked against the reference's
/// two passes after every step.
struct Run {
  optgen::FusedOptimizer opt;
  const optgen::reference::Optimizer& ref = optgen::reference::optimizer_sum::optimizer();
  std::vector<std::unique_ptr<DeviceGroup>> groups;
  std::vector<std::vector<double>> scalar_states;
  Comparison result;

  Run() : opt(optgen::OptimizerSum::info(), optgen::default_hyperparameters(optgen::OptimizerSum::info())) {}

  void add(DType dtype, const std::vector<std::int64_t>& sizes, const std::vector<double>& h, std::mt19937& rng) {
    groups.push_back(std::make_unique<DeviceGroup>(dtype, sizes, std::vector<bool>(sizes.size(), false), rng));
    opt.add_param_group(groups.back()->tensors, h);
    scalar_states.push_back(initial_scalar_state(opt.info(), h));
    if (scalar_states.size() > 1) scalar_states.back()[0] = scalar_states[0][0];  // avg: the optimizer's
  }

  void step(std::int64_t step, std::mt19937& rng) {
    std::vector<StateSnapshot> states;
    for (size_t g = 0; g < groups.size(); ++g) {
      groups[g]->new_gradients(rng);
      states.push_back(snapshot_states(opt, ref, g, *groups[g]));
    }
    opt.step();
    synchronize();
    optgen::reference::OptimizerTotals totals;
    for (size_t g = 0; g < groups.size(); ++g)
      check_group(opt, ref, g, *groups[g], states[g], scalar_states[g], step, result, 1.0f, -1, &totals);
    totals.adding = false;
    for (size_t g = 0; g < groups.size(); ++g)
      check_group(opt, ref, g, *groups[g], states[g], scalar_states[g], step, result, 1.0f, -1, &totals);
  }
};

}  // namespace

TEST_CASE("the reference reduces over every group in two passes, as the spec's statements say", "[reference]") {
  const auto& ref = optgen::reference::optimizer_sum::optimizer();
  std::mt19937 rng(5);
  const double beta = 0.8, floor = 1e-3;
  std::vector<HostGroup> expected = {{0.1, 0.0, {}, {}, {}}, {0.05, 0.3, {}, {}, {}}, {0.2, 0.01, {}, {}, {}}};
  const std::vector<std::vector<size_t>> sizes = {{1, 7, 300}, {5}, {1000, 2}};
  for (size_t g = 0; g < expected.size(); ++g) {
    expected[g].params = random_values(sizes[g], rng);
    expected[g].ms = random_values(sizes[g], rng);
  }
  std::vector<HostGroup> ours = expected;
  std::vector<std::vector<double>> h(expected.size());
  std::vector<std::vector<double>> scalar_state(expected.size(), {floor, 0.0});  // avg, calls
  double avg = floor;
  for (std::int64_t step = 1; step <= 3; ++step) {
    for (size_t g = 0; g < expected.size(); ++g) expected[g].grads = ours[g].grads = random_values(sizes[g], rng);
    std::vector<std::vector<std::vector<double*>>> states(expected.size());
    std::vector<std::vector<optgen::reference::Tensor<double>>> tensors(expected.size());
    std::vector<optgen::reference::GroupStep<double>> groups;
    for (size_t g = 0; g < expected.size(); ++g) {
      h[g] = hyperparameters(ref, ours[g].lr, ours[g].wd, beta, floor, false);
      for (size_t t = 0; t < sizes[g].size(); ++t) {
        states[g].push_back({ours[g].ms[t].data()});
        tensors[g].push_back({sizes[g][t], ours[g].params[t].data(), ours[g].grads[t].data(), states[g][t].data()});
      }
      groups.push_back({h[g].data(), scalar_state[g].data(), step, tensors[g].data(), tensors[g].size()});
    }
    optgen::reference::step_groups<double>(ref, groups.data(), groups.size(), 1.0);
    step_by_hand(expected, beta, floor, avg);
    for (size_t g = 0; g < expected.size(); ++g) {
      INFO("step " << step << ", group " << g);
      CHECK(scalar_state[g][0] == Approx(avg).epsilon(1e-12));
      CHECK(scalar_state[g][1] == expected[g].calls);
      for (size_t t = 0; t < sizes[g].size(); ++t)
        for (size_t i = 0; i < sizes[g][t]; ++i) {
          INFO("tensor " << t << ", element " << i);
          REQUIRE(ours[g].params[t][i] == Approx(expected[g].params[t][i]).epsilon(1e-12).margin(1e-14));
          REQUIRE(ours[g].ms[t][i] == Approx(expected[g].ms[t][i]).epsilon(1e-12).margin(1e-14));
        }
    }
  }
}

TEST_CASE("the reference refuses groups of different variants where it reduces over every group", "[reference]") {
  const auto& ref = optgen::reference::optimizer_sum::optimizer();
  std::vector<double> param = {1.0}, grad = {0.5}, m = {0.0};
  std::vector<double*> states = {m.data()};
  const optgen::reference::Tensor<double> tensor{1, param.data(), grad.data(), states.data()};
  std::vector<double> plain = hyperparameters(ref, 0.1, 0.0, 0.9, 1e-3, false),
                      clipped = hyperparameters(ref, 0.1, 0.0, 0.9, 1e-3, true);
  std::vector<double> s0 = {1e-3, 0}, s1 = {1e-3, 0};
  const std::vector<optgen::reference::GroupStep<double>> groups = {{plain.data(), s0.data(), 1, &tensor, 1},
                                                                    {clipped.data(), s1.data(), 1, &tensor, 1}};
  CHECK_THROWS_WITH(optgen::reference::step_groups<double>(ref, groups.data(), groups.size(), 1.0),
                    Catch::Contains("every group must take one variant"));
}

TEST_CASE("reductions over every group on the GPU match the CPU reference, and the groups share one scalar state",
          "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  for (const bool clip : {false, true}) {  // clip: the group's own norm first, the optimizer's in stage 2
    DYNAMIC_SECTION((clip ? "after a stage of group norms" : "in the first stage")) {
      std::mt19937 rng(9);
      Run run;
      std::vector<double> h = optgen::default_hyperparameters(run.opt.info());
      h[kBeta] = 0.7;
      h[kClip] = clip ? 1.0 : 0.0;
      run.add(DType::F32, {1, 17, 4097, 70001}, h, rng);
      h[kLr] = 0.03, h[kWd] = 0.2;
      run.add(DType::F32, {300001}, h, rng);
      h[kLr] = 0.3, h[kWd] = 0.0;
      run.add(DType::F32, {}, h, rng);  // a group of no tensors takes no part
      run.add(DType::F32, {5, 0, 33}, h, rng);
      for (std::int64_t step = 1; step <= 4; ++step) run.step(step, rng);
      INFO("worst relative error " << run.result.worst << " in " << run.result.where);
      CHECK(run.result.worst <= 1e-5);
      for (size_t g = 1; g < run.groups.size(); ++g)
        CHECK(run.opt.scalar_state("avg", g) == run.opt.scalar_state("avg", 0));
      CHECK(run.opt.scalar_state("calls", 0) == 4);
      CHECK(run.opt.scalar_state("calls", 2) == 4);  // the optimizer's norm is not 0: its step counts
    }
  }
}

TEST_CASE("an optimizer that reduces over every group keeps its groups' shared values alike", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  std::mt19937 rng(3);
  Run run;
  std::vector<double> h = optgen::default_hyperparameters(run.opt.info());
  run.add(DType::F32, {100, 3}, h, rng);
  run.add(DType::F32, {50}, h, rng);
  run.step(1, rng);
  run.step(2, rng);

  SECTION("a group added later takes the optimizer's copy of its scalar state") {
    const double avg = run.opt.scalar_state("avg", 0);
    CHECK(avg != h[kFloor]);
    run.add(DType::F32, {20}, h, rng);
    CHECK(run.opt.scalar_state("avg", 2) == avg);
    CHECK(run.opt.scalar_state("calls", 2) == 0);  // one per group: its own
    run.scalar_states[2][0] = avg;
    run.step(3, rng);
    INFO("worst relative error " << run.result.worst << " in " << run.result.where);
    CHECK(run.result.worst <= 1e-5);
  }
  SECTION("setting it sets every group's copy") {
    run.opt.set_scalar_state("avg", 0.25, 1);
    CHECK(run.opt.scalar_state("avg", 0) == 0.25);
    CHECK(run.opt.scalar_state("avg", 1) == 0.25);
    run.opt.set_scalar_state("calls", 7, 1);
    CHECK(run.opt.scalar_state("calls", 0) == 2);
  }
  SECTION("a hyperparameter the shared state reads must be the same in every group") {
    run.opt.set("beta", 0.5, 1);
    CHECK_THROWS_WITH(run.opt.step(), Catch::Contains("hyperparameter 'beta' is 0.5 in param group 1 and 0.9 in "
                                                      "group 0") &&
                                          Catch::Contains("'avg'"));
    run.opt.set("beta", 0.5);   // every group
    run.opt.set("lr", 0.5, 1);  // read per group: no rule
    CHECK_NOTHROW(run.opt.step());
  }
  SECTION("every group must step with one kernel set") {
    run.add(DType::BF16, {64}, h, rng);
    CHECK_THROWS_WITH(run.opt.step(), Catch::Contains("param groups 0 and 2 step with different kernel sets") &&
                                          Catch::Contains("reduces over every param group"));
  }
}

TEST_CASE("a group of no tensors steps with the kernel set of its variant's groups, bf16 ones too", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  std::mt19937 rng(4);
  Run run;
  const std::vector<double> h = optgen::default_hyperparameters(run.opt.info());
  run.add(DType::BF16, {300, 7}, h, rng);
  run.add(DType::BF16, {}, h, rng);  // no dtype of its own: bf16's plan, not an f32 one
  for (std::int64_t step = 1; step <= 2; ++step) run.step(step, rng);
  CHECK(run.opt.launches_last_step() == 2);  // one plan: its Reduce stage and its Update stage
  INFO("worst relative error " << run.result.worst << " in " << run.result.where);
  CHECK(run.result.worst <= 1e-2);
  CHECK(run.opt.scalar_state("avg", 1) == run.opt.scalar_state("avg", 0));
}
