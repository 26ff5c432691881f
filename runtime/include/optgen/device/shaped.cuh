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
/// Adafactor stage: a segment of 256 rows outlives much of L2; bench/RESULTS.md, 2026-12-01). Most
/// tensors of such a stage have no row lines (rows_in_column_segments: their column segments
/// reduce their rows), and their gradient is read once. Returns the block, and in `kind` which of
/// the two it is.
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

/// A line's finish (Code::finish) as a thread that finishes several lines at once runs it: the
/// line's own results (Code's reductions, of rows where kLevel is kernel_abi::kRowLines, columns
/// where kColumnSegments, matrices where kMatrixRowLines, for either kind of matrix line) read
/// from the registers that hold them, not from where they are stored, and the values it stores
/// held until store(). The loads of every line's finish (its states) are then issued before any
/// store: the compiler moves no load past a store it cannot tell apart from it, and a thread's
/// finishes, one after another, each waited a round trip to memory (a 1x1 convolution's rows and
/// columns are 32 lines a thread).
template <typename Code, int kLevel, typename Sh>
struct HeldLine {
  static constexpr int kHeld = 4;  ///< stored-value slots held (a later one is stored at once)
  const Sh* line_of;  ///< the tensor the line is of
  const float* acc;   ///< the line's results, Code::kReductions
  long long R, C;     ///< the generated finish reads sh_.R and sh_.C
  // Code::finish takes its lines as const (what Shaped's stores write is not Shaped's).
  mutable float held[kHeld];
  mutable unsigned mask;

  __device__ __forceinline__ void bind(const Sh& s, const float (&a)[Code::kReductions]) {
    line_of = &s;
    acc = a;
    R = s.R;
    C = s.C;
    mask = 0u;
  }
  /// The line's result in slot s (its kind's), where Code reduces it.
  __device__ __forceinline__ bool own(int level, int s, float& x) const {
    if (level != kLevel) return false;
#pragma unroll
    for (int r = 0; r < Code::kReductions; ++r)
      if (Code::slot(r) == s) {
        x = acc[r];
        return true;
      }
    return false;
  }
  __device__ __forceinline__ float row_result(int s, long long p) const {
    float x;
    return own(kernel_abi::kRowLines, s, x) ? x : line_of->row_result(s, p);
  }
  __device__ __forceinline__ float col_result(int s, long long q) const {
    float x;
    return own(kernel_abi::kColumnSegments, s, x) ? x : line_of->col_result(s, q);
  }
  __device__ __forceinline__ float matrix_result(int s, long long b) const {
    float x;
    return own(kernel_abi::kMatrixRowLines, s, x) ? x : line_of->matrix_result(s, b);
  }
  __device__ __forceinline__ float row_value(int j, long long p) const { return line_of->row_value(j, p); }
  __device__ __forceinline__ float col_value(int j, long long q) const { return line_of->col_value(j, q); }
  __device__ __forceinline__ float matrix_value(int j, long long b) const { return line_of->matrix_value(j, b); }
  __device__ __forceinline__ float row_state(int op, int j, long long p) const { return line_of->row_state(op, j, p); }
  __device__ __forceinline__ float col_state(int op, int j, long long q) const { return line_of->col_state(op, j, q); }
  /// The line's stored values: held (kLevel's, the line's own: Code::finish stores no other).
  __device__ __forceinline__ void hold(int j, float x) const {
    held[j < kHeld ? j : 0] = x;
    mask |= 1u << j;
  }
  __device__ __forceinline__ void store_row_value(int j, long long p, float x) const {
    if (j < kHeld) return hold(j, x);
    line_of->store_row_value(j, p, x);
  }
  __device__ __forceinline__ void store_col_value(int j, long long q, float x) const {
    if (j < kHeld) return hold(j, x);
    line_of->store_col_value(j, q, x);
  }
  __device__ __forceinline__ void store_matrix_value(int j, long long b, float x) const {
    if (j < kHeld) return hold(j, x);
    line_of->store_matrix_value(j, b, x);
  }
  /// Stores the held values of line `line`.
  __device__ __forceinline__ void store(long long line) const {
#pragma unroll
    for (int j = 0; j < kHeld; ++j) {
      if (!((mask >> j) & 1u)) continue;
      if (kLevel == kernel_abi::kRowLines) line_of->store_row_value(j, line, held[j]);
      if (kLevel == kernel_abi::kColumnSegments) line_of->store_col_value(j, line, held[j]);
      if (kLevel == kernel_abi::kMatrixRowLines) line_of->store_matrix_value(j, line, held[j]);
    }
  }
};

