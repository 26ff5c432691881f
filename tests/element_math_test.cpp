// optgen/element_math.h: CheckedMath's branch-free division and square root give the IEEE result
// (the host's a / b and std::sqrt, correctly rounded) wherever they say exact(), say so for every
// operand in their documented range and for no other; IeeeMath is IEEE throughout.
// The header also compiles alone with NVRTC ([nvrtc]).

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "device_source.h"
#include "gpu.h"
#include "optgen/driver.h"
#include "optgen/kernel_images.h"
#include "optgen/nvrtc.h"

namespace {

using optgen_test::bits_of;
using optgen_test::float_of;

std::string element_math_header() { return optgen_test::device_header("optgen/element_math.h"); }

/// The header included by a kernel source, as the device library includes it: each thread
/// divides a[i] by b[i], takes the root of a[i] and divides that root by b[i], each both ways.
std::string element_math_kernel_source() {
  return R"(#include "optgen/element_math.h"
extern "C" __global__ void element_math_check(long long n, const float* a, const float* b, float* checked_div,
                                              int* div_exact, float* ieee_div, float* checked_sqrt,
                                              int* sqrt_exact, float* ieee_sqrt, float* checked_root_div,
                                              int* root_div_exact, float* ieee_root_div) {
  const long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const optgen::IeeeMath ieee;
  optgen::CheckedMath division;
  checked_div[i] = division.div(a[i], b[i]);
  div_exact[i] = division.exact();
  ieee_div[i] = ieee.div(a[i], b[i]);
  optgen::CheckedMath root;
  checked_sqrt[i] = root.sqrt(a[i]);
  sqrt_exact[i] = root.exact();
  ieee_sqrt[i] = ieee.sqrt(a[i]);
  optgen::CheckedMath root_division;
  checked_root_div[i] = root_division.div(root_division.sqrt(a[i]), b[i]);
  root_div_exact[i] = root_division.exact();
  ieee_root_div[i] = ieee.div(ieee.sqrt(a[i]), b[i]);
}
)";
}

/// The kernels' options that matter here (optgen/kernel_images.h's build passes the same).
const std::vector<std::string> kOptions = {"--std=c++17", "--fmad=false"};

/// A float of random sign and mantissa with its exponent uniform in [lo, hi).
float random_in_binades(std::mt19937& generator, int lo, int hi) {
  const int exponent = std::uniform_int_distribution<int>(lo, hi - 1)(generator);
  const std::uint32_t mantissa = static_cast<std::uint32_t>(generator()) & 0x7fffffu;
  const std::uint32_t sign = (generator() & 1u) << 31;
  return float_of(sign | static_cast<std::uint32_t>(exponent + 127) << 23 | mantissa);
}

/// CheckedMath's documented ranges (element_math.h): |x| in [2^-60, 2^60) for a division's
/// operands (and +0 for its dividend); x normal in [2^-101, 2^120), or +0, for a square root; and
/// for a root divided by b, the root's operand and b (the root itself is always in range).
bool division_in_range(float a, float b) {
  const auto in = [](float x) { return std::fabs(x) >= std::ldexp(1.0f, -60) && std::fabs(x) < std::ldexp(1.0f, 60); };
  return in(b) && (in(a) || bits_of(a) == 0u);
}
bool sqrt_in_range(float x) {
  const std::uint32_t u = bits_of(x);
  return u == 0u || (u >= 0x0d000000u && u < 0x7b800000u);
}
bool root_division_in_range(float a, float b) { return sqrt_in_range(a) && division_in_range(1.0f, b); }

bool same(float x, float y) { return bits_of(x) == bits_of(y) || (std::isnan(x) && std::isnan(y)); }

}  // namespace

TEST_CASE("element_math.h, with no includes of its own, compiles from the device library with NVRTC",
          "[element_math][nvrtc]") {
  std::string why;
  const bool available = optgen::nvrtc::available(&why);
  INFO(why);
  REQUIRE(available);
  REQUIRE(!element_math_header().empty());
  REQUIRE(element_math_header().find("#include") == std::string::npos);
  std::vector<std::string> options = kOptions;
  options.push_back("-Xptxas=-v");
  for (int arch : {80, 90}) {
    INFO("sm_" << arch);
    const auto compiled = optgen::nvrtc::compile(element_math_kernel_source(), "element_math_check.cu", options, arch);
    const auto report = optgen::nvrtc::parse_ptxas_report(compiled.log);
    INFO(compiled.log);
    CHECK(report.kernels == 1);
    CHECK(report.spill_store_bytes == 0);
  }
}

