#pragma once
/// What the engine derives from tensors' shapes for a variant with matrix, row or column code
/// (VariantInfo::stage_blocks): each tensor as matrices of rows and columns, the size and presence
/// of each state, and the host image of a plan's kernel_abi::ShapeTable with the blocks each kind
/// launches. Host computations only, no driver: optimizer.cpp uploads what they return, and
/// tests/shapes_runtime_test.cpp checks them without a GPU. The formulas are kernel_abi.h's.

#include <cstdint>
#include <vector>

#include "optgen/kernel_abi.h"
#include "optgen/optimizer.h"

namespace optgen {

/// A tensor as B matrices of R rows and C columns (kernel_abi.h, "Rows, columns and matrices"):
/// with two or more dimensions, C and R are its last two and B = numel / (R * C) (0 when it has
/// no elements); else it is one matrix of one row, B = 1, R = 1, C = numel, and not factored.
/// A rank's shard of a larger tensor (whole_numel beyond numel) is of its first dimension, as
/// FSDP2's Shard(0) and ZeRO cut tensors: for a tensor of two dimensions, the rows of one matrix,
/// whose whole count (whole_numel / C) the spec's `rows` reads; or, cut along its second
/// (Tensor::shard_dim 1), the columns of one, whose whole count (whole_numel / R) `cols` reads.
struct TensorDims {
  std::int64_t batch = 1;
  std::int64_t rows = 1;
  std::int64_t cols = 0;
  bool factored = false;
  std::int64_t whole_rows = 1;  ///< the rows a spec's `rows` reads: `rows`, or a 2-D shard's whole matrix's
  std::int64_t whole_cols = 0;  ///< the columns `cols` reads: `cols`, a 2-D shard's whole matrix's, or a split's
  /// A tensor of two dimensions bound as a shard (whole_numel given): some rows of one matrix (0
  /// too), so that its sums over rows are its rank's part; or (split_cols, shard_dim 1) some
  /// columns of every row, so that its sums over columns are.
  bool split_rows = false;
  bool split_cols = false;
  /// Tensor::column_splits: each matrix is this many matrices of cols / column_splits columns to
  /// its matrix values, whose count `whole_cols` reads.
  std::int64_t column_splits = 1;

  std::int64_t total_rows() const { return batch * rows; }  ///< B * R
  std::int64_t total_cols() const { return batch * cols; }  ///< B * C
};

/// `shape` as the caller gave it (empty: not given, then the tensor is not factored); `whole_numel`
/// the whole tensor's element count of which it is a shard (0: it is whole), cut along dimension
/// `shard_dim` (Tensor::shard_dim); `column_splits` Tensor::column_splits (checked by the caller).
TensorDims tensor_dims(const std::vector<std::int64_t>& shape, std::int64_t numel, std::int64_t whole_numel = 0,
                       int shard_dim = 0, std::int64_t column_splits = 1);

/// A tensor of a spec of blocks (OptimizerInfo::block_elements): of a positive multiple of
/// `block_elements` elements, one matrix of numel / block_elements rows of block_elements columns,
/// factored, its rows the blocks; else (a shorter or ragged tensor, or none) a vector, not factored.
/// The shape the tensor is bound with does not matter.
TensorDims block_dims(std::int64_t numel, long long block_elements);

/// Whether a plan of tensors `dims` launches its kernel set's Update stage of long rows
/// (KernelInfo::long_row_update, kernel_abi::kLongRowVector): at most an eighth of its elements
/// lie in rows of fewer than kLongRowColumns columns (a tensor of one dimension is one row). On
/// an H200 that stage took gpt2's and bert-base's Adafactor from 83% to 86% of the floor and
/// ghostnet_100's (1x1 and 3x3 convolutions) 19% slower (bench/RESULTS.md, 2026-12-02).
constexpr std::int64_t kLongRowColumns = 32;
bool long_rows(const std::vector<TensorDims>& dims);

/// Whether the kernels of `variant` run a tensor of `dims` as element code: a factored tensor whose
/// matrices are one element (kernel_abi::unit_matrices), in a variant with such code
/// (VariantInfo::unit_matrices). The layout gives it no lines (kernel_abi::kUnitMatrices) and the plan
/// its own Update stage (KernelInfo::unit_update).
bool runs_unit_matrices(const VariantInfo& variant, const TensorDims& dims);

/// Values of a state of `shape` for a tensor of `numel` elements: numel, B * R or B * C.
std::int64_t state_numel(StateShape shape, const TensorDims& dims, std::int64_t numel);

/// Whether entry `j` of variant.states exists for a tensor that is (or is not) factored.
bool state_present(const VariantInfo& variant, int j, bool factored);

/// The host image of a plan's kernel_abi::ShapeTable: every array in the plan's tensor order,
/// and the sizes of the buffers the engine allocates for it (floats, counters).
struct ShapeLayout {
  int num_tensors = 0;
  int line_values = kernel_abi::kFewestLineValues;  ///< kernel_abi::ShapeTable::line_values
  std::vector<long long> rows, cols, whole_rows, whole_cols;
  std::vector<unsigned char> factored;
  std::vector<long long> row_offset, col_offset, matrix_offset;
  /// [kind * (num_tensors + 1) + tensor]: each kind's blocks before the tensor's (kChunkRuns: 0).
  std::vector<long long> block_offset;
  std::vector<long long> col_partial_offset;  ///< in units of num_col_reductions floats
  std::vector<long long> col_tile_offset;
  std::vector<long long> row_partial_offset;  ///< in units of num_row_reductions floats
  std::vector<long long> row_band_offset;
  long long num_rows = 0, num_cols = 0, num_matrices = 0;
  int num_row_reductions = 0, num_col_reductions = 0, num_matrix_reductions = 0;
  StoredValueCounts stored_values;             ///< the variant's: slots of the value buffers
  long long col_partial_units = 0;             ///< col_partials' size in units of num_col_reductions floats
  long long col_tiles = 0;                     ///< col_arrivals' size: tiles of tensors of several segments
  long long row_partial_units = 0;             ///< row_partials' size in units of num_row_reductions floats
  long long row_bands = 0;                     ///< row_arrivals' size: bands of rows of several tiles
  int num_row_states = 0, num_col_states = 0;  ///< the snapshots' states (the variant's Rows, Cols states)
  bool snapshot = false;                       ///< whether a stage takes the snapshot (kSnapshot)

