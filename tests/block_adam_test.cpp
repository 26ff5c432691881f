// The block domain (`block_elements`): tests/specs/block_adam.yaml keeps one second moment per block
// of 128 consecutive elements of a tensor, whatever its shape, and Adam's per element for a tensor
// that is not a whole number of blocks. Its CPU reference against the rule written out by hand, and
// on a GPU its kernels against the reference over shapes whose rows are not its blocks.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "block_adam.h"
#include "block_adam_reference.h"
#include "check.h"
#include "optimizer_harness.h"

using namespace optgen_test;

namespace {
constexpr std::size_t kBlock = 128;
}

TEST_CASE("block_elements: the reference keeps one second moment per block", "[reference]") {
  const auto& info = optgen::BlockAdam::info();
  CHECK(info.block_elements == static_cast<long long>(kBlock));
  const auto& ref = optgen::reference::block_adam::optimizer();
  const std::vector<double> h = optgen::default_hyperparameters(info);
  const double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  // Two blocks, bound as 16 x 16 (rows of 16 that are not its blocks), and 200 elements (no whole
  // number of blocks: per element).
  const std::size_t whole = 2 * kBlock, ragged = 200;
  std::vector<double> p1(whole), g1(whole), m1(whole, 0.0), vmean(2, 0.0);
  std::vector<double> p2(ragged), g2(ragged), m2(ragged, 0.0), v2(ragged, 0.0);
  for (std::size_t i = 0; i < whole; ++i) p1[i] = std::sin(0.1 * static_cast<double>(i));
  for (std::size_t i = 0; i < ragged; ++i) p2[i] = std::cos(0.1 * static_cast<double>(i));
  std::vector<double> e1 = p1, em1 = m1, evmean = vmean, e2 = p2, em2 = m2, ev2 = v2;
  double* states1[] = {m1.data(), vmean.data(), nullptr};
  double* states2[] = {m2.data(), nullptr, v2.data()};
  for (std::int64_t step = 1; step <= 3; ++step) {
    for (std::size_t i = 0; i < whole; ++i) g1[i] = 0.01 * static_cast<double>((i * 7 + step * 3) % 23) - 0.1;
    for (std::size_t i = 0; i < ragged; ++i) g2[i] = 0.02 * static_cast<double>((i * 5 + step) % 17) - 0.15;
    const double bc1 = 1 - std::pow(beta1, static_cast<double>(step));
    const double bc2_sqrt = std::sqrt(1 - std::pow(beta2, static_cast<double>(step)));
    for (std::size_t b = 0; b < 2; ++b) {
      double sum = 0;
      for (std::size_t i = b * kBlock; i < (b + 1) * kBlock; ++i) sum += g1[i] * g1[i];
      evmean[b] = beta2 * evmean[b] + (1 - beta2) * (sum / static_cast<double>(kBlock));
      for (std::size_t i = b * kBlock; i < (b + 1) * kBlock; ++i) {
        em1[i] = em1[i] + (1 - beta1) * (g1[i] - em1[i]);
        e1[i] -= lr / bc1 * em1[i] / (std::sqrt(evmean[b]) / bc2_sqrt + eps);
      }
    }
    for (std::size_t i = 0; i < ragged; ++i) {
      em2[i] = em2[i] + (1 - beta1) * (g2[i] - em2[i]);
      ev2[i] = beta2 * ev2[i] + (1 - beta2) * g2[i] * g2[i];
      e2[i] -= lr / bc1 * em2[i] / (std::sqrt(ev2[i]) / bc2_sqrt + eps);
    }
    optgen::reference::Tensor<double> tensors[] = {{whole, p1.data(), g1.data(), states1, 16, 16},
                                                   {ragged, p2.data(), g2.data(), states2, 0, 0}};
    ref.step_double(h.data(), nullptr, step, tensors, 2, 1.0, nullptr);
    INFO("step " << step);
    for (std::size_t b = 0; b < 2; ++b) CHECK(vmean[b] == Approx(evmean[b]).epsilon(1e-13));
    for (std::size_t i = 0; i < whole; ++i) CHECK(p1[i] == Approx(e1[i]).epsilon(1e-13));
    for (std::size_t i = 0; i < ragged; ++i) CHECK(p2[i] == Approx(e2[i]).epsilon(1e-13));
    CHECK(v2 == ev2);
  }
}

