#pragma once
/// optgen's device library: where an element of a tensor of rows, columns and matrices is
/// (ElementIndex), what code of a variant with rows and columns reads of its tensor besides the
/// element (Shaped: its shape, the results and stored values of earlier stages, its row and column
/// states), and the Position a stage's element loop (chunk_runs, update_stage) hands its code.

#include "optgen/device/operands.cuh"

namespace optgen {

using kernel_abi::ShapeTable;

/// Where element i of a tensor of B matrices of R rows and C columns is: its row p = b * R + r,
/// its column q = b * C + c and its matrix b, counted over the tensor's rows, columns, matrices.
struct ElementIndex {
  long long i, p, q, b, r, c;
};

/// n / d and its remainder, in 32 bits where both fit (a small model's many short lines each pay
/// for this: a 64-bit division is a subroutine of about a hundred instructions).
__device__ __forceinline__ long long divide(long long n, long long d, long long& rest) {
  if (n < 0xffffffffLL && d < 0xffffffffLL) {
    const unsigned un = static_cast<unsigned>(n), ud = static_cast<unsigned>(d), q = un / ud;
    rest = un - q * ud;
    return q;
  }
  const long long q = n / d;
  rest = n - q * d;
  return q;
}

__device__ __forceinline__ ElementIndex element_index(long long i, long long R, long long C) {
  ElementIndex x;
  x.i = i;
  const long long matrix = R * C;
  if (i < 0xffffffffLL && matrix < 0xffffffffLL) {  // 32-bit division where it suffices
    const unsigned ui = static_cast<unsigned>(i), um = static_cast<unsigned>(matrix), uc = static_cast<unsigned>(C);
    const unsigned b = ui / um, rest = ui - b * um, r = rest / uc;
    x.b = b;
    x.r = r;
    x.c = rest - r * uc;
  } else {
    x.b = i / matrix;
    const long long rest = i - x.b * matrix;
    x.r = rest / C;
    x.c = rest - x.r * C;
  }
  x.p = x.b * R + x.r;
  x.q = x.b * C + x.c;
  return x;
}

/// The index of element x.i + gap, where gap is `rows` rows and `cols` columns (gap = rows * C +
/// cols, cols < C) and shorter than a matrix (rows < R): additions and two carries, not the two
/// divisions of element_index. x may stand one past its row's last column (x.c == C), where a walk
/// along a row left it.
__device__ __forceinline__ void skip_ahead(ElementIndex& x, long long gap, long long rows, long long cols, long long R,
                                     long long C) {
  x.i += gap;
  x.r += rows;
  x.p += rows;
  x.c += cols;
  x.q += cols;
  if (x.c >= C) {
    x.c -= C;
    x.q -= C;
    ++x.r;
    ++x.p;
  }
  if (x.r >= R) {
    x.r -= R;
    ++x.b;
    x.q += C;
  }
}

/// The index of the element after x.
__device__ __forceinline__ void advance(ElementIndex& x, long long R, long long C) {
  ++x.i;
  ++x.c;
  ++x.q;
  if (x.c == C) {
    x.c = 0;
    x.q -= C;
    ++x.r;
    ++x.p;
    if (x.r == R) {
      x.r = 0;
      ++x.b;
      x.q += C;
    }
  }
}

/// What the shaped code of one tensor reads besides its elements: its shape, the row, column and
/// matrix results and values of earlier stages, and its row and column states, which the Update
/// stage reads from the snapshot the first Reduce stage took. An absent state reads as 0.
template <typename Ops, bool kFromSnapshot>
struct Shaped {
  static constexpr bool from_snapshot = kFromSnapshot;  ///< the Update stage
  void* const* pointers;  ///< the tensor's operand pointers, num_tensors apart
  long long num_tensors;
  bool factored;
  long long R, C, B;  ///< B matrices of R rows and C columns (B = 0 for an empty tensor but a shard)
  long long whole_R;  ///< the rows a spec's `rows` reads (ShapeTable::whole_rows)
  long long whole_C;  ///< the columns a spec's `cols` reads (ShapeTable::whole_cols)
  long long row0, col0, matrix0;
  // The tensor's part of the results and snapshots, resolved once per block: per-element code
  // then loads each value with one instruction (plain loads, cached in L1: the elements of a row
  // read the same values, which earlier stages wrote, visible once wait_for_previous_kernel
  // returned).
  const float* row_results;
  const float* col_results;
  const float* matrix_results;
  float* row_values;
  float* col_values;
  float* matrix_values;
  const float* row_snapshot;
  const float* col_snapshot;
  long long num_rows, num_cols, num_matrices;

