#pragma once
/// Runs a matrix program (optgen/matrix_program.h) on a batch of matrices of one shape. The program
/// is unrolled on the host with its arguments, and each value it computes is placed in a buffer
/// where no value still to be read lives. Small matrices (a view of at most
/// kernel_abi::kMatrixInBlockRows rows whose values fit in a block's shared memory) run the whole
/// program in one launch, a block per matrix, the buffers in shared memory
/// (kernel_abi::kMatrixProgramInBlock): a batch's launch per product would cost more than its
/// products. Others run their products as strided-batched GEMMs through cuBLAS (optgen/cublas.h),
/// their norms and sums in the module's kernels (kernel_abi::kMatrixSumSquares, kMatrixNormalize,
/// kMatrixCombine), the buffers the matrices' own (`x`) and the scratch's, the result placed in `x`
/// where the program allows it (else copied there at the end): Newton–Schulz alternates between x
/// and one scratch matrix and copies nothing.

#include <cuda.h>

#include <cstddef>
#include <string>
#include <vector>

#include "optgen/cublas.h"
#include "optgen/dtype.h"
#include "optgen/matrix_program.h"
#include "optimizer_impl.h"

namespace optgen {

/// The kernels of matrix programs' norms and sums, in every generated module with a matrix value.
struct MatrixKernels {
  CUfunction sum_squares = nullptr, normalize = nullptr, combine = nullptr;
  CUfunction sum_squares_f32 = nullptr, normalize_f32 = nullptr, combine_f32 = nullptr;
  CUfunction in_block = nullptr, in_block_f32 = nullptr;
  /// Bytes of dynamic shared memory the in-block kernels may take (the device's opt-in limit, less
  /// their static shared memory).
  std::size_t in_block_shared = 0;
  explicit MatrixKernels(const Module& module);
};

/// What is wrong with `arguments` (program.num_arguments of them) for `program`: a repeat's count
/// that is not a whole number from 0 to kMaxRepeat; or "". `names`, where given, names each argument
/// beside its parameter (a hyperparameter's name: "steps (ns_steps)").
std::string matrix_program_problem(const MatrixProgram& program, const double* arguments,
                                   const std::vector<std::string>& names = {});

/// Bytes of scratch `program` needs for `count` matrices of `rows` x `cols` of `dtype` (BF16 or F32),
/// whatever its arguments: its matrices beside x, then the norms' partial sums.
std::size_t matrix_program_scratch_bytes(const MatrixProgram& program, long long count, long long rows, long long cols,
                                         DType dtype);

/// Enqueues `program` with `arguments` (which matrix_program_problem accepts) on `count` row-major
/// `rows` x `cols` matrices of `dtype` consecutive at `x`, in place, on `stream`: BF16 products
/// accumulate in fp32, as torch's; F32 is fp32 throughout. `scratch` holds `scratch_bytes`, at least
/// matrix_program_scratch_bytes (else optgen::Error, before anything is enqueued). Capturable in a
/// CUDA graph. `workspace`: cuBLAS's (cublas::Handle::kWorkspaceBytes), where programs run at once
/// on several streams; 0, the handle's. Returns the launches it enqueued (kernels, cuBLAS calls and
/// copies; 0 for no matrices).
int run_matrix_program(const MatrixProgram& program, const double* arguments, DType dtype, const MatrixKernels& kernels,
                       const cublas::Handle& handle, CUdeviceptr x, CUdeviceptr scratch, std::size_t scratch_bytes,
                       long long count, long long rows, long long cols, CUstream stream, CUdeviceptr workspace = 0);

}  // namespace optgen
