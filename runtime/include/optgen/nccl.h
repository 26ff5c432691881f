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
  int (*GroupStart)();
  int (*GroupEnd)();
  const char* (*GetErrorString)(int);
};
enum { kFloat32 = 7, kFloat64 = 8, kSum = 0, kMax = 2 };  ///< nccl.h's ncclFloat32, ncclFloat64, ncclSum, ncclMax

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

}  // namespace optgen::nccl