/// Lines a thread of short lines takes at a time, their loads and their finishes' loads in flight
/// together. Two: four shortened Adafactor's steps of small models more, but took Adam-mini's
/// Reduce kernel, whose long rows share it, from 62 to 72 registers (sm_90) and its gpt2 step 1.4%
/// longer (bench/RESULTS.md, 2026-12-02, "short lines two at a time").
enum { kShortLineBatch = 2 };

/// Line u of a thread's batch of short lines from round `round0` of the `rounds` its tile `tile`
/// takes: its index, whether it is among the `lines` there are, and its results at the identity.
template <typename Code>
__device__ __forceinline__ void start_short_line(long long tile, int rounds, int round0, int u, long long lines,
                                                 long long& line, bool& valid, float (&acc)[Code::kReductions]) {
  line = (tile * rounds + round0 + u) * OPTGEN_BLOCK_SIZE + threadIdx.x;
  valid = round0 + u < rounds && line < lines;
#pragma unroll
  for (int r = 0; r < Code::kReductions; ++r) acc[r] = reduce_identity<float>(Code::is_max(r));
}

/// The results of a thread's batch of short lines (line[u], where valid[u]) into `out` (slot s of
/// line l at out[s * stride + l]), and the values their finishes store (HeldLine).
template <typename Code, int kLevel, typename Block>
__device__ __forceinline__ void finish_short_lines(const Block& s, const long long (&line)[kShortLineBatch],
                                                   const bool (&valid)[kShortLineBatch],
                                                   const float (&acc)[kShortLineBatch][Code::kReductions], float* out,
                                                   long long stride) {
  typedef HeldLine<Code, kLevel, decltype(s.sh)> Held;
  if constexpr (Code::kStoredValues > 0) {
    Held held[kShortLineBatch];
#pragma unroll
    for (int u = 0; u < kShortLineBatch; ++u) held[u].bind(s.sh, acc[u]);
#pragma unroll
    for (int u = 0; u < kShortLineBatch; ++u)
      if (valid[u]) Code::finish(s.k, s.tv, held[u], line[u]);
#pragma unroll
    for (int u = 0; u < kShortLineBatch; ++u)
      if (valid[u]) held[u].store(line[u]);
  }
#pragma unroll
  for (int u = 0; u < kShortLineBatch; ++u)
#pragma unroll
    for (int r = 0; r < Code::kReductions; ++r)
      if (valid[u]) out[Code::slot(r) * stride + line[u]] = acc[u][r];
}

