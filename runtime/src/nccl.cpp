#include "optgen/nccl.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <tuple>

#include "matrix_exchange.h"
#include "optgen/dtype.h"
#include "optgen/error.h"
#include "optimizer_impl.h"
#include "shared_library.h"

namespace optgen::nccl {
namespace {

constexpr const char* kLibrary = "libnccl.so.2";
constexpr const char* kInstall =
    "install NCCL (torch's wheels ship it as nvidia/nccl/lib/libnccl.so.2; Debian's libnccl2), put it on the "
    "library path, or set OPTGEN_NCCL to its path";

/// The library's path: $OPTGEN_NCCL, else libnccl.so.2 from the library path.
const char* path() {
  const char* given = std::getenv("OPTGEN_NCCL");
  return given != nullptr && *given != '\0' ? given : kLibrary;
}

Api load() {
  const std::string library_path = path();
  void* library = shared_library::open(library_path, kInstall);
  Api api{};
  auto get = [&](auto& slot, const char* name) { shared_library::load(library, library_path, slot, name, kInstall); };
  get(api.GetUniqueId, "ncclGetUniqueId");
  get(api.CommInitRank, "ncclCommInitRank");
  get(api.CommInitAll, "ncclCommInitAll");
  get(api.CommDestroy, "ncclCommDestroy");
  get(api.AllReduce, "ncclAllReduce");
  get(api.AllGather, "ncclAllGather");
  get(api.Send, "ncclSend");
  get(api.Recv, "ncclRecv");
  get(api.CommCount, "ncclCommCount");
  get(api.CommUserRank, "ncclCommUserRank");
  get(api.GroupStart, "ncclGroupStart");
  get(api.GroupEnd, "ncclGroupEnd");
  get(api.GetErrorString, "ncclGetErrorString");
  return api;
}

}  // namespace

const Api& api() { return shared_library::loaded_once(&load); }

bool available(std::string* why) { return shared_library::loads(&api, why); }

void check(int result, const char* call) {
  if (result != 0) throw Error(call, api().GetErrorString(result));
}

std::function<void(const ReductionResults&)> all_reduce_hook(Comm comm) {
  const Api& nccl = api();  // loaded now: a missing NCCL fails here, not inside a step
  return [&nccl, comm](const ReductionResults& r) {
    check(nccl.GroupStart(), "ncclGroupStart");
    for (int i = 0; i < r.num_slots; ++i) {
      if (r.slots[i].stage != r.stage) continue;
      const int op = r.slots[i].is_max ? kMax : kSum;
      double* tensors = r.tensor_results + static_cast<size_t>(i) * static_cast<size_t>(r.num_tensors);
      check(nccl.AllReduce(tensors, tensors, static_cast<size_t>(r.num_tensors), kFloat64, op, comm, r.stream),
            "ncclAllReduce");
      if (!has_group_results(r.slots[i].scope)) continue;
      double* groups = r.group_results + static_cast<size_t>(i) * static_cast<size_t>(r.num_groups);
      check(nccl.AllReduce(groups, groups, static_cast<size_t>(r.num_groups), kFloat64, op, comm, r.stream),
            "ncclAllReduce");
    }
    // The ranks' parts of sums over the rows or columns of sharded matrices (Adafactor's column
    // sums; Adam-mini's row sums of a tensor cut along its columns).
    for (const auto& [results, runs, count] :
         {std::tuple{r.row_results, r.row_runs, r.num_row_runs}, std::tuple{r.col_results, r.col_runs, r.num_col_runs},
          std::tuple{r.matrix_results, r.matrix_runs, r.num_matrix_runs}})
      for (int i = 0; i < count; ++i) {
        float* run = results + runs[i].first;
        check(nccl.AllReduce(run, run, static_cast<size_t>(runs[i].count), kFloat32, kSum, comm, r.stream),
              "ncclAllReduce");
      }
    check(nccl.GroupEnd(), "ncclGroupEnd");
  };
}

namespace {

/// NCCL's datatype for matrices of `dtype` (MatrixWork::Matrices::dtype: BF16 or F32).
int nccl_type(DType dtype) { return dtype == DType::F32 ? kFloat32 : kBfloat16; }

/// What matrix_hook does after one Reduce stage for one list of matrices: the plan, and the
/// owned matrices in batches of one value, shape and arguments, each batch's whole matrices
/// consecutive in `whole`.
struct Exchange {
  struct Batch {
    int value;
    DType dtype;
    std::size_t group;
    std::int64_t rows, cols;
    std::vector<double> arguments;
    std::vector<int> members;  ///< matrices, in the order of their place in `whole`
    DeviceBuffer whole, scratch;
  };
  std::vector<std::vector<std::int64_t>> shards;  ///< [matrix][rank]: rows
  std::vector<std::int64_t> cols;
  MatrixExchange plan;
  std::vector<Batch> batches;
  std::vector<CUdeviceptr> whole_of;  ///< [matrix]: its whole matrix on its owner (this rank), else 0
};

/// The ranks' rows of every matrix of `w`, gathered over `comm` (synchronizes `w.stream`).
std::vector<std::vector<std::int64_t>> gather_rows(const Api& nccl, Comm comm, int ranks, const MatrixWork& w,
                                                   std::vector<std::int64_t>& cols) {
  const auto n = static_cast<std::size_t>(w.num_matrices);
  const auto& d = driver::api();
  auto gather = [&](const std::vector<std::int64_t>& mine) {
    DeviceBuffer send(mine.size() * sizeof(std::int64_t)), recv(mine.size() * ranks * sizeof(std::int64_t));
    std::vector<std::int64_t> every(mine.size() * static_cast<std::size_t>(ranks));
    if (mine.empty()) return every;
    driver::check(d.cuMemcpyHtoD(send.get(), mine.data(), mine.size() * sizeof(std::int64_t)), "cuMemcpyHtoD");
    check(nccl.AllGather(reinterpret_cast<void*>(send.get()), reinterpret_cast<void*>(recv.get()), mine.size(), kInt64,
                         comm, w.stream),
          "ncclAllGather");
    driver::check(d.cuStreamSynchronize(w.stream), "cuStreamSynchronize");
    driver::check(d.cuMemcpyDtoH(every.data(), recv.get(), every.size() * sizeof(std::int64_t)), "cuMemcpyDtoH");
    return every;
  };
  // First the count: ranks that listed other matrices would wait for each other's rows for good.
  const std::vector<std::int64_t> counts = gather({static_cast<std::int64_t>(n)});
  for (int r = 0; r < ranks; ++r)
    if (counts[static_cast<std::size_t>(r)] != static_cast<std::int64_t>(n))
      throw Error("optgen::nccl::matrix_hook",
                  "rank " + std::to_string(r) + " lists " + std::to_string(counts[static_cast<std::size_t>(r)]) +
                      " matrices, this one " + std::to_string(n),
                  "every rank must bind the same tensors, each its rows of every one (none too)");
  std::vector<std::int64_t> mine;
  for (std::size_t i = 0; i < n; ++i) {
    const MatrixWork::Matrices& m = w.matrices[i];
    if (m.batch > 1)
      throw Error("optgen::nccl::matrix_hook",
                  "tensor " + std::to_string(m.tensor) + " of group " + std::to_string(m.group) + " is bound as " +
                      std::to_string(m.batch) + " matrices",
                  "bind each sharded tensor as one matrix (two dimensions) of which each rank holds rows");
    mine.push_back(m.batch == 1 ? m.rows : 0);
    mine.push_back(m.cols);
  }
  const std::vector<std::int64_t> every = gather(mine);
  std::vector<std::vector<std::int64_t>> shards(n, std::vector<std::int64_t>(static_cast<std::size_t>(ranks)));
  cols.assign(n, 0);
  for (std::size_t i = 0; i < n; ++i)
    for (int r = 0; r < ranks; ++r) {
      const std::size_t at = static_cast<std::size_t>(r) * 2 * n + 2 * i;
      shards[i][static_cast<std::size_t>(r)] = every[at];
      if (r > 0 && every[at + 1] != cols[i])
        throw Error("optgen::nccl::matrix_hook",
                    "matrix " + std::to_string(i) + " has " + std::to_string(cols[i]) + " columns on rank 0 but " +
                        std::to_string(every[at + 1]) + " on rank " + std::to_string(r),
                    "every rank must bind the same tensors, each its rows of every one");
      cols[i] = every[at + 1];
    }
  return shards;
}

std::shared_ptr<Exchange> make_exchange(const Api& nccl, Comm comm, int ranks, int rank, const MatrixWork& w,
                                        const FusedOptimizer& optimizer) {
  CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_NONE;
  driver::check(driver::api().cuStreamIsCapturing(w.stream, &capturing), "cuStreamIsCapturing");
  if (capturing != CU_STREAM_CAPTURE_STATUS_NONE)
    throw Error("optgen::nccl::matrix_hook", "the first step of these matrices is being captured in a CUDA graph",
                "take one step before capturing: it learns the ranks' rows and allocates the hook's buffers");
  auto ex = std::make_shared<Exchange>();
  ex->shards = gather_rows(nccl, comm, ranks, w, ex->cols);
  ex->plan = plan_matrix_exchange(ex->shards, ex->cols, ranks, rank);
  ex->whole_of.assign(ex->shards.size(), 0);
  std::map<std::tuple<int, DType, std::int64_t, std::int64_t, std::vector<double>>, std::size_t> index;
  for (int i : ex->plan.owned) {
    const MatrixWork::Matrices& m = w.matrices[i];
    const std::vector<double> arguments(m.arguments, m.arguments + m.num_arguments);
    const auto key = std::tuple{m.value, m.dtype, ex->plan.rows[i], ex->cols[i], arguments};
    auto [at, added] = index.emplace(key, ex->batches.size());
    if (added) ex->batches.push_back({m.value, m.dtype, m.group, ex->plan.rows[i], ex->cols[i], arguments, {}, {}, {}});
    ex->batches[at->second].members.push_back(i);
  }
  for (Exchange::Batch& b : ex->batches) {
    const auto count = static_cast<long long>(b.members.size());
    const std::size_t size = static_cast<std::size_t>(b.rows * b.cols) * size_of(b.dtype);
    b.whole = DeviceBuffer(std::max<std::size_t>(1, size * b.members.size()));
    b.scratch = DeviceBuffer(std::max<std::size_t>(
        1, optimizer.matrix_function_scratch_bytes(b.group, b.value, count, b.rows, b.cols, b.dtype)));
    for (std::size_t k = 0; k < b.members.size(); ++k)
      ex->whole_of[static_cast<std::size_t>(b.members[k])] = b.whole.get() + k * size;
  }
  return ex;
}

/// Moves every rank's rows of each matrix to or from its owner (`gather`: to), in one NCCL group,
/// and the owner's own rows by a copy. Rank r's rows of matrix i lie at its x on rank r, and at
/// their place in the whole matrix on the owner.
void move_rows(const Api& nccl, Comm comm, int rank, const Exchange& ex, const MatrixWork& w, bool gather) {
  check(nccl.GroupStart(), "ncclGroupStart");
  for (std::size_t i = 0; i < ex.shards.size(); ++i) {
    const int owner = ex.plan.owner[i];
    const std::int64_t cols = ex.cols[i];
    const DType dtype = w.matrices[i].dtype;
    void* const mine = reinterpret_cast<void*>(w.matrices[i].x);
    for (std::size_t r = 0; r < ex.shards[i].size(); ++r) {
      const int from = static_cast<int>(r);
      const auto count = static_cast<std::size_t>(ex.shards[i][r] * cols);
      if (count == 0 || (rank != owner && from != rank)) continue;
      if (rank != owner) {
        check(gather ? nccl.Send(mine, count, nccl_type(dtype), owner, comm, w.stream)
                     : nccl.Recv(mine, count, nccl_type(dtype), owner, comm, w.stream),
              gather ? "ncclSend" : "ncclRecv");
        continue;
      }
      void* const part = reinterpret_cast<void*>(ex.whole_of[i] +
                                                 static_cast<std::size_t>(ex.plan.first[i][r] * cols) * size_of(dtype));
      if (from == rank)  // enqueued at once, before the group's transfers, none of which touches it
        driver::check(driver::api().cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(gather ? part : mine),
                                                      reinterpret_cast<CUdeviceptr>(gather ? mine : part),
                                                      count * size_of(dtype), w.stream),
                      "cuMemcpyDtoDAsync");
      else
        check(gather ? nccl.Recv(part, count, nccl_type(dtype), from, comm, w.stream)
                     : nccl.Send(part, count, nccl_type(dtype), from, comm, w.stream),
              gather ? "ncclRecv" : "ncclSend");
    }
  }
  check(nccl.GroupEnd(), "ncclGroupEnd");
}

}  // namespace

