// Batched Newton–Schulz through cuBLAS (optgen/newton_schulz.h) against the same iteration on the
// CPU: in float with every product rounded to bf16, as torch.optim.Muon computes it on bf16
// tensors, and in double, the exact iteration.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "gpu.h"
#include "optgen/newton_schulz.h"
#include "optimizer_harness.h"

using namespace optgen_test;

namespace {

/// One matrix's iteration on the CPU, row-major m x n, in T; `round` applied to every product's
/// result (bf16 rounding, or none).
template <typename T, typename Round>
std::vector<T> newton_schulz_cpu(std::vector<T> x, int m, int n, const optgen::NewtonSchulz& ns, Round round) {
  std::vector<T> g(static_cast<size_t>(m) * m), u(g.size()), next(x.size());
  for (int step = 0; step < ns.steps; ++step) {
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < m; ++j) {
        T s = 0;
        for (int k = 0; k < n; ++k) s += x[i * n + k] * x[j * n + k];
        g[i * m + j] = round(s);
      }
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < m; ++j) {
        T s = 0;
        for (int k = 0; k < m; ++k) s += g[i * m + k] * g[k * m + j];
        u[i * m + j] = round(T(ns.b) * g[i * m + j] + T(ns.c) * s);
      }
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        T s = 0;
        for (int k = 0; k < m; ++k) s += u[i * m + k] * x[k * n + j];
        next[i * n + j] = round(T(ns.a) * x[i * n + j] + s);
      }
    std::swap(x, next);
  }
  return x;
}

/// max |a - b| / max |b|.
template <typename A, typename B>
double relative(const std::vector<A>& a, const std::vector<B>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

}  // namespace

TEST_CASE("batched Newton-Schulz through cuBLAS matches the iteration on the CPU", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  if (std::string why; !optgen::cublas::available(&why)) {
    record_skip(Catch::getResultCapture().getCurrentTestName(), "no cuBLAS: " + why);
    return;
  }
  const optgen::cublas::Handle handle;
  std::mt19937 rng(33);
  std::normal_distribution<float> normal;
  const optgen::NewtonSchulz ns;  // torch.optim.Muon's defaults: 5 steps, (3.4445, -4.7750, 2.0315)
  struct Shape {
    int count, rows, cols;
  };
  // Wide, square, a row, tall (orthogonalised transposed, as torch does), one column.
  for (const Shape& s : {Shape{3, 64, 192}, Shape{2, 96, 96}, Shape{1, 1, 33}, Shape{4, 50, 17}, Shape{2, 9, 1}}) {
    INFO(s.count << " matrices of " << s.rows << " x " << s.cols);
    const size_t size = static_cast<size_t>(s.rows) * s.cols;
    // Each matrix normalised by its Frobenius norm, then rounded to bf16, as torch's input is.
    std::vector<float> x(size * s.count);
    for (int b = 0; b < s.count; ++b) {
      double norm = 0;
      for (size_t i = 0; i < size; ++i) norm += std::pow(x[b * size + i] = normal(rng), 2);
      for (size_t i = 0; i < size; ++i)
        x[b * size + i] = round_to(DType::BF16, static_cast<float>(x[b * size + i] / std::sqrt(norm)));
    }
    DeviceMemory on_device(x.size() * 2), scratch(optgen::newton_schulz_scratch_bytes(s.count, s.rows, s.cols));
    upload(DType::BF16, on_device.at(0), x);
    optgen::newton_schulz(handle, on_device.get(), scratch.get(), s.count, s.rows, s.cols, ns, nullptr);
    synchronize();
    const std::vector<float> gpu = download(DType::BF16, on_device.at(0), x.size());
    const bool tall = s.rows > s.cols;
    const int m = std::min(s.rows, s.cols), n = std::max(s.rows, s.cols);
    for (int b = 0; b < s.count; ++b) {
      INFO("matrix " << b);
      // X: the matrix, or its transpose when tall; the result is compared in the same orientation.
      std::vector<float> in(size), out(size);
      for (int r = 0; r < s.rows; ++r)
        for (int c = 0; c < s.cols; ++c) {
          const size_t at = tall ? static_cast<size_t>(c) * s.rows + r : static_cast<size_t>(r) * s.cols + c;
          in[at] = x[b * size + r * s.cols + c];
          out[at] = gpu[b * size + r * s.cols + c];
        }
      const auto bf16 = newton_schulz_cpu<float>(in, m, n, ns, [](float v) { return round_to(DType::BF16, v); });
      const auto exact =
          newton_schulz_cpu<double>(std::vector<double>(in.begin(), in.end()), m, n, ns, [](double v) { return v; });
      // The GPU sums each product in another order than the CPU, and a bf16 rounding that goes
      // the other way is 2^-8 of the value; five steps carry it on.
      CHECK(relative(out, bf16) <= 3e-2);
      CHECK(relative(out, exact) <= 6e-2);
      CHECK(relative(bf16, exact) <= 6e-2);
    }
  }
}