TEST_CASE("CheckedMath is IEEE where it says exact, and says so across its range", "[element_math][gpu]") {
  OPTGEN_REQUIRE_GPU();
  const optgen::driver::Api& cuda = optgen::driver::api();
  const optgen::Module module =
      optgen_test::compile_for_device(element_math_kernel_source(), "element_math_check.cu", kOptions);
  CUfunction function = module.function("element_math_check");

  // Operands: the boundaries of the ranges and the special values, every pair of them; then pairs
  // across the range and a little beyond (2^-70 .. 2^70), and random bit patterns (NaNs,
  // infinities, subnormals among them).
  std::vector<float> edges;
  for (int e : {-101, -100, -70, -61, -60, -59, -30, -1, 0, 1, 30, 59, 60, 61, 70, 119, 120, 121, 127}) {
    const float p = std::ldexp(1.0f, e);
    for (float x : {p, std::nextafter(p, 0.0f), std::nextafter(p, 2 * p), p * 1.5f}) {
      edges.push_back(x);
      edges.push_back(-x);
    }
  }
  for (float x : {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min(), float_of(0x0d000000u),
                  float_of(0x0cffffffu), float_of(0x007fffffu), 1e-8f, 0.999f, 3.0f})
    edges.push_back(x);
  std::vector<float> a, b;
  for (float x : edges)
    for (float y : edges) {
      a.push_back(x);
      b.push_back(y);
    }
  std::mt19937 generator(2026);
  for (int k = 0; k < (1 << 22); ++k) {
    a.push_back(random_in_binades(generator, -70, 70));
    b.push_back(random_in_binades(generator, -70, 70));
  }
  for (int k = 0; k < (1 << 20); ++k) {
    a.push_back(float_of(static_cast<std::uint32_t>(generator())));
    b.push_back(float_of(static_cast<std::uint32_t>(generator())));
  }
  long long n = static_cast<long long>(a.size());

  const std::size_t bytes = a.size() * 4;
  optgen_test::DeviceMemory a_device(bytes), b_device(bytes), checked_div(bytes), div_exact(bytes), ieee_div(bytes),
      checked_sqrt(bytes), sqrt_exact(bytes), ieee_sqrt(bytes), checked_root_div(bytes), root_div_exact(bytes),
      ieee_root_div(bytes);
  a_device.upload(a);
  b_device.upload(b);
  CUdeviceptr pointers[] = {a_device.get(),         b_device.get(),       checked_div.get(),  div_exact.get(),
                            ieee_div.get(),         checked_sqrt.get(),   sqrt_exact.get(),   ieee_sqrt.get(),
                            checked_root_div.get(), root_div_exact.get(), ieee_root_div.get()};
  void* arguments[] = {&n,           &pointers[0], &pointers[1], &pointers[2], &pointers[3], &pointers[4],
                       &pointers[5], &pointers[6], &pointers[7], &pointers[8], &pointers[9], &pointers[10]};
  optgen::driver::check(cuda.cuLaunchKernel(function, static_cast<unsigned>((n + 255) / 256), 1, 1, 256, 1, 1, 0,
                                            nullptr, arguments, nullptr),
                        "cuLaunchKernel");
  optgen::driver::check(cuda.cuCtxSynchronize(), "cuCtxSynchronize");
  const auto fast_div = checked_div.download<float>(a.size());
  const auto div_ok = div_exact.download<int>(a.size());
  const auto slow_div = ieee_div.download<float>(a.size());
  const auto fast_sqrt = checked_sqrt.download<float>(a.size());
  const auto sqrt_ok = sqrt_exact.download<int>(a.size());
  const auto slow_sqrt = ieee_sqrt.download<float>(a.size());
  const auto fast_root_div = checked_root_div.download<float>(a.size());
  const auto root_div_ok = root_div_exact.download<int>(a.size());
  const auto slow_root_div = ieee_root_div.download<float>(a.size());

  long long wrong = 0, exact_divisions = 0, exact_roots = 0, exact_root_divisions = 0;
  const auto report = [&](const char* what, long long i, float got, float expected) {
    if (++wrong <= 8) {
      INFO(what << " of a = " << std::hexfloat << a[i] << ", b = " << b[i] << ": got " << got << ", expected "
                << expected << " (exact flag: division " << div_ok[i] << ", root " << sqrt_ok[i] << ")");
      CHECK(false);
    }
  };
  for (long long i = 0; i < n; ++i) {
    const float quotient = a[i] / b[i];
    const float root = std::sqrt(a[i]);
    const float root_quotient = root / b[i];
    if (!same(slow_div[i], quotient)) report("IeeeMath::div", i, slow_div[i], quotient);
    if (!same(slow_sqrt[i], root)) report("IeeeMath::sqrt", i, slow_sqrt[i], root);
    if (div_ok[i] != (division_in_range(a[i], b[i]) ? 1 : 0))
      report("CheckedMath::div's flag", i, fast_div[i], quotient);
    if (sqrt_ok[i] != (sqrt_in_range(a[i]) ? 1 : 0)) report("CheckedMath::sqrt's flag", i, fast_sqrt[i], root);
    if (div_ok[i] && !same(fast_div[i], quotient)) report("CheckedMath::div", i, fast_div[i], quotient);
    if (sqrt_ok[i] && !same(fast_sqrt[i], root)) report("CheckedMath::sqrt", i, fast_sqrt[i], root);
    if (!same(slow_root_div[i], root_quotient)) report("IeeeMath::div of a root", i, slow_root_div[i], root_quotient);
    if (root_div_ok[i] != (root_division_in_range(a[i], b[i]) ? 1 : 0))
      report("CheckedMath::div of a root's flag", i, fast_root_div[i], root_quotient);
    if (root_div_ok[i] && !same(fast_root_div[i], root_quotient))
      report("CheckedMath::div of a root", i, fast_root_div[i], root_quotient);
    exact_divisions += div_ok[i];
    exact_roots += sqrt_ok[i];
    exact_root_divisions += root_div_ok[i];
  }
  CHECK(wrong == 0);
  // Most of the operands drawn across 2^-70 .. 2^70 are in range: the check is not vacuous.
  CHECK(exact_divisions > n / 2);
  CHECK(exact_roots > n / 4);
  CHECK(exact_root_divisions > n / 4);
}