  __device__ __forceinline__ void* pointer(int op) const { return pointers[op * num_tensors]; }
  __device__ __forceinline__ float row_result(int s, long long p) const { return row_results[s * num_rows + p]; }
  __device__ __forceinline__ float col_result(int s, long long q) const { return col_results[s * num_cols + q]; }
  __device__ __forceinline__ float matrix_result(int s, long long b) const {
    return matrix_results[s * num_matrices + b];
  }
  /// Value j of row p (ShapeTable::row_values), column q and matrix b; and storing one (the line
  /// that finishes it).
  __device__ __forceinline__ float row_value(int j, long long p) const { return row_values[j * num_rows + p]; }
  __device__ __forceinline__ float col_value(int j, long long q) const { return col_values[j * num_cols + q]; }
  __device__ __forceinline__ float matrix_value(int j, long long b) const {
    return matrix_values[j * num_matrices + b];
  }
  __device__ __forceinline__ void store_row_value(int j, long long p, float x) const { row_values[j * num_rows + p] = x; }
  __device__ __forceinline__ void store_col_value(int j, long long q, float x) const { col_values[j * num_cols + q] = x; }
  __device__ __forceinline__ void store_matrix_value(int j, long long b, float x) const {
    matrix_values[j * num_matrices + b] = x;
  }
  /// Row state `op` (the j-th row state of the variant) of row p, and the same for columns.
  __device__ __forceinline__ float row_state(int op, int j, long long p) const {
    const void* data = pointer(op);
    if (!data) return 0.0f;
    if (from_snapshot) return row_snapshot[j * num_rows + p];
    float x;
    load_codec<1>(Ops::codec(op), data, p, &x);
    return x;
  }
  __device__ __forceinline__ float col_state(int op, int j, long long q) const {
    const void* data = pointer(op);
    if (!data) return 0.0f;
    if (from_snapshot) return col_snapshot[j * num_cols + q];
    float x;
    load_codec<1>(Ops::codec(op), data, q, &x);
    return x;
  }
  /// Stores a row or column state's new value (Update stage): nothing for an absent state.
  __device__ __forceinline__ void store_state(int op, long long index, float x) const {
    void* data = pointer(op);
    if (data) store_codec<1>(Ops::codec(op), data, index, &x);
  }
};

template <typename Ops, bool kFromSnapshot = false>
__device__ __forceinline__ Shaped<Ops, kFromSnapshot> shaped(const TableView& table, int t) {
  const ShapeTable* st = table.shapes;
  Shaped<Ops, kFromSnapshot> s;
  s.pointers = table.pointers + t;
  s.num_tensors = table.num_tensors;
  s.factored = st->factored[t] != 0;
  s.R = st->rows[t];
  s.C = st->cols[t];
  s.whole_R = st->whole_rows[t];
  s.whole_C = st->whole_cols[t];
  // A rank's shard of a matrix that holds none of its rows (columns) is one matrix of 0 rows
  // (columns): it still sums (nothing into) every column (row) and the matrix, and steps its
  // column (row) states (kernel_abi.h's ShapeTable::whole_rows; the runtime's TensorDims).
  s.B = s.R * s.C != 0 ? table.numel[t] / (s.R * s.C) : (s.whole_R > 0 && s.C > 0) || (s.whole_C > 0 && s.R > 0) ? 1 : 0;
  s.row0 = st->row_offset[t];
  s.col0 = st->col_offset[t];
  s.matrix0 = st->matrix_offset[t];
  s.num_rows = st->num_rows;
  s.num_cols = st->num_cols;
  s.num_matrices = st->num_matrices;
  s.row_results = st->row_results + s.row0;
  s.col_results = st->col_results + s.col0;
  s.matrix_results = st->matrix_results + s.matrix0;
  s.row_values = st->row_values + s.row0;
  s.col_values = st->col_values + s.col0;
  s.matrix_values = st->matrix_values + s.matrix0;
  s.row_snapshot = st->row_snapshot + s.row0;
  s.col_snapshot = st->col_snapshot + s.col0;
  return s;
}

/// How many slots a mask of stored-value slots spans (at least one: arrays are not empty).
__host__ __device__ constexpr int slot_span(unsigned mask) {
  int n = 1;
  for (int j = 0; j < 32; ++j)
    if ((mask >> j) & 1u) n = j + 1;
  return n;
}

/// What the code of one element reads of its tensor (the `sh_` of generated code): Shaped's, but the
/// stored values in kRows, kCols and kMatrices (masks of slots), which Position loaded for it
/// through the read-only cache (a row's and a matrix's once per vector of elements of one row).
template <typename Sh, unsigned kRows, unsigned kCols, unsigned kMatrices>
struct ElementValues {
  const Sh& sh;
  float row[slot_span(kRows)], col[slot_span(kCols)], matrix[slot_span(kMatrices)];