TEST_CASE("batched Newton-Schulz in f32 through cuBLAS follows the exact iteration closely", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  if (std::string why; !optgen::cublas::available(&why)) {
    record_skip(Catch::getResultCapture().getCurrentTestName(), "no cuBLAS: " + why);
    return;
  }
  const optgen::cublas::Handle handle;
  std::mt19937 rng(34);
  std::normal_distribution<float> normal;
  optgen::NewtonSchulz ns;
  ns.dtype = DType::F32;
  struct Shape {
    int count, rows, cols;
  };
  for (const Shape& s : {Shape{3, 64, 192}, Shape{4, 50, 17}, Shape{1, 1, 33}}) {
    INFO(s.count << " matrices of " << s.rows << " x " << s.cols);
    const size_t size = static_cast<size_t>(s.rows) * s.cols;
    std::vector<float> x(size * s.count);
    for (int b = 0; b < s.count; ++b) {
      double norm = 0;
      for (size_t i = 0; i < size; ++i) norm += std::pow(x[b * size + i] = normal(rng), 2);
      for (size_t i = 0; i < size; ++i) x[b * size + i] = static_cast<float>(x[b * size + i] / std::sqrt(norm));
    }
    DeviceMemory on_device(x.size() * 4),
        scratch(optgen::newton_schulz_scratch_bytes(s.count, s.rows, s.cols, DType::F32));
    upload(DType::F32, on_device.at(0), x);
    optgen::newton_schulz(handle, on_device.get(), scratch.get(), s.count, s.rows, s.cols, ns, nullptr);
    synchronize();
    const std::vector<float> gpu = download(DType::F32, on_device.at(0), x.size());
    const bool tall = s.rows > s.cols;
    const int m = std::min(s.rows, s.cols), n = std::max(s.rows, s.cols);
    for (int b = 0; b < s.count; ++b) {
      INFO("matrix " << b);
      std::vector<double> in(size);
      std::vector<float> out(size);
      for (int r = 0; r < s.rows; ++r)
        for (int c = 0; c < s.cols; ++c) {
          const size_t at = tall ? static_cast<size_t>(c) * s.rows + r : static_cast<size_t>(r) * s.cols + c;
          in[at] = x[b * size + r * s.cols + c];
          out[at] = gpu[b * size + r * s.cols + c];
        }
      const auto exact = newton_schulz_cpu<double>(in, m, n, ns, [](double v) { return v; });
      // f32 products (no TF32) summed in another order than the CPU's: float rounding, carried
      // through five steps, far inside bf16's 6e-2.
      CHECK(relative(out, exact) <= 1e-4);
    }
  }
  CHECK_THROWS_WITH(optgen::newton_schulz_scratch_bytes(1, 2, 2, DType::F16),
                    Catch::Contains("Newton-Schulz runs in bf16 or f32, not f16"));
}
