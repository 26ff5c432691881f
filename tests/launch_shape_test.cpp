// Launch shapes (kernel_abi.h, "Launch shape"): the kernels compiled for other threads per block
// and elements per thread than the generator's, by NVRTC at load time. Without a GPU: the shape's
// checks and the kernel cache it compiles into ([nvrtc]); on a GPU, kernel sets of every kind
// (element-wise, 8-bit states, Reduce stages, rows and columns) stepped at other shapes against
// the CPU reference, from set_launch_shape and from a tuning table.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "optgen/kernel_cache.h"
#include "optgen/nvrtc.h"
#include "optgen/tuning.h"
#include "optimizer_harness.h"
#include "scoped_resources.h"

using namespace optgen_test;

namespace {

/// The kernel set of `info` that its tuning table knows as `name`.
const optgen::KernelInfo& kernel_named(const optgen::OptimizerInfo& info, const std::string& name) {
  for (int k = 0; k < info.num_kernels; ++k)
    if (optgen::tuning_name(info, info.kernels[k]) == name) return info.kernels[k];
  FAIL("no kernel set " << name << " in " << info.name);
  throw;
}

/// Odd sizes, misaligned tensors, matrices of many rows and columns (launcher_test.cpp's).
const TensorShapes kShapes{
    {{0}, {}, {3}, {17, 1}, {4097}, {8, 4, 3, 3}, {2, 1, 5003}, {601, 173}, {100003}, {16, 8, 1, 1}, {3, 5, 7, 11}}};
const std::vector<bool> kMisaligned = {false, false, true, false, true, false, true, false, true, true, false};

/// Three steps of kernel set `name` of `spec` at launch shape `shape` (set_launch_shape) against
/// the reference, in chunks of 1024 (several per tensor, so blocks straddle tensor ends).
void check_at_shape(const std::string& spec, const std::string& name, optgen::LaunchShape shape) {
  const optgen::OptimizerInfo& info = launcher(spec);
  const optgen::KernelInfo& kernel = kernel_named(info, name);
  std::mt19937 rng(static_cast<unsigned>(shape.block_size * 131 + shape.elements_per_thread));
  std::vector<double> h = hyperparameters_for(info, kernel.variant);
  optgen::FusedOptimizer opt(info, h, storage_of(info, kernel));
  opt.set_chunk_size(1024);
  opt.set_launch_shape(shape);
  DeviceGroup group(kernel.param, kShapes, kMisaligned, rng);
  opt.add_param_group(group.tensors, h);
  REQUIRE(optgen::tuning_name(info, opt.kernel_set(0)) == name);
  CHECK(opt.launch_shape(0) == shape);
  auto scalar_state = initial_scalar_state(info, opt.hyperparameters(0));
  Comparison result;
  for (std::int64_t step = 1; step <= 3; ++step) {
    group.new_gradients(rng);
    compare_step(opt, reference_of(spec), group, scalar_state, step, result);
  }
  const optgen::ModuleOrigin origin = opt.module_origin(0);
  CHECK((origin == optgen::ModuleOrigin::CompiledNow || origin == optgen::ModuleOrigin::CacheHit));
  INFO(name << " at " << optgen::to_string(shape) << ": worst relative error " << result.worst << " in "
            << result.where);
  CHECK(result.worst <= tolerance(info, kernel));
}

}  // namespace

TEST_CASE("launch shape: set_launch_shape takes what the kernels can be compiled for", "[launch_shape]") {
  const optgen::OptimizerInfo& info = launcher("adam");
  CHECK(info.block_size == 256);
  CHECK(info.elements_per_thread == 8);
  CHECK(optgen::to_string(optgen::LaunchShape{128, 16}) == "128x16");
  optgen::FusedOptimizer opt(info, optgen::default_hyperparameters(info));
  for (const optgen::LaunchShape bad :
       {optgen::LaunchShape{100, 8}, optgen::LaunchShape{2048, 8}, optgen::LaunchShape{16, 8},
        optgen::LaunchShape{256, 3}, optgen::LaunchShape{256, 128}, optgen::LaunchShape{256, 0}}) {
    INFO(optgen::to_string(bad));
    CHECK_THAT(error_of([&] { opt.set_launch_shape(bad); }),
               Catch::Contains("Adam::set_launch_shape") && Catch::Contains("launch shape " + optgen::to_string(bad)) &&
                   Catch::Contains("a power of two from 32 to 1024"));
  }
  opt.set_launch_shape({512, 4});
  opt.set_launch_shape({0, 0});  // each kernel set's own again
}

