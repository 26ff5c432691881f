// The generated launchers and the engine behind them: bad input (no GPU needed), and on a GPU
// every built-in spec × variant × storage type against the CPU reference, many tensors and groups
// in one launch, a tensor of more than 2^31 elements, setters, the NVRTC path and its cache.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include <unistd.h>

#include "optgen/blockwise8.h"
#include "optgen/c_api.h"
#include "optgen/kernel_abi.h"
#include "optgen/nccl.h"
#include "optgen/tuning.h"
#include "optimizer_harness.h"

using namespace optgen_test;

// ---- Bad input: rejected before any GPU work, so these run without a GPU. ----

TEST_CASE("add_param_group rejects bad tensors and hyperparameters with a message naming them", "[launcher]") {
  const auto& info = launcher("adam");
  optgen::FusedOptimizer opt(info, optgen::default_hyperparameters(info));
  optgen::Tensor t = fake_tensor();

  optgen::Tensor mismatched = t;
  mismatched.grad_numel = 7;
  CHECK_THAT(
      error_of([&] {
        opt.add_param_group({t, mismatched}, optgen::FusedOptimizer::Overrides{});
      }),
      Catch::Contains(
          "Adam::add_param_group failed: tensor 1 of the group has 8 parameter elements but 7 gradient elements"));

  optgen::Tensor null_grad = t;
  null_grad.grad = nullptr;
  CHECK_THAT(error_of([&] { opt.add_param_group({null_grad}, optgen::FusedOptimizer::Overrides{}); }),
             Catch::Contains("tensor 0 of the group has a null grad pointer"));

  optgen::Tensor misaligned = t;
  misaligned.param = reinterpret_cast<void*>(0x10002);
  CHECK_THAT(error_of([&] { opt.add_param_group({misaligned}, optgen::FusedOptimizer::Overrides{}); }),
             Catch::Contains("not aligned to its 4-byte f32 elements"));

  optgen::Tensor negative = t;
  negative.numel = -1;
  CHECK_THAT(error_of([&] { opt.add_param_group({negative}, optgen::FusedOptimizer::Overrides{}); }),
             Catch::Contains("negative numel"));
  optgen::Tensor bigger_than_whole = t;
  bigger_than_whole.whole_numel = 7;
  CHECK_THAT(error_of([&] { opt.add_param_group({bigger_than_whole}, optgen::FusedOptimizer::Overrides{}); }),
             Catch::Contains("tensor 0 of the group is a shard of 7 elements (whole_numel) but holds 8"));
  optgen::Tensor cut = t;  // 2 x 4 of a matrix of 2 rows and 7 columns: no whole number of columns
  cut.shape = {2, 4};
  cut.whole_numel = 14;
  cut.shard_dim = 2;
  CHECK_THAT(error_of([&] { opt.add_param_group({cut}, optgen::FusedOptimizer::Overrides{}); }),
             Catch::Contains("tensor 0 of the group has shard_dim 2") &&
                 Catch::Contains("a shard is cut along dimension 0 (rows) or 1 (columns) of its shape"));
  cut.shard_dim = 1;
  cut.whole_numel = 15;
  CHECK_THAT(error_of([&] { opt.add_param_group({cut}, optgen::FusedOptimizer::Overrides{}); }),
             Catch::Contains("tensor 0 of the group is columns of a matrix of 2 rows (shape), but its whole tensor's "
                             "15 elements (whole_numel) are no whole number of columns"));
  cut.shape = {2, 2, 2};
  cut.whole_numel = 16;
  CHECK_THAT(error_of([&] { opt.add_param_group({cut}, optgen::FusedOptimizer::Overrides{}); }),
             Catch::Contains("is a shard cut along dimension 1 (shard_dim) but is bound with 3 dimensions"));

  optgen::Tensor wrong_shape = t;
  wrong_shape.shape = {3, 2};
  CHECK_THAT(error_of([&] {
               opt.add_param_group({t, wrong_shape}, optgen::FusedOptimizer::Overrides{});
             }),
             Catch::Contains("tensor 1 of the group has shape [3, 2], 6 elements, but numel 8") &&
                 Catch::Contains("pass the parameter's own shape, or none"));
  optgen::Tensor negative_dim = t;
  negative_dim.shape = {-2, -4};
  CHECK_THAT(error_of([&] { opt.add_param_group({negative_dim}, optgen::FusedOptimizer::Overrides{}); }),
             Catch::Contains("tensor 0 of the group has a negative dimension in its shape [-2, -4]"));
  optgen::Tensor huge = t;
  huge.shape = {1LL << 40, 1LL << 40, 0};
  CHECK_THAT(error_of([&] { opt.add_param_group({huge}, optgen::FusedOptimizer::Overrides{}); }),
             Catch::Contains("has shape [1099511627776, 1099511627776, 0], 0 elements, but numel 8"));
  huge.shape = {1LL << 40, 1LL << 40};
  CHECK_THAT(error_of([&] { opt.add_param_group({huge}, optgen::FusedOptimizer::Overrides{}); }),
             Catch::Contains("too many elements to count"));

  const auto& sgd_info = launcher("sgd");
  optgen::FusedOptimizer sgd(sgd_info, optgen::default_hyperparameters(sgd_info));
  optgen::Tensor half = t;
  half.dtype = DType::F16;
  CHECK_THAT(error_of([&] { sgd.add_param_group({half}, optgen::FusedOptimizer::Overrides{}); }),
             Catch::Contains("no kernel for variant sgd with storage f16 was generated (its kernels: f32, bf16)") &&
                 Catch::Contains("fix: add \"f16\" to the spec's 'storage:'"));

  optgen::Tensor bf16 = t;
  bf16.dtype = DType::BF16;
  CHECK_THAT(error_of([&] {
               opt.add_param_group({t, bf16}, optgen::FusedOptimizer::Overrides{});
             }),
             Catch::Contains("tensor 1 of the group is bf16 but tensor 0 is f32"));

  CHECK_THAT(error_of([&] {
               opt.add_param_group({t}, {{"beta3", 0.5}});
             }),
             Catch::Contains("Adam has no hyperparameter 'beta3'") && Catch::Contains("lr, beta1, beta2"));
  CHECK_THAT(error_of([&] {
               opt.add_param_group({t}, {{"amsgrad", 2}});
             }),
             Catch::Contains("amsgrad is a bool; got 2"));
  CHECK_THAT(error_of([&] { opt.add_param_group({t}, {{"lr", NAN}}); }), Catch::Contains("lr is NaN"));
  CHECK_THAT(error_of([&] {
               optgen::FusedOptimizer(
                   info, optgen::default_hyperparameters(info),
                   optgen::StorageOptions{DType::F32, {{"exp_avg_sqq", DType::F32}}, optgen::ParamWrite::Nearest, 0});
             }),
             Catch::Contains("names state 'exp_avg_sqq', which Adam does not have") &&
                 Catch::Contains("its states: exp_avg, exp_avg_sq, max_exp_avg_sq"));
  CHECK_THAT(
      error_of([&] {
        optgen::FusedOptimizer(
            info, optgen::default_hyperparameters(info),
            optgen::StorageOptions{
                DType::F32, {{"exp_avg", DType::F32}, {"exp_avg", DType::BF16}}, optgen::ParamWrite::Nearest, 0});
      }),
      Catch::Contains("gives state 'exp_avg' a dtype twice"));
  CHECK_THAT(error_of([&] { opt.set("lr", 0.1, 3); }), Catch::Contains("no param group 3"));
  CHECK_THAT(error_of([&] { opt.set_chunk_size(100); }), Catch::Contains("must be a multiple of 64"));
  CHECK(opt.num_groups() == 0);
}

