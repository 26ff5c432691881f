// Rows, columns and matrices on the GPU: torch's Adafactor (specs/adafactor.yaml) against its CPU
// reference with several groups, conv-shaped and tall tensors, 10,000 tensors, zero gradients and
// gradient clipping; and its Reduce stages' determinism, eager and replayed from a graph; a spec
// whose row values no line finishes (tests/specs/row_inline.yaml). (Every
// built-in x storage, Adafactor included, is also in launcher_test.cpp, and under AMP in
// amp_test.cpp; its reference against torch's recorded trajectories is in reference_test.cpp.)

#include <catch2/catch.hpp>

#include <memory>
#include <random>
#include <vector>

#include "adafactor.h"
#include "adafactor_reference.h"
#include "capture.h"
#include "optimizer_harness.h"
#include "row_inline.h"
#include "row_inline_reference.h"

using namespace optgen_test;

namespace {

using Shapes = std::vector<std::vector<std::int64_t>>;

/// Groups of one optimizer (Adafactor unless told), each checked against the reference after every
/// step.
struct Run {
  const optgen::OptimizerInfo& info;
  const optgen::reference::Optimizer& ref;
  optgen::FusedOptimizer opt{info, optgen::default_hyperparameters(info)};
  std::vector<std::unique_ptr<DeviceGroup>> groups;
  std::vector<std::vector<double>> scalar_states;
  Comparison result;

  explicit Run(const optgen::OptimizerInfo& i = optgen::Adafactor::info(),
               const optgen::reference::Optimizer& r = optgen::reference::adafactor::optimizer())
      : info(i), ref(r) {}

  DeviceGroup& add(const Shapes& shapes, std::vector<double> h, std::mt19937& rng) {
    groups.push_back(
        std::make_unique<DeviceGroup>(DType::F32, TensorShapes{shapes}, std::vector<bool>(shapes.size(), false), rng));
    opt.add_param_group(groups.back()->tensors, h);
    scalar_states.push_back(initial_scalar_state(info, opt.hyperparameters(groups.size() - 1)));
    return *groups.back();
  }

  void step(std::int64_t step, std::mt19937& rng, float gradient_scale = 1.0f) {
    std::vector<StateSnapshot> states;
    for (size_t g = 0; g < groups.size(); ++g) {
      groups[g]->new_gradients(rng, gradient_scale);
      states.push_back(snapshot_states(opt, ref, g, *groups[g]));
    }
    opt.step();
    synchronize();
    for (size_t g = 0; g < groups.size(); ++g)
      check_group(opt, ref, g, *groups[g], states[g], scalar_states[g], step, result);
  }
};

std::vector<double> hyperparameters(const optgen::OptimizerInfo& info,
                                    const std::vector<std::pair<const char*, double>>& values) {
  std::vector<double> h = optgen::default_hyperparameters(info);
  for (const auto& [name, value] : values)
    for (int i = 0; i < info.num_hyperparameters; ++i)
      if (info.hyperparameters[i].name == std::string(name)) h[i] = value;
  return h;
}

}  // namespace

TEST_CASE("Adafactor on the GPU matches its reference: groups, conv weights, tall and long matrices, clipping",
          "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  std::mt19937 rng(2026);
  Run run;
  const auto& info = run.info;
  run.add({{768, 300}, {300}, {8, 4, 3, 3}, {16, 8, 1, 1}, {1}, {0, 7}, {1300, 3}, {5, 2, 3000}},
          hyperparameters(info, {}), rng);
  run.add({{40, 50}, {2, 3, 4}, {17}}, hyperparameters(info, {{"weight_decay", 0.1}, {"maximize", 1}, {"lr", 0.05}}),
          rng);
  // Clipping: the clip_grad_norm variant, with its extra Reduce stage.
  run.add({{33, 65}, {129}}, hyperparameters(info, {{"max_grad_norm", 0.5}, {"eps2", 1e-2}, {"d", 0.5}}), rng);
  for (std::int64_t step = 1; step <= 4; ++step) run.step(step, rng);
  INFO("worst relative error " << run.result.worst << " in " << run.result.where);
  CHECK(run.result.worst <= tolerance(DType::F32, {DType::F32}));
  // Under an eighth of each plan's elements in rows shorter than 32: the Update stages of long rows
  // (vectors of eight), over conv weights, one-column matrices and rows that vectors straddle too;
  // the 1x1 conv weight's (matrices of one element) after the first's.
  CHECK(run.opt.stage_kernels(0) ==
        std::vector<std::string>{"adafactor_f32_f32_reduce1", "adafactor_f32_f32_reduce2", "adafactor_f32_f32_reduce3",
                                 "adafactor_f32_f32_update_long_rows", "adafactor_f32_f32_update_unit_matrices"});
  CHECK(run.opt.launches_last_step() == 5 + 5);  // the clip_grad_norm variant's plan: its four Reduce stages too
  CHECK(run.opt.stage_kernels(2).back() == "adafactor_clip_grad_norm_f32_f32_update_long_rows");
}