std::function<void(const MatrixWork&)> matrix_hook(Comm comm, FusedOptimizer& optimizer) {
  const Api& nccl = api();
  int ranks = 0, rank = 0;
  check(nccl.CommCount(comm, &ranks), "ncclCommCount");
  check(nccl.CommUserRank(comm, &rank), "ncclCommUserRank");
  auto exchanges = std::make_shared<std::map<std::vector<std::int64_t>, std::shared_ptr<const Exchange>>>();
  return [&nccl, comm, ranks, rank, &optimizer, exchanges](const MatrixWork& w) {
    // The list of matrices, as its exchange is made for it: stage, and each one's place, shape and
    // arguments (a group's changed hyperparameters batch its matrices anew).
    std::vector<std::int64_t> key{w.stage};
    for (int i = 0; i < w.num_matrices; ++i) {
      const MatrixWork::Matrices& m = w.matrices[i];
      key.insert(key.end(),
                 {m.value, static_cast<std::int64_t>(m.dtype), static_cast<std::int64_t>(m.group),
                  static_cast<std::int64_t>(m.tensor), static_cast<std::int64_t>(m.x), m.batch, m.rows, m.cols});
      for (int a = 0; a < m.num_arguments; ++a) {
        std::int64_t bits = 0;
        std::memcpy(&bits, &m.arguments[a], sizeof bits);
        key.push_back(bits);
      }
    }
    std::shared_ptr<const Exchange>& ex = (*exchanges)[key];
    if (!ex) ex = make_exchange(nccl, comm, ranks, rank, w, optimizer);
    move_rows(nccl, comm, rank, *ex, w, true);
    for (const Exchange::Batch& b : ex->batches)
      optimizer.apply_matrix_function(b.group, b.value, b.arguments.data(), b.whole.get(), b.scratch.get(),
                                      static_cast<long long>(b.members.size()), b.rows, b.cols, w.stream);
    move_rows(nccl, comm, rank, *ex, w, false);
  };
}

}  // namespace optgen::nccl
