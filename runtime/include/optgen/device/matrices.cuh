#pragma once
/// optgen's device library: the kernels around cuBLAS's products of a matrix function
/// (kernel_abi::MatrixBatch): each matrix of a batch divided by max(its Frobenius norm, eps), as
/// torch.optim.Muon's _zeropower_via_newtonschulz does before its iteration: of a bf16 matrix, the
/// norm summed in higher precision and rounded to bf16, as is its maximum with eps; of an f32 one
/// (a storage that keeps the matrix value in f32), the same in f32, nothing rounded; and a program's
/// sums of matrices without a product (kernel_abi::MatrixSum). A generated kernel source includes
/// this header when its spec has a matrix value; the runtime launches the kernels by their names in
/// kernel_abi.h.

#include "optgen/device/operands.cuh"
#include "optgen/device/reduce.cuh"

namespace optgen {

/// Elements [begin, end) of part `block % parts` of matrix `block / parts`.
struct MatrixPart {
  long long matrix, begin, end;
};
__device__ __forceinline__ MatrixPart matrix_part(const kernel_abi::MatrixBatch& batch, long long block) {
  const long long matrix = block / batch.parts, part = block % batch.parts;
  const long long first = matrix * batch.size + part * batch.part_size;
  const long long end = (part + 1) * batch.part_size;
  const long long last = matrix * batch.size + (end < batch.size ? end : batch.size);
  return {matrix, first, last};
}

/// The sum of squares of this thread's elements of `part`, V at a time.
template <typename T, int V>
__device__ __forceinline__ float sum_squares_of(const kernel_abi::MatrixBatch& batch, const MatrixPart& part) {
  float sum = 0.0f;
  for (long long i = part.begin + V * threadIdx.x; i < part.end; i += V * blockDim.x) {
    float v[V];
    load_vector<T, V>(batch.x, i, v);
#pragma unroll
    for (int e = 0; e < V; ++e) sum += v[e] * v[e];
  }
  return sum;
}

/// This thread's elements of `part` divided by `divisor` into batch.y, V at a time.
template <typename T, int V>
__device__ __forceinline__ void divide(const kernel_abi::MatrixBatch& batch, const MatrixPart& part, float divisor) {
  for (long long i = part.begin + V * threadIdx.x; i < part.end; i += V * blockDim.x) {
    float v[V];
    load_vector<T, V>(batch.x, i, v);
#pragma unroll
    for (int e = 0; e < V; ++e) v[e] /= divisor;
    store_vector<T, V>(batch.y, i, v);
  }
}

/// Elements a vector of 16 bytes holds, where every matrix starts on 16 bytes (a size that is a
/// multiple of it: parts are multiples of 8 elements, the buffers 256-byte aligned).
template <typename T>
__device__ __forceinline__ bool vectors_fit(const kernel_abi::MatrixBatch& batch) {
  return batch.size % (16 / sizeof(T)) == 0;
}

/// Block `blockIdx.x`'s sum of squares of its part, into batch.partials.
template <typename T>
__device__ __forceinline__ void matrix_sum_squares(const kernel_abi::MatrixBatch& batch) {
  const MatrixPart part = matrix_part(batch, blockIdx.x);
  const float sum =
      vectors_fit<T>(batch) ? sum_squares_of<T, 16 / sizeof(T)>(batch, part) : sum_squares_of<T, 1>(batch, part);
  const double total = block_combine(false, static_cast<double>(sum));
  if (threadIdx.x == 0) batch.partials[blockIdx.x] = total;
}

/// Block `blockIdx.x`'s part divided by max(its matrix's norm, eps), each rounded to T as torch's
/// division of a T tensor by its norm rounds them, into batch.y. The block adds the matrix's
/// partials (threads strided, then block_combine: the same order, so the same bits, in every block).
template <typename T>
__device__ __forceinline__ void matrix_normalize(const kernel_abi::MatrixBatch& batch) {
  const MatrixPart part = matrix_part(batch, blockIdx.x);
  const double* partials = batch.partials + part.matrix * batch.parts;
  double total = 0.0;
  for (int p = threadIdx.x; p < batch.parts; p += blockDim.x) total += __ldcg(partials + p);
  total = block_combine(false, total);
  __shared__ float divisor;
  if (threadIdx.x == 0) {
    auto rounded = [](float v) { return to_float(from_float<T>(v)); };
    divisor = rounded(fmaxf(rounded(static_cast<float>(sqrt(total))), batch.eps));
  }
  __syncthreads();
  if (vectors_fit<T>(batch))
    divide<T, 16 / sizeof(T)>(batch, part, divisor);
  else
    divide<T, 1>(batch, part, divisor);
}

/// d = alpha op(a) + beta op(b), an element a thread, grid-strided (a transposed operand is read
/// across its rows: uncoalesced, for sums that programs write beside their products).
template <typename T>
__device__ __forceinline__ void matrix_combine(const kernel_abi::MatrixSum& s) {
  const long long size = s.rows * s.cols, total = size * s.count;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long matrix = i / size, at = i % size, r = at / s.cols, c = at % s.cols;
    const long long transposed = matrix * size + c * s.rows + r;
    float a, b = 0.0f;
    load_vector<T, 1>(s.a, s.transpose_a ? transposed : i, &a);
    if (s.b) load_vector<T, 1>(s.b, s.transpose_b ? transposed : i, &b);
    float d = s.alpha * a + (s.b ? s.beta * b : 0.0f);
    store_vector<T, 1>(s.d, i, &d);
  }
}

