// The reduction hook (FusedOptimizer::set_reduction_hook) on two GPUs: two ranks, each holding one
// half of every tensor (as ZeRO and FSDP shard them), all-reduce the results of each Reduce stage
// with NCCL (optgen::nccl::all_reduce_hook) and reproduce the trajectory of one GPU holding whole
// tensors: LAMB (per-tensor norms), clipped AdamW (a global norm) and cautious AdamW (a mean over
// each whole tensor, of Tensor::whole_numel elements), Adafactor (rows of each matrix on each rank,
// the columns' and matrices' sums all-reduced: its step on shards; or columns of each, the rows' sums
// all-reduced) and Adam-mini (its blocks, rows, whole on each rank, or cut along their columns,
// Tensor::shard_dim 1, as optgen.torch cuts a tensor's one block); and Muon through the NCCL matrix
// hook (optgen::nccl::matrix_hook: each matrix orthogonalised whole on an owner rank, whose plan
// is checked here without GPUs too). NCCL is loaded at run time (optgen/nccl.h:
// libnccl.so.2, as torch's wheels ship it, or $OPTGEN_NCCL); the test skips itself without two
// GPUs or without NCCL.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "matrix_exchange.h"
#include "optgen/nccl.h"
#include "optimizer_harness.h"

using namespace optgen_test;