TEST_CASE("the runtime reads each stage's kind from the launcher's plan and refuses a plan it cannot run",
          "[launcher]") {
  const auto& lamb = launcher("lamb");
  for (int v = 0; v < lamb.num_variants; ++v) {
    const optgen::VariantInfo& variant = lamb.variants[v];
    REQUIRE(variant.num_stages >= 2);  // the norms, then the update
    CHECK(optgen::stage_plan_problem(variant).empty());
    CHECK(variant.stage_kinds[0] == optgen::StageKind::Reduce);
    CHECK(optgen::update_stage(variant) == variant.num_stages - 1);
  }
  for (int k = 0; k < lamb.num_kernels; ++k) {  // a tuning table names a set by its Update stage's kernel
    const std::string name = optgen::tuning_name(lamb, lamb.kernels[k]);
    CHECK(name.substr(name.size() - 7) == "_update");
  }

  // The same tables with one variant's plan out of order: an Update stage first, a Reduce stage last.
  std::vector<optgen::VariantInfo> variants(lamb.variants, lamb.variants + lamb.num_variants);
  const std::vector<optgen::StageKind> swapped = {optgen::StageKind::Update, optgen::StageKind::Reduce};
  variants[0].stage_kinds = swapped.data();
  variants[0].num_stages = 2;
  optgen::OptimizerInfo broken = lamb;
  broken.variants = variants.data();
  CHECK_THAT(error_of([&] { optgen::FusedOptimizer(broken, optgen::default_hyperparameters(lamb)); }),
             Catch::Contains(std::string("variant ") + variants[0].name +
                             "'s stage plan has a stage of kind update (stage 1 of 2) before its last") &&
                 Catch::Contains("regenerate the launcher"));
  const std::vector<optgen::StageKind> no_update = {optgen::StageKind::Reduce};
  variants[0].stage_kinds = no_update.data();
  variants[0].num_stages = 1;
  CHECK_THAT(error_of([&] { optgen::FusedOptimizer(broken, optgen::default_hyperparameters(lamb)); }),
             Catch::Contains("has no Update stage (its last stage is of kind reduce)"));
}

TEST_CASE(
    "a spec whose every variant has rows and columns launches 128-thread blocks of 8192-element chunks "
    "(32768 with 8-bit states)",
    "[launcher]") {
  for (const auto& [name, info] : optgen::builtin_launchers()) {
    INFO("spec " << name);
    bool shaped = true;  // every variant has stage blocks (matrix, row or column code)
    for (int v = 0; v < info->num_variants; ++v) shaped = shaped && info->variants[v].stage_blocks != nullptr;
    CHECK(info->block_size == (shaped ? 128 : 256));
    CHECK(info->elements_per_thread == 8);
    if (!shaped) continue;
    for (int k = 0; k < info->num_kernels; ++k) {
      const optgen::KernelInfo& kernel = info->kernels[k];
      const bool eight_bit =
          kernel.state_dtypes &&
          std::any_of(kernel.state_dtypes, kernel.state_dtypes + info->num_states, optgen::is_blockwise);
      CHECK(kernel.chunk_size == (eight_bit ? 32768 : 8192));
    }
  }
  CHECK(launcher("adafactor").block_size == 128);
  CHECK(launcher("adam_mini").block_size == 128);
  CHECK(launcher("lamb").block_size == 256);
}

TEST_CASE("a derived flag cannot be set directly", "[launcher]") {
  const auto& info = launcher("sgd");
  optgen::FusedOptimizer opt(info, optgen::default_hyperparameters(info));
  opt.set("lr", 0.5);  // no groups yet: changes the default
  CHECK_THAT(error_of([&] { opt.set("use_momentum", 1); }),
             Catch::Contains("use_momentum is derived from other hyperparameters"));
}

