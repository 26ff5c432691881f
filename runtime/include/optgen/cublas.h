#pragma once
/// cuBLAS for the matrix stages (Muon's Newton–Schulz): loaded at run time with dlopen, as the
/// runtime loads libcuda, NVRTC and NCCL ($OPTGEN_CUBLAS, else libcublas.so.13 or .so.12 from the
/// library path: the CUDA toolkit's, or the nvidia-cublas wheel torch ships), so that nothing links
/// it and a program without it runs until it asks for it. The few entry points used are declared
/// here with cublas_api.h's types as plain ints and pointers (its C ABI is stable).

#include <cuda.h>

#include <cstddef>
#include <string>

namespace optgen::cublas {

using HandlePointer = void*;  ///< a cublasHandle_t

/// The loaded entry points (cublas_api.h's names without the cublas prefix; cublasStatus_t,
/// cublasOperation_t, cudaDataType, cublasComputeType_t and cublasGemmAlgo_t as int).
struct Api {
  int (*Create)(HandlePointer*);
  int (*Destroy)(HandlePointer);
  int (*SetStream)(HandlePointer, CUstream);
  int (*SetWorkspace)(HandlePointer, void*, size_t);
  int (*GemmStridedBatchedEx)(HandlePointer, int transa, int transb, int m, int n, int k, const void* alpha,
                              const void* a, int a_type, int lda, long long stride_a, const void* b, int b_type,
                              int ldb, long long stride_b, const void* beta, void* c, int c_type, int ldc,
                              long long stride_c, int batch_count, int compute_type, int algo);
  const char* (*GetStatusString)(int);
};
/// cublas_api.h's and library_types.h's values of the enums used.
enum { kOpN = 0, kOpT = 1, kBF16 = 14, kF32 = 0, kCompute32F = 68, kGemmDefault = -1 };

/// cuBLAS, loaded on first use. Throws optgen::Error naming dlopen and what to do without it.
/// Thread-safe.
const Api& api();

/// Whether cuBLAS can be loaded; never throws. `why`, when given, receives the reason when not.
bool available(std::string* why = nullptr);

/// Throws optgen::Error naming `call` and cuBLAS's error text unless `status` is CUBLAS_STATUS_SUCCESS.
void check(int status, const char* call);

/// A cuBLAS handle of the current context with a workspace of its own (cublasSetWorkspace), so that
/// its calls allocate nothing and can be captured in a CUDA graph; each call runs on the stream
/// it is given.
class Handle {
 public:
  Handle();
  ~Handle();
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  /// The handle, its stream set to `stream`.
  HandlePointer on(CUstream stream) const;

 private:
  HandlePointer handle_ = nullptr;
  CUdeviceptr workspace_ = 0;
};

}  // namespace optgen::cublas
