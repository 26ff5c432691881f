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

struct Shape {
  int count, rows, cols;
};

/// One matrix of a batch before and after the GPU's iteration, each as X: the matrix, or its
/// transpose when tall (the orientation the iteration runs in, on the CPU too).
struct Orthogonalised {
  std::vector<float> in, out;
};

/// `s.count` random matrices, each normalised by its Frobenius norm and rounded to ns.dtype (as
/// the step's input is), orthogonalised by the GPU's batched iteration into their buffer: from
/// there, or (`from_scratch`) from the start of the scratch, as the step's norm kernels leave them
/// for an odd number of steps.
std::vector<Orthogonalised> orthogonalise(const optgen::cublas::Handle& handle, const optgen::NewtonSchulz& ns,
                                          const Shape& s, std::mt19937& rng, std::normal_distribution<float>& normal,
                                          bool from_scratch = false) {
  const size_t size = static_cast<size_t>(s.rows) * s.cols;
  std::vector<float> x(size * s.count);
  for (int b = 0; b < s.count; ++b) {
    double norm = 0;
    for (size_t i = 0; i < size; ++i) norm += std::pow(x[b * size + i] = normal(rng), 2);
    for (size_t i = 0; i < size; ++i)
      x[b * size + i] = round_to(ns.dtype, static_cast<float>(x[b * size + i] / std::sqrt(norm)));
  }
  DeviceMemory on_device(x.size() * optgen::size_of(ns.dtype)),
      scratch(optgen::newton_schulz_scratch_bytes(s.count, s.rows, s.cols, ns.dtype));
  upload(ns.dtype, on_device.at(0), from_scratch ? std::vector<float>(x.size(), NAN) : x);
  if (from_scratch) upload(ns.dtype, scratch.at(0), x);
  optgen::newton_schulz(handle, on_device.get(), scratch.get(), s.count, s.rows, s.cols, ns, nullptr, from_scratch);
  synchronize();
  const std::vector<float> gpu = download(ns.dtype, on_device.at(0), x.size());
  const bool tall = s.rows > s.cols;
  std::vector<Orthogonalised> result(static_cast<size_t>(s.count),
                                     {std::vector<float>(size), std::vector<float>(size)});
  for (int b = 0; b < s.count; ++b)
    for (int r = 0; r < s.rows; ++r)
      for (int c = 0; c < s.cols; ++c) {
        const size_t at = tall ? static_cast<size_t>(c) * s.rows + r : static_cast<size_t>(r) * s.cols + c;
        result[b].in[at] = x[b * size + r * s.cols + c];
        result[b].out[at] = gpu[b * size + r * s.cols + c];
      }
  return result;
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
  // Wide, square, a row, tall (orthogonalised transposed, as torch does), one column.
  for (const Shape& s : {Shape{3, 64, 192}, Shape{2, 96, 96}, Shape{1, 1, 33}, Shape{4, 50, 17}, Shape{2, 9, 1}}) {
    INFO(s.count << " matrices of " << s.rows << " x " << s.cols);
    const int m = std::min(s.rows, s.cols), n = std::max(s.rows, s.cols);
    const std::vector<Orthogonalised> batch = orthogonalise(handle, ns, s, rng, normal);
    for (size_t b = 0; b < batch.size(); ++b) {
      INFO("matrix " << b);
      const std::vector<float>& in = batch[b].in;
      const std::vector<float>& out = batch[b].out;
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
  for (const Shape& s : {Shape{3, 64, 192}, Shape{4, 50, 17}, Shape{1, 1, 33}}) {
    INFO(s.count << " matrices of " << s.rows << " x " << s.cols);
    const int m = std::min(s.rows, s.cols), n = std::max(s.rows, s.cols);
    const std::vector<Orthogonalised> batch = orthogonalise(handle, ns, s, rng, normal);
    for (size_t b = 0; b < batch.size(); ++b) {
      INFO("matrix " << b);
      const std::vector<float>& out = batch[b].out;
      const auto exact = newton_schulz_cpu<double>(std::vector<double>(batch[b].in.begin(), batch[b].in.end()), m, n,
                                                   ns, [](double v) { return v; });
      // f32 products (no TF32) summed in another order than the CPU's: float rounding, carried
      // through five steps, far inside bf16's 6e-2.
      CHECK(relative(out, exact) <= 1e-4);
    }
  }
  CHECK_THROWS_WITH(optgen::newton_schulz_scratch_bytes(1, 2, 2, DType::F16),
                    Catch::Contains("Newton-Schulz runs in bf16 or f32, not f16"));
}

TEST_CASE("Newton-Schulz from the scratch ends in the matrices' buffer, as from there", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  if (std::string why; !optgen::cublas::available(&why)) {
    record_skip(Catch::getResultCapture().getCurrentTestName(), "no cuBLAS: " + why);
    return;
  }
  const optgen::cublas::Handle handle;
  // Odd steps from the scratch end in x with no copy; even ones copy back; none copies the input.
  for (const int steps : {5, 4, 1, 0})
    for (const Shape& s : {Shape{3, 64, 192}, Shape{4, 50, 17}}) {
      INFO(steps << " steps, " << s.count << " matrices of " << s.rows << " x " << s.cols);
      optgen::NewtonSchulz ns;
      ns.steps = steps;
      std::mt19937 rng(35), same(35);
      std::normal_distribution<float> normal, same_normal;
      const std::vector<Orthogonalised> from_x = orthogonalise(handle, ns, s, rng, normal);
      const std::vector<Orthogonalised> from_scratch = orthogonalise(handle, ns, s, same, same_normal, true);
      for (size_t b = 0; b < from_x.size(); ++b) CHECK(from_scratch[b].out == from_x[b].out);
    }
}
