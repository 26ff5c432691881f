// The reduction hook (FusedOptimizer::set_reduction_hook) on two GPUs: two ranks, each holding one
// half of every tensor (as ZeRO and FSDP shard them), all-reduce the results of each Reduce stage
// with NCCL (optgen::nccl::all_reduce_hook) and reproduce the trajectory of one GPU holding whole
// tensors: LAMB (per-tensor norms), clipped AdamW (a global norm) and cautious AdamW (a mean over
// each whole tensor, of Tensor::whole_numel elements) and Adafactor (rows of each matrix on each rank,
// the columns' and matrices' sums all-reduced: its step on shards). NCCL is loaded at run time (optgen/nccl.h:
// libnccl.so.2, as torch's wheels ship it, or $OPTGEN_NCCL); the test skips itself without two
// GPUs or without NCCL.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "optgen/nccl.h"
#include "optimizer_harness.h"

using namespace optgen_test;

namespace {

/// Whole tensors, their values per step: initial params and the gradients of every step.
struct Problem {
  std::vector<std::vector<std::int64_t>> shapes;
  std::vector<std::int64_t> sizes;
  std::vector<std::vector<float>> params0;
  std::vector<std::vector<std::vector<float>>> grads;  // [step][tensor]
};

/// Vectors, as ZeRO shards any tensor.
const std::vector<std::vector<std::int64_t>> kVectors = {{1}, {3}, {1000}, {4097}, {65536 + 5}, {300001}};
/// Matrices, whose ranks hold rows (FSDP2's Shard(0)), uneven ones; rank 1 holds none of 1x6's; a
/// conv weight's shards hold whole 2x2 matrices; a vector.
const std::vector<std::vector<std::int64_t>> kMatrices = {{37, 19}, {1, 6}, {4, 3, 2, 2}, {11}, {5, 37}, {301, 129}};

Problem make_problem(int steps, const std::vector<std::vector<std::int64_t>>& shapes = kVectors) {
  Problem p;
  p.shapes = shapes;
  for (const auto& shape : shapes) {
    std::int64_t n = 1;
    for (std::int64_t d : shape) n *= d;
    p.sizes.push_back(n);
  }
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto n : p.sizes) {
    p.params0.emplace_back(static_cast<size_t>(n));
    for (float& x : p.params0.back()) x = u(rng);
  }
  p.grads.resize(static_cast<size_t>(steps));
  for (auto& step : p.grads)
    for (auto n : p.sizes) {
      step.emplace_back(static_cast<size_t>(n));
      for (float& x : step.back()) x = u(rng);
    }
  return p;
}

/// Elements [begin, end) of a tensor of `shape` held by `rank` of `ranks`: a part of its first
/// dimension (the first or second half of a vector, rows of a matrix), as ZeRO and FSDP shard.
std::pair<size_t, size_t> shard(const std::vector<std::int64_t>& shape, int rank, int ranks) {
  const auto first = static_cast<size_t>(shape[0]);
  size_t inner = 1;
  for (size_t d = 1; d < shape.size(); ++d) inner *= static_cast<size_t>(shape[d]);
  const size_t begin = first * static_cast<size_t>(rank) / static_cast<size_t>(ranks);
  return {begin * inner, first * static_cast<size_t>(rank + 1) / static_cast<size_t>(ranks) * inner};
}

