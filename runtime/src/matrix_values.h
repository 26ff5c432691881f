#pragma once
/// A plan's matrix values (VariantInfo::matrix_values, a spec's newton_schulz): the buffers their
/// Reduce stage stores the operands in, and the work the runtime does on them before the next
/// stage: their function's program (matrix_program_run.h). A tensor is the matrices of its last two dimensions
/// (shape_layout.h's TensorDims); the matrices of one shape, across tensors and groups, lie consecutively in one
/// bucket, so that each product of the iteration is one strided-batched GEMM over the whole bucket (or over each run of
/// its groups whose arguments differ): launches grow with the shapes, not with the tensors.

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "matrix_program_run.h"
#include "optgen/cublas.h"
#include "optimizer_impl.h"

namespace optgen {

/// The matrices of one shape of one matrix value, of its dtype (bf16 or f32), consecutive at `x`.
struct MatrixBucket {
  int value = 0;  ///< index into VariantInfo::matrix_values
  DType dtype = DType::BF16;
  std::int64_t rows = 0, cols = 0, count = 0;
  CUdeviceptr x = 0;
  /// Its groups in order, each with the matrices it holds there: [first, first + count).
  struct GroupRun {
    int group;
    std::int64_t first, count;
  };
  std::vector<GroupRun> groups;
};

/// One tensor's matrices of one matrix value, where its bucket holds them.
struct MatrixTensor {
  int value = 0;              ///< index into VariantInfo::matrix_values
  DType dtype = DType::BF16;  ///< of its elements
  std::size_t tensor = 0;     ///< the plan's tensor
  std::size_t group = 0;      ///< the optimizer's group that holds it
  std::size_t position = 0;   ///< its index there
  CUdeviceptr x = 0;
  std::int64_t batch = 0, rows = 0, cols = 0;
};

/// A stream of the optimizer's own on which some buckets' programs run beside those on the caller's
/// stream (build_matrices says which), with scratch and a cuBLAS workspace of its own; `done`
/// orders the caller's stream after it.
struct MatrixLane {
  mutable OwnedStream stream;  // made in build_matrices (not during a capture), used by steps
  mutable OwnedEvent done;
  CUdeviceptr scratch = 0;  ///< matrix_program_scratch_bytes of its largest bucket
  std::size_t scratch_bytes = 0;
  CUdeviceptr workspace = 0;  ///< cublas::Handle::kWorkspaceBytes
};

/// What apply_matrices enqueues for a stage, made for one set of its groups' arguments and made
/// anew when they change: each value's program unrolled once per distinct set of arguments, the
/// small matrices of every bucket in a few launches of the in-block kernels, the others a batch
/// each through cuBLAS on their bucket's lane.
struct MatrixStageWork {
  bool made = false;
  std::vector<double> arguments;  ///< what it was made for: per value of the stage, per group, its arguments
  std::vector<std::unique_ptr<UnrolledProgram>> programs;  ///< by address in `in_block` and `batches`
  InBlockLaunches in_block;
  struct Batch {
    std::size_t bucket;
    const UnrolledProgram* program;
    CUdeviceptr x;
    std::int64_t count;
  };
  std::vector<Batch> batches;
};

/// The tensors of one stage's matrix values bound with column splits (Tensor::column_splits):
/// `table` holds `count` kernel_abi::ColumnSplit, moved by one launch before the stage's programs
/// and one after.
struct StageColumnSplits {
  int stage = 0;
  CUdeviceptr table = 0;
  int count = 0;
  long long most_units = 0;  ///< of one tensor: the launch's grid
};

struct PlanMatrices {
  /// Every bucket's matrices, the operands of tensors with column splits and their ColumnSplit
  /// tables, the scratch, then the lanes' scratch and workspaces.
  DeviceBuffer memory;
  std::vector<MatrixBucket> buckets;
  std::vector<MatrixTensor> tensors;  ///< in plan order, each value's in turn (for a matrix hook)
  std::vector<StageColumnSplits> column_splits;
  CUdeviceptr scratch = 0;  ///< for the buckets on the caller's stream: the largest one's
  std::size_t scratch_bytes = 0;
  MatrixKernels kernels;
  /// Per bucket, where its batches through cuBLAS run: 0 on the caller's stream, i on lanes[i - 1]
  /// (matrices that may run in a block each, matrix_view_fits_block, stay on the caller's).
  std::vector<int> lane_of;
  std::vector<MatrixLane> lanes;
  mutable OwnedEvent fork;  ///< orders the lanes after the caller's stream
  /// Per stage (VariantInfo::matrix_values' `stage`), what apply_matrices last made for it: a memo,
  /// remade where the arguments differ, so a step unrolls and packs nothing.
  mutable std::vector<MatrixStageWork> work;
};

/// Lays out and allocates the buffers of `variant`'s matrix values, each of its dtype in kernel set
/// `kernel` (matrix_dtype), for a plan's tensors (`tensors`,
/// each of group `groups[t]`; null for a placeholder), and points the rows of `pointers`
/// (TableView::pointers, n = tensors.size() a row) of their operands at them. `module`: the plan's,
/// whose matrix kernels it looks up. `lanes`: whether small buckets may run on lanes (not where a
/// matrix hook does the work instead). optgen::Error, naming `call`, for a tensor that is no matrix:
/// bound without a shape of two or more dimensions.
PlanMatrices build_matrices(const VariantInfo& variant, const KernelInfo& kernel,
                            const std::vector<const BoundTensor*>& tensors, const std::vector<int>& groups,
                            const Module& module, std::vector<void*>& pointers, const std::string& call, bool lanes);

/// The arguments of matrix value `value` for a group of hyperparameters `h`.
std::vector<double> matrix_arguments(const MatrixValueInfo& value, const std::vector<double>& h);

/// What is wrong with the arguments hyperparameters `h` give `variant`'s matrix functions
/// (a repeat's count, such as newton_schulz's steps: a whole number from 0 to 1000), or "". Checked where a group's
/// hyperparameters are given or changed, so that no step stops halfway.
std::string matrix_argument_problem(const OptimizerInfo& info, const VariantInfo& variant,
                                    const std::vector<double>& h);

/// Enqueues on `stream` the move of the operands of stage `stage`'s tensors with column splits into
/// their matrices in the buckets (to_pieces) or back: before and after the stage's matrix functions,
/// or a matrix hook. Returns the launches (0 or 1).
int move_column_splits(const PlanMatrices& matrices, int stage, bool to_pieces, CUstream stream);

/// Enqueues on `stream` what the matrix values stored by Reduce stage `stage` (1, 2, ...) need before
/// the next stage reads them: each bucket's matrices through its value's program,
/// with the arguments of its groups (their hyperparameters, `groups[g].h`, which
/// matrix_argument_problem accepted), one batch per run of groups whose arguments agree: the small
/// ones (InBlockLaunches) in a few launches on `stream`, the others through cuBLAS, those of lanes
/// on their lanes, forked from `stream` and joined back to it; the operands of tensors with column
/// splits moved into their buckets' pieces before and back after. Capturable in a CUDA graph. Returns
/// the launches it enqueued (as run_matrix_program).
int apply_matrices(const PlanMatrices& matrices, const VariantInfo& variant, int stage,
                   const std::vector<Group>& groups, const cublas::Handle& handle, CUstream stream);

}  // namespace optgen