TEST_CASE("the C ABI reports failures through optgen_last_error", "[launcher]") {
  optgen_optimizer* opt = nullptr;
  const char* bad_name[] = {"beta3"};
  const double value[] = {0.5};
  CHECK(optgen_adam_create(bad_name, value, 1, nullptr, &opt) == -1);
  CHECK_THAT(std::string(optgen_last_error()), Catch::Contains("Adam has no hyperparameter 'beta3'"));
  const char* lr[] = {"lr"};
  REQUIRE(optgen_adam_create(lr, value, 1, nullptr, &opt) == 0);
  CHECK(std::string(optgen_last_error()).empty());
  double got = 0;
  CHECK(optgen_get(opt, "lr", 0, &got) == -1);  // no group yet
  CHECK_THAT(std::string(optgen_last_error()), Catch::Contains("no param group 0"));
  optgen_tensor t{reinterpret_cast<void*>(0x10000),
                  reinterpret_cast<const void*>(0x20000),
                  8,
                  -1,
                  OPTGEN_F32,
                  OPTGEN_F32,
                  nullptr,
                  2,
                  nullptr,
                  0,
                  0,
                  1};
  CHECK(optgen_add_param_group(opt, &t, 1, nullptr, nullptr, 0, nullptr) == -1);
  CHECK_THAT(std::string(optgen_last_error()), Catch::Contains("tensor 0 has ndim 2 but a NULL shape"));
  const int64_t shape[] = {4, 3};
  t.shape = shape;
  CHECK(optgen_add_param_group(opt, &t, 1, nullptr, nullptr, 0, nullptr) == -1);
  CHECK_THAT(std::string(optgen_last_error()), Catch::Contains("tensor 0 of the group has shape [4, 3], 12 elements, "
                                                               "but numel 8"));
  t.ndim = 0;
  t.shape = nullptr;
  t.grad_dtype = OPTGEN_BF16;
  CHECK(optgen_add_param_group(opt, &t, 1, nullptr, nullptr, 0, nullptr) == -1);
  CHECK_THAT(std::string(optgen_last_error()), Catch::Contains("has a f32 param but a bf16 grad"));
  t.grad_dtype = 7;
  CHECK(optgen_add_param_group(opt, &t, 1, nullptr, nullptr, 0, nullptr) == -1);
  CHECK_THAT(std::string(optgen_last_error()), Catch::Contains("unknown dtype 7"));
  CHECK(optgen_step(nullptr, nullptr) == -1);
  CHECK_THAT(std::string(optgen_last_error()), Catch::Contains("optimizer is NULL"));
  CHECK(optgen_step_amp(nullptr, nullptr, nullptr, nullptr) == -1);
  CHECK_THAT(std::string(optgen_last_error()), Catch::Contains("optgen_step_amp failed: optimizer is NULL"));
  CHECK(optgen_prepare(nullptr, nullptr) == -1);
  CHECK(optgen_save(opt, nullptr) == -1);
  CHECK_THAT(std::string(optgen_last_error()), Catch::Contains("optgen_save failed: optimizer or path is NULL"));
  CHECK(optgen_load(opt, "/nonexistent/optgen.safetensors") == -1);
  CHECK_THAT(std::string(optgen_last_error()), Catch::Contains("cannot open the file"));
  double mu = 0;
  CHECK(optgen_scalar_state(opt, "mu_product", 0, &mu) == -1);
  CHECK_THAT(std::string(optgen_last_error()),
             Catch::Contains("Adam has no scalar state 'mu_product'") && Catch::Contains("it keeps no scalar state"));
  CHECK(optgen_set_step_count(opt, 0, 5) == -1);
  CHECK_THAT(std::string(optgen_last_error()), Catch::Contains("no param group 0"));
  CHECK(optgen_set_launch_shape(opt, 48, 8) == -1);
  CHECK_THAT(std::string(optgen_last_error()),
             Catch::Contains("launch shape 48x8: the block size must be a power of two from 32 to 1024"));
  CHECK(optgen_set_launch_shape(nullptr, 64, 8) == -1);
  CHECK_THAT(std::string(optgen_last_error()), Catch::Contains("optgen_set_launch_shape failed: optimizer is NULL"));
  CHECK(optgen_set_launch_shape(opt, 0, 0) == 0);
  int block_size = 0, per_thread = 0;
  CHECK(optgen_launch_shape(opt, 0, &block_size, &per_thread) == -1);
  CHECK_THAT(std::string(optgen_last_error()), Catch::Contains("no param group 0"));
  CHECK(optgen_launch_shape(opt, 0, nullptr, &per_thread) == -1);
  CHECK_THAT(std::string(optgen_last_error()), Catch::Contains("block_size or elements_per_thread is NULL"));
  CHECK(optgen_set_chunk_size(opt, 100) == -1);
  CHECK_THAT(std::string(optgen_last_error()), Catch::Contains("chunk size 100 must be a multiple of 64"));
  int64_t chunk = 0;
  CHECK(optgen_chunk_size(opt, 0, &chunk) == -1);
  CHECK_THAT(std::string(optgen_last_error()), Catch::Contains("no param group 0"));
  size_t groups = 7;
  CHECK(optgen_num_groups(opt, &groups) == 0);
  CHECK(groups == 0);
  optgen_destroy(opt);
}

TEST_CASE("without NCCL the NCCL reduction hook is refused, saying how to get it", "[launcher]") {
  // ctest's nccl.missing runs this with OPTGEN_NCCL naming a file that is not there.
  const char* given = std::getenv("OPTGEN_NCCL");
  const bool told_missing = given != nullptr && std::string(given).find("/nonexistent/") != std::string::npos;
  std::string why;
  if (optgen::nccl::available(&why)) {
    REQUIRE_FALSE(told_missing);
    record_skip(Catch::getResultCapture().getCurrentTestName(),
                "NCCL is installed here (ctest's nccl.missing hides it)");
    return;
  }
  CHECK_THAT(why, Catch::Contains("dlopen(") && Catch::Contains("OPTGEN_NCCL"));
  optgen_optimizer* opt = nullptr;
  REQUIRE(optgen_adam_create(nullptr, nullptr, 0, nullptr, &opt) == 0);
  int comm = 0;  // never used: loading NCCL fails first
  CHECK(optgen_set_nccl_reduction_hook(opt, &comm) == -1);
  CHECK_THAT(std::string(optgen_last_error()), Catch::Contains("OPTGEN_NCCL"));
  CHECK(optgen_set_nccl_reduction_hook(opt, nullptr) == -1);
  CHECK_THAT(std::string(optgen_last_error()), Catch::Contains("nccl_comm is NULL"));
  optgen_destroy(opt);
}

