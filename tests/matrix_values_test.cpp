// Matrix functions in the step (a spec's newton_schulz; specs/muon.yaml): the launcher's tables, a
// tensor that is no matrix refused, and on the GPU Muon against the CPU reference over matrices of
// mixed shapes in two groups (one bucket shared by both, with arguments that differ), and a step
// captured in a CUDA graph.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>

#include "capture.h"
#include "check.h"
#include "optimizer_harness.h"

using namespace optgen_test;

TEST_CASE("muon's variant tables carry its matrix value, its stage and its arguments", "[launcher]") {
  const auto& info = launcher("muon");
  for (int v = 0; v < info.num_variants; ++v) {
    const optgen::VariantInfo& variant = info.variants[v];
    INFO("variant " << variant.name);
    REQUIRE(variant.num_matrix_values == 1);
    const optgen::MatrixValueInfo& o = variant.matrix_values[0];
    CHECK(std::string(o.name) == "o");
    CHECK(std::string(o.program->name) == "newton_schulz");
    // Stored by the last Reduce stage (after the clipping's norm, where it clips), read by the update.
    CHECK(o.stage == variant.num_stages - 1);
    REQUIRE(o.num_arguments == 5);
    const char* names[] = {"ns_steps", "ns_a", "ns_b", "ns_c", "eps"};
    for (int a = 0; a < 5; ++a) CHECK(o.arguments[a].hyperparameter == hyperparameter_index(info, names[a]));
  }
  CHECK(launcher("adamw").variants[0].num_matrix_values == 0);
  // Its storage list keeps `o` in bf16 (f32, bf16) and in f32 (f32:o=f32, bf16:o=f32), per variant.
  int f32 = 0;
  for (int k = 0; k < info.num_kernels; ++k) f32 += optgen::matrix_dtype(info.kernels[k], 0) == DType::F32;
  CHECK(f32 == 2 * info.num_variants);
  CHECK(info.num_kernels == 4 * info.num_variants);
  CHECK(optgen::matrix_value_names(info) == std::vector<std::string>{"o"});
}

TEST_CASE("newton_schulz's numbers may be written as arithmetic of numbers, and no other value", "[errors]") {
  const std::string head =
      "optimizer: M\nsummary: s\nhyperparameters:\n  lr: {type: float, default: 0.02}\nupdate:\n  - o = ";
  const std::string tail = "\n  - param = param - lr * o\n";
  CHECK(optgen::test::spec_error("m.yaml",
                                 head + "newton_schulz(grad, 2 + 3, 3.4445, -4.775, 2.0315, 1.0e-7)" + tail) == "");
  CHECK_THAT(optgen::test::spec_error("m.yaml", head + "newton_schulz(grad, 5, 3.4445, -lr, 2.0315, 1.0e-7)" + tail),
             Catch::Contains("argument 'b' of 'newton_schulz' must be a hyperparameter or a number"));
  CHECK_THAT(
      optgen::test::spec_error("m.yaml", head + "newton_schulz(grad, 5 / 2, 3.4445, -4.775, 2.0315, 1e-7)" + tail),
      Catch::Contains("argument 'steps' of 'newton_schulz' counts iterations"));
}

TEST_CASE("newton_schulz's steps are a whole number from 0 to 1000, checked where hyperparameters are given",
          "[launcher]") {
  const auto& info = launcher("muon");
  optgen::FusedOptimizer opt(info, optgen::default_hyperparameters(info));
  std::vector<double> h = optgen::default_hyperparameters(info);
  for (double steps : {-1.0, 1001.0}) {
    h[hyperparameter_index(info, "ns_steps")] = steps;
    CHECK_THAT(error_of([&] { opt.states_used(h); }),
               Catch::Contains("newton_schulz's steps (ns_steps) is " + std::to_string(steps)) &&
                   Catch::Contains("give a whole number from 0 to 1000"));
  }
  h[hyperparameter_index(info, "ns_steps")] = 2.5;  // any int hyperparameter is a whole number
  CHECK_THAT(error_of([&] { opt.states_used(h); }),
             Catch::Contains("ns_steps is an int; got 2.5") && Catch::Contains("give a whole number"));
  for (double steps : {0.0, 5.0, 1000.0}) {
    h[hyperparameter_index(info, "ns_steps")] = steps;
    CHECK(error_of([&] { opt.states_used(h); }) == "(no error)");
  }
}