  __device__ __forceinline__ float row_value(int j, long long p) const {
    return (kRows >> j) & 1u ? row[j] : sh.row_value(j, p);
  }
  __device__ __forceinline__ float col_value(int j, long long q) const {
    return (kCols >> j) & 1u ? col[j] : sh.col_value(j, q);
  }
  __device__ __forceinline__ float matrix_value(int j, long long b) const {
    return (kMatrices >> j) & 1u ? matrix[j] : sh.matrix_value(j, b);
  }
  __device__ __forceinline__ float row_result(int s, long long p) const { return sh.row_result(s, p); }
  __device__ __forceinline__ float col_result(int s, long long q) const { return sh.col_result(s, q); }
  __device__ __forceinline__ float matrix_result(int s, long long b) const { return sh.matrix_result(s, b); }
  __device__ __forceinline__ float row_state(int op, int j, long long p) const { return sh.row_state(op, j, p); }
  __device__ __forceinline__ float col_state(int op, int j, long long q) const { return sh.col_state(op, j, q); }
  __device__ __forceinline__ void store_state(int op, long long index, float x) const { sh.store_state(op, index, x); }
};

/// Where a stage's elements are, as their code needs it: nothing for element-wise code; for code
/// of rows and columns (kShaped), its tensor (Shaped; the row and column states from the snapshot
/// where kFromSnapshot: the Update stage's), the element's row, column and matrix, and the stored
/// values `Code` reads (Code::kRowValues, kColValues, kMatrixValues), where it reads any of them
/// (Code::kIndexed: else its tensor's values and shape only). A loop visits V consecutive
/// elements at a time: seek finds the first (two divisions, or, in a Reduce stage, a few
/// additions for the thread's next vector of a walk) and loads its row's and matrix's values, once
/// for all V where they lie in one row (the tensor's rows are a multiple of V long), and in a
/// Reduce stage its columns' values; next advances to the following one and, outside a row of
/// vectors, loads its row's and matrix's values again. `Stage` is the struct whose tensor()
/// computes the stage's tensor values; apply() calls Code::apply with what it reads (the Update
/// stage's column values loaded there); store_states and finish_vector store the Update stage's
/// row and column states.
template <typename Stage, typename Code, typename Ops, bool kShaped, int V, bool kFromSnapshot = false>
struct Position {
  __device__ __forceinline__ Position(const TableView&, int) {}
  template <typename Values, typename Results, typename States>
  __device__ __forceinline__ typename Stage::TensorValues tensor(const Values& k, long long numel, const Results& r,
                                                                 const States& ts) const {
    return Stage::tensor(k, numel, r, ts);
  }
  template <typename Values, typename Results, typename States>
  __device__ __forceinline__ void store_tensor_states(const Values& k, long long numel, const Results& r,
                                                      const States& ts) const {
    Code::store_tensor_states(k, numel, r, ts);
  }
  /// Whether an operand exists for this tensor (every one does here).
  __device__ __forceinline__ bool present(const void*) const { return true; }
  __device__ __forceinline__ void seek(long long, bool = true) {}
  __device__ __forceinline__ bool in_row() const { return true; }
  __device__ __forceinline__ void next(int, bool) {}
  template <typename Values, typename TensorValues, typename A, typename B>
  __device__ __forceinline__ void apply(const Values& k, const TensorValues& tv, A& a, B& b, int = -1,
                                        bool = false) const {
    Code::apply(k, tv, a, b);
  }
  template <typename Values, typename TensorValues>
  __device__ __forceinline__ void store_states(const Values&, const TensorValues&, bool) const {}
  template <typename Values, typename TensorValues>
  __device__ __forceinline__ void finish_vector(const Values&, const TensorValues&) const {}
  template <typename Values, typename TensorValues>
  __device__ __forceinline__ void store_lines_without_elements(const Values&, const TensorValues&) const {}
};

template <typename Stage, typename Code, typename Ops, int V, bool kFromSnapshot>
struct Position<Stage, Code, Ops, true, V, kFromSnapshot> {
  typedef Shaped<Ops, kFromSnapshot> Sh;
  static constexpr unsigned kRows = Code::kRowValues, kCols = Code::kColValues, kMatrices = Code::kMatrixValues;
  /// A walk's threads take V consecutive elements each, a block's width of vectors apart (chunk_runs,
  /// ElementWalk): a thread's next vector starts kGap elements after its last one ends.
  static constexpr long long kGap = static_cast<long long>(OPTGEN_BLOCK_SIZE - 1) * V;
  Sh sh;
  ElementIndex ix;
  bool rows_of_vectors;  ///< every row holds whole vectors: a vector's elements share their row
  bool in_row_;          ///< the vector since the last seek lies in one row (its values are loaded)
  // A Reduce stage finds its thread's next vector by skip_ahead, which holds ix across vectors; the
  // Update stage finds each by element_index: ix held across its vectors spilled 24-28 bytes at its
  // register cap (adam_mini's clipped f16 kernels with master copies, sm_80).
  static constexpr bool kSkip = !kFromSnapshot;
  int gap;  ///< kGap in rows and columns, (rows << 16) | columns; -1 where a matrix is not longer
  float row[slot_span(kRows)], matrix[slot_span(kMatrices)];
  // A Reduce stage's column values of a vector in one row, loaded together by seek: loaded by
  // apply, each waited for before its element, they held Adafactor's norm of the update to their
  // latency (2026-12-01: its step 3% shorter on gpt2 and llama-1b). The Update stage loads them in
  // apply: held for a vector at its 80 registers, they spilled 24-36 bytes in the bf16, f16 and
  // clipped kernel sets.
  static constexpr bool kPrefetch = !kFromSnapshot && kCols != 0u;
  float col[kPrefetch ? slot_span(kCols) : 1][kPrefetch ? V : 1];

