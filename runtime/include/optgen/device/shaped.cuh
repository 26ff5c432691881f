#pragma once
/// optgen's device library: the blocks of a Reduce stage of matrix, row or column code
/// (kernel_abi::ShapeTable; generator/shapes.h): its lines, column segments and snapshot. Its
/// chunk runs are reduce.cuh's, its driver reduce_stage.cuh's.

#include "optgen/device/reduce.cuh"

namespace optgen {

/// Which tensor's blocks of `kind` hold block b of that kind (the last t with block_offset[t] <= b),
/// and which of them it is.
struct KindBlock {
  int tensor;
  long long local;
};
__device__ __forceinline__ KindBlock block_of_kind(const ShapeTable& st, int kind, long long b) {
  const long long* offset = st.block_offset + static_cast<long long>(kind) * (st.num_tensors + 1);
  int lo = 0, hi = st.num_tensors;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (__ldg(offset + mid) <= b)
      lo = mid;
    else
      hi = mid;
  }
  return {lo, b - offset[lo]};
}

/// A stage's row lines and column segments, interleaved: block b of the two kinds together is a
/// tensor's, whose blocks of both kinds are consecutive, the row lines spread among the column
/// segments in proportion to their counts (a row line where b * rows / (rows + columns) steps).
/// Row lines go down a tensor's rows, column segments down its bands of kColumnSegmentRows rows
/// (shaped_columns): a column segment starts on the gradient rows the row lines just beside it
/// read, and the second read hits L2 while they are still there (16% of the reads of gpt2's first
/// Adafactor stage: a segment of 256 rows outlives much of L2; bench/RESULTS.md, 2026-12-01).
/// Returns the block, and in `kind` which of the two it is.
__device__ __forceinline__ KindBlock rows_and_columns_block(const ShapeTable& st, long long b, int& kind) {
  const long long* rows = st.block_offset + static_cast<long long>(kernel_abi::kRowLines) * (st.num_tensors + 1);
  const long long* columns =
      st.block_offset + static_cast<long long>(kernel_abi::kColumnSegments) * (st.num_tensors + 1);
  int lo = 0, hi = st.num_tensors;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (__ldg(rows + mid) + __ldg(columns + mid) <= b)
      lo = mid;
    else
      hi = mid;
  }
  const long long n_rows = rows[lo + 1] - rows[lo], n = n_rows + columns[lo + 1] - columns[lo];
  const long long j = b - rows[lo] - columns[lo];
  // Row lines among the tensor's first j blocks, j * n_rows / n: in 32 bits where that holds it (a
  // small model's many short blocks each pay for this), then whether block j is one of them.
  const unsigned long long product = static_cast<unsigned long long>(j) * n_rows;
  const long long rows_before = product <= 0xffffffffull && n <= 0xffffffffll
                                    ? static_cast<unsigned>(product) / static_cast<unsigned>(n)
                                    : static_cast<long long>(product / n);
  const bool row = (j + 1) * n_rows >= (rows_before + 1) * n;
  kind = row ? kernel_abi::kRowLines : kernel_abi::kColumnSegments;
  return {lo, row ? rows_before : j - rows_before};
}

/// Combines `x` over the `lanes` consecutive threads that share a line (a power of two up to the
/// block size), in a fixed order; the result is valid in the line's first thread. Every thread of
/// the block must call it.
template <typename T>
__device__ T line_combine(bool is_max, T x, int lanes) {
  __shared__ T warps[32];
  const int width = lanes < 32 ? lanes : 32;
  for (int offset = width / 2; offset > 0; offset /= 2)
    x = reduce_combine(is_max, x, __shfl_down_sync(0xffffffffu, x, offset, width));
  if (lanes <= 32) return x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) warps[warp] = x;
  __syncthreads();
  if (threadIdx.x % lanes == 0) {
    for (int w = 1; w < lanes / 32; ++w) x = reduce_combine(is_max, x, warps[warp + w]);
  }
  __syncthreads();
  return x;
}

/// The group of tensor t (a linear search: plans have few groups).
__device__ __forceinline__ int group_of_tensor(const ReductionTable& red, int t) {
  for (int g = 0; g < red.num_groups; ++g) {
    const int first = red.group_first_tensor[g], n = red.group_tensors[g];
    if (n > 0 && t >= first && t < first + n) return g;
  }
  return 0;
}

