#include "optgen/newton_schulz.h"

#include <algorithm>
#include <climits>
#include <utility>

#include "optgen/driver.h"
#include "optgen/error.h"

namespace optgen {
namespace {

constexpr size_t kBF16 = 2;  // bytes

}  // namespace

size_t newton_schulz_scratch_bytes(long long count, int rows, int cols) {
  const auto c = static_cast<size_t>(count), m = static_cast<size_t>(std::min(rows, cols));
  return kBF16 * c * (static_cast<size_t>(rows) * static_cast<size_t>(cols) + 2 * m * m);
}

// cuBLAS is column-major. X is m x n, m <= n. A wide matrix (rows <= cols) is X itself, row-major:
// to cuBLAS the n x m Xᵀ, and G = X Xᵀ is the product (Xᵀ)ᵀ Xᵀ, X' = a X + U X is Xᵀ' = a Xᵀ + Xᵀ U
// (U = b G + c G G is symmetric). A tall one (rows > cols) is Xᵀ row-major, which is X itself to
// cuBLAS, ld m: G = X Xᵀ and X' = a X + U X as written.
void newton_schulz(const cublas::Handle& handle, CUdeviceptr x, CUdeviceptr scratch, long long count, int rows,
                   int cols, const NewtonSchulz& ns, CUstream stream) {
  if (rows < 1 || cols < 1 || count < 1 || count > INT_MAX)
    throw Error("optgen::newton_schulz", std::to_string(count) + " matrices of " + std::to_string(rows) + " x " +
                                             std::to_string(cols) + ": give from 1 to 2^31 - 1, of at least 1 x 1");
  const cublas::Api& api = cublas::api();
  const driver::Api& cuda = driver::api();
  cublas::HandlePointer h = handle.on(stream);
  const bool tall = rows > cols;
  const int m = std::min(rows, cols), n = std::max(rows, cols);
  const long long mn = static_cast<long long>(m) * n, mm = static_cast<long long>(m) * m;
  const int batch = static_cast<int>(count);
  const size_t x_bytes = kBF16 * static_cast<size_t>(count * mn), g_bytes = kBF16 * static_cast<size_t>(count * mm);
  CUdeviceptr other = scratch, g = scratch + x_bytes, u = g + g_bytes;
  const float one = 1.0f, zero = 0.0f;
  auto gemm = [&](int ta, int tb, int r, int c, int inner, const float* alpha, CUdeviceptr a, int lda, long long sa,
                  CUdeviceptr b, int ldb, long long sb, const float* beta, CUdeviceptr out, int ldc, long long sc) {
    cublas::check(api.GemmStridedBatchedEx(h, ta, tb, r, c, inner, alpha, reinterpret_cast<const void*>(a),
                                           cublas::kBF16, lda, sa, reinterpret_cast<const void*>(b), cublas::kBF16, ldb,
                                           sb, beta, reinterpret_cast<void*>(out), cublas::kBF16, ldc, sc, batch,
                                           cublas::kCompute32F, cublas::kGemmDefault),
                  "cublasGemmStridedBatchedEx");
  };
  auto copy = [&](CUdeviceptr to, CUdeviceptr from, size_t bytes) {
    driver::check(cuda.cuMemcpyDtoDAsync(to, from, bytes, stream), "cuMemcpyDtoDAsync");
  };
  const CUdeviceptr given = x;
  for (int step = 0; step < ns.steps; ++step) {
    // G = X Xᵀ
    if (tall)
      gemm(cublas::kOpN, cublas::kOpT, m, m, n, &one, x, m, mn, x, m, mn, &zero, g, m, mm);
    else
      gemm(cublas::kOpT, cublas::kOpN, m, m, n, &one, x, n, mn, x, n, mn, &zero, g, m, mm);
    // U = b G + c G G
    copy(u, g, g_bytes);
    gemm(cublas::kOpN, cublas::kOpN, m, m, m, &ns.c, g, m, mm, g, m, mm, &ns.b, u, m, mm);
    // X = a X + U X
    copy(other, x, x_bytes);
    if (tall)
      gemm(cublas::kOpN, cublas::kOpN, m, n, m, &one, u, m, mm, x, m, mn, &ns.a, other, m, mn);
    else
      gemm(cublas::kOpN, cublas::kOpN, n, m, m, &one, x, n, mn, u, m, mm, &ns.a, other, n, mn);
    std::swap(x, other);
  }
  if (x != given) copy(given, x, x_bytes);
}

}  // namespace optgen