TEST_CASE("launch shape: compile_launch_shape compiles into the kernel cache once", "[launch_shape][nvrtc]") {
  std::string why;
  const bool available = optgen::nvrtc::available(&why);
  INFO(why);
  REQUIRE(available);
  TemporaryDirectory cache;
  ScopedEnvironment cache_dir("OPTGEN_CACHE_DIR", cache.path().c_str());
  const optgen::OptimizerInfo& sgd = launcher("sgd");
  // The generator's own shape is the embedded images': nothing to compile.
  CHECK_FALSE(optgen::compile_launch_shape(sgd, {sgd.block_size, sgd.elements_per_thread}, 90));
  CHECK(std::filesystem::is_empty(cache.path()));
  CHECK(optgen::compile_launch_shape(sgd, {128, 4}, 90));
  CHECK_FALSE(optgen::compile_launch_shape(sgd, {128, 4}, 90));  // cached
  CHECK(optgen::compile_launch_shape(sgd, {128, 4}, 80));        // another architecture
  CHECK(optgen::compile_launch_shape(sgd, {512, 8}, 90));        // another shape
  int entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(cache.path())) entries += entry.is_regular_file();
  CHECK(entries == 3);
}

TEST_CASE("launch shape: kernel sets of every kind step at other shapes as the reference does", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  struct Case {
    std::string spec, kernel_set;
    optgen::LaunchShape shape;
  };
  const std::vector<Case> cases = {
      {"adam", "adam_f32_f32_update", {128, 4}},                // element-wise, fewer threads
      {"adamw", "adamw_bf16_bf16_update", {512, 16}},           // narrow operands: more tiles
      {"adam", "adam_f32_q8_exp_avg_sq_uq8_update", {512, 8}},  // 8-bit states, 16 warps a block
      {"lamb", "lamb_f32_f32_update", {64, 16}},                // Reduce stages
      {"adafactor", "adafactor_f32_f32_update", {1024, 2}},     // rows, columns and matrices
  };
  // Compiled first, a thread each (each is seconds to a minute of NVRTC).
  const int arch = optgen::driver::compute_capability(optgen::driver::current_device());
  std::vector<std::future<bool>> compiling;
  for (const Case& c : cases)
    compiling.push_back(
        std::async(std::launch::async, optgen::compile_launch_shape, std::cref(launcher(c.spec)), c.shape, arch));
  for (auto& f : compiling) f.get();
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.kernel_set << " at " << optgen::to_string(c.shape)) {
      check_at_shape(c.spec, c.kernel_set, c.shape);
    }
  }
}

TEST_CASE("launch shape: an optimizer takes its launch shape from the table for its GPU", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const std::string device = optgen::driver::device_name(optgen::driver::current_device());
  const optgen::OptimizerInfo& adam = launcher("adam");
  const std::string path =
      (std::filesystem::temp_directory_path() / ("optgen_launch_shape." + std::to_string(getpid()) + ".json")).string();
  std::ofstream(path) << R"({"device": ")" + device +
                             R"(", "kernels": {"adam_f32_f32_update": [{"elements": 1000, "chunk_size": 1024, )"
                             R"("block_size": 128, "elements_per_thread": 4}]}})";
  ScopedEnvironment tuning("OPTGEN_TUNING", path.c_str());
  std::mt19937 rng(11);
  DeviceGroup group(DType::F32, std::vector<std::int64_t>{5000, 300, 1}, {false, true, false}, rng);
  optgen::FusedOptimizer opt(adam, optgen::default_hyperparameters(adam));
  opt.add_param_group(group.tensors, optgen::FusedOptimizer::Overrides{});
  CHECK(opt.chunk_size(0) == 1024);
  CHECK(opt.launch_shape(0) == optgen::LaunchShape{128, 4});
  const Comparison result = compare_steps(opt, reference_of("adam"), group, 2, rng);
  INFO("worst relative error " << result.worst << " in " << result.where);
  CHECK(result.worst <= tolerance(adam, opt.kernel_set(0)));
  const optgen::ModuleOrigin origin = opt.module_origin(0);  // compiled for 128x4, not embedded
  CHECK((origin == optgen::ModuleOrigin::CompiledNow || origin == optgen::ModuleOrigin::CacheHit));
  // set_launch_shape wins over the table; the generator's shape runs the kernels it was built with.
  optgen::FusedOptimizer own(adam, optgen::default_hyperparameters(adam));
  own.set_launch_shape({adam.block_size, adam.elements_per_thread});
  own.add_param_group(group.tensors, optgen::FusedOptimizer::Overrides{});
  CHECK(own.launch_shape(0) == optgen::LaunchShape{256, 8});
  const Comparison again = compare_steps(own, reference_of("adam"), group, 1, rng);
  CHECK(again.worst <= tolerance(adam, own.kernel_set(0)));
  CHECK(own.module_origin(0) == own.module_origin());
  std::filesystem::remove(path);
}