TEST_CASE("block_elements: the kernels match the reference, blocks across rows and ragged tensors", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const auto& info = optgen::BlockAdam::info();
  const auto& ref = optgen::reference::block_adam::optimizer();
  // Blocks whatever the shape: rows of 16 (8 to a block), of 640 (a block across two rows), a 3-D
  // tensor, one block, many blocks; and tensors that are no whole number of blocks (per element):
  // 7, 1000 elements, a 10 x 30 matrix, a vector of 129, and one longer than a block's pass over a
  // line (which has no lines: shape_layout). With 8-bit states (a tensor of 4096 elements or more),
  // 8-bit blocks of 256 that are not its blocks of 128, and a tensor's last 8-bit block half full
  // (513 x 128, 33 x 128) or of 113 elements (70001).
  const TensorShapes shapes{
      {{16, 64}, {3, 640}, {2, 4, 48}, {128}, {513, 128}, {7}, {1000}, {10, 30}, {129}, {70001}, {33, 128}}};
  for (int k = 0; k < info.num_kernels; ++k) {  // f32 and bf16 params, 8-bit states, without and with clipping
    const optgen::KernelInfo& kernel = info.kernels[k];
    INFO("kernel set " << kernel.stages[0]);
    std::mt19937 rng(23);
    DeviceGroup group(kernel.param, shapes, std::vector<bool>(shapes.list.size(), false), rng);
    const std::vector<double> h = hyperparameters_for(info, kernel.variant);
    optgen::FusedOptimizer opt(info, h, storage_of(info, kernel));
    opt.add_param_group(group.tensors, h);
    // One value per block for the tensors of whole blocks, none for the others.
    CHECK(opt.state("vmean", 0, 0).numel == 8);
    CHECK(opt.state("vmean", 0, 1).numel == 15);
    CHECK(opt.state("vmean", 0, 4).numel == 513);
    CHECK(opt.state("vmean", 0, 7).data == nullptr);
    CHECK(opt.state("v", 0, 0).data == nullptr);
    CHECK(opt.state("v", 0, 6).numel == 1000);
    if (optgen::is_blockwise(kernel.state_dtypes[0])) {  // m in 8 bits where a tensor is large enough
      CHECK(opt.state("m", 0, 4).dtype == optgen::DType::Q8);
      CHECK(opt.state("m", 0, 6).dtype == optgen::DType::F32);
      CHECK(opt.state("v", 0, 9).dtype == optgen::DType::UQ8);
      CHECK(opt.state("vmean", 0, 10).dtype == optgen::DType::F32);
    }
    const Comparison result = compare_steps(opt, ref, group, 5, rng);
    INFO("worst relative error " << result.worst << " in " << result.where);
    CHECK(result.worst <= 1e-5);
  }
}

TEST_CASE("block_elements: 10,000 tensors, bound with no shape", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const auto& info = optgen::BlockAdam::info();
  const auto& ref = optgen::reference::block_adam::optimizer();
  std::vector<std::int64_t> numels;
  for (int i = 0; i < 10000; ++i) numels.push_back(i % 3 == 0 ? 100 : (1 + i % 5) * 128);
  std::mt19937 rng(5);
  DeviceGroup group(optgen::DType::F32, numels, std::vector<bool>(numels.size(), false), rng);
  for (auto& t : group.tensors) t.shape.clear();  // a spec of blocks needs none
  const std::vector<double> h = optgen::default_hyperparameters(info);
  optgen::FusedOptimizer opt(info, h);
  opt.add_param_group(group.tensors, h);
  const Comparison result = compare_steps(opt, ref, group, 2, rng);
  INFO("worst relative error " << result.worst << " in " << result.where);
  CHECK(result.worst <= 1e-5);
}

TEST_CASE("block_elements: a shard of a larger tensor is refused", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const auto& info = optgen::BlockAdam::info();
  std::mt19937 rng(3);
  DeviceGroup group(optgen::DType::F32, std::vector<std::int64_t>{256}, {false}, rng);
  group.tensors[0].whole_numel = 512;
  optgen::FusedOptimizer opt(info, optgen::default_hyperparameters(info));
  CHECK_THAT(error_of([&] { opt.add_param_group(group.tensors, optgen::default_hyperparameters(info)); }),
             Catch::Contains("is a shard of a larger tensor (whole_numel)") &&
                 Catch::Contains("per block of 128 elements (block_elements)"));
}
