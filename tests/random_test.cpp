// optgen/random.h: Philox4x32-10 against Random123's known answers, the stream of stochastic
// rounding (one element at a time and eight at a time, as the header documents it), and bf16
// stochastic rounding: unbiased, always one of the two neighbours, special values kept. On the
// CPU; the header also compiles alone with NVRTC ([nvrtc]), and the device computes the same bits
// as the host ([gpu]).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "device_source.h"
#include "gpu.h"
#include "optgen/driver.h"
#include "optgen/dtype.h"
#include "optgen/kernel_images.h"
#include "optgen/nvrtc.h"
#include "optgen/random.h"

namespace rnd = optgen::random;

namespace {

using optgen_test::bits_of;
using optgen_test::float_of;

bool bf16_is_nan(unsigned bf16) { return (bf16 & 0x7F80u) == 0x7F80u && (bf16 & 0x7Fu) != 0; }

rnd::Philox4x32 words(std::uint32_t a, std::uint32_t b, std::uint32_t c, std::uint32_t d) { return {{a, b, c, d}}; }

/// The contract as the header's comment states it, written out here a second time: the four words
/// of element i's group of 8.
rnd::Philox4x32 contract_words(unsigned long long seed, int tensor, long long step, long long i) {
  const auto group = static_cast<std::uint64_t>(i) / 8;
  return rnd::philox4x32_10(words(static_cast<std::uint32_t>(group), static_cast<std::uint32_t>(group >> 32),
                                  static_cast<std::uint32_t>(tensor), static_cast<std::uint32_t>(step)),
                            static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
}

}  // namespace

TEST_CASE("Philox4x32-10 gives Random123's known answers", "[random]") {
  // Random123's tests/kat_vectors, lines 27-29 (github.com/DEShawResearch/random123, commit
  // 9545ff6413f258be2f04c1d319d99aaef7521150): "philox4x32 10", then CTR (4 words), KEY (2 words),
  // EXPECTED (4 words):
  //   philox4x32 10 00000000 00000000 00000000 00000000 00000000 00000000   6627e8d5 e169c58d bc57ac4c 9b00dbd8
  //   philox4x32 10 ffffffff ffffffff ffffffff ffffffff ffffffff ffffffff   408f276d 41c83b0e a20bc7c6 6d5451fd
  //   philox4x32 10 243f6a88 85a308d3 13198a2e 03707344 a4093822 299f31d0   d16cfe09 94fdcceb 5001e420 24126ea1
  struct Vector {
    rnd::Philox4x32 counter;
    std::uint32_t key[2];
    rnd::Philox4x32 expected;
  };
  const Vector vectors[] = {
      {words(0, 0, 0, 0), {0, 0}, words(0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)},
      {words(0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff),
       {0xffffffff, 0xffffffff},
       words(0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)},
      {words(0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344),
       {0xa4093822, 0x299f31d0},
       words(0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1)},
  };
  for (const auto& v : vectors) {
    const rnd::Philox4x32 out = rnd::philox4x32_10(v.counter, v.key[0], v.key[1]);
    for (int k = 0; k < 4; ++k) {
      INFO("counter " << std::hex << v.counter.x[0] << " word " << k);
      CHECK(out.x[k] == v.expected.x[k]);
    }
  }
}

TEST_CASE("the stochastic-rounding stream is the documented one, one element or eight at a time", "[random]") {
  // The first group of the zero seed, tensor 0, step 0 is the all-zero known answer above, split
  // into 16-bit halves: low half first.
  unsigned first[8];
  rnd::random_bits16x8(0, 0, 0, 0, first);
  const unsigned expected_first[8] = {0xe8d5, 0x6627, 0xc58d, 0xe169, 0xac4c, 0xbc57, 0xdbd8, 0x9b00};
  for (int k = 0; k < 8; ++k) CHECK(first[k] == expected_first[k]);

  const unsigned long long seeds[] = {0, 1, 0xDEADBEEFCAFEF00Dull, ~0ull};
  const int tensors[] = {0, 1, 7, std::numeric_limits<int>::max()};
  const long long steps[] = {0, 1, 12345, (1ll << 32) + 5};
  // Element ranges: the start of a tensor, where i / 8 crosses into its high word, and far out.
  const long long starts[] = {0, (1ll << 35) - 64, (1ll << 62) - 64};
  long long checked = 0;
  for (auto seed : seeds)
    for (int tensor : tensors)
      for (long long step : steps)
        for (long long start : starts)
          for (long long i = start; i < start + 256; i += 8) {
            unsigned eight[8];
            rnd::random_bits16x8(seed, tensor, step, i, eight);
            const rnd::Philox4x32 w = contract_words(seed, tensor, step, i);
            for (int k = 0; k < 8; ++k) {
              const unsigned one = rnd::random_bits16(seed, tensor, step, i + k);
              const unsigned documented = k % 2 == 0 ? w.x[k / 2] & 0xFFFFu : w.x[k / 2] >> 16;
              if (one != eight[k] || one != documented || one > 0xFFFFu) {
                INFO("seed " << seed << " tensor " << tensor << " step " << step << " element " << i + k);
                CHECK(one == eight[k]);
                CHECK(one == documented);
                CHECK(one <= 0xFFFFu);
              }
              ++checked;
            }
          }
  CHECK(checked == 4 * 4 * 4 * 3 * 256);

  // The step enters with its low 32 bits only: steps 2^32 apart share their bits. Other seeds,
  // tensors and steps draw other bits (4096 elements of 16 bits: equal by chance with probability
  // 2^-65536).
  auto stream = [](unsigned long long seed, int tensor, long long step) {
    std::vector<unsigned> out;
    for (long long i = 0; i < 4096; ++i) out.push_back(rnd::random_bits16(seed, tensor, step, i));
    return out;
  };
  const auto base = stream(42, 3, 5);
  CHECK(stream(42, 3, (1ll << 32) + 5) == base);
  CHECK(stream(43, 3, 5) != base);
  CHECK(stream(42ull | (1ull << 32), 3, 5) != base);
  CHECK(stream(42, 4, 5) != base);
  CHECK(stream(42, 3, 6) != base);
}

TEST_CASE("bf16 stochastic rounding rounds up for exactly the fraction's share of the random values", "[random]") {
  // For x = lo + f * ulp, f = (low 16 bits) / 2^16, exactly f * 2^16 of the 2^16 random values
  // round up: with uniform bits the expectation is x exactly, nothing left to chance.
  const std::uint32_t patterns[] = {bits_of(1.0f + 0x1p-9f),
                                    bits_of(1.0f / 3),
                                    bits_of(-2.7182817f),
                                    bits_of(1e-30f),
                                    0x00012345u,  // a subnormal
                                    0x3F7FFFFFu,  // just below 1: its upper neighbour is 1, in the next binade
                                    0x007FFFFFu,  // the largest subnormal: its upper neighbour is the smallest normal
                                    0x3F800001u,
                                    0xBF80FFFFu,
                                    0x7F7FFFFFu /* FLT_MAX: up is inf */,
                                    0x7F7F8000u,
                                    0xFF7F0001u};
  for (std::uint32_t bits : patterns) {
    const std::uint32_t fraction = bits & 0xFFFFu;
    const unsigned lo = bits >> 16;
    std::uint32_t up = 0;
    for (std::uint32_t r = 0; r < 0x10000u; ++r) {
      const unsigned rounded = rnd::stochastic_round_bf16(float_of(bits), r);
      if (rounded == lo + 1)
        ++up;
      else if (rounded != lo)
        FAIL("x bits " << std::hex << bits << " random " << r << " gave " << rounded);
    }
    INFO("x bits " << std::hex << bits);
    CHECK(up == fraction);
  }
}

TEST_CASE("bf16 stochastic rounding with the stream is unbiased", "[random]") {
  // x lies between adjacent bf16 values lo and hi = lo + ulp; each rounding is lo or hi, hi with
  // probability p, a two-point distribution of standard deviation ulp * sqrt(p (1 - p)) <= ulp / 2.
  // The mean of N = 2^20 independent roundings has standard deviation at most ulp / 2 / sqrt(N) =
  // ulp / 2048; the tolerance is 6 of those, 6 * ulp / 2048 (about 0.3% of an ulp), which uniform
  // independent bits exceed with probability below 2e-9. The bits are a fixed function of
  // (seed, tensor, step, i), so the outcome does not change from run to run. The means are exact in
  // double (a sum of 2^20 values of 8 significant bits each).
  constexpr long long N = 1ll << 20;
  const float xs[] = {1.0f + 0x1p-9f, 1.0f / 3, -2.7182817f, 1e-30f, float_of(0x00012345u), 0.1f, -65504.7f};
  for (float x : xs) {
    const std::uint32_t bits = bits_of(x);
    const double lo = optgen::bf16_to_float(static_cast<std::uint16_t>(bits >> 16));
    const double hi = optgen::bf16_to_float(static_cast<std::uint16_t>((bits >> 16) + 1));
    const double ulp = std::fabs(hi - lo);
    const double tolerance = 6 * ulp / 2 / std::sqrt(static_cast<double>(N));
    REQUIRE((bits & 0xFFFFu) != 0);  // not already a bf16

    // Over the elements of one tensor at one step, and over the steps of one element.
    double over_elements = 0, over_steps = 0;
    for (long long i = 0; i < N; ++i) {
      over_elements += optgen::bf16_to_float(rnd::stochastic_round_bf16(x, rnd::random_bits16(0x5EEDull, 2, 17, i)));
      over_steps += optgen::bf16_to_float(rnd::stochastic_round_bf16(x, rnd::random_bits16(0x5EEDull, 2, i, 12345)));
    }
    over_elements /= N;
    over_steps /= N;
    INFO("x = " << x << " (bits " << std::hex << bits << std::dec << "), ulp " << ulp << ", tolerance " << tolerance);
    CHECK(std::fabs(over_elements - x) <= tolerance);
    CHECK(std::fabs(over_steps - x) <= tolerance);
    // Round to nearest, by contrast, is off by min(p, 1 - p) ulp: far outside the tolerance.
    CHECK(std::fabs(optgen::bf16_to_float(optgen::float_to_bf16(x)) - x) > tolerance);
  }
}

TEST_CASE("bf16 stochastic rounding always gives one of the two neighbours", "[random]") {
  std::mt19937 generator(20240607);
  for (int n = 0; n < (1 << 20); ++n) {
    const std::uint32_t bits = static_cast<std::uint32_t>(generator());
    const std::uint32_t r = static_cast<std::uint32_t>(generator());
    const float x = float_of(bits);
    if (std::isnan(x)) continue;
    const unsigned rounded = rnd::stochastic_round_bf16(x, r);
    const float value = optgen::bf16_to_float(static_cast<std::uint16_t>(rounded));
    const float toward_zero = float_of(bits & 0xFFFF0000u);
    const float away = float_of((bits & 0xFFFF0000u) + 0x10000u);  // may be ±inf, never NaN
    INFO("x bits " << std::hex << bits << " random " << r);
    REQUIRE(!bf16_is_nan(rounded));
    REQUIRE((rounded == bits >> 16 || rounded == (bits >> 16) + 1));
    REQUIRE((value == toward_zero || value == away));
    REQUIRE(std::fabs(toward_zero) <= std::fabs(x));
    REQUIRE(std::fabs(x) <= std::fabs(away));
    REQUIRE(std::signbit(value) == std::signbit(x));
  }
}

TEST_CASE("bf16 stochastic rounding keeps NaN, infinities and bf16 values", "[random]") {
  const std::uint32_t randoms[] = {0, 1, 0x7FFF, 0x8000, 0xFFFF, 0x1234, 0xFFFFFFFFu, 0xABCD0001u};

  SECTION("NaN stays NaN, quiet, with its sign: as round to nearest converts it") {
    const std::uint32_t nans[] = {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF800001u,
                                  0x7FBFFFFFu, 0x7FFFFFFFu, 0xFFFFFFFFu, 0x7FA50000u};
    for (std::uint32_t bits : nans)
      for (std::uint32_t r : randoms) {
        const unsigned rounded = rnd::stochastic_round_bf16(float_of(bits), r);
        INFO("NaN bits " << std::hex << bits << " random " << r << " gave " << rounded);
        CHECK(bf16_is_nan(rounded));
        CHECK((rounded & 0x40u) != 0);
        CHECK((rounded >> 15) == (bits >> 31));
        CHECK(rounded == optgen::float_to_bf16(float_of(bits)));
      }
  }

  SECTION("every bf16 value, ±0 and ±inf included, comes back unchanged") {
    std::vector<std::uint32_t> all_randoms(std::begin(randoms), std::end(randoms));
    for (std::uint32_t r = 0; r < 0x10000u; r += 0x0FFFu) all_randoms.push_back(r);
    for (std::uint32_t b = 0; b < 0x10000u; ++b) {
      if (bf16_is_nan(b)) continue;
      for (std::uint32_t r : all_randoms)
        if (rnd::stochastic_round_bf16(float_of(b << 16), r) != b)
          FAIL("bf16 " << std::hex << b << " random " << r << " changed");
    }
    for (std::uint32_t r = 0; r < 0x10000u; ++r) {
      CHECK(rnd::stochastic_round_bf16(std::numeric_limits<float>::infinity(), r) == 0x7F80u);
      CHECK(rnd::stochastic_round_bf16(-std::numeric_limits<float>::infinity(), r) == 0xFF80u);
    }
  }

  SECTION("the top of the range carries into infinity, never into NaN") {
    // Between the largest bf16 (0x7F7F) and FLT_MAX, the upper neighbour is 2^128, encoded as inf:
    // x rounds to inf with probability f, as everywhere else it rounds up with probability f.
    const float max = std::numeric_limits<float>::max();
    CHECK(rnd::stochastic_round_bf16(max, 0) == 0x7F7Fu);
    CHECK(rnd::stochastic_round_bf16(max, 1) == 0x7F80u);
    CHECK(rnd::stochastic_round_bf16(max, 0xFFFF) == 0x7F80u);
    CHECK(rnd::stochastic_round_bf16(-max, 0) == 0xFF7Fu);
    CHECK(rnd::stochastic_round_bf16(-max, 1) == 0xFF80u);
    for (std::uint32_t low = 0; low < 0x10000u; ++low)
      for (std::uint32_t sign : {0u, 0x80000000u})
        for (std::uint32_t r : {0u, 0x8000u, 0xFFFFu, low}) {
          const std::uint32_t bits = sign | 0x7F7F0000u | low;
          const unsigned rounded = rnd::stochastic_round_bf16(float_of(bits), r);
          const unsigned lo = bits >> 16;
          if (rounded != (low + (r & 0xFFFFu) >= 0x10000u ? lo + 1 : lo))
            FAIL("x bits " << std::hex << bits << " random " << r << " gave " << rounded);
        }
  }

  SECTION("only the low 16 random bits count") {
    std::mt19937 generator(7);
    for (int n = 0; n < 100000; ++n) {
      const float x = float_of(static_cast<std::uint32_t>(generator()));
      const std::uint32_t r = static_cast<std::uint32_t>(generator());
      REQUIRE(rnd::stochastic_round_bf16(x, r) == rnd::stochastic_round_bf16(x, r & 0xFFFFu));
    }
  }
}

namespace {

std::string random_header() { return optgen_test::device_header("optgen/random.h"); }

/// The header included by a kernel source, as the device library includes it: element e of plan
/// tensor `tensor` draws its bits both ways and rounds x[e].
std::string random_kernel_source() {
  return R"(#include "optgen/random.h"
extern "C" __global__ void random_check(unsigned long long seed, int tensor, long long step, long long n,
                                        const float* x, unsigned int* one, unsigned int* eight,
                                        unsigned short* rounded) {
  const long long e = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (e < n) {
    one[e] = optgen::random::random_bits16(seed, tensor, step, e);
    rounded[e] = optgen::random::stochastic_round_bf16(x[e], one[e]);
  }
  if (e * 8 < n) {
    unsigned int bits[8];
    optgen::random::random_bits16x8(seed, tensor, step, e * 8, bits);
    for (int k = 0; k < 8; ++k) eight[e * 8 + k] = bits[k];
  }
}
)";
}

}  // namespace