TEST_CASE("the C ABI describes an optimizer: names, types, defaults, states and which a group has", "[launcher]") {
  optgen_optimizer* opt = nullptr;
  optgen_storage storage{OPTGEN_BF16, 0, nullptr, nullptr, OPTGEN_PARAM_NEAREST, 0};
  REQUIRE(optgen_rmsprop_create(nullptr, nullptr, 0, &storage, &opt) == 0);
  CHECK(std::string(optgen_name(opt)) == "RMSprop");
  CHECK(std::string(optgen_spec(opt)) == "rmsprop");
  CHECK(optgen_name(nullptr) == nullptr);
  int32_t dtype = -1;
  CHECK(optgen_state_dtype(opt, "square_avg", &dtype) == 0);
  CHECK(dtype == OPTGEN_BF16);
  CHECK(optgen_state_dtype(opt, "no_such_state", &dtype) == -1);
  CHECK_THAT(optgen_last_error(), Catch::Contains("no state 'no_such_state'"));

  size_t n = 0;
  REQUIRE(optgen_num_hyperparameters(opt, &n) == 0);
  const auto& info = optgen::RMSprop::info();
  REQUIRE(n == static_cast<size_t>(info.num_hyperparameters));
  std::vector<double> h;
  for (size_t i = 0; i < n; ++i) {
    optgen_hyperparameter_info d{};
    REQUIRE(optgen_describe_hyperparameter(opt, i, &d) == 0);
    CHECK(std::string(d.name) == info.hyperparameters[i].name);
    CHECK(d.type == static_cast<int32_t>(info.hyperparameters[i].type));
    CHECK(d.default_value == info.hyperparameters[i].default_value);
    h.push_back(d.default_value);
  }
  optgen_hyperparameter_info last{};
  REQUIRE(optgen_describe_hyperparameter(opt, n - 1, &last) == 0);
  CHECK(std::string(last.name) == "clip_grad_norm");  // the clipping's flag comes after the spec's own
  CHECK((last.derived == 1 && last.specialized == 1 && last.type == OPTGEN_BOOL));
  CHECK(optgen_describe_hyperparameter(opt, n, &last) == -1);
  CHECK_THAT(std::string(optgen_last_error()), Catch::Contains("index out of range"));

  REQUIRE(optgen_num_states(opt, &n) == 0);
  REQUIRE(n == 3);
  optgen_state_info s{};
  REQUIRE(optgen_describe_state(opt, 1, &s) == 0);
  CHECK(std::string(s.name) == "momentum_buffer");
  CHECK((s.init_value == 0 && s.init_hyperparameter == -1));
  // Which states a group has follows its flags, derived ones included (momentum > 0).
  std::vector<int32_t> used(3, -1);
  REQUIRE(optgen_states_used(opt, h.data(), h.size(), used.data()) == 0);
  CHECK(used == std::vector<int32_t>{1, 0, 0});
  h[4] = 0.9;  // momentum
  h[5] = 1;    // centered
  REQUIRE(optgen_states_used(opt, h.data(), h.size(), used.data()) == 0);
  CHECK(used == std::vector<int32_t>{1, 1, 1});
  CHECK(optgen_states_used(opt, h.data(), 2, used.data()) == -1);
  CHECK_THAT(std::string(optgen_last_error()), Catch::Contains("expected 10 hyperparameters, got 2"));
  optgen_destroy(opt);

  REQUIRE(optgen_asgd_create(nullptr, nullptr, 0, nullptr, &opt) == 0);
  REQUIRE(optgen_num_scalar_states(opt, &n) == 0);
  REQUIRE(n == 2);
  REQUIRE(optgen_describe_scalar_state(opt, 0, &s) == 0);
  CHECK(std::string(s.name) == "eta");
  CHECK(s.init_hyperparameter == 0);  // starts as lr
  CHECK(optgen_rebind(opt, 0, nullptr, nullptr, nullptr, 1) == -1);
  CHECK_THAT(std::string(optgen_last_error()), Catch::Contains("tensors, params or grads is NULL"));
  optgen_destroy(opt);
}

TEST_CASE("the C ABI and the generator say which version they are", "[launcher]") {
  CHECK(optgen_abi_version() == OPTGEN_ABI_VERSION);
  CHECK(std::string(optgen_version()) == OPTGEN_VERSION);
  CHECK(optgen::Adam::info().abi_version == optgen::kernel_abi::kVersion);
  CHECK(std::string(optgen::Adam::info().generator) == "optgen " OPTGEN_VERSION);
}

TEST_CASE("the C ABI hands out the 8-bit states' maps and blocks, and refuses other dtypes", "[launcher]") {
  for (const int32_t dtype : {OPTGEN_Q8, OPTGEN_UQ8}) {
    std::vector<float> map(256, -2.0f);
    int32_t block = 0;
    int64_t min_numel = 0;
    REQUIRE(optgen_blockwise8_layout(dtype, map.data(), &block, &min_numel) == 0);
    const float* expected = dtype == OPTGEN_Q8 ? optgen::blockwise8::kSignedMap : optgen::blockwise8::kUnsignedMap;
    CHECK(std::equal(map.begin(), map.end(), expected));
    CHECK(block == 256);
    CHECK(min_numel == 4096);
    CHECK(optgen_blockwise8_layout(dtype, nullptr, nullptr, nullptr) == 0);
  }
  CHECK(optgen_blockwise8_layout(OPTGEN_BF16, nullptr, nullptr, nullptr) == -1);
  CHECK_THAT(std::string(optgen_last_error()), Catch::Contains("not OPTGEN_Q8 or OPTGEN_UQ8"));
  CHECK(optgen_blockwise8_layout(9, nullptr, nullptr, nullptr) == -1);
  CHECK_THAT(std::string(optgen_last_error()), Catch::Contains("unknown dtype 9"));
}