// ---- A matrix program in one block (kernel_abi::MatrixInBlock): every value a row-major matrix in
// shared memory, rows and columns padded with zeros to multiples of 16.

/// A step of the program where this block's run puts it: element offsets of its values in shared
/// memory and their row strides, out's shape, a product's inner dimension.
struct InBlockStep {
  int out, a, b, c;  ///< b and c -1 for none
  int out_ld, a_ld, b_ld;
  int rows, cols;
  int inner;
  int transpose_a, transpose_b;
  float alpha, beta;
};

/// A dimension rounded up to the 16 a value is padded to.
__device__ __forceinline__ int padded(int n) { return (n + 15) / 16 * 16; }

/// Element (r, k) of op(m), m row-major with `ld` elements a row.
template <typename T>
__device__ __forceinline__ T element_of(const T* m, int ld, bool transposed, int r, int k) {
  return transposed ? m[k * ld + r] : m[r * ld + k];
}

/// The shared-memory address of `p`, for ldmatrix.
__device__ __forceinline__ unsigned shared_address(const void* p) {
  unsigned address;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(address) : "l"(p));
  return address;
}

/// Four 8 x 8 bf16 matrices, a row of 16 bytes at each lane's `row` (lanes 8j to 8j + 7 name matrix
/// j's rows), into mma's fragment registers; `transposed`: each matrix transposed.
__device__ __forceinline__ void load_matrices(const bf16* row, bool transposed, unsigned (&r)[4]) {
  const unsigned at = shared_address(row);
  if (transposed)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(at));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(at));
}

