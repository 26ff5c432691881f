#include "optgen/newton_schulz.h"

#include <algorithm>
#include <climits>
#include <utility>

#include "optgen/driver.h"
#include "optgen/error.h"

namespace optgen {
namespace {

/// The bytes of an element of `dtype`, which must be BF16 or F32.
size_t element_bytes(DType dtype, const char* call) {
  if (dtype != DType::BF16 && dtype != DType::F32)
    throw Error(call, std::string("Newton-Schulz runs in bf16 or f32, not ") + to_string(dtype));
  return size_of(dtype);
}

}  // namespace

size_t newton_schulz_scratch_bytes(long long count, int rows, int cols, DType dtype) {
  const auto c = static_cast<size_t>(count), m = static_cast<size_t>(std::min(rows, cols));
  return element_bytes(dtype, "optgen::newton_schulz_scratch_bytes") * c *
         (static_cast<size_t>(rows) * static_cast<size_t>(cols) + 2 * m * m);
}

// cuBLAS is column-major. X is m x n, m <= n. A wide matrix (rows <= cols) is X itself, row-major:
// to cuBLAS the n x m Xᵀ, and G = X Xᵀ is the product (Xᵀ)ᵀ Xᵀ, X' = a X + U X is Xᵀ' = a Xᵀ + Xᵀ U
// (U = b G + c G G is symmetric). A tall one (rows > cols) is Xᵀ row-major, which is X itself to
// cuBLAS, ld m: G = X Xᵀ and X' = a X + U X as written. Each product writes a buffer apart from the
// terms it adds (cublasLt's D apart from C): X and the scratch's X take turns, and nothing is copied
// but, where the result ends in the scratch, the result back into place.
int newton_schulz(const cublas::Handle& handle, CUdeviceptr x, CUdeviceptr scratch, long long count, int rows, int cols,
                  const NewtonSchulz& ns, CUstream stream, bool input_in_scratch) {
  if (rows < 1 || cols < 1 || count < 1 || count > INT_MAX)
    throw Error("optgen::newton_schulz", std::to_string(count) + " matrices of " + std::to_string(rows) + " x " +
                                             std::to_string(cols) + ": give from 1 to 2^31 - 1, of at least 1 x 1");
  using cublas::kOpN;
  using cublas::kOpT;
  const bool tall = rows > cols;
  const int m = std::min(rows, cols), n = std::max(rows, cols);
  const long long mn = static_cast<long long>(m) * n, mm = static_cast<long long>(m) * m;
  const int batch = static_cast<int>(count);
  const size_t element = element_bytes(ns.dtype, "optgen::newton_schulz");
  const size_t x_bytes = element * static_cast<size_t>(count * mn), g_bytes = element * static_cast<size_t>(count * mm);
  const int type = ns.dtype == DType::F32 ? cublas::kF32 : cublas::kBF16;
  const CUdeviceptr g = scratch + x_bytes, u = g + g_bytes;
  // G = X Xᵀ; U = b G + c G G; X' = a X + U X.
  const cublas::Product gram = tall ? cublas::Product{kOpN, kOpT, m, m, n, m, m, m, mn, mn, mm, batch, type}
                                    : cublas::Product{kOpT, kOpN, m, m, n, n, n, m, mn, mn, mm, batch, type};
  const cublas::Product square{kOpN, kOpN, m, m, m, m, m, m, mm, mm, mm, batch, type};
  const cublas::Product apply = tall ? cublas::Product{kOpN, kOpN, m, n, m, m, m, m, mm, mn, mn, batch, type}
                                     : cublas::Product{kOpN, kOpN, n, m, m, n, m, n, mn, mm, mn, batch, type};
  CUdeviceptr current = input_in_scratch ? scratch : x, next = input_in_scratch ? x : scratch;
  int enqueued = 0;
  for (int step = 0; step < ns.steps; ++step, enqueued += 3) {
    handle.multiply(gram, 1.0f, current, current, 0.0f, g, g, stream);
    handle.multiply(square, ns.c, g, g, ns.b, g, u, stream);
    if (tall)
      handle.multiply(apply, 1.0f, u, current, ns.a, current, next, stream);
    else
      handle.multiply(apply, 1.0f, current, u, ns.a, current, next, stream);
    std::swap(current, next);
  }
  if (current == x) return enqueued;
  driver::check(driver::api().cuMemcpyDtoDAsync(x, current, x_bytes, stream), "cuMemcpyDtoDAsync");
  return enqueued + 1;
}

}  // namespace optgen