TEST_CASE("a kernel set with a bf16 operand needs compute capability 8.0, the others 7.5", "[launcher]") {
  // prepare() refuses the first on older GPUs, whose module holds it compiled empty.
  const auto& info = optgen::Adam::info();
  int bf16_sets = 0, others = 0;
  for (int k = 0; k < info.num_kernels; ++k) {
    const std::string name = optgen::tuning_name(info, info.kernels[k]);  // e.g. adam_bf16_f32_update
    const bool bf16 = name.find("bf16") != std::string::npos;
    INFO(name);
    CHECK(optgen::minimum_compute_capability(info, info.kernels[k]) == (bf16 ? 80 : 75));
    ++(bf16 ? bf16_sets : others);
  }
  CHECK(bf16_sets > 0);
  CHECK(others > 0);
}

TEST_CASE("without a CUDA driver, binding tensors says so and what to do", "[launcher]") {
  if (optgen::driver::available()) return;  // covered on machines without a driver (CI)
  const auto& info = launcher("adam");
  optgen::FusedOptimizer opt(info, optgen::default_hyperparameters(info));
  CHECK_THAT(error_of([&] { opt.add_param_group({fake_tensor()}, optgen::FusedOptimizer::Overrides{}); }),
             Catch::Contains("libcuda.so.1"));
}

// ---- On a GPU. ----

TEST_CASE("every built-in spec x variant x storage matches the CPU reference", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  std::mt19937 rng(20261121);
  // Shapes, which only a spec with rows and columns (adafactor) reads: empty, a scalar, vectors;
  // matrices with one column, with rows longer than a block's lanes, with more rows than a column
  // segment and two chunks; batches of small matrices (conv weights); matrices whose rows are whole
  // tiles of 128 columns, which column segments reduce (kernel_abi::rows_in_column_segments): three
  // tiles and two segments, a batch of two of two tiles, one tile; matrices of one element (1x1 conv
  // weights, a 2-D one, run as element code: kernel_abi::kUnitMatrices), one of two chunks.
  const TensorShapes shapes{{{0},
                             {},
                             {3},
                             {17, 1},
                             {4097},
                             {8, 4, 3, 3},
                             {2, 1, 5003},
                             {601, 173},
                             {100003},
                             {16, 8, 1, 1},
                             {3, 5, 7, 11},
                             {300, 384},
                             {2, 40, 256},
                             {20, 128},
                             {1, 1},
                             {480, 160, 1, 1}}};
  const std::vector<bool> misaligned = {false, false, true,  false, true, false, true,  false,
                                        true,  true,  false, false, true, false, false, false};
  // A spec with a matrix function (muon) steps matrices only: wide, tall, one row, one column, a
  // batch of small ones, and one of rows longer than a block's lanes.
  const TensorShapes matrices{{{3, 5}, {17, 1}, {1, 9}, {8, 4, 3, 3}, {2, 70, 30}, {601, 173}, {16, 8, 1, 1}}};
  const std::vector<bool> matrices_misaligned = {false, true, false, true, false, false, true};
  int combinations = 0;
  for (const auto& entry : optgen::builtin_launchers()) combinations += entry.second->num_kernels;
  // Every variant x {f32, bf16 params with f32 states}; adam's and adamw's also x {f16 params, bf16
  // states with bf16 or f32 params, bf16 and f16 params with master copies, bf16 params rounded
  // stochastically, bf16 moments with an f32 exp_avg_sq, 8-bit states with f32 or bf16 params};
  // adafactor's, prodigy's, dadapt_adam's and adamw_schedule_free's also x f16 params; lamb's also
  // x 8-bit states (f32 params); adam_mini's x 8-bit states (f32 and bf16 params); muon's also x
  // {f32, bf16 params} with its matrix value in f32.
  int variants = 0;
  for (const auto& entry : optgen::builtin_launchers()) variants += entry.second->num_variants;
  // adam, adamw and prodigy: 4 variants each; adafactor, lamb, dadapt_adam, adamw_schedule_free,
  // adam_mini and muon 2 each
  CHECK(combinations == 2 * variants + 9 * (4 + 4) + 2 + 2 + 4 + 2 + 2 + 2 * 2 + 2 * 2);
  CHECK(optgen::builtin_launchers().size() == builtin_spec_count());
  for (const auto& [name, info] : optgen::builtin_launchers()) {
    const auto& ref = reference_of(name);
    for (int k = 0; k < info->num_kernels; ++k) {
      const optgen::KernelInfo& kernel = info->kernels[k];
      DYNAMIC_SECTION(kernel.stages[0]) {
        std::vector<double> h = hyperparameters_for(*info, kernel.variant);
        optgen::FusedOptimizer opt(*info, h, storage_of(*info, kernel));
        opt.set_chunk_size(65536);
        const bool of_matrices = info->variants[kernel.variant].num_matrix_values > 0;
        DeviceGroup group(kernel.param, of_matrices ? matrices : shapes, of_matrices ? matrices_misaligned : misaligned,
                          rng);
        opt.add_param_group(group.tensors, h);
        auto scalar_state = initial_scalar_state(*info, opt.hyperparameters(0));
        Comparison result;
        for (std::int64_t step = 1; step <= 3; ++step) {
          group.new_gradients(rng);
          compare_step(opt, ref, group, scalar_state, step, result);
          // Its stages, and the Update stage of matrices of one element where the set has one (the
          // shapes have such tensors); a variant with matrix values launches their work between them
          // too (matrix_values_test.cpp counts that exactly).
          const optgen::VariantInfo& variant = info->variants[kernel.variant];
          if (variant.num_matrix_values == 0)
            CHECK(opt.launches_last_step() == variant.num_stages + (kernel.unit_update ? 1 : 0));
          else
            CHECK(opt.launches_last_step() > variant.num_stages);
        }
        INFO(kernel.stages[0] << ": worst relative error " << result.worst << " in " << result.where);
        // Muon's lr times its largest scale, sqrt(601 / 173) (match_rms_adamw is off by default).
        double lr = 0;
        for (int i = 0; i < info->num_hyperparameters; ++i)
          if (std::string(info->hyperparameters[i].name) == "lr") lr = h[i];
        CHECK(result.worst <= (of_matrices ? matrix_tolerance(*info, kernel, lr, std::sqrt(601.0 / 173.0), 3)
                                           : tolerance(*info, kernel)));
      }
    }
  }
}