/// d += a b of mma.m16n8k16 (bf16 in, fp32 accumulated): a's four registers, b's two.
__device__ __forceinline__ void mma_16x8x16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// out = alpha op(a) op(b) + beta c of one block: each warp a 16 x 16 tile of out at a time, two
/// mma.m16n8k16 (bf16 in, fp32 accumulated) for each 16 of the padded inner dimension, whose
/// padding adds zeros. ldmatrix loads the fragments in the PTX ISA's layouts for mma.m16n8k16 (a
/// row, b column): op(a)'s 16 x 16 block as four 8 x 8 matrices (rows 0-7 and 8-15 of columns 0-7,
/// then of columns 8-15), op(b)'s 16 x 16 as four (rows 0-7 and 8-15 of columns 0-7, then of
/// columns 8-15), each read transposed where the operand's rows are the other dimension. A row of
/// a value is 16-byte aligned and its stride an odd multiple of 16 bytes, so the eight rows of a
/// matrix fall in different banks.
__device__ __forceinline__ void product_in_block(bf16* shared, const InBlockStep& st) {
  const bf16* a = shared + st.a;
  const bf16* b = shared + st.b;
  bf16* out = shared + st.out;
  const bf16* c = st.c >= 0 ? shared + st.c : nullptr;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3, j = lane >> 3, w = lane & 7;
  const int tile_rows = padded(st.rows) / 16, tile_cols = padded(st.cols) / 16;
  const int inner = padded(st.inner);
  const bool ta = st.transpose_a != 0, tb = st.transpose_b != 0;
  for (int tile = warp; tile < tile_rows * tile_cols; tile += warps) {
    const int r0 = tile / tile_cols * 16, n0 = tile % tile_cols * 16;
    float d[2][4] = {};
    for (int k0 = 0; k0 < inner; k0 += 16) {
      unsigned fa[4], fb[4];
      // op(a) = a: lane l names row r0 + l % 16 at column k0 + 8 (l / 16); op(a) = a^T (a is k x m):
      // matrix j is a's rows k0 + 8 (j / 2) + w at column r0 + 8 (j % 2), transposed.
      load_matrices(ta ? a + (k0 + (j >> 1) * 8 + w) * st.a_ld + r0 + (j & 1) * 8
                       : a + (r0 + (lane & 15)) * st.a_ld + k0 + (lane >> 4) * 8,
                    ta, fa);
      // op(b) = b^T (b is n x k): matrix j is b's rows n0 + 8 (j / 2) + w at column k0 + 8 (j % 2);
      // op(b) = b (k x n): b's rows k0 + 8 (j % 2) + w at column n0 + 8 (j / 2), transposed.
      load_matrices(tb ? b + (n0 + (j >> 1) * 8 + w) * st.b_ld + k0 + (j & 1) * 8
                       : b + (k0 + (j & 1) * 8 + w) * st.b_ld + n0 + (j >> 1) * 8,
                    !tb, fb);
      mma_16x8x16(d[0], fa, fb[0], fb[1]);
      mma_16x8x16(d[1], fa, fb[2], fb[3]);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = r0 + g + (i >= 2 ? 8 : 0), col = n0 + 8 * h + 2 * t + (i & 1);
        const float beta_c = c ? st.beta * to_float(c[r * st.out_ld + col]) : 0.0f;
        out[r * st.out_ld + col] = from_float<bf16>(st.alpha * d[h][i] + beta_c);
      }
  }
}

/// The same in f32 on the CUDA cores, an element of out a thread at a time (no TF32, as cuBLAS's
/// 32F products); the padding written as zeros.
__device__ __forceinline__ void product_in_block(float* shared, const InBlockStep& st) {
  const float* a = shared + st.a;
  const float* b = shared + st.b;
  float* out = shared + st.out;
  const float* c = st.c >= 0 ? shared + st.c : nullptr;
  const bool ta = st.transpose_a != 0, tb = st.transpose_b != 0;
  for (int i = threadIdx.x; i < padded(st.rows) * st.out_ld; i += blockDim.x) {
    const int r = i / st.out_ld, col = i % st.out_ld;
    if (r >= st.rows || col >= st.cols) {
      out[i] = 0.0f;
      continue;
    }
    float sum = 0.0f;
    for (int k = 0; k < st.inner; ++k)
      sum = fmaf(element_of(a, st.a_ld, ta, r, k), element_of(b, st.b_ld, tb, k, col), sum);
    out[i] = st.alpha * sum + (c ? st.beta * c[i] : 0.0f);
  }
}

/// out = a / max(norm(a), eps): the sum of squares a thread's elements at a time in float, added
/// over the block in double, the norm and its maximum with eps rounded to T, as kMatrixNormalize;
/// the padding written as zeros, as every step writes its output's.
template <typename T>
__device__ __forceinline__ void normalize_in_block(T* shared, const InBlockStep& st) {
  const T* a = shared + st.a;
  T* out = shared + st.out;
  float sum = 0.0f;
  for (int i = threadIdx.x; i < st.rows * st.cols; i += blockDim.x) {
    const float v = to_float(a[i / st.cols * st.a_ld + i % st.cols]);
    sum += v * v;
  }
  const double total = block_combine(false, static_cast<double>(sum));
  __shared__ float divisor;
  if (threadIdx.x == 0) {
    auto rounded = [](float v) { return to_float(from_float<T>(v)); };
    divisor = rounded(fmaxf(rounded(static_cast<float>(sqrt(total))), st.beta));
  }
  __syncthreads();
  for (int i = threadIdx.x; i < padded(st.rows) * st.out_ld; i += blockDim.x) {
    const int r = i / st.out_ld, col = i % st.out_ld;
    out[i] = from_float<T>(r < st.rows && col < st.cols ? to_float(a[r * st.a_ld + col]) / divisor : 0.0f);
  }
}

