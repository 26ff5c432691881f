// The reduction hook (FusedOptimizer::set_reduction_hook) on two GPUs: two ranks, each holding one
// half of every tensor (as ZeRO and FSDP shard them), all-reduce the results of each Reduce stage
// with NCCL and reproduce the trajectory of one GPU holding whole tensors: LAMB (per-tensor norms),
// clipped AdamW (a global norm) and cautious AdamW (a mean over each whole tensor, of
// Tensor::whole_numel elements). NCCL is loaded at run time (libnccl.so.2, as torch's wheels
// ship it); the test skips itself without two GPUs or without NCCL.
#include <dlfcn.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "optimizer_harness.h"

using namespace optgen_test;

namespace {

// The few NCCL entry points the test needs, with nccl.h's types (a stable C ABI).
struct NcclUniqueId {
  char internal[128];
};
using NcclComm = void*;
enum { kNcclFloat64 = 8, kNcclSum = 0, kNcclMax = 2 };

struct Nccl {
  void* library = nullptr;
  int (*comm_init_all)(NcclComm*, int, const int*) = nullptr;
  int (*all_reduce)(const void*, void*, size_t, int, int, NcclComm, CUstream) = nullptr;
  int (*group_start)() = nullptr;
  int (*group_end)() = nullptr;
  int (*comm_destroy)(NcclComm) = nullptr;
  const char* (*error_string)(int) = nullptr;

