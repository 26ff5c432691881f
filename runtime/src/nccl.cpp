#include "optgen/nccl.h"

#include <cstdlib>
#include <tuple>

#include "optgen/error.h"
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
      if (r.slots[i].scope != Domain::Group) continue;
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

}  // namespace optgen::nccl