/// Steps `rank`'s shards of `problem` on the current device; returns its params after every step
/// ([step][tensor]) and the published norms of group 0 (clipping only).
std::pair<std::vector<std::vector<std::vector<float>>>, std::vector<float>> run_rank(
    const std::string& spec, const optgen::FusedOptimizer::Overrides& overrides, const Problem& problem, int rank,
    int ranks, optgen::nccl::Comm comm) {
  const auto& info = launcher(spec);
  std::vector<std::unique_ptr<DeviceMemory>> params, grads;
  std::vector<optgen::Tensor> tensors;
  for (size_t t = 0; t < problem.sizes.size(); ++t) {
    const auto [begin, end] = shard(problem.shapes[t], rank, ranks);
    params.push_back(std::make_unique<DeviceMemory>(std::max<size_t>(end - begin, 1) * sizeof(float)));
    grads.push_back(std::make_unique<DeviceMemory>(std::max<size_t>(end - begin, 1) * sizeof(float)));
    params.back()->upload(std::vector<float>(problem.params0[t].begin() + static_cast<std::ptrdiff_t>(begin),
                                             problem.params0[t].begin() + static_cast<std::ptrdiff_t>(end)));
    optgen::Tensor tensor;
    tensor.param = params.back()->at(0);
    tensor.grad = grads.back()->at(0);
    tensor.numel = static_cast<std::int64_t>(end - begin);
    tensor.whole_numel = problem.sizes[t];  // what cautious AdamW's mean counts
    tensor.shape = problem.shapes[t];       // the rank's part of the first dimension
    tensor.shape[0] = static_cast<std::int64_t>(end - begin) / (problem.sizes[t] / problem.shapes[t][0]);
    tensors.push_back(tensor);
  }
  optgen::FusedOptimizer opt(info, optgen::default_hyperparameters(info));
  opt.add_param_group(tensors, overrides);
  if (comm) opt.set_reduction_hook(optgen::nccl::all_reduce_hook(comm));
  // A blocking stream: it waits for the uploads, whose copies from pageable memory may still be in
  // flight on the legacy stream when cuMemcpyHtoD returns.
  CUstream stream = nullptr;
  optgen::driver::check(optgen::driver::api().cuStreamCreate(&stream, CU_STREAM_DEFAULT), "cuStreamCreate");
  opt.prepare(stream);
  std::vector<double> h = opt.hyperparameters(0);
  optgen::derive_flags(info, h.data());
  const bool clips = info.variants[optgen::select_variant(info, h.data())].grad_norm_slot >= 0;
  std::vector<std::vector<std::vector<float>>> trajectory;
  std::vector<float> norms;
  for (const auto& step_grads : problem.grads) {
    for (size_t t = 0; t < problem.sizes.size(); ++t) {
      const auto [begin, end] = shard(problem.shapes[t], rank, ranks);
      grads[t]->upload(std::vector<float>(step_grads[t].begin() + static_cast<std::ptrdiff_t>(begin),
                                          step_grads[t].begin() + static_cast<std::ptrdiff_t>(end)));
    }
    opt.step(stream);
    optgen::driver::check(optgen::driver::api().cuStreamSynchronize(stream), "cuStreamSynchronize");
    std::vector<std::vector<float>> now;
    for (size_t t = 0; t < problem.sizes.size(); ++t)
      now.push_back(download(DType::F32, params[t]->at(0), static_cast<size_t>(tensors[t].numel)));
    trajectory.push_back(now);
    if (clips) norms.push_back(download(DType::F32, opt.grad_norm(0), 1)[0]);
  }
  optgen::driver::api().cuStreamDestroy(stream);
  return {trajectory, norms};
}

}  // namespace