  __device__ __forceinline__ Position(const TableView& table, int t) : sh(shaped<Ops, kFromSnapshot>(table, t)) {
    rows_of_vectors = sh.C % V == 0;
    ix.i = -kGap - 1;  // no seek yet: the first is element_index's
    static_assert(kGap < (1 << 15), "a walk's gap in rows and columns fits 16 bits each");
    const long long rows = sh.C > 0 ? kGap / sh.C : 0;
    gap = kSkip && sh.C > 0 && sh.R * sh.C > kGap ? static_cast<int>(rows << 16 | (kGap - rows * sh.C)) : -1;
  }
  template <typename Values, typename Results, typename States>
  __device__ __forceinline__ typename Stage::TensorValues tensor(const Values& k, long long numel, const Results& r,
                                                                 const States& ts) const {
    return Stage::tensor(k, numel, r, sh.factored, sh.whole_R, sh.whole_C, ts);
  }
  template <typename Values, typename Results, typename States>
  __device__ __forceinline__ void store_tensor_states(const Values& k, long long numel, const Results& r,
                                                      const States& ts) const {
    Code::store_tensor_states(k, numel, r, sh.factored, sh.whole_R, sh.whole_C, ts);
  }
  /// A state that exists for factored tensors only, or for the others only, has no pointer where
  /// it does not (generator/shapes.h's state_presence): it reads as 0 and is not stored.
  __device__ __forceinline__ bool present(const void* data) const { return data != nullptr; }

