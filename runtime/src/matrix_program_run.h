#pragma once
/// Runs a matrix program (optgen/matrix_program.h) on batches of matrices. The program is unrolled
/// on the host once per set of arguments (UnrolledProgram), and each value it computes is placed in
/// a buffer where no value still to be read lives. Small matrices (a view of at most
/// kernel_abi::kMatrixInBlockRows rows whose values fit in a block's shared memory) run the whole
/// program in a block each, the buffers in shared memory (kernel_abi::kMatrixProgramInBlock), their
/// batches of every shape packed into a few launches (InBlockLaunches): a launch a product would
/// cost more than the products. Others run their products as strided-batched GEMMs through cuBLAS
/// (optgen/cublas.h), their norms and sums in the module's kernels (kernel_abi::kMatrixSumSquares,
/// kMatrixNormalize, kMatrixCombine), the buffers the matrices' own (`x`) and the scratch's, the
/// result placed in `x` where the program allows it (else copied there at the end): Newton–Schulz
/// alternates between x and one scratch matrix and copies nothing.

#include <cuda.h>

#include <cstddef>
#include <string>
#include <vector>

#include "optgen/cublas.h"
#include "optgen/dtype.h"
#include "optgen/kernel_abi.h"
#include "optgen/matrix_program.h"
#include "optimizer_impl.h"

namespace optgen {

/// The kernels of matrix programs' norms and sums, in every generated module with a matrix value.
struct MatrixKernels {
  CUfunction sum_squares = nullptr, normalize = nullptr, combine = nullptr;
  CUfunction sum_squares_f32 = nullptr, normalize_f32 = nullptr, combine_f32 = nullptr;
  CUfunction in_block = nullptr, in_block_f32 = nullptr;
  CUfunction column_splits = nullptr;  ///< kernel_abi::kMatrixColumnSplits
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

/// Whether matrices of `rows` x `cols` may run in a block each: their view (the program's R x C)
/// has at most kernel_abi::kMatrixInBlockRows rows. Whether they do depends on the arguments too
/// (InBlockLaunches::add).
bool matrix_view_fits_block(const MatrixProgram& program, long long rows, long long cols);

/// One instruction of a program unrolled: it writes value `out` (values are numbered in the order
/// they are computed; value 0 is the argument), reading values a, b and c (-1: none).
struct MatrixTraceStep {
  MatrixOp op;
  int out, a, b, c;
  bool transpose_a, transpose_b;
  float alpha, beta;
};

/// A program unrolled: its steps, each value's variable (its shape), the value it returns.
struct MatrixTrace {
  std::vector<MatrixTraceStep> steps;
  std::vector<int> variable;
  int result = 0;
};

/// `program` unrolled with one set of arguments (which matrix_program_problem accepts), for
/// matrices of `dtype` (BF16: products in bf16 with fp32 accumulation, as torch's; F32: fp32
/// throughout): made once per set, then run on any number of batches either way.
class UnrolledProgram {
 public:
  UnrolledProgram(const MatrixProgram& program, const double* arguments, DType dtype);

  /// Bytes of shared memory a block takes to run a matrix of `rows` x `cols` whole, or 0 where no
  /// block can: a view of more than kMatrixInBlockRows rows, a program of more than
  /// kMatrixInBlockSteps steps or kMatrixInBlockBuffers buffers.
  std::size_t in_block_bytes(long long rows, long long cols) const;
  /// The in-block kernel's argument with the program's steps and buffers, and no runs.
  const kernel_abi::MatrixInBlock& in_block() const { return in_block_; }
  DType dtype() const { return dtype_; }
  const MatrixProgram& program() const { return *program_; }

  /// Enqueues the program on `count` row-major `rows` x `cols` matrices consecutive at `x`, in place,
  /// on `stream`, through cuBLAS and the norm and sum kernels. `scratch` holds `scratch_bytes`, at
  /// least matrix_program_scratch_bytes (else optgen::Error, before anything is enqueued).
  /// `workspace`: cuBLAS's (cublas::Handle::kWorkspaceBytes), where programs run at once on several
  /// streams; 0, the handle's. Returns the launches it enqueued (kernels, cuBLAS calls and copies).
  int run_batched(const MatrixKernels& kernels, const cublas::Handle& handle, CUdeviceptr x, CUdeviceptr scratch,
                  std::size_t scratch_bytes, long long count, long long rows, long long cols, CUstream stream,
                  CUdeviceptr workspace) const;

 private:
  const MatrixProgram* program_;
  DType dtype_;
  MatrixTrace trace_;
  kernel_abi::MatrixInBlock in_block_{};
  bool fits_block_ = false;  ///< within kMatrixInBlockSteps steps and kMatrixInBlockBuffers buffers
};

/// Launches of the in-block kernels, built once and enqueued every step: batches of matrices, each
/// of one shape through one UnrolledProgram, packed into as few launches as keep each batch more
/// than half the blocks to a multiprocessor it has on its own (a launch's dynamic shared memory is
/// its largest batch's).
class InBlockLaunches {
 public:
  /// Adds `count` row-major `rows` x `cols` matrices consecutive at `x`, through `program`; false
  /// (nothing added) where they do not run in a block: program.in_block_bytes is 0 or more than
  /// the kernels' shared memory. `program` is compared by address while launches are added.
  bool add(const UnrolledProgram& program, const MatrixKernels& kernels, CUdeviceptr x, long long count, long long rows,
           long long cols);
  /// Enqueues every launch on `stream`; returns how many. Capturable in a CUDA graph: the launches
  /// carry everything by value.
  int enqueue(CUstream stream) const;
  bool empty() const { return launches_.empty(); }

 private:
  struct Launch {
    const UnrolledProgram* program;
    CUfunction function;
    int occupancy;  ///< the class of its batches' blocks to a multiprocessor on their own
    kernel_abi::MatrixInBlock argument;
    long long blocks;
    std::size_t shared_bytes;
  };
  std::vector<Launch> launches_;
};

/// Enqueues `program` with `arguments` (which matrix_program_problem accepts) on `count` row-major
/// `rows` x `cols` matrices of `dtype` consecutive at `x`, in place, on `stream`: in a block each
/// where they fit, else as UnrolledProgram::run_batched (`scratch`, `workspace`). Capturable in a
/// CUDA graph. Returns the launches it enqueued (0 for no matrices).
int run_matrix_program(const MatrixProgram& program, const double* arguments, DType dtype, const MatrixKernels& kernels,
                       const cublas::Handle& handle, CUdeviceptr x, CUdeviceptr scratch, std::size_t scratch_bytes,
                       long long count, long long rows, long long cols, CUstream stream, CUdeviceptr workspace = 0);

}  // namespace optgen