TEST_CASE("a tensor bound without the dimensions of a matrix is refused by a spec with a matrix function", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const auto& info = launcher("muon");
  const std::vector<double> h = optgen::default_hyperparameters(info);
  std::mt19937 rng(1);
  DeviceGroup group(DType::F32, TensorShapes{{{4, 3}, {7}}}, {false, false}, rng);
  optgen::FusedOptimizer opt(info, h);
  opt.add_param_group(group.tensors, h);
  const std::string error = error_of([&] { opt.step(); });
  CHECK_THAT(error, Catch::Contains("applies newton_schulz to 'o', which needs matrices, but tensor 1") &&
                        Catch::Contains("is bound with 1 dimension") && Catch::Contains("AdamW for embeddings"));
}

TEST_CASE("muon matches the CPU reference on matrices of mixed shapes in two groups, in every storage", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const auto& info = launcher("muon");
  const auto& ref = reference_of("muon");
  for (int k = 0; k < info.num_kernels; ++k) {
    const optgen::KernelInfo& kernel = info.kernels[k];
    INFO("kernel set " << kernel.stages[0]);
    std::vector<double> h0 = hyperparameters_for(info, kernel.variant), h1 = h0;
    h0[hyperparameter_index(info, "lr")] = 0.02;
    // The second group shares a shape with the first (one bucket, two runs of other arguments).
    h1[hyperparameter_index(info, "ns_steps")] = 3;
    h1[hyperparameter_index(info, "nesterov")] = 0;
    h1[hyperparameter_index(info, "match_rms_adamw")] = 1;
    std::mt19937 rng(static_cast<unsigned>(k) + 7);
    DeviceGroup a(kernel.param, TensorShapes{{{64, 32}, {32, 64}, {3, 64, 32}, {1, 9}}}, {false, true, false, false},
                  rng);
    DeviceGroup b(kernel.param, TensorShapes{{{64, 32}, {17, 1}, {100, 300}}}, {false, false, true}, rng);
    optgen::FusedOptimizer opt(info, h0, storage_of(info, kernel));
    opt.add_param_group(a.tensors, h0);
    opt.add_param_group(b.tensors, h1);
    const Comparison result = step_two_groups(opt, ref, a, b, h0, h1, 5, rng);
    INFO("worst relative error " << result.worst << " in " << result.where);
    // lr 0.02 (group 0); the largest scale, match_rms_adamw's 0.2 sqrt(300) of group 1's 100 x 300.
    CHECK(result.worst <= matrix_tolerance(info, kernel, 0.02, 0.2 * std::sqrt(300.0), 5));
  }
}

TEST_CASE("buckets of small matrices on streams of their own step as on the caller's, bit for bit", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const auto& info = launcher("muon");
  const optgen::KernelInfo& kernel = info.kernels[0];
  const std::vector<double> h = hyperparameters_for(info, kernel.variant);
  // Five shapes, each bucket small for any GPU: with OPTGEN_MATRIX_STREAMS unset they run on lanes.
  const TensorShapes shapes{{{64, 32}, {32, 64}, {3, 48, 16}, {1, 9}, {100, 300}, {64, 32}}};
  std::vector<std::vector<std::vector<unsigned char>>> after;
  for (const char* streams : {"1", ""}) {
    INFO("OPTGEN_MATRIX_STREAMS '" << streams << "'");
    setenv("OPTGEN_MATRIX_STREAMS", streams, 1);  // read when the optimizer prepares
    std::mt19937 rng(11);
    DeviceGroup group(kernel.param, shapes, std::vector<bool>(6, false), rng);
    optgen::FusedOptimizer opt(info, h, storage_of(info, kernel));
    opt.add_param_group(group.tensors, h);
    for (int step = 0; step < 3; ++step) {
      group.new_gradients(rng);
      opt.step();
    }
    synchronize();
    unsetenv("OPTGEN_MATRIX_STREAMS");
    after.push_back(group.device_bytes());
  }
  CHECK(after[0] == after[1]);
}