  /// Element i, the first of the V a vector loop visits (`vector`), or one on its own. The thread's
  /// next vector of a Reduce stage's walk (kGap past where next() left the last) is found by
  /// skip_ahead(), any other element by element_index's divisions.
  __device__ __forceinline__ void seek(long long i, bool vector = true) {
    in_row_ = vector && rows_of_vectors;
    if (!Code::kIndexed) return;
    if (kSkip && i - ix.i == kGap && gap >= 0)
      skip_ahead(ix, kGap, gap >> 16, gap & 0xffff, sh.R, sh.C);
    else
      ix = element_index(i, sh.R, sh.C);
    load_row();
    if constexpr (kPrefetch) {
      if (in_row_) {
#pragma unroll
        for (int j = 0; j < slot_span(kCols); ++j)
#pragma unroll
          for (int e = 0; e < V; ++e)
            if ((kCols >> j) & 1u) col[j][e] = column_value(j, ix.q + e);
      }
    }
  }
  /// Whether the vector since the last seek lies in one row. A loop over its elements branches on
  /// it once and hands next() the constant: `if (at.in_row()) body(true); else body(false);`, each
  /// copy of the body then runs its elements with no branch between them.
  __device__ __forceinline__ bool in_row() const { return in_row_; }
  /// From element e of the vector to element e + 1 (in_row: as in_row() said, a constant).
  __device__ __forceinline__ void next(int e, bool in_row) {
    if (!Code::kIndexed) return;
    if (in_row) {
      ++ix.i;
      ++ix.c;
      ++ix.q;
      return;
    }
    advance(ix, sh.R, sh.C);
    if (e + 1 < V) load_row();
  }
  /// Code::apply for element e of the vector since the last seek (in_row: as in_row() said, a
  /// constant as for next; false for an element on its own, whose e is not read).
  template <typename Values, typename TensorValues, typename A, typename B>
  __device__ __forceinline__ void apply(const Values& k, const TensorValues& tv, A& a, B& b, int e = -1,
                                        bool in_row = false) const {
    ElementValues<Sh, kRows, kCols, kMatrices> at{sh};
#pragma unroll
    for (int j = 0; j < slot_span(kRows); ++j)
      if ((kRows >> j) & 1u) at.row[j] = row[j];
#pragma unroll
    for (int j = 0; j < slot_span(kCols); ++j) {
      if (!((kCols >> j) & 1u)) continue;
      if constexpr (kPrefetch)
        at.col[j] = in_row ? col[j][e] : column_value(j, ix.q);
      else
        at.col[j] = column_value(j, ix.q);
    }
#pragma unroll
    for (int j = 0; j < slot_span(kMatrices); ++j)
      if ((kMatrices >> j) & 1u) at.matrix[j] = matrix[j];
    Code::apply(k, tv, at, ix, a, b);
  }
  /// The row and column states of the element (the Update stage's Code::store_states stores those
  /// of a row's column 0 and a column's row 0): stored now outside a row of vectors (in_row, a
  /// constant as for next), else by finish_vector once the vector's elements are computed.
  template <typename Values, typename TensorValues>
  __device__ __forceinline__ void store_states(const Values& k, const TensorValues& tv, bool in_row) const {
    if (!in_row) Code::store_states(k, tv, held(), ix);
  }
  /// A rank's shard of a matrix that holds none of its rows (no elements: its one empty chunk's
  /// block calls this) still holds the matrix's columns, whose sums the reduction hook made whole:
  /// it stores their states as row 0 of every other shard does, so that every rank's copy of a
  /// column state steps alike. No element is at column 0 here (c = -1): there is no row to store.
  /// The same for the rows of a shard that holds none of a matrix's columns (r = -1).
  /// (An empty tensor that is no shard has no matrix, B = 0, and nothing to store; reading B, not
  /// the whole dimensions, keeps those out of the registers of the element loop before this.)
  template <typename Values, typename TensorValues>
  __device__ __forceinline__ void store_lines_without_elements(const Values& k, const TensorValues& tv) const {
    if (!Code::kIndexed || sh.B == 0) return;
    if (sh.R == 0)
      for (long long q = threadIdx.x; q < sh.C; q += OPTGEN_BLOCK_SIZE) {
        const ElementIndex x{q, 0, q, 0, 0, -1};
        Code::store_states(k, tv, sh, x);
      }
    if (sh.C == 0)
      for (long long p = threadIdx.x; p < sh.R; p += OPTGEN_BLOCK_SIZE) {
        const ElementIndex x{p, p, 0, 0, -1, 0};
        Code::store_states(k, tv, sh, x);
      }
  }
  /// The row and column states of a vector in one row, once its elements are computed (next has
  /// passed them: the vector starts V elements back).
  template <typename Values, typename TensorValues>
  __device__ __forceinline__ void finish_vector(const Values& k, const TensorValues& tv) const {
    if (!in_row_ || !Code::kIndexed) return;  // code that reads no index stores no row or column state
    ElementIndex x = ix;
    x.i -= V;
    x.c -= V;
    x.q -= V;
    // Code::store_states stores at a row's column 0 and a column's row 0: told that the vector's
    // column is not negative (seek found it: Code::kIndexed), the compiler tests column 0 for its
    // first element only. (A test of the vector, returning where it holds neither, spilled 24
    // bytes in adam_mini's f16 Update stage with master copies, sm_80.)
    __builtin_assume(x.c >= 0);
    const ElementValues<Sh, kRows, 0u, kMatrices> values = held();
#pragma unroll
    for (int e = 0; e < V; ++e) {
      Code::store_states(k, tv, values, x);
      ++x.i;
      ++x.c;
      ++x.q;
    }
  }