/// Short lines of a shaped Reduce stage (kernel_abi::short_lines(length) > 1, a line of one lane):
/// each thread reduces short_lines lines, block_size apart (consecutive threads, consecutive lines),
/// kShortLineBatch at a time, element by element: apart from shaped_lines' code for longer ones,
/// which holds a line's vectors in flight and would hold more registers for a loop around it.
template <int kKind, typename Reduce, typename Group, typename Ops>
__device__ __forceinline__ void reduce_short_lines(const ShapedBlock<Reduce, Group, Ops>& s,
                                                   void* const (&ptr)[Reduce::kOperands], long long local,
                                                   long long lines, long long length, float* out, long long stride) {
  typedef typename Reduce::template Lines<kKind> Code;
  constexpr int kOps = Reduce::kOperands;
  constexpr int kR = Code::kReductions;
  constexpr int kB = kShortLineBatch;
  const int rounds = kernel_abi::short_lines(length);
  for (int round0 = 0; round0 < rounds; round0 += kB) {
    long long line[kB];
    bool valid[kB];
    float acc[kB][kR];
    ElementIndex x[kB];  // row lines: the line's element j
#pragma unroll
    for (int u = 0; u < kB; ++u) {
      start_short_line<Code>(local, rounds, round0, u, lines, line[u], valid[u], acc[u]);
      if constexpr (kKind == kernel_abi::kRowLines) {
        x[u].p = line[u];
        x[u].b = divide(line[u], s.sh.R, x[u].r);
        x[u].c = 0;
        x[u].q = x[u].b * s.sh.C;
        x[u].i = line[u] * s.sh.C;
      }
    }
    if (!valid[0]) return;  // the later rounds' lines are further on
#pragma unroll 1
    for (int j = 0; j < static_cast<int>(length); ++j) {  // at most 16
      float value[kB][kR];
      if constexpr (kKind == kernel_abi::kRowLines) {
        float operands[kB][kOps];
#pragma unroll
        for (int u = 0; u < kB; ++u)
          if (valid[u]) load_element<Code, Ops, kOps>(ptr, x[u].i, operands[u], s.scaled, s.grad_scale);
#pragma unroll
        for (int u = 0; u < kB; ++u) {
          if (!valid[u]) continue;
          Code::apply(s.k, s.tv, s.sh, x[u], operands[u], value[u]);
          ++x[u].c;
          ++x[u].q;
          ++x[u].i;
        }
      } else {
#pragma unroll
        for (int u = 0; u < kB; ++u)
          if (valid[u]) Code::apply(s.k, s.tv, s.sh, line[u] * length + j, line[u], value[u]);
      }
#pragma unroll
      for (int u = 0; u < kB; ++u)
#pragma unroll
        for (int r = 0; r < kR; ++r)
          if (valid[u]) acc[u][r] = reduce_combine(Code::is_max(r), acc[u][r], value[u][r]);
    }
    finish_short_lines<Code, kKind == kernel_abi::kRowLines ? kernel_abi::kRowLines : kernel_abi::kMatrixRowLines>(
        s, line, valid, acc, out, stride);
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
  static_assert(!reads_blockwise<Code, Ops>(), "a line reads single elements: no 8-bit state (generator/blockwise_states.h)");
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

/// A warp's values of N rows (a power of two up to 32), a[u] of row u in each lane, combined over
/// the warp's 32 lanes in a fixed order: halves exchanged while a lane holds more than one row
/// (N - 1 shuffles), then a shuffle tree. Lane l returns row l / (32 / N)'s.
template <int N>
__device__ __forceinline__ float warp_rows_combine(bool is_max, const float (&a)[N]) {
  static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "rows: a power of two up to 32");
  const int lane = threadIdx.x & 31;
  float x[N];
#pragma unroll
  for (int u = 0; u < N; ++u) x[u] = a[u];
#pragma unroll
  for (int half = N / 2, offset = 16; half >= 1; half /= 2, offset /= 2) {
    const bool upper = (lane & offset) != 0;
#pragma unroll
    for (int i = 0; i < half; ++i)
      x[i] = reduce_combine(is_max, upper ? x[i + half] : x[i],
                            __shfl_xor_sync(0xffffffffu, upper ? x[i] : x[i + half], offset));
  }
#pragma unroll
  for (int offset = 16 / N; offset >= 1; offset /= 2)
    x[0] = reduce_combine(is_max, x[0], __shfl_xor_sync(0xffffffffu, x[0], offset));
  return x[0];
}

/// Column q's results from its sums over segment `segment` of its rows (acc), in a tile `tile` of
/// block_size columns: stored where the column has one segment; else stored as the segment's
/// partials, which the last segment of the tile to arrive combines in segment order. The block's
/// threads all call it where the column has several segments (a barrier).
template <typename Code, typename Block>
__device__ __forceinline__ void column_results(const ShapeTable& st, const Block& s, int t, long long q,
                                               long long segment, long long tile,
                                               const float (&acc)[Code::kReductions]) {
  constexpr int kR = Code::kReductions;
  const long long columns = s.sh.B * s.sh.C, segments = kernel_abi::column_segments(s.sh.R);
  float* out = st.col_results + s.sh.col0;
  if (segments == 1) {
    if (q >= columns) return;
#pragma unroll
    for (int r = 0; r < kR; ++r) out[Code::slot(r) * st.num_cols + q] = acc[r];
    if constexpr (Code::kStoredValues > 0) Code::finish(s.k, s.tv, s.sh, q);
    return;
  }
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

/// What follows rows_and_columns_tile's loop: the tile's columns (column_results) and the band's
/// rows: their results are the block's (a barrier made them visible to it), or, where this is the
/// band's last tile to arrive, the tiles' partials combined in tile order; then finished.
template <typename Reduce, typename Group, typename Ops>
__device__ __forceinline__ void finish_tile(const TableView& table, const GroupTable& groups, const StepInputs& inputs,
                                         const ReductionTable& red, int t, long long tile, long long segment,
                                         const float (&acc)[Reduce::Cols::kReductions]) {
  typedef typename Reduce::Cols Code;
  typedef typename Reduce::template Lines<kernel_abi::kRowLines> RowCode;
  constexpr int kRR = RowCode::kReductions;
  const ShapeTable& st = *table.shapes;
  const ShapedBlock<Reduce, Group, Ops> s = shaped_block<Reduce, Group, Ops>(table, groups, inputs, red, t);
  const long long R = s.sh.R, C = s.sh.C, rows = s.sh.B * R, b = tile * OPTGEN_BLOCK_SIZE / C;
  const long long tiles = C / OPTGEN_BLOCK_SIZE, first = segment * kernel_abi::kColumnSegmentRows;
  const long long last = first + kernel_abi::kColumnSegmentRows < R ? first + kernel_abi::kColumnSegmentRows : R;
  float* out = st.row_results + s.sh.row0;
  const int nr = st.num_row_reductions;
  const float* partials = st.row_partials + st.row_partial_offset[t] * nr;
  bool finish_rows = tiles == 1;  // block-uniform
  if (!finish_rows) {
    __threadfence();  // every thread's partials, not only thread 0's
    finish_rows = last_to_arrive(&st.row_arrivals[st.row_band_offset[t] + b * kernel_abi::column_segments(R) + segment],
                                 static_cast<unsigned>(tiles));
  }
  for (long long k = first + threadIdx.x; finish_rows && k < last; k += OPTGEN_BLOCK_SIZE) {
    const long long p = b * R + k;
    if (tiles > 1) {
#pragma unroll
      for (int r = 0; r < kRR; ++r) {
        float total = reduce_identity<float>(RowCode::is_max(r));
        const float* partial = partials + p * nr + RowCode::slot(r);
        const long long stride = rows * nr;
#pragma unroll 4
        for (long long j = 0; j < tiles; ++j, partial += stride)
          total = reduce_combine(RowCode::is_max(r), total, __ldcg(partial));
        out[RowCode::slot(r) * st.num_rows + p] = total;
      }
    }
    if constexpr (RowCode::kStoredValues > 0) RowCode::finish(s.k, s.tv, s.sh, p);
  }
  column_results<Code>(st, s, t, tile * OPTGEN_BLOCK_SIZE + threadIdx.x, segment, tile, acc);
}

/// A column segment that reduces rows too (shaped_columns, kWithRows): tile `tile` of block_size
/// (128) columns of a matrix, over the rows of segment `segment`. Each warp takes a quarter of the
/// rows, a lane four consecutive columns (one access) of four rows at a time; the warp combines
/// each row over its 128 columns (warp_rows_combine) and stores it (a tile that spans the matrix's
/// rows) or the tile's partial of it, and the warps' column sums are combined in warp order for
/// thread threadIdx.x's column (finish_tile stores them).
template <typename Reduce, typename Group, typename Ops>
__device__ __forceinline__ void rows_and_columns_tile(const TableView& table, const GroupTable& groups,
                                                      const StepInputs& inputs, const ReductionTable& red, int t,
                                                      long long tile, long long segment) {
  typedef typename Reduce::Cols Code;
  typedef typename Reduce::template Lines<kernel_abi::kRowLines> RowCode;
  static_assert(!reads_blockwise<Code, Ops>() && !reads_blockwise<RowCode, Ops>(),
                "a tile of rows and columns reads single elements: no 8-bit state (generator/blockwise_states.h)");
  constexpr int kOps = Reduce::kOperands, kR = Code::kReductions, kRR = RowCode::kReductions;
  constexpr int kWarps = kernel_abi::kRowTileThreads / 32, V = kernel_abi::kRowTileThreads / 32;  // a lane's columns
  constexpr int kUnroll = 4;                                                                        // rows in flight
  static_assert(OPTGEN_BLOCK_SIZE == kernel_abi::kRowTileThreads, "a tile is four warps of 32 x 4 columns");
  const long long tile_first = tile * OPTGEN_BLOCK_SIZE;
  // The block's tensor as the loop reads it; finish_tile reads it again, so that the loop does not
  // hold what only the finish needs (held, the kernel took 116 registers rather than 88, sm_90).
  const ShapedBlock<Reduce, Group, Ops> s = shaped_block<Reduce, Group, Ops>(table, groups, inputs, red, t);
  const ShapeTable& st = *table.shapes;
  void* ptr[kOps];
#pragma unroll
  for (int op = 0; op < kOps; ++op)
    ptr[op] = Code::loads(op) || RowCode::loads(op) ? operand_pointer<Ops, kOps>(table, op, t) : nullptr;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long R = s.sh.R, C = s.sh.C, rows = s.sh.B * R;
  const long long first = segment * kernel_abi::kColumnSegmentRows;
  const long long last = first + kernel_abi::kColumnSegmentRows < R ? first + kernel_abi::kColumnSegmentRows : R;
  const long long b = tile_first / C;
  const int c0 = static_cast<int>(tile_first - b * C) + lane * V;  // the lane's first column
  const int tiles = static_cast<int>(C / OPTGEN_BLOCK_SIZE), tile_in_matrix = (c0 - lane * V) / OPTGEN_BLOCK_SIZE;
  // The warp's rows of the segment: rows first + k for k in [k_first, k_last).
  const int quarter = (static_cast<int>(last - first) + kWarps - 1) / kWarps;
  const int k_first = warp * quarter;
  const int k_last = k_first + quarter < static_cast<int>(last - first) ? k_first + quarter : static_cast<int>(last - first);
  bool vectors = true;
#pragma unroll
  for (int op = 0; op < kOps; ++op) vectors = vectors && reinterpret_cast<uintptr>(ptr[op]) % 16 == 0;
  float* out = st.row_results + s.sh.row0;
  const int nr = st.num_row_reductions;
  float* partials = st.row_partials + st.row_partial_offset[t] * nr;
  float sums[V][kR];
#pragma unroll
  for (int e = 0; e < V; ++e)
#pragma unroll
    for (int r = 0; r < kR; ++r) sums[e][r] = reduce_identity<float>(Code::is_max(r));
  ElementIndex x;
  x.b = b;
  const long long p0 = b * R + first;  // the segment's first row in the tensor
  long long i0 = (p0 + k_first) * C + c0;  // the lane's first element of row first + k0
  for (int k0 = k_first; k0 < k_last; k0 += kUnroll, i0 += kUnroll * C) {
    float v[kUnroll][kOps][V];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const long long i = i0 + u * C;
#pragma unroll
      for (int op = 0; op < kOps; ++op) {
        if (k0 + u < k_last && ptr[op]) {
          if (vectors) {
            load_operand<Ops, V>(op, ptr[op], i, v[u][op]);
          } else {
#pragma unroll
            for (int e = 0; e < V; ++e) load_operand<Ops, 1>(op, ptr[op], i + e, &v[u][op][e]);
          }
        } else {
#pragma unroll
          for (int e = 0; e < V; ++e) v[u][op][e] = 0.0f;
        }
      }
    }
    float row_value[kRR][kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int r = 0; r < kRR; ++r) row_value[r][u] = reduce_identity<float>(RowCode::is_max(r));
      if (k0 + u >= k_last) continue;
      x.r = first + k0 + u;
      x.p = p0 + k0 + u;
#pragma unroll
      for (int e = 0; e < V; ++e) {
        float operands[kOps];
#pragma unroll
        for (int op = 0; op < kOps; ++op) operands[op] = v[u][op][e];
        if (s.scaled) operands[1] = operands[1] / s.grad_scale;
        x.c = c0 + e;
        x.q = b * C + x.c;
        x.i = x.p * C + x.c;
        float value[kR], row[kRR];
        Code::apply(s.k, s.tv, s.sh, x, operands, value);
        RowCode::apply(s.k, s.tv, s.sh, x, operands, row);
#pragma unroll
        for (int r = 0; r < kR; ++r) sums[e][r] = reduce_combine(Code::is_max(r), sums[e][r], value[r]);
#pragma unroll
        for (int r = 0; r < kRR; ++r) row_value[r][u] = reduce_combine(RowCode::is_max(r), row_value[r][u], row[r]);
      }
    }
    const int u = lane / (32 / kUnroll);  // the row warp_rows_combine leaves this lane
    const long long p = p0 + k0 + u;
    const bool mine = lane % (32 / kUnroll) == 0 && k0 + u < k_last;
#pragma unroll
    for (int r = 0; r < kRR; ++r) {
      const float total = warp_rows_combine(RowCode::is_max(r), row_value[r]);
      if (mine) {
        if (tiles == 1)
          out[RowCode::slot(r) * st.num_rows + p] = total;
        else
          partials[(tile_in_matrix * rows + p) * nr + RowCode::slot(r)] = total;
      }
    }
  }
  // The warps' column sums, combined in warp order for thread threadIdx.x's column.
  __shared__ float warp_sums[kR][kWarps][32 * V];
#pragma unroll
  for (int e = 0; e < V; ++e)
#pragma unroll
    for (int r = 0; r < kR; ++r) warp_sums[r][warp][lane * V + e] = sums[e][r];
  __syncthreads();
  float acc[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    acc[r] = reduce_identity<float>(Code::is_max(r));
#pragma unroll
    for (int w = 0; w < kWarps; ++w) acc[r] = reduce_combine(Code::is_max(r), acc[r], warp_sums[r][w][threadIdx.x]);
  }
  finish_tile<Reduce, Group, Ops>(table, groups, inputs, red, t, tile, segment, acc);
}