TEST_CASE("a step's launches count the work on its matrices and follow its arguments", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const auto& info = launcher("muon");
  const optgen::KernelInfo& kernel = info.kernels[0];
  std::vector<double> h = hyperparameters_for(info, kernel.variant);
  std::mt19937 rng(3);
  // Matrices of two shapes, each too large to run in one block (a view of more than
  // kMatrixInBlockRows rows): two batches through cuBLAS.
  DeviceGroup group(kernel.param, TensorShapes{{{80, 96}, {80, 96}, {72, 100}}}, {false, false, false}, rng);
  optgen::FusedOptimizer opt(info, h, storage_of(info, kernel));
  opt.add_param_group(group.tensors, h);
  for (int steps : {5, 4, 1}) {
    INFO("ns_steps " << steps);
    opt.set("ns_steps", steps);
    for (int step = 0; step < 2; ++step) {
      INFO("step " << step);
      group.new_gradients(rng);
      opt.step();
      synchronize();
      // A batch: its norms' two kernels and three products a step (nothing copied: for an odd
      // number the norms leave the input in the scratch, where the iteration's result is not).
      const int per_batch = 2 + 3 * steps;
      CHECK(opt.launches_last_step() == info.variants[kernel.variant].num_stages + 2 * per_batch);
    }
  }
}

TEST_CASE("small matrices of every shape run their whole program in one launch, up to the steps a block holds",
          "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const auto& info = launcher("muon");
  const optgen::KernelInfo& kernel = info.kernels[0];
  std::vector<double> h = hyperparameters_for(info, kernel.variant);
  std::mt19937 rng(3);
  // Two shapes of at most kMatrixInBlockRows rows in their view (16 x 48; 64 x 32, seen as 32 x 64),
  // as many blocks to a multiprocessor on any GPU of 64 KB of shared memory a multiprocessor.
  DeviceGroup group(kernel.param, TensorShapes{{{64, 32}, {64, 32}, {16, 48}}}, {false, false, false}, rng);
  optgen::FusedOptimizer opt(info, h, storage_of(info, kernel));
  opt.add_param_group(group.tensors, h);
  const int stages = info.variants[kernel.variant].num_stages;
  // The norm and three products a step: 1 + 3 * 13 steps fit kMatrixInBlockSteps, 1 + 3 * 14 do not.
  static_assert(optgen::kernel_abi::kMatrixInBlockSteps == 40, "the step counts below assume 40");
  for (int steps : {5, 13, 0, 14, 5}) {
    INFO("ns_steps " << steps);
    opt.set("ns_steps", steps);
    for (int step = 0; step < 2; ++step) {  // the second made from what the first left (nothing changed)
      group.new_gradients(rng);
      opt.step();
      synchronize();
      CHECK(opt.launches_last_step() == stages + (steps <= 13 ? 1 : 2 * (2 + 3 * steps)));
    }
  }
}

