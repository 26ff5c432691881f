#pragma once
/// Batched Newton–Schulz orthogonalisation of bf16 matrices through cuBLAS (optgen/cublas.h): the
/// loop of torch.optim.Muon's _zeropower_via_newtonschulz (torch 2.11) for many matrices of one
/// shape at once, from its normalised input on: `steps` times G = X Xᵀ, U = b G + c G G,
/// X = a X + U X, each product one strided-batched GEMM over the matrices, bf16 in and out with fp32
/// accumulation, as torch's products of bf16 tensors are.

#include <cuda.h>

#include <cstddef>

#include "optgen/cublas.h"
#include "optgen/dtype.h"

namespace optgen {

/// The iteration's steps and coefficients (torch.optim.Muon's ns_steps, ns_coefficients), and the
/// dtype of its matrices and products: BF16 with fp32 accumulation, as torch's, or F32 throughout.
struct NewtonSchulz {
  int steps = 5;
  float a = 3.4445f, b = -4.7750f, c = 2.0315f;
  DType dtype = DType::BF16;
};

/// Bytes of scratch newton_schulz needs for `count` matrices of `rows` x `cols` of `dtype`: a
/// second X, G and U.
size_t newton_schulz_scratch_bytes(long long count, int rows, int cols, DType dtype = DType::BF16);

/// Orthogonalises `count` row-major `rows` x `cols` matrices of ns.dtype, consecutive at `x`, in place, as
/// torch does each: a matrix of more rows than columns transposed first and back after (here by
/// reading it column-major: nothing is moved). `scratch` holds newton_schulz_scratch_bytes; where
/// `input_in_scratch`, the input is its first count * rows * cols elements instead of x's (the
/// result still lands in x).
/// Enqueued on `stream`: three GEMMs a step (cublasLt, each writing apart from what it reads, so
/// the steps alternate between x and the scratch), and one copy of the result to x where it ends in
/// the scratch (an odd number of steps from x, an even one from the scratch); capturable in a CUDA
/// graph. Returns how many it enqueued (products and the copy), 0 for no matrices.
int newton_schulz(const cublas::Handle& handle, CUdeviceptr x, CUdeviceptr scratch, long long count, int rows, int cols,
                  const NewtonSchulz& ns, CUstream stream, bool input_in_scratch = false);

}  // namespace optgen