TEST_CASE("the Update stages of short and of long rows each match the CPU reference where a plan takes them", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  std::mt19937 rng(20261202);
  // Rows of one to eleven values (conv weights, a column, a short vector) and, with a matrix of rows
  // that vectors of eight straddle (173), long ones; misaligned tensors go element by element.
  const TensorShapes short_rows{{{8, 4, 3, 3}, {16, 8, 1, 1}, {3, 5, 7, 11}, {17, 1}, {3}, {40, 3}}};
  const TensorShapes long_rows_too{{{601, 173}, {2, 40, 256}, {4097}, {16, 8, 1, 1}, {3}}};
  int sets = 0;
  for (const auto& [name, info] : optgen::builtin_launchers()) {
    const auto& ref = reference_of(name);
    for (int k = 0; k < info->num_kernels; ++k) {
      const optgen::KernelInfo& kernel = info->kernels[k];
      if (!kernel.long_row_update) continue;
      ++sets;
      const std::string update = kernel.stages[info->variants[kernel.variant].num_stages - 1];
      for (const bool long_plan : {false, true}) {
        DYNAMIC_SECTION(kernel.stages[0] << (long_plan ? ", long rows" : ", short rows")) {
          const std::vector<double> h = hyperparameters_for(*info, kernel.variant);
          optgen::FusedOptimizer opt(*info, h, storage_of(*info, kernel));
          const TensorShapes& shapes = long_plan ? long_rows_too : short_rows;
          std::vector<bool> misaligned(shapes.list.size(), false);
          misaligned[1] = misaligned[4] = true;
          DeviceGroup group(kernel.param, shapes, misaligned, rng);
          opt.add_param_group(group.tensors, h);
          auto scalar_state = initial_scalar_state(*info, opt.hyperparameters(0));
          Comparison result;
          for (std::int64_t step = 1; step <= 3; ++step) {
            group.new_gradients(rng);
            compare_step(opt, ref, group, scalar_state, step, result);
          }
          // The Update stage (then, where the set has one, that of the 1x1 conv weight).
          const std::vector<std::string> kernels = opt.stage_kernels(0);
          const std::string chosen =
              kernels.at(static_cast<std::size_t>(info->variants[kernel.variant].num_stages - 1));
          CHECK(chosen == (long_plan ? std::string(kernel.long_row_update) : update));
          CHECK(kernels.back() == (kernel.unit_update ? std::string(kernel.unit_update) : chosen));
          INFO(chosen << ": worst relative error " << result.worst << " in " << result.where);
          CHECK(result.worst <= tolerance(*info, kernel));
        }
      }
    }
  }
  CHECK(sets == 4);  // adafactor's and adam_mini's f32 sets, each with and without clipping
}

/// 10,000 tensors for `name`, each of one of the domains its spec steps in: numels of 0 to 300
/// (adam, prodigy), those and matrices of up to 20 x 40 (adam_mini's rows of the bound shape: one
/// row, one column, a bias), or matrices of 20 shapes of up to 24 x 24 (muon: one bucket a shape).
TensorShapes ten_thousand_shapes(const std::string& name, std::mt19937& rng) {
  std::uniform_int_distribution<std::int64_t> numel(0, 300), rows(1, 20), cols(1, 40), side(1, 24);
  TensorShapes shapes;
  if (name == "muon") {
    std::vector<std::vector<std::int64_t>> twenty;
    while (twenty.size() < 20) {
      std::vector<std::int64_t> shape = {side(rng), side(rng)};
      if (std::find(twenty.begin(), twenty.end(), shape) == twenty.end()) twenty.push_back(shape);
    }
    std::uniform_int_distribution<std::size_t> pick(0, twenty.size() - 1);
    for (int i = 0; i < 10000; ++i) shapes.list.push_back(twenty[i < 20 ? i : pick(rng)]);
  } else {
    for (int i = 0; i < 10000; ++i)
      shapes.list.push_back(name == "adam_mini" && i % 2 ? std::vector<std::int64_t>{rows(rng), cols(rng)}
                                                         : std::vector<std::int64_t>{numel(rng)});
  }
  return shapes;
}