 private:
  /// What Code::store_states reads of its element's row and matrix: the values held here (a state's
  /// new value may share the slot of a value the code reads, generator/shapes.h's StoredValue),
  /// rather than a load of them again; of its column, a load.
  __device__ __forceinline__ ElementValues<Sh, kRows, 0u, kMatrices> held() const {
    ElementValues<Sh, kRows, 0u, kMatrices> values{sh};
#pragma unroll
    for (int j = 0; j < slot_span(kRows); ++j)
      if ((kRows >> j) & 1u) values.row[j] = row[j];
#pragma unroll
    for (int j = 0; j < slot_span(kMatrices); ++j)
      if ((kMatrices >> j) & 1u) values.matrix[j] = matrix[j];
    return values;
  }
  /// Value j of column q, through the read-only data cache (as load_row's).
  __device__ __forceinline__ float column_value(int j, long long q) const {
    return __ldg(sh.col_values + j * sh.num_cols + q);
  }
  // The row's and matrix's values, through the read-only data cache (the stage that loads them does
  // not write them), as apply() loads the column's.
  __device__ __forceinline__ void load_row() {
#pragma unroll
    for (int j = 0; j < slot_span(kRows); ++j)
      if ((kRows >> j) & 1u) row[j] = __ldg(sh.row_values + j * sh.num_rows + ix.p);
#pragma unroll
    for (int j = 0; j < slot_span(kMatrices); ++j)
      if ((kMatrices >> j) & 1u) matrix[j] = __ldg(sh.matrix_values + j * sh.num_matrices + ix.b);
  }
};

}  // namespace optgen