/// Element i of the operands Code::loads selects (0 from an absent state), the gradient divided by
/// AMP's scale.
template <typename Code, typename Ops, int kOps>
__device__ __forceinline__ void load_element(void* const (&ptr)[kOps], long long i, float (&x)[kOps], bool scaled,
                                             float grad_scale) {
#pragma unroll
  for (int op = 0; op < kOps; ++op) {
    x[op] = 0.0f;
    if (Code::loads(op) && ptr[op]) load_operand<Ops, 1>(op, ptr[op], i, &x[op]);
  }
  if (scaled) x[1] = x[1] / grad_scale;
}

/// What every block of a shaped Reduce stage reads first: its tensor's group values, tensor values
/// and shape.
template <typename Reduce, typename Group, typename Ops>
struct ShapedBlock {
  typename Group::Values k;
  typename Reduce::TensorValues tv;
  Shaped<Ops, false> sh;
  bool scaled;
  float grad_scale;
};

template <typename Reduce, typename Group, typename Ops>
__device__ __forceinline__ ShapedBlock<Reduce, Group, Ops> shaped_block(const TableView& table,
                                                                        const GroupTable& groups,
                                                                        const StepInputs& inputs,
                                                                        const ReductionTable& red, int t) {
  typedef typename Group::Values Values;
  ShapedBlock<Reduce, Group, Ops> s;
  const int g = group_of_tensor(red, t);
  s.k = *group_values<Values>(groups, current_slot(groups, g), g);
  s.sh = shaped<Ops>(table, t);
  s.tv = Reduce::tensor(s.k, table.whole_numel[t], results(red, t, g), s.sh.factored, s.sh.whole_R, s.sh.whole_C,
                        TensorStates<Ops, Reduce::kOperands>{table, t});
  s.scaled = inputs.grad_scale != 0;
  s.grad_scale = s.scaled ? *inputs.grad_scale : 1.0f;
  return s;
}

/// Short lines of a shaped Reduce stage (kernel_abi::short_lines(length) > 1, a line of one lane):
/// each thread reduces short_lines lines, block_size apart (consecutive threads, consecutive lines),
/// element by element: apart from shaped_lines' code for longer ones, which holds a line's
/// vectors in flight and would hold more registers for a loop around it.
template <int kKind, typename Reduce, typename Group, typename Ops>
__device__ __forceinline__ void reduce_short_lines(const ShapedBlock<Reduce, Group, Ops>& s,
                                                   void* const (&ptr)[Reduce::kOperands], long long local,
                                                   long long lines, long long length, float* out, long long stride) {
  typedef typename Reduce::template Lines<kKind> Code;
  constexpr int kOps = Reduce::kOperands;
  constexpr int kR = Code::kReductions;
  const int rounds = kernel_abi::short_lines(length);
  for (int round = 0; round < rounds; ++round) {
    const long long line = (local * rounds + round) * OPTGEN_BLOCK_SIZE + threadIdx.x;
    if (line >= lines) return;  // the later rounds' lines are further on
    float acc[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) acc[r] = reduce_identity<float>(Code::is_max(r));
    ElementIndex x;  // row lines: the line's first element
    if constexpr (kKind == kernel_abi::kRowLines) {
      x.p = line;
      x.b = line / s.sh.R;
      x.r = line - x.b * s.sh.R;
      x.c = 0;
      x.q = x.b * s.sh.C;
      x.i = line * s.sh.C;
    }
#pragma unroll 1
    for (int j = 0; j < static_cast<int>(length); ++j) {  // at most 16
      float value[kR];
      if constexpr (kKind == kernel_abi::kRowLines) {
        float operands[kOps];
        load_element<Code, Ops, kOps>(ptr, x.i, operands, s.scaled, s.grad_scale);
        Code::apply(s.k, s.tv, s.sh, x, operands, value);
        ++x.c;
        ++x.q;
        ++x.i;
      } else {
        Code::apply(s.k, s.tv, s.sh, line * length + j, line, value);
      }
#pragma unroll
      for (int r = 0; r < kR; ++r) acc[r] = reduce_combine(Code::is_max(r), acc[r], value[r]);
    }
#pragma unroll
    for (int r = 0; r < kR; ++r) out[Code::slot(r) * stride + line] = acc[r];
    if constexpr (Code::kStoredValues > 0) Code::finish(s.k, s.tv, s.sh, line);
  }
}

