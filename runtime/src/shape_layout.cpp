#include "shape_layout.h"

#include <string>

#include "optgen/error.h"

namespace optgen {

TensorDims tensor_dims(const std::vector<std::int64_t>& shape, std::int64_t numel, std::int64_t whole_numel,
                       int shard_dim, std::int64_t column_splits) {
  TensorDims d;
  if (shape.size() < 2) {
    d.cols = d.whole_cols = numel;
    return d;
  }
  d.factored = true;
  d.cols = shape[shape.size() - 1];
  d.rows = shape[shape.size() - 2];
  // A shard of a matrix is one matrix, of no rows (columns) too: its columns (rows) are the matrix's.
  const bool shard = shape.size() == 2 && whole_numel > 0;
  d.split_rows = shard && shard_dim == 0 && d.cols > 0;
  d.split_cols = shard && shard_dim == 1 && d.rows > 0;
  d.batch = d.split_rows || d.split_cols ? 1 : d.rows * d.cols == 0 ? 0 : numel / (d.rows * d.cols);
  d.whole_rows = d.split_rows ? whole_numel / d.cols : d.rows;
  d.whole_cols = d.split_cols ? whole_numel / d.rows : d.cols;
  if (column_splits > 1) {
    d.column_splits = column_splits;
    d.whole_cols = d.cols / column_splits;
  }
  return d;
}

TensorDims block_dims(std::int64_t numel, long long block_elements) {
  const auto rows = static_cast<std::int64_t>(
      reference::block_rows(static_cast<std::size_t>(numel), static_cast<std::size_t>(block_elements)));
  return rows ? tensor_dims({rows, block_elements}, numel) : tensor_dims({}, numel);
}

bool runs_unit_matrices(const VariantInfo& variant, const TensorDims& d) {
  return variant.unit_matrices && d.factored && kernel_abi::unit_matrices(d.rows, d.cols, d.whole_rows, d.whole_cols);
}

bool long_rows(const std::vector<TensorDims>& dims) {
  std::int64_t elements = 0, in_short_rows = 0;
  for (const TensorDims& d : dims) {
    const std::int64_t numel = d.total_rows() * d.cols;
    elements += numel;
    if (d.cols < kLongRowColumns) in_short_rows += numel;
  }
  return in_short_rows * 8 <= elements;
}

std::int64_t state_numel(StateShape shape, const TensorDims& dims, std::int64_t numel) {
  switch (shape) {
    case StateShape::Elements: return numel;
    case StateShape::Rows: return dims.total_rows();
    case StateShape::Cols: return dims.total_cols();
    case StateShape::Tensor: return 1;
  }
  return numel;
}

bool state_present(const VariantInfo& variant, int j, bool factored) {
  if (!variant.state_presence) return true;
  switch (variant.state_presence[j]) {
    case StatePresence::Always: return true;
    case StatePresence::Factored: return factored;
    case StatePresence::NotFactored: return !factored;
  }
  return true;
}

int plan_line_values(const std::vector<TensorDims>& dims, int block_size, long long resident_blocks) {
  using namespace kernel_abi;
  auto row_blocks = [&](int line_values) {
    long long blocks = 0;
    for (const TensorDims& d : dims) blocks += line_blocks(d.total_rows(), d.cols, block_size, line_values);
    return blocks;
  };
  int line_values = kMostLineValues;
  while (line_values > kFewestLineValues && row_blocks(line_values) < 2 * resident_blocks) line_values /= 2;
  return line_values;
}

ShapeLayout shape_layout(const OptimizerInfo& info, const VariantInfo& variant, const std::vector<TensorDims>& dims,
                         int block_size, int line_values) {
  using namespace kernel_abi;
  ShapeLayout l;
  const std::size_t T = dims.size();
  l.num_tensors = static_cast<int>(T);
  l.line_values = line_values;
  for (int r = 0; r < variant.num_reductions; ++r) {
    const Domain scope = variant.reductions[r].scope;
    l.num_row_reductions += scope == Domain::Row ? 1 : 0;
    l.num_col_reductions += scope == Domain::Column ? 1 : 0;
    l.num_matrix_reductions += scope == Domain::Matrix ? 1 : 0;
  }
  l.stored_values = variant.stored_values;
  for (int s = 0; s < variant.num_stages && variant.stage_blocks; ++s)
    l.snapshot = l.snapshot || (variant.stage_blocks[s] >> kSnapshot & 1u) != 0;
  std::vector<int> shaped_states;  // entries j of variant.states of shape Rows or Cols
  for (int j = 0; j < variant.num_states; ++j) {
    const StateShape shape = info.states[variant.states[j]].shape;
    l.num_row_states += shape == StateShape::Rows ? 1 : 0;
    l.num_col_states += shape == StateShape::Cols ? 1 : 0;
    if (shape == StateShape::Rows || shape == StateShape::Cols) shaped_states.push_back(j);
  }

  // Whether a tensor's column segments may take its rows (rows_in_column_segments): where a stage
  // has row lines and column segments, and every stage of row lines, of the step and of the step
  // on shards, has column segments too.
  bool rows_with_columns = false, rows_alone = false;
  for (const unsigned* masks : {variant.stage_blocks, variant.shard_stage_blocks})
    for (int s = 0; s < variant.num_stages && masks; ++s) {
      const bool rows = (masks[s] >> kRowLines & 1u) != 0, columns = (masks[s] >> kColumnSegments & 1u) != 0;
      rows_with_columns = rows_with_columns || (rows && columns);
      rows_alone = rows_alone || (rows && !columns);
    }
  rows_with_columns = rows_with_columns && !rows_alone;

  l.block_offset.assign(static_cast<std::size_t>(kNumBlockKinds) * (T + 1), 0);
  auto offsets_of = [&](int kind) { return l.block_offset.begin() + static_cast<std::ptrdiff_t>(kind * (T + 1)); };
  for (std::size_t t = 0; t < T; ++t) {
    const TensorDims& d = dims[t];
    // A tensor whose matrices are one element, where the kernels run it as element code, has no
    // rows, columns or matrices of its own here, and no blocks but chunk runs.
    const bool unit = runs_unit_matrices(variant, d);
    const long long R = d.rows, C = d.cols, rows = unit ? 0 : d.total_rows(), cols = unit ? 0 : d.total_cols();
    l.rows.push_back(R);
    l.cols.push_back(C);
    l.whole_rows.push_back(d.whole_rows);
    l.whole_cols.push_back(d.whole_cols);
    l.factored.push_back(unit ? kUnitMatrices : d.factored ? 1 : 0);
    l.row_offset.push_back(l.num_rows);
    l.col_offset.push_back(l.num_cols);
    l.matrix_offset.push_back(l.num_matrices);
    l.num_rows += rows;
    l.num_cols += cols;
    l.num_matrices += unit ? 0 : d.batch;

    bool has_shaped_state = false;
    for (int j : shaped_states) has_shaped_state = has_shaped_state || state_present(variant, j, d.factored);
    long long blocks[kNumBlockKinds] = {};
    // A shard's rows (columns) are finished across ranks: they keep their lines.
    const bool rows_in_columns =
        rows_with_columns && !d.split_rows && !d.split_cols && rows_in_column_segments(R, C, block_size) && rows > 0;
    const long long matrices = unit ? 0 : d.batch;
    // A tensor that is not factored has no rows, columns or matrices to reduce: the language keeps
    // every reduction into them, and every value of them, under the `factored` guard. Its lines
    // stay where one pass of a block takes its one row (without them gpt2's Adafactor step took
    // 936.5 us against 926.5, bench/RESULTS.md, 2026-12-04), and go where the row is longer, which
    // one block would walk alone (a vector of 38.6M elements took 15 ms a step). A matrix function
    // takes such a tensor as one row: a variant with matrix values keeps its lines.
    const bool lines =
        d.factored || variant.num_matrix_values > 0 || C <= static_cast<long long>(block_size) * line_values;
    blocks[kRowLines] = rows_in_columns || !lines ? 0 : line_blocks(rows, C, block_size, line_values);
    blocks[kColumnSegments] = lines ? column_blocks(cols, R, block_size) : 0;
    blocks[kMatrixRowLines] = lines ? line_blocks(matrices, R, block_size, line_values) : 0;
    blocks[kMatrixColumnLines] = lines ? line_blocks(matrices, C, block_size, line_values) : 0;
    blocks[kSnapshot] = has_shaped_state && !unit ? snapshot_blocks(rows, cols, block_size) : 0;
    for (int kind = 1; kind < kNumBlockKinds; ++kind)
      offsets_of(kind)[static_cast<std::ptrdiff_t>(t + 1)] =
          offsets_of(kind)[static_cast<std::ptrdiff_t>(t)] + blocks[kind];

    // Column partials and arrivals: only for tensors whose columns take several segments.
    l.col_partial_offset.push_back(l.col_partial_units);
    l.col_tile_offset.push_back(l.col_tiles);
    const long long segments = column_segments(R);
    if (segments > 1) {
      l.col_partial_units += segments * cols;
      l.col_tiles += (cols + block_size - 1) / block_size;
    }
    // Row partials and arrivals: only for rows that column segments take, of several tiles.
    l.row_partial_offset.push_back(l.row_partial_units);
    l.row_band_offset.push_back(l.row_bands);
    if (rows_in_columns && C > block_size) {
      l.row_partial_units += C / block_size * rows;
      l.row_bands += d.batch * segments;
    }
  }
  return l;
}

long long stage_grid(unsigned stage_mask, long long chunk_run_blocks, const ShapeLayout& layout) {
  long long blocks = 0;
  for (int kind = 0; kind < kernel_abi::kNumBlockKinds; ++kind) {
    if (!(stage_mask & (1u << kind))) continue;
    blocks += kind == kernel_abi::kChunkRuns ? chunk_run_blocks : layout.blocks(kind);
  }
  return blocks;
}

PartialRuns partial_runs(const VariantInfo& variant, int stage, const ShapeLayout& layout,
                         const std::vector<TensorDims>& dims) {
  PartialRuns runs;
  auto add = [](std::vector<ResultRun>& list, long long first, long long count) {
    if (count == 0) return;
    if (!list.empty() && list.back().first + list.back().count == first)
      list.back().count += count;
    else
      list.push_back({first, count});
  };
  for (int r = 0; r < variant.num_reductions; ++r) {
    const ReductionSlot& slot = variant.reductions[r];
    if (slot.stage != stage || !(slot.across_rows || slot.across_cols)) continue;
    const Domain scope = slot.scope;
    const long long size = scope == Domain::Row      ? layout.num_rows
                           : scope == Domain::Column ? layout.num_cols
                                                     : layout.num_matrices;
    const std::vector<long long>& offset = scope == Domain::Row      ? layout.row_offset
                                           : scope == Domain::Column ? layout.col_offset
                                                                     : layout.matrix_offset;
    std::vector<ResultRun>& list = scope == Domain::Row      ? runs.rows
                                   : scope == Domain::Column ? runs.cols
                                                             : runs.matrices;
    for (std::size_t t = 0; t < dims.size(); ++t)
      if ((slot.across_rows && dims[t].split_rows) || (slot.across_cols && dims[t].split_cols)) {
        // The hooks add the ranks' parts up (ReductionResults): a maximum's parts they would add too.
        if (slot.is_max)
          throw Error("FusedOptimizer::prepare",
                      std::string("reduction '") + slot.name + "' is a maximum across the " +
                          (dims[t].split_rows ? "rows" : "columns") + " of each matrix, and tensor " +
                          std::to_string(t) +
                          " of the plan is a shard holding some of them: only sums of the ranks' "
                          "parts are combined across ranks",
                      "bind that tensor whole on every rank (whole_numel 0)");
        add(list, slot.scope_index * size + offset[t],
            scope == Domain::Row      ? dims[t].rows
            : scope == Domain::Column ? dims[t].cols
                                      : 1);
      }
  }
  return runs;
}

}  // namespace optgen
