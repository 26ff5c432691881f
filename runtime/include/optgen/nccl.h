#pragma once
/// Reductions across ranks through NCCL, for ranks whose tensors are shards of one model (ZeRO,
/// FSDP): NCCL is loaded at run time with dlopen (libnccl.so.2 from the library path, as torch's
/// wheels ship it, or $OPTGEN_NCCL), as the runtime loads libcuda and NVRTC, so nothing links it
/// and a program without it runs until it asks for it. Its C ABI is stable; the few entry points
/// used are declared here with nccl.h's types.

#include <cuda.h>

#include <cstddef>
#include <functional>
#include <string>

#include "optgen/optimizer.h"

namespace optgen::nccl {

using Comm = void*;  ///< an ncclComm_t
struct UniqueId {    ///< an ncclUniqueId
  char internal[128];
};

/// The loaded entry points (nccl.h's names without the nccl prefix; ncclResult_t as int).
struct Api {
  int (*GetUniqueId)(UniqueId*);
  int (*CommInitRank)(Comm*, int, UniqueId, int);
  int (*CommInitAll)(Comm*, int, const int*);
  int (*CommDestroy)(Comm);
  int (*AllReduce)(const void*, void*, size_t, int, int, Comm, CUstream);
  int (*AllGather)(const void*, void*, size_t, int, Comm, CUstream);
  int (*Send)(const void*, size_t, int, int, Comm, CUstream);
  int (*Recv)(void*, size_t, int, int, Comm, CUstream);
  int (*CommCount)(Comm, int*);
  int (*CommUserRank)(Comm, int*);
  int (*GroupStart)();
  int (*GroupEnd)();
  const char* (*GetErrorString)(int);
};
/// nccl.h's ncclInt64, ncclFloat32, ncclFloat64, ncclBfloat16, ncclSum, ncclMax.
enum { kInt64 = 4, kFloat32 = 7, kFloat64 = 8, kBfloat16 = 9, kSum = 0, kMax = 2 };

/// NCCL, loaded on first use. Throws optgen::Error naming dlopen and what to do without it.
/// Thread-safe.
const Api& api();

/// Whether NCCL can be loaded; never throws. `why`, when given, receives the reason when not.
bool available(std::string* why = nullptr);

/// Throws optgen::Error naming `call` and NCCL's error text unless `result` is ncclSuccess.
void check(int result, const char* call);

/// A reduction hook (FusedOptimizer::set_reduction_hook) that makes each rank's results global:
/// after each Reduce stage, one ncclAllReduce over `comm` per reduction of the stage (a sum or a
/// maximum, in double, on the step's stream, in one NCCL group) over its tensor results and, for a
/// reduction over a group, its group results. Every rank must hold the same groups with the same
/// number of tensors, each its own part of every tensor, bound with the whole tensor's element
/// count (Tensor::whole_numel). `comm` must outlive the optimizer's steps.
std::function<void(const ReductionResults&)> all_reduce_hook(Comm comm);

/// A matrix hook (FusedOptimizer::set_matrix_hook) of `optimizer` over `comm`, for ranks that each
/// hold consecutive rows of every matrix (a tensor of two dimensions bound with Tensor::whole_numel;
/// rank 0 the first rows, any rank none): each whole matrix goes to an owner rank (the costliest
/// first, each to the least loaded rank), which applies its function to the matrices it owns,
/// batched by shape and arguments (FusedOptimizer::apply_matrix_function), and hands every rank its
/// rows back: two NCCL groups of sends and receives on the step's stream, capturable in a CUDA
/// graph. The first call for a list of matrices learns the ranks' rows (an all-gather that
/// synchronizes) and allocates its buffers: take one step before capturing one. Every rank must
/// bind the same tensors. `comm` and `optimizer` must outlive the optimizer's steps.
std::function<void(const MatrixWork&)> matrix_hook(Comm comm, FusedOptimizer& optimizer);

}  // namespace optgen::nccl