/// out = alpha op(a) + beta op(b), the padding written as zeros.
template <typename T>
__device__ __forceinline__ void combine_in_block(T* shared, const InBlockStep& st) {
  for (int i = threadIdx.x; i < padded(st.rows) * st.out_ld; i += blockDim.x) {
    const int r = i / st.out_ld, col = i % st.out_ld;
    float v = 0.0f;
    if (r < st.rows && col < st.cols) {
      v = st.alpha * to_float(element_of(shared + st.a, st.a_ld, st.transpose_a != 0, r, col));
      if (st.b >= 0) v += st.beta * to_float(element_of(shared + st.b, st.b_ld, st.transpose_b != 0, r, col));
    }
    shared[st.out + i] = from_float<T>(v);
  }
}

/// Where element i of a matrix as stored is in its view's shared-memory copy (rows of `ld`
/// elements): row i / cols, column i % cols; or, where the view is the stored matrix's transpose (a
/// tall matrix's), row i % rows, column i / rows. Threads walk the stored order: global accesses
/// coalesce either way.
__device__ __forceinline__ int view_offset(const kernel_abi::MatrixInBlockRun& run, int i, int ld) {
  return run.column_major ? i % run.rows * ld + i / run.rows : i / run.cols * ld + i % run.cols;
}

/// Where a block's buffers lie for its run's shape: each one's element offset, row stride, rows and
/// columns.
struct InBlockBuffers {
  int offset[kernel_abi::kMatrixInBlockBuffers], ld[kernel_abi::kMatrixInBlockBuffers];
  int rows[kernel_abi::kMatrixInBlockBuffers], cols[kernel_abi::kMatrixInBlockBuffers];
  int elements;  ///< of them all
};

/// Block `blockIdx.x`: its run found, its matrix loaded into shared memory, the program's steps, the
/// result stored.
template <typename T>
__device__ __forceinline__ void matrix_program_in_block(const kernel_abi::MatrixInBlock& p) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  T* shared = reinterpret_cast<T*>(shared_bytes);
  int k = 0;
  while (k + 1 < p.num_runs && p.runs[k + 1].first <= static_cast<int>(blockIdx.x)) ++k;
  const kernel_abi::MatrixInBlockRun& run = p.runs[k];
  __shared__ InBlockBuffers buffers;
  if (threadIdx.x == 0) {
    int at = 0;
    for (int b = 0; b < p.num_buffers; ++b) {
      const int rows = p.buffer_rows[b] == kernel_abi::kViewRows ? run.rows : run.cols;
      const int cols = p.buffer_cols[b] == kernel_abi::kViewRows ? run.rows : run.cols;
      buffers.offset[b] = at;
      buffers.ld[b] = padded(cols) + 8;
      buffers.rows[b] = rows;
      buffers.cols[b] = cols;
      at += padded(rows) * buffers.ld[b];  // a multiple of 8 elements: each row starts on 16 bytes
    }
    buffers.elements = at;
  }
  __syncthreads();
  const long long m = static_cast<int>(blockIdx.x) - run.first;
  T* x = static_cast<T*>(run.x);
  for (int i = threadIdx.x; i < buffers.elements; i += blockDim.x) shared[i] = from_float<T>(0.0f);
  __syncthreads();
  const long long first = m * run.rows * run.cols;
  for (int i = threadIdx.x; i < run.rows * run.cols; i += blockDim.x)
    shared[buffers.offset[p.argument] + view_offset(run, i, buffers.ld[p.argument])] = x[first + i];
  __syncthreads();
  for (int s = 0; s < p.num_steps; ++s) {
    const kernel_abi::MatrixStep& step = p.steps[s];
    auto at = [&](int b) { return b < 0 ? -1 : buffers.offset[b]; };
    auto ld = [&](int b) { return b < 0 ? 0 : buffers.ld[b]; };
    const InBlockStep st{at(step.out),
                         at(step.a),
                         at(step.b),
                         at(step.c),
                         ld(step.out),
                         ld(step.a),
                         ld(step.b),
                         buffers.rows[step.out],
                         buffers.cols[step.out],
                         step.transpose_a ? buffers.rows[step.a] : buffers.cols[step.a],
                         step.transpose_a,
                         step.transpose_b,
                         step.alpha,
                         step.beta};
    switch (step.op) {
      case kernel_abi::kNormalizeStep: normalize_in_block(shared, st); break;
      case kernel_abi::kProductStep: product_in_block(shared, st); break;
      case kernel_abi::kCombineStep: combine_in_block(shared, st); break;
      default: break;
    }
    __syncthreads();
  }
  for (int i = threadIdx.x; i < run.rows * run.cols; i += blockDim.x)
    x[first + i] = shared[buffers.offset[p.result] + view_offset(run, i, buffers.ld[p.result])];
}