TEST_CASE("10,000 tensors in each domain step as the reference, in the launches of a few", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  // Elements (adam), rows of the bound shape (adam_mini), reductions over the optimizer and its
  // shared scalar state (prodigy), matrices batched by shape (muon).
  for (const char* name : {"adam", "adam_mini", "prodigy", "muon"}) {
    DYNAMIC_SECTION(name) {
      std::mt19937 rng(7);
      const auto& info = launcher(name);
      const TensorShapes shapes = ten_thousand_shapes(name, rng);
      const bool matrices = steps_matrices(info);
      std::vector<bool> misaligned(shapes.list.size(), false);
      if (!matrices)
        for (std::size_t i = 3; i < misaligned.size(); i += 7) misaligned[i] = true;
      const std::vector<double> h = optgen::default_hyperparameters(info);
      optgen::FusedOptimizer opt(info, h);
      DeviceGroup group(DType::F32, shapes, misaligned, rng);
      opt.add_param_group(group.tensors, {{"weight_decay", 0.01}});
      const Comparison result = compare_steps(opt, reference_of(name), group, 2, rng);
      INFO("worst relative error " << result.worst << " in " << result.where);
      if (!matrices) {
        CHECK(result.worst <= tolerance(DType::F32, {DType::F32}));
      } else {
        const std::vector<std::string> chosen = opt.stage_kernels(0);
        const optgen::KernelInfo* kernel = nullptr;
        for (int k = 0; k < info.num_kernels; ++k)
          if (info.kernels[k].stages[0] == chosen[0]) kernel = &info.kernels[k];
        REQUIRE(kernel != nullptr);
        CHECK(result.worst <= matrix_tolerance(info, *kernel, hyperparameter(info, h, "lr"), std::sqrt(24.0), 2));
      }
      // As many launches as a group of one tensor of each shape takes (muon's: its 20 shapes').
      TensorShapes few;
      for (const auto& shape : shapes.list)
        if (std::find(few.list.begin(), few.list.end(), shape) == few.list.end()) few.list.push_back(shape);
      optgen::FusedOptimizer small(info, h);
      DeviceGroup small_group(DType::F32, few, std::vector<bool>(few.list.size(), false), rng);
      small.add_param_group(small_group.tensors, {{"weight_decay", 0.01}});
      small_group.new_gradients(rng);
      small.step();
      synchronize();
      INFO(few.list.size() << " tensors of the shapes take " << small.launches_last_step() << " launches");
      CHECK(opt.launches_last_step() == small.launches_last_step());
      if (std::string(name) == "adam") CHECK(opt.launches_last_step() == 1);
    }
  }
}

TEST_CASE("param groups with different hyperparameters share one launch", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const auto& info = launcher("adamw");
  const auto& ref = reference_of("adamw");
  for (int groups : {3, 20}) {
    DYNAMIC_SECTION(groups << " groups") {
      std::mt19937 rng(groups);
      optgen::FusedOptimizer opt(info, optgen::default_hyperparameters(info));
      std::vector<std::unique_ptr<DeviceGroup>> device_groups;
      std::vector<std::vector<double>> scalar_states;
      for (int g = 0; g < groups; ++g) {
        device_groups.push_back(std::make_unique<DeviceGroup>(DType::F32, std::vector<std::int64_t>{1000 + g, 77, 5000},
                                                              std::vector<bool>{false, true, false}, rng));
        opt.add_param_group(device_groups.back()->tensors,
                            {{"lr", 1e-3 * (g + 1)}, {"weight_decay", 0.01 * g}, {"maximize", g % 2}});
        scalar_states.push_back(initial_scalar_state(info, opt.hyperparameters(g)));
      }
      for (std::int64_t step = 1; step <= 2; ++step) {
        for (auto& g : device_groups) g->new_gradients(rng);
        std::vector<StateSnapshot> before;
        for (int g = 0; g < groups; ++g) before.push_back(snapshot_states(opt, ref, g, *device_groups[g]));
        opt.step();
        synchronize();
        CHECK(opt.launches_last_step() == 1);
        for (int g = 0; g < groups; ++g) {
          Comparison result;
          check_group(opt, ref, g, *device_groups[g], before[g], scalar_states[g], step, result);
          INFO("worst relative error " << result.worst << " in " << result.where);
          CHECK(result.worst <= 1e-5);
        }
      }
    }
  }
}

TEST_CASE("a tensor of more than 2^31 elements is updated to its last element", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const std::int64_t n = (std::int64_t{1} << 31) + 4099;  // probes below must not overlap
  DeviceMemory param(n * 4), grad(n * 4);
  const auto& api = optgen::driver::api();
  float one = 1.0f, half = 0.5f;
  std::uint32_t one_bits, half_bits;
  std::memcpy(&one_bits, &one, 4);
  std::memcpy(&half_bits, &half, 4);
  optgen::driver::check(api.cuMemsetD32(param.get(), one_bits, n), "cuMemsetD32");
  optgen::driver::check(api.cuMemsetD32(grad.get(), half_bits, n), "cuMemsetD32");
  synchronize();  // the memsets run asynchronously
  // Distinct gradients around 2^31 and at the very end, where 32-bit indexing would go wrong.
  const std::vector<std::int64_t> probes = {0, (std::int64_t{1} << 31) - 40, n - 64};
  std::mt19937 rng(31);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<std::vector<float>> probe_grads;
  for (auto at : probes) {
    std::vector<float> g(64);
    for (auto& x : g) x = uniform(rng);
    grad.upload(g, at * 4);
    probe_grads.push_back(g);
  }
  const auto& info = launcher("sgd");
  optgen::FusedOptimizer opt(info, optgen::default_hyperparameters(info));
  opt.add_param_group({{param.at(0), grad.at(0), n, DType::F32}}, {{"lr", 0.1}, {"momentum", 0.9}});
  opt.step();
  opt.step();
  synchronize();
  CHECK(opt.launches_last_step() == 1);
  for (size_t p = 0; p < probes.size(); ++p) {
    auto got = param.download<float>(64, probes[p] * 4);
    for (size_t i = 0; i < 64; ++i) {
      // Two SGD steps with momentum 0.9 and the same gradient g: buf = g, then 1.9 g.
      const float g = probe_grads[p][i];
      const float expected = 1.0f - 0.1f * g - 0.1f * (0.9f * g + g);
      INFO("element " << probes[p] + static_cast<std::int64_t>(i));
      CHECK(std::fabs(got[i] - expected) <= 1e-6f);
    }
  }
  auto last = param.download<float>(1, (n - 1) * 4);
  CHECK(last[0] != 1.0f);
}