/// The column segments of a shaped Reduce stage: a thread per column (of any matrix of the
/// tensor) sums down up to kColumnSegmentRows rows; a tensor of more rows has several segments per
/// column, whose partials the last segment of a tile of columns to arrive combines in order.
///
/// In a stage of row lines too (kWithRows), a tensor without row lines (rows_in_column_segments:
/// its matrices' rows are whole tiles of the block's 128 columns) has its rows reduced here as
/// well, so that the stage reads its gradient once (rows_and_columns_tile).
template <bool kWithRows, typename Reduce, typename Group, typename Ops>
__device__ __forceinline__ void shaped_columns(const TableView& table, const GroupTable& groups,
                                               const StepInputs& inputs, const ReductionTable& red, KindBlock at) {
  typedef typename Reduce::Cols Code;
  static_assert(!reads_blockwise<Code, Ops>(),
                "a column segment reads single elements: no 8-bit state (generator/blockwise_states.h)");
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
  if constexpr (kWithRows && OPTGEN_BLOCK_SIZE == kernel_abi::kRowTileThreads) {
    // The plan gave the tensor no row lines for one of two reasons: its column segments take its
    // rows (rows_in_column_segments; row partials and bands are laid out for it), or it has no rows
    // (a rank's shard that holds none of a matrix's rows), which the plain segments serve.
    const long long* row_lines = st.block_offset + static_cast<long long>(kernel_abi::kRowLines) * (st.num_tensors + 1);
    if (row_lines[t + 1] == row_lines[t] && kernel_abi::rows_in_column_segments(R, C, OPTGEN_BLOCK_SIZE))
      return rows_and_columns_tile<Reduce, Group, Ops>(table, groups, inputs, red, t, tile, segment);
  }
  float acc[kR];
  void* ptr[kOps];
#pragma unroll
  for (int op = 0; op < kOps; ++op) ptr[op] = Code::loads(op) ? operand_pointer<Ops, kOps>(table, op, t) : nullptr;
  // Column q's reductions over the segment's rows, into acc.
  auto sum_column = [&](long long q) {
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
  // A tile of short_lines(R) rounds of block_size columns (kernel_abi::column_blocks), short
  // columns kShortLineBatch at a time (reduce_short_lines' rows).
  const int rounds = kernel_abi::short_lines(R);
  if (rounds > 1) {
    constexpr int kB = kShortLineBatch;
    for (int round0 = 0; round0 < rounds; round0 += kB) {
      long long q[kB];
      bool valid[kB];
      float sums[kB][kR];
      ElementIndex x[kB];  // the column's element in row r
#pragma unroll
      for (int u = 0; u < kB; ++u) {
        start_short_line<Code>(tile, rounds, round0, u, columns, q[u], valid[u], sums[u]);
        x[u].b = divide(q[u], C, x[u].c);
        x[u].q = q[u];
      }
      if (!valid[0]) return;  // the later rounds' columns are further on
#pragma unroll 1
      for (long long r = 0; r < R; ++r) {  // at most 16
        float v[kB][kOps];
#pragma unroll
        for (int u = 0; u < kB; ++u) {
          x[u].r = r;
          x[u].p = x[u].b * R + r;
          x[u].i = x[u].p * C + x[u].c;
          if (valid[u]) load_element<Code, Ops, kOps>(ptr, x[u].i, v[u], s.scaled, s.grad_scale);
        }
#pragma unroll
        for (int u = 0; u < kB; ++u) {
          if (!valid[u]) continue;
          float value[kR];
          Code::apply(s.k, s.tv, s.sh, x[u], v[u], value);
#pragma unroll
          for (int j = 0; j < kR; ++j) sums[u][j] = reduce_combine(Code::is_max(j), sums[u][j], value[j]);
        }
      }
      finish_short_lines<Code, kernel_abi::kColumnSegments>(s, q, valid, sums, st.col_results + s.sh.col0,
                                                              st.num_cols);
    }
    return;
  }
  if (segments == 1) {
    const long long q = tile * OPTGEN_BLOCK_SIZE + threadIdx.x;
    sum_column(q);
    column_results<Code>(st, s, t, q, segment, tile, acc);
    return;
  }
  // Several segments: short_lines(R) is 1 (R > kColumnSegmentRows), a tile is block_size columns.
  const long long q = tile * OPTGEN_BLOCK_SIZE + threadIdx.x;
  sum_column(q);
  column_results<Code>(st, s, t, q, segment, tile, acc);
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
