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
  long long R, C, B;  ///< B matrices of R rows and C columns (B = 0 for an empty tensor)
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
  s.B = s.R * s.C == 0 ? 0 : table.numel[t] / (s.R * s.C);
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

/// Where a stage's elements are, as their code needs it: nothing for element-wise code; for code
/// of rows and columns (kShaped), its tensor (Shaped; the row and column states from the snapshot
/// where kFromSnapshot: the Update stage's) and the element's row, column and matrix, found once
/// per vector (seek) and advanced element by element (next). `Stage` is the struct whose tensor()
/// computes the stage's tensor values; apply() calls a code struct's apply with what it reads.
template <typename Stage, typename Ops, bool kShaped, bool kFromSnapshot = false>
struct Position {
  __device__ __forceinline__ Position(const TableView&, int) {}
  template <typename Values, typename Results>
  __device__ __forceinline__ typename Stage::TensorValues tensor(const Values& k, long long numel,
                                                                 const Results& r) const {
    return Stage::tensor(k, numel, r);
  }
  /// Whether an operand exists for this tensor (every one does here).
  __device__ __forceinline__ bool present(const void*) const { return true; }
  __device__ __forceinline__ void seek(long long) {}
  __device__ __forceinline__ void next() {}
  template <typename Code, typename Values, typename TensorValues, typename A, typename B>
  __device__ __forceinline__ void apply(const Values& k, const TensorValues& tv, A& a, B& b) const {
    Code::apply(k, tv, a, b);
  }
};

template <typename Stage, typename Ops, bool kFromSnapshot>
struct Position<Stage, Ops, true, kFromSnapshot> {
  Shaped<Ops, kFromSnapshot> sh;
  ElementIndex ix;
  __device__ __forceinline__ Position(const TableView& table, int t) : sh(shaped<Ops, kFromSnapshot>(table, t)) {}
  template <typename Values, typename Results>
  __device__ __forceinline__ typename Stage::TensorValues tensor(const Values& k, long long numel,
                                                                 const Results& r) const {
    return Stage::tensor(k, numel, r, sh.factored, sh.R, sh.C);
  }
  /// A state that exists for factored tensors only, or for the others only, has no pointer where
  /// it does not (generator/shapes.h's state_presence): it reads as 0 and is not stored.
  __device__ __forceinline__ bool present(const void* data) const { return data != nullptr; }
  __device__ __forceinline__ void seek(long long i) { ix = element_index(i, sh.R, sh.C); }
  __device__ __forceinline__ void next() { advance(ix, sh.R, sh.C); }
  template <typename Code, typename Values, typename TensorValues, typename A, typename B>
  __device__ __forceinline__ void apply(const Values& k, const TensorValues& tv, A& a, B& b) const {
    Code::apply(k, tv, sh, ix, a, b);
  }
};

}  // namespace optgen