TEST_CASE("two GPUs with halves of every tensor step as one: LAMB, clipped AdamW, cautious AdamW, Adafactor",
          "[gpu][nccl]") {
  OPTGEN_REQUIRE_GPU();
  const auto& api = optgen::driver::api();
  int devices = 0;
  optgen::driver::check(api.cuDeviceGetCount(&devices), "cuDeviceGetCount");
  if (devices < 2) {
    record_skip(Catch::getResultCapture().getCurrentTestName(), "fewer than two GPUs");
    return;
  }
  std::string why;
  if (!optgen::nccl::available(&why)) {
    record_skip(Catch::getResultCapture().getCurrentTestName(), why);
    return;
  }
  const int steps = 5;
  const Problem vectors = make_problem(steps), matrices = make_problem(steps, kMatrices);
  const std::vector<std::tuple<std::string, optgen::FusedOptimizer::Overrides, const Problem*>> runs = {
      {"lamb", {{"lr", 0.01}, {"weight_decay", 0.1}}, &vectors},
      {"adamw", {{"lr", 0.01}, {"max_grad_norm", 5.0}}, &vectors},
      {"lamb", {{"lr", 0.01}, {"max_grad_norm", 5.0}}, &vectors},       // three stages: the norm, then LAMB's two
      {"cautious_adamw", {{"lr", 0.01}}, &vectors},                     // a mean over each tensor: whole_numel
      {"adafactor", {{"lr", 0.01}, {"weight_decay", 0.1}}, &matrices},  // rows, columns, matrices
  };
  for (const auto& [spec, overrides, problem_of] : runs) {
    const Problem& problem = *problem_of;
    INFO(spec << (overrides.size() > 1 ? " with " + overrides[1].first : std::string()));
    // One GPU, whole tensors.
    CUcontext first = nullptr;
    CUdevice device0 = 0;
    optgen::driver::check(api.cuDeviceGet(&device0, 0), "cuDeviceGet");
    optgen::driver::check(api.cuDevicePrimaryCtxRetain(&first, device0), "cuDevicePrimaryCtxRetain");
    optgen::driver::check(api.cuCtxSetCurrent(first), "cuCtxSetCurrent");
    const auto whole = run_rank(spec, overrides, problem, 0, 1, nullptr);

    // Two GPUs, a thread each, halves.
    optgen::nccl::Comm comms[2] = {nullptr, nullptr};
    const int list[2] = {0, 1};
    optgen::nccl::check(optgen::nccl::api().CommInitAll(comms, 2, list), "ncclCommInitAll");
    std::vector<std::pair<std::vector<std::vector<std::vector<float>>>, std::vector<float>>> halves(2);
    std::vector<std::string> errors(2);
    std::vector<std::thread> threads;
    for (int rank = 0; rank < 2; ++rank)
      threads.emplace_back([&, rank] {
        try {
          CUdevice device = 0;
          CUcontext context = nullptr;
          optgen::driver::check(api.cuDeviceGet(&device, rank), "cuDeviceGet");
          optgen::driver::check(api.cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain");
          optgen::driver::check(api.cuCtxSetCurrent(context), "cuCtxSetCurrent");
          halves[static_cast<size_t>(rank)] =
              run_rank(spec, overrides, problem, rank, 2, comms[static_cast<size_t>(rank)]);
        } catch (const std::exception& e) {
          errors[static_cast<size_t>(rank)] = e.what();
        } catch (...) {  // nothing may leave a thread
          errors[static_cast<size_t>(rank)] = "an exception that is not a std::exception";
        }
      });
    for (auto& t : threads) t.join();
    for (optgen::nccl::Comm c : comms) optgen::nccl::api().CommDestroy(c);
    REQUIRE(errors[0] == "");
    REQUIRE(errors[1] == "");

    double worst = 0;
    std::string where;
    for (int step = 0; step < steps; ++step)
      for (size_t t = 0; t < problem.sizes.size(); ++t) {
        std::vector<float> joined = halves[0].first[static_cast<size_t>(step)][t];
        const auto& second = halves[1].first[static_cast<size_t>(step)][t];
        joined.insert(joined.end(), second.begin(), second.end());
        const double e = relative_error(joined, whole.first[static_cast<size_t>(step)][t]);
        if (e > worst) where = "step " + std::to_string(step + 1) + ", tensor " + std::to_string(t);
        worst = std::max(worst, e);
      }
    INFO("worst relative error of the two ranks against one GPU: " << worst << " at " << where);
    CHECK(worst <= 1e-5);
    for (size_t s = 0; s < whole.second.size(); ++s) {
      CHECK(halves[0].second[s] == Approx(whole.second[s]).epsilon(1e-6));
      CHECK(halves[1].second[s] == Approx(whole.second[s]).epsilon(1e-6));
    }
  }
}

TEST_CASE("one rank through the NCCL hook steps as without it", "[gpu][nccl]") {
  using optgen::FusedOptimizer;
  // The hook's mechanics on any GPU: an all-reduce over one rank leaves every result as it was, so
  // the trajectory is the one without the hook, bit for bit (two ranks: the test above).
  OPTGEN_REQUIRE_GPU();
  std::string why;
  if (!optgen::nccl::available(&why)) {
    record_skip(Catch::getResultCapture().getCurrentTestName(), why);
    return;
  }
  const auto& api = optgen::driver::api();
  CUcontext context = nullptr;
  CUdevice device = 0;
  optgen::driver::check(api.cuDeviceGet(&device, 0), "cuDeviceGet");
  optgen::driver::check(api.cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain");
  optgen::driver::check(api.cuCtxSetCurrent(context), "cuCtxSetCurrent");
  optgen::nccl::Comm comm = nullptr;
  const int list[1] = {0};
  optgen::nccl::check(optgen::nccl::api().CommInitAll(&comm, 1, list), "ncclCommInitAll");
  const Problem problem = make_problem(3);
  for (const auto& [spec, overrides] : std::vector<std::pair<std::string, optgen::FusedOptimizer::Overrides>>{
           {"lamb", {{"lr", 0.01}, {"max_grad_norm", 5.0}}}, {"cautious_adamw", {{"lr", 0.01}}}}) {
    INFO(spec);
    const auto alone = run_rank(spec, overrides, problem, 0, 1, nullptr);
    const auto hooked = run_rank(spec, overrides, problem, 0, 1, comm);
    CHECK(hooked.first == alone.first);
    CHECK(hooked.second == alone.second);
  }
  // Adafactor with the hook runs its step on shards, which computes its row, column and matrix
  // values where it reads them instead of once: the same arithmetic in float, in other places.
  const Problem matrices = make_problem(3, kMatrices);
  const FusedOptimizer::Overrides adafactor = {{"lr", 0.01}, {"weight_decay", 0.1}};
  const auto alone = run_rank("adafactor", adafactor, matrices, 0, 1, nullptr);
  const auto hooked = run_rank("adafactor", adafactor, matrices, 0, 1, comm);
  for (size_t step = 0; step < alone.first.size(); ++step)
    for (size_t t = 0; t < matrices.sizes.size(); ++t) {
      INFO("step " << step + 1 << ", tensor " << t);
      CHECK(relative_error(hooked.first[step][t], alone.first[step][t]) <= 1e-6);
    }
  optgen::nccl::api().CommDestroy(comm);
}
