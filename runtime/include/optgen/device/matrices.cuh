#pragma once
/// optgen's device library: the kernels around cuBLAS's products of a matrix function
/// (kernel_abi::MatrixBatch): each matrix of a batch divided by max(its Frobenius norm, eps), as
/// torch.optim.Muon's _zeropower_via_newtonschulz does before its iteration: of a bf16 matrix, the
/// norm summed in higher precision and rounded to bf16, as is its maximum with eps. A generated kernel
/// source includes this header when its spec has a matrix value; the runtime launches the two
/// kernels by their names in kernel_abi.h.

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

}  // namespace optgen

extern "C" __global__ void __launch_bounds__(optgen::kernel_abi::kMatrixKernelBlock)
    optgen_matrix_sum_squares(const optgen::kernel_abi::MatrixBatch batch) {
  const optgen::MatrixPart part = optgen::matrix_part(batch, blockIdx.x);
  const optgen::bf16* x = static_cast<const optgen::bf16*>(batch.x);
  float sum = 0.0f;
  for (long long i = part.begin + threadIdx.x; i < part.end; i += blockDim.x) {
    const float v = optgen::to_float(x[i]);
    sum += v * v;
  }
  const double total = optgen::block_combine(false, static_cast<double>(sum));
  if (threadIdx.x == 0) batch.partials[blockIdx.x] = total;
}

extern "C" __global__ void __launch_bounds__(optgen::kernel_abi::kMatrixKernelBlock)
    optgen_matrix_normalize(const optgen::kernel_abi::MatrixBatch batch) {
  const optgen::MatrixPart part = optgen::matrix_part(batch, blockIdx.x);
  __shared__ float divisor;
  if (threadIdx.x == 0) {
    double total = 0.0;  // the matrix's partials in part order: the same bits in every block
    const double* partials = batch.partials + part.matrix * batch.parts;
    for (int p = 0; p < batch.parts; ++p) total += partials[p];
    auto rounded = [](float v) { return optgen::to_float(optgen::from_float<optgen::bf16>(v)); };
    divisor = rounded(fmaxf(rounded(static_cast<float>(sqrt(total))), batch.eps));
  }
  __syncthreads();
  optgen::bf16* x = static_cast<optgen::bf16*>(batch.x);
  for (long long i = part.begin + threadIdx.x; i < part.end; i += blockDim.x)
    x[i] = optgen::from_float<optgen::bf16>(optgen::to_float(x[i]) / divisor);
}