TEST_CASE("seventy shapes of small matrices step as the CPU reference in a few launches", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const auto& info = launcher("muon");
  const auto& ref = reference_of("muon");
  for (int k = 0; k < info.num_kernels; ++k) {  // f32 params, o in bf16 and in f32 (f32:o=f32)
    const optgen::KernelInfo& kernel = info.kernels[k];
    if (kernel.variant != 0 || kernel.param != DType::F32) continue;
    INFO("kernel set " << kernel.stages[0]);
    std::vector<double> h0 = hyperparameters_for(info, kernel.variant), h1 = h0;
    h1[hyperparameter_index(info, "ns_steps")] = 3;
    std::mt19937 rng(static_cast<unsigned>(k) + 5);
    // 1 x 24 to 70 x 24 (those of more than 24 rows seen as 24 x r): more runs than one launch
    // holds (kMatrixInBlockRuns), of sizes that fit more and fewer blocks to a multiprocessor;
    // group 1's shapes are group 0's with other arguments.
    static_assert(optgen::kernel_abi::kMatrixInBlockRuns < 70, "the shapes below need two launches or more");
    TensorShapes shapes_a, shapes_b;
    for (std::int64_t r = 1; r <= 70; ++r) shapes_a.list.push_back({r, 24});
    for (std::int64_t r = 1; r <= 70; r += 23) shapes_b.list.push_back({r, 24});
    DeviceGroup a(kernel.param, shapes_a, std::vector<bool>(shapes_a.list.size(), false), rng);
    DeviceGroup b(kernel.param, shapes_b, std::vector<bool>(shapes_b.list.size(), false), rng);
    optgen::FusedOptimizer opt(info, h0, storage_of(info, kernel));
    opt.add_param_group(a.tensors, h0);
    opt.add_param_group(b.tensors, h1);
    const Comparison result = step_two_groups(opt, ref, a, b, h0, h1, 3, rng);
    INFO("worst relative error " << result.worst << " in " << result.where);
    CHECK(result.worst <= matrix_tolerance(info, kernel, hyperparameter(info, h0, "lr"), std::sqrt(70.0 / 24.0), 3));
    // Two programs (5 and 3 steps of Newton–Schulz), each two launches or more, fewer than a shape each.
    const int matrix_launches = opt.launches_last_step() - info.variants[kernel.variant].num_stages;
    CHECK(matrix_launches >= 3);
    CHECK(matrix_launches < 20);
  }
}

TEST_CASE("a muon step captured in a CUDA graph does what it does eagerly", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const auto& info = launcher("muon");
  const std::vector<double> h = optgen::default_hyperparameters(info);
  // The last one in column thirds (Tensor::column_splits): its moves in and out are captured too.
  const TensorShapes shapes{{{64, 32}, {32, 64}, {64, 32}, {4, 8, 8}, {32, 96}}};
  std::mt19937 rng_a(3), rng_b(3);
  DeviceGroup a(DType::F32, shapes, std::vector<bool>(5, false), rng_a);
  DeviceGroup b(DType::F32, shapes, std::vector<bool>(5, false), rng_b);
  a.tensors[4].column_splits = b.tensors[4].column_splits = 3;
  optgen::FusedOptimizer eager(info, h), replayed(info, h);
  eager.add_param_group(a.tensors, h);
  replayed.add_param_group(b.tensors, h);
  Capture capture;
  replayed.prepare(capture.stream());
  capture.begin();
  replayed.step(capture.stream());
  capture.end();
  for (int step = 0; step < 3; ++step) {
    a.new_gradients(rng_a);
    b.new_gradients(rng_b);
    eager.step();
    synchronize();
    capture.replay();
    capture.synchronize();
  }
  for (std::size_t t = 0; t < a.tensors.size(); ++t) {
    INFO("tensor " << t);
    const auto stepped = download(DType::F32, a.tensors[t].param, a.params[t].size());
    CHECK(stepped != a.params[t]);
    CHECK(download(DType::F32, b.tensors[t].param, b.params[t].size()) == stepped);
  }
}

