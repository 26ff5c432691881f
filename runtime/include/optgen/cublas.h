#pragma once
/// cuBLAS's matrix products for the matrix stages (Muon's Newton–Schulz), through cublasLt: loaded at
/// run time with dlopen, as the runtime loads libcuda, NVRTC and NCCL ($OPTGEN_CUBLASLT, else
/// libcublasLt.so.13 or .so.12 from the library path: the CUDA toolkit's, or the nvidia-cublas
/// wheel torch ships), so that nothing links it and a program without it runs until it asks for
/// it. cublasLt rather than cublas: its products may write D apart from the C they add, so an
/// iteration moves no copies. The few entry points used are declared here with cublasLt.h's types as
/// plain ints and pointers (its C ABI is stable).

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

namespace optgen::cublas {

using HandlePointer = void*;  ///< a cublasLtHandle_t
using Descriptor = void*;     ///< a cublasLtMatmulDesc_t, cublasLtMatrixLayout_t or cublasLtMatmulPreference_t
/// cublasLtMatmulAlgo_t, and cublasLtMatmulHeuristicResult_t: the algorithm and its workspace.
struct Algorithm {
  std::uint64_t data[8];
};
struct Heuristic {
  Algorithm algo;
  std::size_t workspace;
  int state;
  float waves;
  int reserved[4];
};

/// The loaded entry points (cublasLt.h's names without the cublasLt prefix; cublasStatus_t and the
/// enums as int).
struct Api {
  int (*Create)(HandlePointer*);
  int (*Destroy)(HandlePointer);
  int (*MatmulDescCreate)(Descriptor*, int compute_type, int scale_type);
  int (*MatmulDescDestroy)(Descriptor);
  int (*MatmulDescSetAttribute)(Descriptor, int attribute, const void* value, std::size_t bytes);
  int (*MatrixLayoutCreate)(Descriptor*, int type, std::uint64_t rows, std::uint64_t cols, std::int64_t ld);
  int (*MatrixLayoutDestroy)(Descriptor);
  int (*MatrixLayoutSetAttribute)(Descriptor, int attribute, const void* value, std::size_t bytes);
  int (*MatmulPreferenceCreate)(Descriptor*);
  int (*MatmulPreferenceDestroy)(Descriptor);
  int (*MatmulPreferenceSetAttribute)(Descriptor, int attribute, const void* value, std::size_t bytes);
  int (*MatmulAlgoGetHeuristic)(HandlePointer, Descriptor op, Descriptor a, Descriptor b, Descriptor c, Descriptor d,
                                Descriptor preference, int requested, Heuristic* results, int* returned);
  int (*Matmul)(HandlePointer, Descriptor op, const void* alpha, const void* a, Descriptor a_layout, const void* b,
                Descriptor b_layout, const void* beta, const void* c, Descriptor c_layout, void* d, Descriptor d_layout,
                const Algorithm* algo, void* workspace, std::size_t workspace_bytes, CUstream stream);
  const char* (*GetStatusString)(int);
};
/// cublasLt.h's and library_types.h's values of the enums used.
enum {
  kOpN = 0,
  kOpT = 1,
  kBF16 = 14,  // CUDA_R_16BF
  kF32 = 0,    // CUDA_R_32F
  kCompute32F = 68,
  kTransA = 3,  // CUBLASLT_MATMUL_DESC_TRANSA
  kTransB = 4,
  kBatchCount = 5,  // CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT
  kBatchStride = 6,
  kMaxWorkspaceBytes = 1,  // CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES
};

/// cublasLt, loaded on first use. Throws optgen::Error naming dlopen and what to do without it.
/// Thread-safe.
const Api& api();

/// Whether cublasLt can be loaded; never throws. `why`, when given, receives the reason when not.
bool available(std::string* why = nullptr);

/// Throws optgen::Error naming `call` and cuBLAS's error text unless `status` is CUBLAS_STATUS_SUCCESS.
void check(int status, const char* call);

/// A column-major product D = alpha op(A) op(B) + beta C of a batch of `count` matrices of `dtype`,
/// kBF16 (fp32 accumulation, as torch's products of bf16 tensors) or kF32 (fp32 throughout, no
/// TF32), each operand `stride` elements after the
/// last in its batch: D is r x c, the inner dimension k; A is r x k (k x r when transposed) with
/// leading dimension lda, B k x c (c x k) with ldb, C and D r x c with ldc. C may be D; neither may
/// be A or B.
struct Product {
  int trans_a, trans_b;
  int r, c, k;
  int lda, ldb, ldc;
  long long stride_a, stride_b, stride_c;
  int count;
  int dtype = kBF16;
  bool operator<(const Product& o) const {
    return std::tie(trans_a, trans_b, r, c, k, lda, ldb, ldc, stride_a, stride_b, stride_c, count, dtype) <
           std::tie(o.trans_a, o.trans_b, o.r, o.c, o.k, o.lda, o.ldb, o.ldc, o.stride_a, o.stride_b, o.stride_c,
                    o.count, o.dtype);
  }
};

/// A cublasLt handle of the current context with a workspace of its own, so that its products
/// allocate nothing and can be captured in a CUDA graph. Each product's descriptors and algorithm
/// (cublasLt's heuristic's first choice) are made once per shape of product and kept.
class Handle {
 public:
  Handle();
  ~Handle();
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  /// Enqueues D = alpha op(A) op(B) + beta C on `stream`, with the handle's workspace, or with
  /// `workspace` (kWorkspaceBytes) where given: products that may run at once on several streams
  /// need one each.
  void multiply(const Product& p, float alpha, CUdeviceptr a, CUdeviceptr b, float beta, CUdeviceptr c, CUdeviceptr d,
                CUstream stream, CUdeviceptr workspace = 0) const;

  /// The bytes of a product's workspace: what cuBLAS asks for on Hopper (32 MiB), enough for every
  /// GPU before it.
  static constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;

 private:
  struct Plan;
  const Plan& plan(const Product& p) const;

  HandlePointer handle_ = nullptr;
  CUdeviceptr workspace_ = 0;
  mutable std::mutex mutex_;
  mutable std::map<Product, std::unique_ptr<Plan>> plans_;
};

}  // namespace optgen::cublas
