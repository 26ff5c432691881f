#pragma once
/// optgen's device library: the Reduce stage, one driver for every variant: a grid of the kinds of
/// block its reductions need, chunk runs (reduce.cuh) and the lines, column segments and snapshot
/// of rows and columns (shaped.cuh).

#include "optgen/device/shaped.cuh"

namespace optgen {

/// Whether a Reduce stage's kBlocks has blocks of `kind`.
__device__ __forceinline__ constexpr bool has_blocks(unsigned blocks, kernel_abi::BlockKind kind) {
  return ((blocks >> kind) & 1u) != 0;
}

/// A Reduce stage: block b is a block of the first kind in Reduce::kBlocks (kernel_abi::BlockKind)
/// while b is below that kind's count, and so on; chunk runs count table.num_chunks /
/// chunks_per_block blocks, the other kinds ShapeTable::block_offset's. Row lines and column
/// segments, where a stage has both, are one range, interleaved (rows_and_columns_block). An
/// element-wise variant's stages have chunk runs only. Nothing but the stage's results (and a row
/// or column line's stored values, and the operands of its matrix values and states it stores) is
/// written, and the step is not advanced: that is the Update stage's.
///
/// It waits for the kernel before it and only then lets the next one start. The Update stage after
/// it loads params, grads and states before its own wait, and a wait covers only the kernel just
/// before (programmatic dependent launch is not transitive): let start first, that Update stage
/// could run under the tail of the kernel before this one, the last step's Update stage, which
/// writes them.
///
/// AMP: an overflow skips the Update stage; this one still runs (a clipping variant reports the
/// norm of an overflowed step, inf or NaN, as torch's clip_grad_norm_ would), and writes only its
/// results: the values it stores element by element (Code::kElementStores) it leaves alone.
template <typename Reduce, typename Group, typename Ops>
__device__ __forceinline__ void reduce_stage(const TableView& table, const GroupTable& groups, const StepInputs& inputs,
                                             const ReductionTable& red) {
  using namespace kernel_abi;
  constexpr unsigned kBlocks = Reduce::kBlocks;
  wait_for_previous_kernel();  // earlier stages' results; and the last step's states
  allow_next_kernel();
  long long b = blockIdx.x;
  auto total = [&](BlockKind kind) {
    const ShapeTable& st = *table.shapes;
    return st.block_offset[static_cast<long long>(kind) * (st.num_tensors + 1) + st.num_tensors];
  };
  if constexpr (kBlocks == 1u << kChunkRuns) {  // the only kind
    return chunk_runs<typename Reduce::Elements, Reduce, Group, Ops, Reduce::kShaped>(table, groups, inputs, red, b);
  } else if constexpr (has_blocks(kBlocks, kChunkRuns)) {
    const long long n = (table.num_chunks + red.chunks_per_block - 1) / red.chunks_per_block;
    if (b < n)
      return chunk_runs<typename Reduce::Elements, Reduce, Group, Ops, Reduce::kShaped>(table, groups, inputs, red, b);
    b -= n;
  }
  const ShapeTable* st = table.shapes;
  if constexpr (has_blocks(kBlocks, kRowLines) && has_blocks(kBlocks, kColumnSegments)) {
    const long long n = total(kRowLines) + total(kColumnSegments);
    if (b < n) {
      int kind;
      const KindBlock at = rows_and_columns_block(*st, b, kind);
      if (kind == kRowLines) return shaped_lines<kRowLines, Reduce, Group, Ops>(table, groups, inputs, red, at);
      return shaped_columns<true, Reduce, Group, Ops>(table, groups, inputs, red, at);
    }
    b -= n;
  } else if constexpr (has_blocks(kBlocks, kRowLines)) {
    if (b < total(kRowLines))
      return shaped_lines<kRowLines, Reduce, Group, Ops>(table, groups, inputs, red, block_of_kind(*st, kRowLines, b));
    b -= total(kRowLines);
  } else if constexpr (has_blocks(kBlocks, kColumnSegments)) {
    if (b < total(kColumnSegments))
      return shaped_columns<false, Reduce, Group, Ops>(table, groups, inputs, red,
                                                       block_of_kind(*st, kColumnSegments, b));
    b -= total(kColumnSegments);
  }
  if constexpr (has_blocks(kBlocks, kMatrixRowLines)) {
    if (b < total(kMatrixRowLines))
      return shaped_lines<kMatrixRowLines, Reduce, Group, Ops>(table, groups, inputs, red,
                                                               block_of_kind(*st, kMatrixRowLines, b));
    b -= total(kMatrixRowLines);
  }
  if constexpr (has_blocks(kBlocks, kMatrixColumnLines)) {
    if (b < total(kMatrixColumnLines))
      return shaped_lines<kMatrixColumnLines, Reduce, Group, Ops>(table, groups, inputs, red,
                                                                  block_of_kind(*st, kMatrixColumnLines, b));
    b -= total(kMatrixColumnLines);
  }
  if constexpr (has_blocks(kBlocks, kSnapshot)) {
    if (b < total(kSnapshot)) return shaped_snapshot<Reduce, Ops>(table, b);
  }
}

}  // namespace optgen