/// The line kinds of a shaped Reduce stage (kRowLines, kMatrixRowLines, kMatrixColumnLines):
/// `lanes` consecutive threads reduce each line (a row's C elements, a matrix's R row values or C
/// column values), kernel_abi::lines_per_block lines per block, into one result per line; lines of
/// one lane go to reduce_short_lines.
template <int kKind, typename Reduce, typename Group, typename Ops>
__device__ __forceinline__ void shaped_lines(const TableView& table, const GroupTable& groups, const StepInputs& inputs,
                                             const ReductionTable& red, KindBlock at) {
  typedef typename Reduce::template Lines<kKind> Code;
  constexpr int kOps = Reduce::kOperands;
  constexpr int kR = Code::kReductions;
  const ShapeTable& st = *table.shapes;
  const int t = at.tensor;
  const long long local = at.local;
  const ShapedBlock<Reduce, Group, Ops> s = shaped_block<Reduce, Group, Ops>(table, groups, inputs, red, t);
  const long long lines = kKind == kernel_abi::kRowLines ? s.sh.B * s.sh.R : s.sh.B;
  const long long length = kKind == kernel_abi::kMatrixRowLines ? s.sh.R : s.sh.C;
  const int lanes = kernel_abi::line_lanes(length, OPTGEN_BLOCK_SIZE, st.line_values);
  const long long line = local * (OPTGEN_BLOCK_SIZE / lanes) + threadIdx.x / lanes;
  const int lane = threadIdx.x % lanes;
  void* ptr[kOps];
#pragma unroll
  for (int op = 0; op < kOps; ++op) ptr[op] = Code::loads(op) ? operand_pointer<Ops, kOps>(table, op, t) : nullptr;
  float* out = kKind == kernel_abi::kRowLines ? st.row_results + s.sh.row0 : st.matrix_results + s.sh.matrix0;
  const long long stride = kKind == kernel_abi::kRowLines ? st.num_rows : st.num_matrices;
  if (kernel_abi::short_lines(length) > 1)  // the block's threads all take this branch: no barrier in it
    return reduce_short_lines<kKind>(s, ptr, local, lines, length, out, stride);
  float acc[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) acc[r] = reduce_identity<float>(Code::is_max(r));
  if (line < lines) {
    if constexpr (kKind == kernel_abi::kRowLines) {
      // Elements of row `line`: V consecutive ones per access (16 bytes of the parameter), kBatch
      // accesses in flight per thread, where the row's operands allow vectors (every row starts
      // at a multiple of V, the operands at 16 bytes); else one element per access.
      constexpr int V = reduce_vector<Ops>();
      constexpr int kBatch = 4;
      ElementIndex x;
      x.p = line;
      x.b = line / s.sh.R;
      x.r = line - x.b * s.sh.R;
      const long long first = line * s.sh.C;
      bool vectors = length % V == 0;
#pragma unroll
      for (int op = 0; op < kOps; ++op) vectors = vectors && reinterpret_cast<uintptr>(ptr[op]) % 16 == 0;
      auto visit = [&](long long j, float(&operands)[kOps]) {
        if (s.scaled) operands[1] = operands[1] / s.grad_scale;
        x.c = j;
        x.q = x.b * s.sh.C + j;
        x.i = first + j;
        float value[kR];
        Code::apply(s.k, s.tv, s.sh, x, operands, value);
#pragma unroll
        for (int r = 0; r < kR; ++r) acc[r] = reduce_combine(Code::is_max(r), acc[r], value[r]);
      };
      if (vectors) {
        for (long long j0 = static_cast<long long>(lane) * V; j0 < length; j0 += kBatch * lanes * V) {
          float v[kBatch][kOps][V];
#pragma unroll
          for (int u = 0; u < kBatch; ++u) {
            const long long j = j0 + static_cast<long long>(u) * lanes * V;
#pragma unroll
            for (int op = 0; op < kOps; ++op) {
              if (j < length && Code::loads(op) && ptr[op]) {
                load_operand<Ops, V>(op, ptr[op], first + j, v[u][op]);
              } else {
#pragma unroll
                for (int e = 0; e < V; ++e) v[u][op][e] = 0.0f;
              }
            }
          }
#pragma unroll
          for (int u = 0; u < kBatch; ++u) {
            const long long j = j0 + static_cast<long long>(u) * lanes * V;
            if (j >= length) continue;
#pragma unroll
            for (int e = 0; e < V; ++e) {
              float operands[kOps];
#pragma unroll
              for (int op = 0; op < kOps; ++op) operands[op] = v[u][op][e];
              visit(j + e, operands);
            }
          }
        }
      } else {
        for (long long j0 = lane; j0 < length; j0 += kBatch * lanes) {
          float v[kBatch][kOps];
#pragma unroll
          for (int u = 0; u < kBatch; ++u)
            if (j0 + u * lanes < length) load_element<Code, Ops, kOps>(ptr, first + j0 + u * lanes, v[u], false, 1.0f);
#pragma unroll
          for (int u = 0; u < kBatch; ++u)
            if (j0 + u * lanes < length) visit(j0 + u * lanes, v[u]);
        }
      }
    } else {
      // Row (column) j of matrix `line`, kBatch at a time with their loads in flight together: a
      // lane of a long matrix line (gpt2's embedding: 50,257 rows, 393 a lane) is otherwise a chain
      // of round trips to memory.
      const long long b = line;
      const long long first = b * (kKind == kernel_abi::kMatrixRowLines ? s.sh.R : s.sh.C);
      constexpr int kBatch = 16;
      long long j = lane;
      for (; j + (kBatch - 1) * lanes < length; j += kBatch * lanes) {
        float value[kBatch][kR];
#pragma unroll
        for (int u = 0; u < kBatch; ++u) Code::apply(s.k, s.tv, s.sh, first + j + u * lanes, b, value[u]);
#pragma unroll
        for (int u = 0; u < kBatch; ++u)
#pragma unroll
          for (int r = 0; r < kR; ++r) acc[r] = reduce_combine(Code::is_max(r), acc[r], value[u][r]);
      }
      for (; j < length; j += lanes) {
        float value[kR];
        Code::apply(s.k, s.tv, s.sh, first + j, b, value);
#pragma unroll
        for (int r = 0; r < kR; ++r) acc[r] = reduce_combine(Code::is_max(r), acc[r], value[r]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const float total = line_combine(Code::is_max(r), acc[r], lanes);
    if (lane == 0 && line < lines) out[Code::slot(r) * stride + line] = total;
  }
  // The values these results finish (the line's first thread stored them: it reads its own writes).
  if constexpr (Code::kStoredValues > 0)
    if (lane == 0 && line < lines) Code::finish(s.k, s.tv, s.sh, line);
}

/// The column segments of a shaped Reduce stage: a thread per column (of any matrix of the
/// tensor) sums down up to kColumnSegmentRows rows; a tensor of more rows has several segments per
/// column, whose partials the last segment of a tile of columns to arrive combines in order.
template <typename Reduce, typename Group, typename Ops>
__device__ __forceinline__ void shaped_columns(const TableView& table, const GroupTable& groups,
                                               const StepInputs& inputs, const ReductionTable& red, KindBlock at) {
  typedef typename Reduce::Cols Code;
  constexpr int kOps = Reduce::kOperands;
  constexpr int kR = Code::kReductions;
  const ShapeTable& st = *table.shapes;
  const int t = at.tensor;
  const long long local = at.local;
  const ShapedBlock<Reduce, Group, Ops> s = shaped_block<Reduce, Group, Ops>(table, groups, inputs, red, t);
  const long long R = s.sh.R, C = s.sh.C, columns = s.sh.B * C;
  const long long segments = kernel_abi::column_segments(R);
  // Segment by segment, each across the tiles of block_size columns (rows_and_columns_block's
  // order; short_lines(R) is 1 where there are several).
  long long segment = 0, tile = local;
  if (segments > 1) {
    const long long tiles = (columns + OPTGEN_BLOCK_SIZE - 1) / OPTGEN_BLOCK_SIZE;
    segment = local / tiles;
    tile = local - segment * tiles;
  }
  void* ptr[kOps];
#pragma unroll
  for (int op = 0; op < kOps; ++op) ptr[op] = Code::loads(op) ? operand_pointer<Ops, kOps>(table, op, t) : nullptr;
  // Column q's reductions over the segment's rows, into acc.
  auto sum_column = [&](long long q, float(&acc)[kR]) {
#pragma unroll
    for (int r = 0; r < kR; ++r) acc[r] = reduce_identity<float>(Code::is_max(r));
    if (q >= columns) return;
    ElementIndex x;
    x.b = q / C;
    x.c = q - x.b * C;
    x.q = q;
    const long long first = segment * kernel_abi::kColumnSegmentRows;
    const long long last = first + kernel_abi::kColumnSegmentRows < R ? first + kernel_abi::kColumnSegmentRows : R;
    constexpr int kUnroll = 8;  // rows in flight per thread
    for (long long r0 = first; r0 < last; r0 += kUnroll) {
      float v[kUnroll][kOps];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (r0 + u < last)
          load_element<Code, Ops, kOps>(ptr, (x.b * R + r0 + u) * C + x.c, v[u], s.scaled, s.grad_scale);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (r0 + u >= last) continue;
        x.r = r0 + u;
        x.p = x.b * R + x.r;
        x.i = x.p * C + x.c;
        float value[kR];
        Code::apply(s.k, s.tv, s.sh, x, v[u], value);
#pragma unroll
        for (int r = 0; r < kR; ++r) acc[r] = reduce_combine(Code::is_max(r), acc[r], value[r]);
      }
    }
  };
  float* out = st.col_results + s.sh.col0;
  float acc[kR];
  if (segments == 1) {
    // A tile of short_lines(R) rounds of block_size columns (kernel_abi::column_blocks).
    const int rounds = kernel_abi::short_lines(R);
#pragma unroll 1
    for (int round = 0; round < rounds; ++round) {
      const long long q = (tile * rounds + round) * OPTGEN_BLOCK_SIZE + threadIdx.x;
      sum_column(q, acc);
      if (q >= columns) continue;
#pragma unroll
      for (int r = 0; r < kR; ++r) out[Code::slot(r) * st.num_cols + q] = acc[r];
      if constexpr (Code::kStoredValues > 0) Code::finish(s.k, s.tv, s.sh, q);
    }
    return;
  }
  // Several segments: short_lines(R) is 1 (R > kColumnSegmentRows), a tile is block_size columns.
  const long long q = tile * OPTGEN_BLOCK_SIZE + threadIdx.x;
  sum_column(q, acc);
  const long long n = st.num_col_reductions;
  float* partials = st.col_partials + st.col_partial_offset[t] * n;
#pragma unroll
  for (int r = 0; r < kR; ++r)
    if (q < columns) partials[(segment * columns + q) * n + Code::slot(r)] = acc[r];
  // Every thread's partials, not only thread 0's, must be visible to the last block.
  __threadfence();
  if (!last_to_arrive(&st.col_arrivals[st.col_tile_offset[t] + tile], static_cast<unsigned>(segments))) return;
  if (q >= columns) return;
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    float x = reduce_identity<float>(Code::is_max(r));
    for (long long j = 0; j < segments; ++j)
      x = reduce_combine(Code::is_max(r), x, __ldcg(partials + (j * columns + q) * n + Code::slot(r)));
    out[Code::slot(r) * st.num_cols + q] = x;
  }
  if constexpr (Code::kStoredValues > 0) Code::finish(s.k, s.tv, s.sh, q);
}

/// kSnapshot: copies the tensor's row and column states (as floats) for the Update stage.
template <typename Reduce, typename Ops>
__device__ __forceinline__ void shaped_snapshot(const TableView& table, long long block) {
  typedef typename Reduce::Snapshot Code;
  const ShapeTable& st = *table.shapes;
  const KindBlock at = block_of_kind(st, kernel_abi::kSnapshot, block);
  const int t = at.tensor;
  const long long local = at.local;
  const Shaped<Ops, false> sh = shaped<Ops>(table, t);
  const long long B = sh.B;
  const long long e = local * OPTGEN_BLOCK_SIZE + threadIdx.x;
#pragma unroll
  for (int j = 0; j < Code::kRowStates; ++j)
    if (e < B * sh.R && sh.pointer(Code::row_op(j)))
      st.row_snapshot[j * st.num_rows + sh.row0 + e] = sh.row_state(Code::row_op(j), j, e);
#pragma unroll
  for (int j = 0; j < Code::kColStates; ++j)
    if (e < B * sh.C && sh.pointer(Code::col_op(j)))
      st.col_snapshot[j * st.num_cols + sh.col0 + e] = sh.col_state(Code::col_op(j), j, e);
}

}  // namespace optgen
