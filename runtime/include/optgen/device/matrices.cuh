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

}  // namespace optgen

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