namespace {

/// Whole tensors, their values per step: initial params and the gradients of every step; whether
/// ranks hold columns of each matrix (two dimensions), else parts of every tensor's first dimension.
struct Problem {
  std::vector<std::vector<std::int64_t>> shapes;
  bool columns = false;
  std::vector<std::int64_t> sizes;
  std::vector<std::vector<float>> params0;
  std::vector<std::vector<std::vector<float>>> grads;  // [step][tensor]
};

/// Vectors, as ZeRO shards any tensor.
const std::vector<std::vector<std::int64_t>> kVectors = {{1}, {3}, {1000}, {4097}, {65536 + 5}, {300001}};
/// Matrices, whose ranks hold rows (FSDP2's Shard(0)), uneven ones; rank 1 holds none of 1x6's; a
/// conv weight's shards hold whole 2x2 matrices; a vector.
const std::vector<std::vector<std::int64_t>> kMatrices = {{37, 19}, {1, 6}, {4, 3, 2, 2}, {11}, {5, 37}, {301, 129}};
/// Matrices whose ranks hold columns (Tensor::shard_dim 1), uneven ones; rank 0 holds none of 3x1's.
const std::vector<std::vector<std::int64_t>> kColumns = {{37, 19}, {1, 6},  {3, 1},    {4, 3, 2, 2},
                                                         {11},     {5, 37}, {301, 129}};

/// Matrices for Muon (two dimensions each), uneven rows (rank 0 holds none of 1x6's), two of one
/// shape (one batch on an owner).
const std::vector<std::vector<std::int64_t>> kMuon = {{37, 19}, {1, 6}, {5, 37}, {301, 129}, {64, 48}, {64, 48}};

Problem make_problem(int steps, const std::vector<std::vector<std::int64_t>>& shapes = kVectors, bool columns = false) {
  Problem p;
  p.shapes = shapes;
  p.columns = columns;
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

/// Whether `rank` of the problem's tensor t holds columns of it (a matrix of a problem of columns).
bool cuts_columns(const Problem& p, size_t t) { return p.columns && p.shapes[t].size() == 2; }

/// [begin, end) of the dimension of tensor t that `rank` of `ranks` holds a part of: its first (the
/// first or second half of a vector, rows of a matrix, as ZeRO and FSDP shard), or its columns.
std::pair<size_t, size_t> cut(const Problem& p, size_t t, int rank, int ranks) {
  const auto n = static_cast<size_t>(p.shapes[t][cuts_columns(p, t) ? 1 : 0]);
  return {n * static_cast<size_t>(rank) / static_cast<size_t>(ranks),
          n * static_cast<size_t>(rank + 1) / static_cast<size_t>(ranks)};
}

/// `rank`'s part of `whole`, values of the problem's tensor t, and the shape it is bound with.
std::vector<float> part(const Problem& p, size_t t, const std::vector<float>& whole, int rank, int ranks) {
  const auto [begin, end] = cut(p, t, rank, ranks);
  const auto rows = static_cast<size_t>(p.shapes[t][0]);
  const size_t inner = whole.size() / std::max<size_t>(rows, 1);
  std::vector<float> values;
  if (!cuts_columns(p, t))
    return std::vector<float>(whole.begin() + static_cast<std::ptrdiff_t>(begin * inner),
                              whole.begin() + static_cast<std::ptrdiff_t>(end * inner));
  for (size_t r = 0; r < rows; ++r)
    values.insert(values.end(), whole.begin() + static_cast<std::ptrdiff_t>(r * inner + begin),
                  whole.begin() + static_cast<std::ptrdiff_t>(r * inner + end));
  return values;
}
std::vector<std::int64_t> part_shape(const Problem& p, size_t t, int rank, int ranks) {
  const auto [begin, end] = cut(p, t, rank, ranks);
  std::vector<std::int64_t> shape = p.shapes[t];
  shape[cuts_columns(p, t) ? 1 : 0] = static_cast<std::int64_t>(end - begin);
  return shape;
}

/// Steps `rank`'s shards of `problem` on the current device; returns its params after every step
/// ([step][tensor]) and the published norms of group 0 (clipping only). With `comm`, the NCCL
/// reduction hook, and unless `whole_matrices` is false the NCCL matrix hook. `storage`: the optimizer's.
std::pair<std::vector<std::vector<std::vector<float>>>, std::vector<float>> run_rank(
    const std::string& spec, const optgen::FusedOptimizer::Overrides& overrides, const Problem& problem, int rank,
    int ranks, optgen::nccl::Comm comm, bool whole_matrices = true, const optgen::StorageOptions& storage = {}) {
  const auto& info = launcher(spec);
  std::vector<std::unique_ptr<DeviceMemory>> params, grads;
  std::vector<optgen::Tensor> tensors;
  for (size_t t = 0; t < problem.sizes.size(); ++t) {
    const std::vector<float> values = part(problem, t, problem.params0[t], rank, ranks);
    params.push_back(std::make_unique<DeviceMemory>(std::max<size_t>(values.size(), 1) * sizeof(float)));
    grads.push_back(std::make_unique<DeviceMemory>(std::max<size_t>(values.size(), 1) * sizeof(float)));
    params.back()->upload(values);
    optgen::Tensor tensor;
    tensor.param = params.back()->at(0);
    tensor.grad = grads.back()->at(0);
    tensor.numel = static_cast<std::int64_t>(values.size());
    tensor.whole_numel = problem.sizes[t];  // what cautious AdamW's mean counts
    tensor.shape = part_shape(problem, t, rank, ranks);
    tensor.shard_dim = cuts_columns(problem, t) ? 1 : 0;
    tensors.push_back(tensor);
  }
  optgen::FusedOptimizer opt(info, optgen::default_hyperparameters(info), storage);
  opt.add_param_group(tensors, overrides);
  if (comm) opt.set_reduction_hook(optgen::nccl::all_reduce_hook(comm));
  if (comm && whole_matrices) opt.set_matrix_hook(optgen::nccl::matrix_hook(comm, opt));
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
    for (size_t t = 0; t < problem.sizes.size(); ++t) grads[t]->upload(part(problem, t, step_grads[t], rank, ranks));
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

using Run = std::pair<std::vector<std::vector<std::vector<float>>>, std::vector<float>>;

/// Whether two GPUs and NCCL are here; else records the test skipped, saying why.
bool two_gpus_with_nccl() {
  std::string why;
  int devices = 0;
  if (optgen::driver::available(&why)) {
    optgen::driver::check(optgen::driver::api().cuDeviceGetCount(&devices), "cuDeviceGetCount");
    if (devices < 2) why = "fewer than two GPUs";
  }
  if (devices < 2 || !optgen::nccl::available(&why)) {
    record_skip(Catch::getResultCapture().getCurrentTestName(), why);
    return false;
  }
  return true;
}

/// run_rank on the current thread's GPU `device` (its primary context).
Run on_device(int device, const std::function<Run()>& run) {
  const auto& api = optgen::driver::api();
  CUdevice d = 0;
  CUcontext context = nullptr;
  optgen::driver::check(api.cuDeviceGet(&d, device), "cuDeviceGet");
  optgen::driver::check(api.cuDevicePrimaryCtxRetain(&context, d), "cuDevicePrimaryCtxRetain");
  optgen::driver::check(api.cuCtxSetCurrent(context), "cuCtxSetCurrent");
  return run();
}

/// Two GPUs, a thread and a rank each, holding their parts of `problem` (NCCL hooks over them).
std::vector<Run> on_two_gpus(const std::string& spec, const optgen::FusedOptimizer::Overrides& overrides,
                             const Problem& problem, bool whole_matrices = true,
                             const optgen::StorageOptions& storage = {}) {
  optgen::nccl::Comm comms[2] = {nullptr, nullptr};
  const int list[2] = {0, 1};
  optgen::nccl::check(optgen::nccl::api().CommInitAll(comms, 2, list), "ncclCommInitAll");
  std::vector<Run> halves(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank)
    threads.emplace_back([&, rank] {
      try {
        halves[static_cast<size_t>(rank)] = on_device(rank, [&] {
          return run_rank(spec, overrides, problem, rank, 2, comms[static_cast<size_t>(rank)], whole_matrices, storage);
        });
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
  return halves;
}

/// The worst relative error and the largest difference of the ranks' params against the same parts
/// of one GPU's, over every step and tensor; `where` the worst relative error's.
struct Against {
  double relative = 0, largest = 0;
  std::string where;
};
Against against_one_gpu(const Problem& problem, const std::vector<Run>& halves, const Run& whole) {
  Against a;
  for (size_t step = 0; step < problem.grads.size(); ++step)
    for (size_t t = 0; t < problem.sizes.size(); ++t) {
      // The ranks' parts one after the other, against the same parts of one GPU's.
      std::vector<float> joined, expected;
      for (int rank = 0; rank < 2; ++rank) {
        const auto& mine = halves[static_cast<size_t>(rank)].first[step][t];
        const auto theirs = part(problem, t, whole.first[step][t], rank, 2);
        joined.insert(joined.end(), mine.begin(), mine.end());
        expected.insert(expected.end(), theirs.begin(), theirs.end());
      }
      const double e = relative_error(joined, expected);
      if (e > a.relative) a.where = "step " + std::to_string(step + 1) + ", tensor " + std::to_string(t);
      a.relative = std::max(a.relative, e);
      for (size_t i = 0; i < joined.size(); ++i)
        a.largest = std::max(a.largest, static_cast<double>(std::fabs(joined[i] - expected[i])));
    }
  return a;
}

}  // namespace

TEST_CASE(
    "two GPUs with halves of every tensor step as one: LAMB, clipped AdamW, cautious AdamW, Adafactor, "
    "Adam-mini",
    "[gpu][nccl]") {
  if (!two_gpus_with_nccl()) return;
  const int steps = 5;
  const Problem vectors = make_problem(steps), matrices = make_problem(steps, kMatrices);
  const Problem columns = make_problem(steps, kColumns, true);
  const std::vector<std::tuple<std::string, optgen::FusedOptimizer::Overrides, const Problem*>> runs = {
      {"lamb", {{"lr", 0.01}, {"weight_decay", 0.1}}, &vectors},
      {"adamw", {{"lr", 0.01}, {"max_grad_norm", 5.0}}, &vectors},
      {"lamb", {{"lr", 0.01}, {"max_grad_norm", 5.0}}, &vectors},       // three stages: the norm, then LAMB's two
      {"cautious_adamw", {{"lr", 0.01}}, &vectors},                     // a mean over each tensor: whole_numel
      {"adafactor", {{"lr", 0.01}, {"weight_decay", 0.1}}, &matrices},  // rows, columns, matrices
      {"adafactor", {{"lr", 0.01}, {"weight_decay", 0.1}}, &columns},   // the rows' sums all-reduced
      {"adam_mini", {{"lr", 0.01}, {"weight_decay", 0.1}}, &matrices},  // whole rows: nothing across ranks
      {"adam_mini", {{"lr", 0.01}, {"weight_decay", 0.1}}, &columns},   // a row's block cut across the ranks
  };
  for (const auto& [spec, overrides, problem_of] : runs) {
    const Problem& problem = *problem_of;
    INFO(spec << (overrides.size() > 1 ? " with " + overrides[1].first : std::string())
              << (problem.columns ? ", columns" : ""));
    const Run whole = on_device(0, [&] { return run_rank(spec, overrides, problem, 0, 1, nullptr); });
    const std::vector<Run> halves = on_two_gpus(spec, overrides, problem);
    const Against a = against_one_gpu(problem, halves, whole);
    INFO("worst relative error of the two ranks against one GPU: " << a.relative << " at " << a.where);
    CHECK(a.relative <= 1e-5);
    for (size_t s = 0; s < whole.second.size(); ++s) {
      CHECK(halves[0].second[s] == Approx(whole.second[s]).epsilon(1e-6));
      CHECK(halves[1].second[s] == Approx(whole.second[s]).epsilon(1e-6));
    }
  }
}

TEST_CASE("two GPUs holding rows of every matrix step Muon as one: each matrix orthogonalised whole on its owner",
          "[gpu][nccl]") {
  if (!two_gpus_with_nccl()) return;
  const int steps = 5;
  const double lr = 0.02;
  const Problem problem = make_problem(steps, kMuon);
  const optgen::FusedOptimizer::Overrides overrides = {{"lr", lr}};
  const Run whole = on_device(0, [&] { return run_rank("muon", overrides, problem, 0, 1, nullptr); });
  // Newton-Schulz runs in bf16 on batches of other sizes on an owner than on one GPU, where cuBLAS
  // may round otherwise: each step may move a value by up to 2% of lr times the largest scale,
  // sqrt(301 / 129), far less than orthogonalising a shard in place of its matrix does.
  const double tolerance = 0.02 * lr * std::sqrt(301.0 / 129.0) * steps;
  const Against gathered = against_one_gpu(problem, on_two_gpus("muon", overrides, problem), whole);
  INFO("the largest difference from one GPU: " << gathered.largest << " (tolerance " << tolerance << ")");
  CHECK(gathered.largest <= tolerance);
  // Each rank orthogonalising its own rows (no matrix hook) steps otherwise: the check can fail.
  const Against alone = against_one_gpu(problem, on_two_gpus("muon", overrides, problem, false), whole);
  INFO("without the matrix hook: " << alone.largest);
  CHECK(alone.largest > tolerance);
  // With `o` in f32: the hook moves f32 rows, and the products round alike but for their sums'
  // order, a hundredth of the bf16 tolerance.
  optgen::StorageOptions f32;
  f32.state_dtypes = {{"o", DType::F32}};
  const Run whole_f32 = on_device(0, [&] { return run_rank("muon", overrides, problem, 0, 1, nullptr, true, f32); });
  const Against gathered_f32 = against_one_gpu(problem, on_two_gpus("muon", overrides, problem, true, f32), whole_f32);
  INFO("o in f32, the largest difference from one GPU: " << gathered_f32.largest);
  CHECK(gathered_f32.largest <= tolerance / 100);
}

TEST_CASE("the matrix exchange gives the costliest matrix first to the least loaded rank, as optgen.torch does",
          "[launcher]") {
  // tests/python/test_matrix_exchange.py's owners, for the same matrices.
  CHECK(optgen::matrix_owners({256, 2048, 2048, 256}, {2048, 2048, 2048, 2048}, 2) == std::vector<int>{0, 0, 1, 1});
  CHECK(optgen::matrix_owners({4, 4, 4}, {4, 4, 4}, 1) == std::vector<int>{0, 0, 0});
  CHECK(optgen::matrix_cost(37, 19) == 19.0 * 19.0 * 37.0);
  // Rows of each rank (rank 0 none of the second), where they start, the whole rows, what rank 1 owns.
  const optgen::MatrixExchange plan = optgen::plan_matrix_exchange({{19, 18}, {0, 1}, {3, 2}}, {19, 6, 37}, 2, 1);
  CHECK(plan.rows == std::vector<std::int64_t>{37, 1, 5});
  CHECK(plan.first == std::vector<std::vector<std::int64_t>>{{0, 19}, {0, 0}, {0, 3}});
  CHECK(plan.owner == std::vector<int>{0, 1, 1});  // 37x19 (the costliest) to 0, then the least loaded: 1
  CHECK(plan.owned == std::vector<int>{1, 2});
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
  // Adafactor and Adam-mini with the hook run their steps on shards, which compute their row,
  // column and matrix values where they read them instead of once: the same arithmetic in float,
  // in other places; Muon's matrices go through the matrix hook, to their one owner.
  const FusedOptimizer::Overrides overrides = {{"lr", 0.01}, {"weight_decay", 0.1}};
  for (const auto& [spec, shaped] :
       {std::pair{"adafactor", make_problem(3, kMatrices)}, std::pair{"adafactor", make_problem(3, kColumns, true)},
        std::pair{"adam_mini", make_problem(3, kColumns, true)}, std::pair{"muon", make_problem(3, kMuon)}}) {
    const auto alone = run_rank(spec, overrides, shaped, 0, 1, nullptr);
    const auto hooked = run_rank(spec, overrides, shaped, 0, 1, comm);
    for (size_t step = 0; step < alone.first.size(); ++step)
      for (size_t t = 0; t < shaped.sizes.size(); ++t) {
        INFO(spec << (shaped.columns ? ", columns" : "") << ", step " << step + 1 << ", tensor " << t);
        CHECK(relative_error(hooked.first[step][t], alone.first[step][t]) <= 1e-6);
      }
  }
  optgen::nccl::api().CommDestroy(comm);
}