TEST_CASE("random.h, with no includes of its own, compiles from the device library with NVRTC", "[random][nvrtc]") {
  std::string why;
  const bool available = optgen::nvrtc::available(&why);
  INFO(why);
  REQUIRE(available);
  REQUIRE(!random_header().empty());
  REQUIRE(random_header().find("#include") == std::string::npos);
  for (int arch : {80, 90}) {
    INFO("sm_" << arch);
    const auto compiled = optgen::nvrtc::compile(random_kernel_source(), "random_check.cu", {"-Xptxas=-v"}, arch);
    const auto report = optgen::nvrtc::parse_ptxas_report(compiled.log);
    INFO(compiled.log);
    CHECK(report.kernels == 1);
    CHECK(report.spill_store_bytes == 0);
    CHECK(report.max_stack_frame_bytes == 0);
  }
}

TEST_CASE("the device draws and rounds as the host does", "[random][gpu]") {
  OPTGEN_REQUIRE_GPU();
  const optgen::driver::Api& cuda = optgen::driver::api();
  const optgen::Module module = optgen_test::compile_for_device(random_kernel_source(), "random_check.cu");
  CUfunction function = module.function("random_check");

  // Random float patterns, NaNs included, then the special values.
  long long n = 1 << 20;
  std::vector<float> x(static_cast<std::size_t>(n));
  std::mt19937 generator(99);
  for (auto& v : x) v = float_of(static_cast<std::uint32_t>(generator()));
  const float specials[] = {0.0f,
                            -0.0f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::max(),
                            -std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::quiet_NaN(),
                            float_of(0x7F800001u),
                            float_of(0x00012345u)};
  for (std::size_t k = 0; k < std::size(specials); ++k) x[k] = specials[k];

  const unsigned long long seed = 0x0123456789ABCDEFull;
  int tensor = 5;
  long long step = (1ll << 33) + 77;
  optgen_test::DeviceMemory x_device(x.size() * 4), one_device(x.size() * 4), eight_device(x.size() * 4),
      rounded_device(x.size() * 2);
  x_device.upload(x);
  CUdeviceptr x_pointer = x_device.get(), one = one_device.get(), eight = eight_device.get(),
              rounded = rounded_device.get();
  unsigned long long seed_argument = seed;
  void* arguments[] = {&seed_argument, &tensor, &step, &n, &x_pointer, &one, &eight, &rounded};
  optgen::driver::check(
      cuda.cuLaunchKernel(function, static_cast<unsigned>(n / 256), 1, 1, 256, 1, 1, 0, nullptr, arguments, nullptr),
      "cuLaunchKernel");
  optgen::driver::check(cuda.cuCtxSynchronize(), "cuCtxSynchronize");
  const auto one_host = one_device.download<unsigned>(x.size());
  const auto eight_host = eight_device.download<unsigned>(x.size());
  const auto rounded_host = rounded_device.download<std::uint16_t>(x.size());

  long long mismatches = 0;
  for (long long e = 0; e < n; ++e) {
    const unsigned expected = rnd::random_bits16(seed, tensor, step, e);
    const unsigned short expected_rounded = rnd::stochastic_round_bf16(x[e], expected);
    if (one_host[e] != expected || eight_host[e] != expected || rounded_host[e] != expected_rounded) {
      if (++mismatches <= 5) {
        INFO("element " << e << ": device " << one_host[e] << " / " << eight_host[e] << " / " << rounded_host[e]
                        << ", host " << expected << " / " << expected_rounded);
        CHECK(false);
      }
    }
  }
  CHECK(mismatches == 0);
}