TEST_CASE("Adafactor over 10,000 tensors of one to four dimensions matches its reference", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  std::mt19937 rng(17);
  std::uniform_int_distribution<std::int64_t> dim(1, 40), rank(1, 4);
  Run run;
  for (int g = 0; g < 2; ++g) {
    Shapes shapes(5000);
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      shapes[i].resize(static_cast<size_t>(rank(rng)));
      for (auto& d : shapes[i]) d = dim(rng);
      // One tensor in 500 a 1x1 convolution's weight (O, I, 1, 1): its matrices are one element.
      if (i % 500 == 0) shapes[i] = {dim(rng), dim(rng), 1, 1};
    }
    run.add(shapes, hyperparameters(run.info, {{"weight_decay", 0.01 * g}}), rng);
  }
  for (std::int64_t step = 1; step <= 2; ++step) run.step(step, rng);
  INFO("worst relative error " << run.result.worst << " in " << run.result.where);
  CHECK(run.result.worst <= tolerance(DType::F32, {DType::F32}));
  // Three Reduce stages and the Update, for any number of tensors; and the Update stage of those whose
  // matrices are one element.
  CHECK(run.opt.launches_last_step() == 5);
  CHECK(run.opt.stage_kernels(0)[3] == "adafactor_f32_f32_update");  // most rows shorter than 32
  CHECK(run.opt.stage_kernels(0).back() == "adafactor_f32_f32_update_unit_matrices");
}

TEST_CASE("Adafactor with zero gradients and parameters matches its reference", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  std::mt19937 rng(5);
  Run run;
  DeviceGroup& g = run.add({{64, 33}, {2, 9, 9}, {100}}, hyperparameters(run.info, {}), rng);
  for (size_t t = 0; t < g.sizes.size(); ++t) {
    std::fill(g.params[t].begin(), g.params[t].end(), 0.0f);
    upload(g.dtype, g.tensors[t].param, g.params[t]);
  }
  run.step(1, rng, 0.0f);  // every norm, row and column sum is zero
  run.step(2, rng, 1.0f);
  INFO("worst relative error " << run.result.worst << " in " << run.result.where);
  CHECK(run.result.worst <= tolerance(DType::F32, {DType::F32}));
}

TEST_CASE("Adafactor is deterministic: the same inputs give the same bits, eager or replayed from a graph", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const auto& info = optgen::Adafactor::info();
  const Shapes shapes = {{3000, 257}, {4, 600, 70}, {8, 4, 3, 3}, {4097}, {1, 70001}};
  const std::vector<bool> misaligned = {false, true, false, true, false};
  const std::vector<double> h = optgen::default_hyperparameters(info);
  std::vector<std::unique_ptr<DeviceGroup>> groups;
  std::vector<std::unique_ptr<optgen::FusedOptimizer>> opts;
  for (int i = 0; i < 3; ++i) {
    std::mt19937 rng(5);
    groups.push_back(std::make_unique<DeviceGroup>(DType::F32, TensorShapes{shapes}, misaligned, rng));
    opts.push_back(std::make_unique<optgen::FusedOptimizer>(info, h));
    opts.back()->set_chunk_size(256);
    opts.back()->add_param_group(groups.back()->tensors, h);
  }
  Capture capture;
  opts[2]->prepare(capture.stream());
  capture.begin();
  opts[2]->step(capture.stream());
  capture.end();
  for (int step = 1; step <= 4; ++step) {
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

TEST_CASE("row values no line finishes are computed where read, beside stored column values", "[gpu]") {
  // tests/specs/row_inline.yaml: r's new value reads a row mean and a tensor norm of one stage, so
  // the Update stage computes it per element from the snapshot of r; c's is stored by its column.
  // {6, 4, 1, 1} is a 1x1 conv weight: matrices of one element, run as element code.
  OPTGEN_REQUIRE_GPU();
  std::mt19937 rng(31);
  Run run(optgen::RowInline::info(), optgen::reference::row_inline::optimizer());
  run.add({{300, 70}, {5, 3, 3}, {1, 257}, {257, 1}, {40}, {6, 4, 1, 1}}, hyperparameters(run.info, {}), rng);
  run.add({{64, 65}}, hyperparameters(run.info, {{"max_grad_norm", 0.3}}), rng);
  for (std::int64_t step = 1; step <= 3; ++step) run.step(step, rng);
  INFO("worst relative error " << run.result.worst << " in " << run.result.where);
  CHECK(run.result.worst <= tolerance(DType::F32, {DType::F32}));
}

TEST_CASE("Adafactor refuses a tensor bound without its shape", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  std::mt19937 rng(1);
  DeviceGroup g(DType::F32, std::vector<std::int64_t>{12}, std::vector<bool>{false}, rng);
  g.tensors[0].shape.clear();  // not given
  const auto& info = optgen::Adafactor::info();
  optgen::FusedOptimizer opt(info, optgen::default_hyperparameters(info));
  const std::string message = error_of([&] { opt.add_param_group(g.tensors, optgen::default_hyperparameters(info)); });
  INFO(message);
  CHECK(message.find("shape") != std::string::npos);
}