  /// The blocks of `kind` over all tensors (block_offset's last entry of the kind).
  long long blocks(int kind) const {
    return block_offset[static_cast<std::size_t>(kind) * static_cast<std::size_t>(num_tensors + 1) +
                        static_cast<std::size_t>(num_tensors)];
  }
};

/// Values a lane takes at most in a plan's lines of `dims` (kernel_abi::line_lanes):
/// kMostLineValues, halved down to kFewestLineValues while the plan's row lines (the most it has)
/// would make fewer blocks of `block_size` threads than two waves of `resident_blocks` (blocks the
/// GPU runs at once): a plan that fills the GPU takes fewer, longer blocks, one that does not
/// spreads each line over more lanes.
int plan_line_values(const std::vector<TensorDims>& dims, int block_size, long long resident_blocks);

/// The layout for `tensors` (the plan's, in order; `dims` of each) of a variant of `info`.
/// kSnapshot blocks go to tensors for which at least one row or column state exists; the other
/// kinds' to every tensor, by kernel_abi.h's formulas for blocks of `block_size` threads (the
/// plan's launch shape) whose lanes take at most `line_values` values of a line.
ShapeLayout shape_layout(const OptimizerInfo& info, const VariantInfo& variant, const std::vector<TensorDims>& dims,
                         int block_size, int line_values);

/// The row, column and matrix results of Reduce stage `stage` that are each rank's part
/// (ReductionResults::row_runs, col_runs, matrix_runs): those of the stage's reductions that sum
/// over rows (ReductionSlot::across_rows) of the tensors that split rows (TensorDims::split_rows),
/// and over columns (across_cols) of those that split columns, as runs of floats in
/// ShapeTable::row_results, col_results and matrix_results, neighbours merged. optgen::Error where
/// such a reduction is a maximum (a column's max of a shard of rows): the hooks add the parts up.
struct PartialRuns {
  std::vector<ResultRun> rows, cols, matrices;
};
PartialRuns partial_runs(const VariantInfo& variant, int stage, const ShapeLayout& layout,
                         const std::vector<TensorDims>& dims);

/// The blocks Reduce stage `stage_mask` (a mask of kernel_abi::BlockKind bits) launches: for
/// kChunkRuns `chunk_run_blocks`, for every other kind the layout's total of that kind, one kind
/// after the other in the order of the enum.
long long stage_grid(unsigned stage_mask, long long chunk_run_blocks, const ShapeLayout& layout);

}  // namespace optgen