TEST_CASE("setters change the next step, and a setter that would switch variants is rejected", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  std::mt19937 rng(3);
  optgen::SGD::Options sgd_options;
  sgd_options.lr = 0.1;
  optgen::SGD sgd(sgd_options);
  DeviceGroup group(DType::F32, {1000}, {false}, rng);
  sgd.add_param_group(group.tensors);
  group.new_gradients(rng);
  sgd.set_lr(0.25);
  CHECK(sgd.options(0).lr == 0.25);
  sgd.step();
  auto after = download(DType::F32, group.tensors[0].param, 1000);
  for (size_t i = 0; i < 1000; ++i)
    CHECK(after[i] == Approx(group.params[0][i] - 0.25f * group.grads[0][i]).epsilon(1e-6));
  CHECK_THAT(error_of([&] { sgd.set_momentum(0.9); }),
             Catch::Contains("would switch param group 0 from kernel variant sgd to sgd_use_momentum") &&
                 Catch::Contains("pass momentum to add_param_group instead"));
  CHECK(sgd.step_count(0) == 1);
}

TEST_CASE("caller-provided state buffers are used as they are", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  std::mt19937 rng(5);
  DeviceGroup group(DType::F32, {256}, {false}, rng);
  DeviceMemory exp_avg(256 * 4), exp_avg_sq(256 * 4);
  exp_avg.upload(std::vector<float>(256, 0.5f));
  exp_avg_sq.upload(std::vector<float>(256, 0.25f));
  void* states[] = {exp_avg.at(0), exp_avg_sq.at(0), nullptr};
  group.tensors[0].states = states;
  optgen::Adam adam;
  adam.add_param_group(group.tensors);
  CHECK(adam.exp_avg(0, 0).data == exp_avg.at(0));
  group.new_gradients(rng);
  adam.step();
  auto m = exp_avg.download<float>(256);
  for (size_t i = 0; i < 256; ++i) CHECK(m[i] == Approx(0.9f * 0.5f + 0.1f * group.grads[0][i]).epsilon(1e-6));
}

TEST_CASE("pointers to host memory are rejected", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  std::vector<float> host(64), host_grad(64);
  optgen::Adam adam;
  CHECK_THAT(error_of([&] {
               adam.add_param_group({{host.data(), host_grad.data(), 64, DType::F32}});
             }),
             Catch::Contains("the param pointer is not device memory"));
}

TEST_CASE("the C ABI drives an optimizer on the GPU", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  std::mt19937 rng(11);
  DeviceGroup group(DType::F32, {4096}, {false}, rng);
  group.new_gradients(rng);
  optgen_optimizer* opt = nullptr;
  const char* names[] = {"lr"};
  const double values[] = {0.5};
  REQUIRE(optgen_sgd_create(names, values, 1, nullptr, &opt) == 0);
  optgen_tensor t{
      group.tensors[0].param, group.tensors[0].grad, 4096, 4096, OPTGEN_F32, OPTGEN_F32, nullptr, 0, nullptr, 0, 0, 1};
  size_t index = 99;
  REQUIRE(optgen_add_param_group(opt, &t, 1, nullptr, nullptr, 0, &index) == 0);
  CHECK(index == 0);
  REQUIRE(optgen_step(opt, nullptr) == 0);
  int launches = 0;
  REQUIRE(optgen_launches_last_step(opt, &launches) == 0);
  CHECK(launches == 1);
  auto after = download(DType::F32, t.param, 4096);
  CHECK(after[17] == Approx(group.params[0][17] - 0.5f * group.grads[0][17]).epsilon(1e-6));

  // Another launch shape (compiled by NVRTC) and chunk size: the same update.
  REQUIRE(optgen_set_launch_shape(opt, 64, 4) == 0);
  REQUIRE(optgen_set_chunk_size(opt, 1024) == 0);
  REQUIRE(optgen_step(opt, nullptr) == 0);
  int block_size = 0, per_thread = 0;
  int64_t chunk = 0;
  REQUIRE(optgen_launch_shape(opt, 0, &block_size, &per_thread) == 0);
  REQUIRE(optgen_chunk_size(opt, 0, &chunk) == 0);
  CHECK(block_size == 64);
  CHECK(per_thread == 4);
  CHECK(chunk == 1024);
  const auto twice = download(DType::F32, t.param, 4096);
  for (size_t i = 0; i < 4096; ++i) CHECK(twice[i] == after[i] - 0.5f * group.grads[0][i]);
  optgen_destroy(opt);
}

TEST_CASE("kernels compiled by NVRTC at load time go through the disk cache: cold, warm, corrupt", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const auto dir = std::filesystem::temp_directory_path() / ("optgen_cache_test_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  ::setenv("OPTGEN_CACHE_DIR", dir.c_str(), 1);
  ::setenv("OPTGEN_FORCE_NVRTC", "1", 1);
  std::mt19937 rng(13);
  DeviceGroup group(DType::F32, {1000}, {false}, rng);
  auto origin_of_a_new_optimizer = [&] {
    optgen::Lion lion;
    lion.add_param_group(group.tensors);
    lion.step();
    return lion.engine().module_origin();
  };
  CHECK(origin_of_a_new_optimizer() == optgen::ModuleOrigin::CompiledNow);
  CHECK(origin_of_a_new_optimizer() == optgen::ModuleOrigin::CacheHit);
  int entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    ++entries;
    std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x5a');
  }
  CHECK(entries == 1);
  CHECK(origin_of_a_new_optimizer() == optgen::ModuleOrigin::CompiledNow);
  CHECK(origin_of_a_new_optimizer() == optgen::ModuleOrigin::CacheHit);
  ::unsetenv("OPTGEN_FORCE_NVRTC");
  ::unsetenv("OPTGEN_CACHE_DIR");
  CHECK(origin_of_a_new_optimizer() == optgen::ModuleOrigin::EmbeddedCubin);
  std::filesystem::remove_all(dir);
}