  /// Loads libnccl.so.2 (from the library path or OPTGEN_NCCL); false when it cannot.
  bool load(std::string* why) {
    const char* path = std::getenv("OPTGEN_NCCL");
    library = dlopen(path ? path : "libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!library) {
      *why = std::string("no NCCL: ") + dlerror() + " (set OPTGEN_NCCL to libnccl.so.2)";
      return false;
    }
    comm_init_all = reinterpret_cast<decltype(comm_init_all)>(dlsym(library, "ncclCommInitAll"));
    all_reduce = reinterpret_cast<decltype(all_reduce)>(dlsym(library, "ncclAllReduce"));
    group_start = reinterpret_cast<decltype(group_start)>(dlsym(library, "ncclGroupStart"));
    group_end = reinterpret_cast<decltype(group_end)>(dlsym(library, "ncclGroupEnd"));
    comm_destroy = reinterpret_cast<decltype(comm_destroy)>(dlsym(library, "ncclCommDestroy"));
    error_string = reinterpret_cast<decltype(error_string)>(dlsym(library, "ncclGetErrorString"));
    if (!comm_init_all || !all_reduce || !group_start || !group_end || !comm_destroy || !error_string) {
      *why = "libnccl.so.2 lacks an entry point the test needs";
      return false;
    }
    return true;
  }
  void check(int result, const char* what) const {
    if (result != 0) throw std::runtime_error(std::string(what) + ": " + error_string(result));
  }
};

/// The hook that makes a rank's results global: one all-reduce per reduction of the stage, over
/// its tensor results and, for a group reduction, its group results.
void all_reduce_stage(const Nccl& nccl, NcclComm comm, const optgen::ReductionResults& r) {
  nccl.check(nccl.group_start(), "ncclGroupStart");
  for (int i = 0; i < r.num_slots; ++i) {
    if (r.slots[i].stage != r.stage) continue;
    const int op = r.slots[i].is_max ? kNcclMax : kNcclSum;
    double* tensors = r.tensor_results + static_cast<size_t>(i) * static_cast<size_t>(r.num_tensors);
    nccl.check(nccl.all_reduce(tensors, tensors, static_cast<size_t>(r.num_tensors), kNcclFloat64, op, comm, r.stream),
               "ncclAllReduce");
    if (r.slots[i].scope != optgen::Domain::Group) continue;
    double* groups = r.group_results + static_cast<size_t>(i) * static_cast<size_t>(r.num_groups);
    nccl.check(nccl.all_reduce(groups, groups, static_cast<size_t>(r.num_groups), kNcclFloat64, op, comm, r.stream),
               "ncclAllReduce");
  }
  nccl.check(nccl.group_end(), "ncclGroupEnd");
}

/// Whole tensors, their values per step: initial params and the gradients of every step.
struct Problem {
  std::vector<std::int64_t> sizes;
  std::vector<std::vector<float>> params0;
  std::vector<std::vector<std::vector<float>>> grads;  // [step][tensor]
};

Problem make_problem(int steps) {
  Problem p;
  p.sizes = {1, 3, 1000, 4097, 65536 + 5, 300001};
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

/// Elements [begin, end) of tensor t held by `rank` of `ranks`: the first or second half.
std::pair<size_t, size_t> shard(std::int64_t n, int rank, int ranks) {
  const auto size = static_cast<size_t>(n);
  const size_t begin = size * static_cast<size_t>(rank) / static_cast<size_t>(ranks);
  return {begin, size * static_cast<size_t>(rank + 1) / static_cast<size_t>(ranks)};
}

/// Steps `rank`'s shards of `problem` on the current device; returns its params after every step
/// ([step][tensor]) and the published norms of group 0 (clipping only).
std::pair<std::vector<std::vector<std::vector<float>>>, std::vector<float>> run_rank(
    const std::string& spec, const optgen::FusedOptimizer::Overrides& overrides, const Problem& problem, int rank,
    int ranks, const Nccl* nccl, NcclComm comm) {
  const auto& info = launcher(spec);
  std::vector<std::unique_ptr<DeviceMemory>> params, grads;
  std::vector<optgen::Tensor> tensors;
  for (size_t t = 0; t < problem.sizes.size(); ++t) {
    const auto [begin, end] = shard(problem.sizes[t], rank, ranks);
    params.push_back(std::make_unique<DeviceMemory>(std::max<size_t>(end - begin, 1) * sizeof(float)));
    grads.push_back(std::make_unique<DeviceMemory>(std::max<size_t>(end - begin, 1) * sizeof(float)));
    params.back()->upload(std::vector<float>(problem.params0[t].begin() + static_cast<std::ptrdiff_t>(begin),
                                             problem.params0[t].begin() + static_cast<std::ptrdiff_t>(end)));
    optgen::Tensor tensor;
    tensor.param = params.back()->at(0);
    tensor.grad = grads.back()->at(0);
    tensor.numel = static_cast<std::int64_t>(end - begin);
    tensor.whole_numel = problem.sizes[t];  // what cautious AdamW's mean counts
    tensors.push_back(tensor);
  }
  optgen::FusedOptimizer opt(info, optgen::default_hyperparameters(info));
  opt.add_param_group(tensors, overrides);
  if (nccl) opt.set_reduction_hook([&](const optgen::ReductionResults& r) { all_reduce_stage(*nccl, comm, r); });
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
      const auto [begin, end] = shard(problem.sizes[t], rank, ranks);
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

TEST_CASE("two GPUs with halves of every tensor step as one: LAMB, clipped AdamW, cautious AdamW", "[gpu][nccl]") {
  OPTGEN_REQUIRE_GPU();
  const auto& api = optgen::driver::api();
  int devices = 0;
  optgen::driver::check(api.cuDeviceGetCount(&devices), "cuDeviceGetCount");
  if (devices < 2) {
    record_skip(Catch::getResultCapture().getCurrentTestName(), "fewer than two GPUs");
    return;
  }
  Nccl nccl;
  std::string why;
  if (!nccl.load(&why)) {
    record_skip(Catch::getResultCapture().getCurrentTestName(), why);
    return;
  }
  const int steps = 5;
  const Problem problem = make_problem(steps);
  const std::vector<std::pair<std::string, optgen::FusedOptimizer::Overrides>> runs = {
      {"lamb", {{"lr", 0.01}, {"weight_decay", 0.1}}},
      {"adamw", {{"lr", 0.01}, {"max_grad_norm", 5.0}}},
      {"lamb", {{"lr", 0.01}, {"max_grad_norm", 5.0}}},  // three stages: the norm, then LAMB's two
      {"cautious_adamw", {{"lr", 0.01}}},                // a mean over each tensor: whole_numel
  };
  for (const auto& [spec, overrides] : runs) {
    INFO(spec << (overrides.size() > 1 ? " with " + overrides[1].first : std::string()));
    // One GPU, whole tensors.
    CUcontext first = nullptr;
    CUdevice device0 = 0;
    optgen::driver::check(api.cuDeviceGet(&device0, 0), "cuDeviceGet");
    optgen::driver::check(api.cuDevicePrimaryCtxRetain(&first, device0), "cuDevicePrimaryCtxRetain");
    optgen::driver::check(api.cuCtxSetCurrent(first), "cuCtxSetCurrent");
    const auto whole = run_rank(spec, overrides, problem, 0, 1, nullptr, nullptr);

    // Two GPUs, a thread each, halves.
    NcclComm comms[2] = {nullptr, nullptr};
    const int list[2] = {0, 1};
    nccl.check(nccl.comm_init_all(comms, 2, list), "ncclCommInitAll");
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
              run_rank(spec, overrides, problem, rank, 2, &nccl, comms[static_cast<size_t>(rank)]);
        } catch (const std::exception& e) {
          errors[static_cast<size_t>(rank)] = e.what();
        } catch (...) {  // nothing may leave a thread
          errors[static_cast<size_t>(rank)] = "an exception that is not a std::exception";
        }
      });
    for (auto& t : threads) t.join();
    for (NcclComm c : comms) nccl.comm_destroy(c);
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