/// kernel_abi::ColumnSplit: a block's share of one tensor's units, in units of U. A unit j
/// of the pieces is (matrix b, piece p, row r, unit c) in that order; the same value of the whole
/// tensor is row b * rows + r, unit p * width + c.
template <typename U>
__device__ __forceinline__ void move_column_splits(const kernel_abi::ColumnSplit& s, bool to_pieces) {
  U* whole = static_cast<U*>(s.whole);
  U* pieces = static_cast<U*>(s.pieces);
  const long long units = s.batch * s.splits * s.rows * s.width;
  for (long long j = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; j < units;
       j += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long c = j % s.width, q = j / s.width;
    const long long r = q % s.rows, m = q / s.rows;
    const long long p = m % s.splits, b = m / s.splits;
    const long long w = ((b * s.rows + r) * s.splits + p) * s.width + c;
    if (to_pieces)
      pieces[j] = whole[w];
    else
      whole[w] = pieces[j];
  }
}

}  // namespace optgen

extern "C" __global__ void __launch_bounds__(optgen::kernel_abi::kMatrixKernelBlock)
    optgen_matrix_program_in_block(const optgen::kernel_abi::MatrixInBlock program) {
  optgen::matrix_program_in_block<optgen::bf16>(program);
}

extern "C" __global__ void __launch_bounds__(optgen::kernel_abi::kMatrixKernelBlock)
    optgen_matrix_program_in_block_f32(const optgen::kernel_abi::MatrixInBlock program) {
  optgen::matrix_program_in_block<float>(program);
}

extern "C" __global__ void __launch_bounds__(optgen::kernel_abi::kMatrixKernelBlock)
    optgen_matrix_combine(const optgen::kernel_abi::MatrixSum sum) {
  optgen::matrix_combine<optgen::bf16>(sum);
}

extern "C" __global__ void __launch_bounds__(optgen::kernel_abi::kMatrixKernelBlock)
    optgen_matrix_combine_f32(const optgen::kernel_abi::MatrixSum sum) {
  optgen::matrix_combine<float>(sum);
}

extern "C" __global__ void __launch_bounds__(optgen::kernel_abi::kMatrixKernelBlock)
    optgen_matrix_sum_squares(const optgen::kernel_abi::MatrixBatch batch) {
  optgen::matrix_sum_squares<optgen::bf16>(batch);
}

extern "C" __global__ void __launch_bounds__(optgen::kernel_abi::kMatrixKernelBlock)
    optgen_matrix_normalize(const optgen::kernel_abi::MatrixBatch batch) {
  optgen::matrix_normalize<optgen::bf16>(batch);
}

extern "C" __global__ void __launch_bounds__(optgen::kernel_abi::kMatrixKernelBlock)
    optgen_matrix_sum_squares_f32(const optgen::kernel_abi::MatrixBatch batch) {
  optgen::matrix_sum_squares<float>(batch);
}

extern "C" __global__ void __launch_bounds__(optgen::kernel_abi::kMatrixKernelBlock)
    optgen_matrix_normalize_f32(const optgen::kernel_abi::MatrixBatch batch) {
  optgen::matrix_normalize<float>(batch);
}

extern "C" __global__ void __launch_bounds__(optgen::kernel_abi::kMatrixKernelBlock)
    optgen_matrix_column_splits(const optgen::kernel_abi::ColumnSplit* splits, int count, int to_pieces) {
  for (int e = 0; e < count; ++e) {
    const optgen::kernel_abi::ColumnSplit s = splits[e];
    switch (s.unit_bytes) {
      case 16: optgen::move_column_splits<uint4>(s, to_pieces != 0); break;
      case 8: optgen::move_column_splits<uint2>(s, to_pieces != 0); break;
      case 4: optgen::move_column_splits<unsigned int>(s, to_pieces != 0); break;
      default: optgen::move_column_splits<unsigned short>(s, to_pieces != 0); break;
    }
  }
}