TEST_CASE(
    "a matrix hook is handed every tensor's matrices with its group's arguments, and does the work in their place",
    "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const auto& info = launcher("muon");
  const auto& ref = reference_of("muon");
  // The default storage (o in bf16) and o in f32, which the hook is told.
  for (const DType dtype : {DType::BF16, DType::F32}) {
    INFO("o in " << optgen::to_string(dtype));
    std::vector<double> h0 = optgen::default_hyperparameters(info), h1 = h0;
    h0[hyperparameter_index(info, "lr")] = 0.02;
    h1[hyperparameter_index(info, "ns_steps")] = 3;
    std::mt19937 rng(11);
    DeviceGroup a(DType::F32, TensorShapes{{{64, 32}, {3, 16, 8}}}, {false, false}, rng);
    DeviceGroup b(DType::F32, TensorShapes{{{64, 32}}}, {false}, rng);
    optgen::StorageOptions storage;
    if (dtype == DType::F32) storage.state_dtypes = {{"o", DType::F32}};
    optgen::FusedOptimizer opt(info, h0, storage);
    opt.add_param_group(a.tensors, h0);
    opt.add_param_group(b.tensors, h1);
    DeviceMemory scratch(opt.matrix_function_scratch_bytes(0, 0, 3, 64, 32, dtype));
    std::vector<std::string> seen;
    opt.set_matrix_hook([&](const optgen::MatrixWork& work) {
      for (int i = 0; i < work.num_matrices; ++i) {
        const optgen::MatrixWork::Matrices& m = work.matrices[i];
        const std::vector<double>& h = m.group == 0 ? h0 : h1;
        CHECK(m.num_arguments == 5);
        CHECK(m.dtype == dtype);
        std::string args;  // per argument, 1 where it is the group's hyperparameter
        for (int k = 0; k < 5; ++k)
          args += std::to_string(
              m.arguments[k] ==
              h[static_cast<std::size_t>(info.variants[0].matrix_values[0].arguments[k].hyperparameter)]);
        seen.push_back(std::to_string(m.group) + "." + std::to_string(m.tensor) + " " + std::to_string(m.batch) + "x" +
                       std::to_string(m.rows) + "x" + std::to_string(m.cols) + " " + args);
        opt.apply_matrix_function(m.group, m.value, m.arguments, m.x, scratch.get(), m.batch, m.rows, m.cols,
                                  work.stream);
      }
    });
    const Comparison result = step_two_groups(opt, ref, a, b, h0, h1, 3, rng);
    INFO("worst relative error " << result.worst << " in " << result.where);
    CHECK(result.worst <= matrix_tolerance(info, info.kernels[0], 0.02, std::sqrt(2.0), 3));
    REQUIRE(seen.size() == 9);  // three tensors, three steps
    CHECK(seen[0] == "0.0 1x64x32 11111");
    CHECK(seen[1] == "0.1 3x16x8 11111");
    CHECK(seen[2] == "1.0 1x64x32 11111");
  }
}

TEST_CASE("a shard of a matrix's rows reads the whole matrix's rows as the spec's rows", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const auto& info = launcher("muon");
  std::vector<double> h = optgen::default_hyperparameters(info);
  h[hyperparameter_index(info, "lr")] = 1.0;
  h[hyperparameter_index(info, "weight_decay")] = 0.0;
  // 16 of a 64 x 32 matrix's rows, and a whole 16 x 32 matrix: torch's scale sqrt(max(1, rows /
  // cols)) is sqrt(2) for the first, 1 for the second. A hook that sets every matrix function's
  // result to 1 makes each step subtract the scale.
  std::mt19937 rng(5);
  DeviceGroup group(DType::F32, TensorShapes{{{16, 32}, {16, 32}}}, {false, false}, rng);
  group.tensors[0].whole_numel = 64 * 32;
  optgen::FusedOptimizer opt(info, h);
  opt.add_param_group(group.tensors, h);
  opt.set_matrix_hook([](const optgen::MatrixWork& work) {
    for (int i = 0; i < work.num_matrices; ++i) {
      const optgen::MatrixWork::Matrices& m = work.matrices[i];
      optgen::driver::check(
          optgen::driver::api().cuMemsetD16(m.x, 0x3F80, static_cast<std::size_t>(m.batch * m.rows * m.cols)),
          "cuMemsetD16");  // bf16 1.0
    }
  });
  group.new_gradients(rng);
  opt.step();
  synchronize();
  for (std::size_t t = 0; t < 2; ++t) {
    const auto stepped = download(DType::F32, group.tensors[t].param, group.params[t].size());
    const double scale = t == 0 ? std::sqrt(2.0) : 1.0;
    for (std::size_t i = 0; i < stepped.size(); ++i)
      REQUIRE(std::abs((group.params[t][i] - stepped[i]) - scale) <= 1e-5 * (1 + std::abs(group.params[t][i])));
  }
  // A shard of a whole number of rows only.
  std::mt19937 rng2(6);
  DeviceGroup bad(DType::F32, TensorShapes{{{16, 32}}}, {false}, rng2);
  bad.tensors[0].whole_numel = 64 * 32 + 5;
  optgen::FusedOptimizer refused(info, h);
  CHECK_THAT(error_of([&] { refused.add_param_group(bad.tensors, h); }), Catch::Contains("no whole number of rows"));
}
