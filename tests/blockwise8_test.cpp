// bitsandbytes' 8-bit blockwise dynamic quantisation (runtime/include/optgen/blockwise8.h), on the
// CPU: the two maps of create_dynamic_map() (their whole tables are checked by
// `python3 tests/record_blockwise8_maps.py --check runtime/include/optgen/blockwise8.h`; the spot
// values below are from that script's output), quantize_2D's rounding (nearest code, a tie to the
// even code), the sign rule of state1, blockwise round trips, a block of zeros, and the header's
// text compiling with NVRTC (no include path) as generated kernels will hold it.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "device_source.h"
#include "emit_images.h"
#include "gpu.h"
#include "optgen/blockwise8.h"
#include "optgen/nvrtc.h"

namespace b8 = optgen::blockwise8;

namespace {

struct Map {
  const char* name;
  const float* values;
};

const Map kMaps[] = {{"kSignedMap", b8::kSignedMap}, {"kUnsignedMap", b8::kUnsignedMap}};

std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

/// The rule quantize() documents, by a linear scan instead of bitsandbytes' binary search: the
/// codes c, c + 1 with map[c] <= x <= map[c + 1], then the float midpoint (a + b) * 0.5f decides,
/// a tie going to the even code; below map[0] code 0, above map[255] code 255.
int expected_code(const float* map, float x) {
  if (!(x > map[0])) return 0;
  if (x >= map[255]) return 255;
  int c = 0;
  while (!(x <= map[c + 1])) ++c;
  const float midpoint = (map[c] + map[c + 1]) * 0.5f;
  if (x > midpoint) return c + 1;
  if (x < midpoint) return c;
  return c % 2 == 0 ? c : c + 1;
}

/// The gap between the two codes around x (x in [map[0], map[255]]).
double local_gap(const float* map, double x) {
  int c = 0;
  while (c < 254 && !(x <= map[c + 1])) ++c;
  return static_cast<double>(map[c + 1]) - map[c];
}

}  // namespace

TEST_CASE("blockwise8: the maps are bitsandbytes' create_dynamic_map(signed=True) and (signed=False)", "[blockwise8]") {
  for (const Map& map : kMaps) {
    INFO(map.name);
    for (int c = 0; c < 255; ++c) {
      INFO("code " << c);
      CHECK(map.values[c] < map.values[c + 1]);  // sorted ascending, 256 distinct values
    }
    CHECK(map.values[255] == 1.0f);
  }
  STATIC_REQUIRE(sizeof(b8::kSignedMap) / sizeof(float) == 256);
  STATIC_REQUIRE(sizeof(b8::kUnsignedMap) / sizeof(float) == 256);
  STATIC_REQUIRE(b8::kBlockSize == 256);

  // Signed: 127 negatives, +0 at 127, 127 positives and 1. The negatives mirror the positives
  // below 1: the map has no -1 (its least value is -0.99296874).
  CHECK(bits(b8::kSignedMap[127]) == bits(0.0f));
  for (int c = 0; c < 127; ++c) CHECK(b8::kSignedMap[c] == -b8::kSignedMap[254 - c]);
  // Unsigned: 0 at index 0, then 254 positives and 1.
  CHECK(bits(b8::kUnsignedMap[0]) == bits(0.0f));

  // Exponent level i (scale 10^(i-6)) holds the 2^i (signed) or 2^(i+1) (unsigned) midpoints of
  // linspace(0.1, 1, ...) times 10^(i-6): that many positive entries lie in (10^(i-7), 10^(i-6)).
  for (int i = 0; i < 7; ++i) {
    const double low = std::pow(10.0, i - 7), high = std::pow(10.0, i - 6);
    int signed_count = 0, unsigned_count = 0;
    for (int c = 0; c < 255; ++c) {
      signed_count += b8::kSignedMap[c] > low && b8::kSignedMap[c] < high;
      unsigned_count += b8::kUnsignedMap[c] > low && b8::kUnsignedMap[c] < high;
    }
    INFO("level " << i);
    CHECK(signed_count == (1 << i));
    CHECK(unsigned_count == (2 << i));
  }

  // Spot values printed by tests/record_blockwise8_maps.py (shortest decimals that read back as the
  // same float; the script checks the whole tables against create_dynamic_map, and against torch).
  CHECK(b8::kSignedMap[0] == -0.99296874f);
  CHECK(b8::kSignedMap[1] == -0.9789063f);
  CHECK(b8::kSignedMap[126] == -0.00000055000004f);
  CHECK(b8::kSignedMap[128] == 0.00000055000004f);
  CHECK(b8::kSignedMap[129] == 0.0000032500002f);
  CHECK(b8::kSignedMap[200] == 0.23359375f);
  CHECK(b8::kSignedMap[254] == 0.99296874f);
  CHECK(b8::kUnsignedMap[1] == 0.00000032500003f);
  CHECK(b8::kUnsignedMap[126] == 0.099296875f);
  CHECK(b8::kUnsignedMap[127] == 0.103515625f);
  CHECK(b8::kUnsignedMap[128] == 0.11054687f);
  CHECK(b8::kUnsignedMap[200] == 0.61679685f);
  CHECK(b8::kUnsignedMap[254] == 0.9964844f);
}

TEST_CASE("blockwise8: every map value quantises to its own code and dequantises back", "[blockwise8]") {
  for (const Map& map : kMaps) {
    INFO(map.name);
    for (int c = 0; c < 256; ++c) {
      INFO("code " << c);
      CHECK(b8::quantize(map.values, map.values[c]) == c);
      CHECK(b8::dequantize(map.values, static_cast<unsigned char>(c), 1.0f) == map.values[c]);
      CHECK(b8::dequantize(map.values, static_cast<unsigned char>(c), 0.5f) == map.values[c] * 0.5f);
    }
  }
}

TEST_CASE("blockwise8: quantize rounds to the nearest code and a midpoint to the even code", "[blockwise8]") {
  const float inf = std::numeric_limits<float>::infinity();
  for (const Map& map : kMaps) {
    INFO(map.name);
    const float* m = map.values;
    for (int c = 0; c < 255; ++c) {
      INFO("codes " << c << " and " << c + 1);
      // bitsandbytes' midpoint, in float as quantize_2D computes it.
      const float midpoint = (m[c] + m[c + 1]) * 0.5f;
      REQUIRE(midpoint > m[c]);
      REQUIRE(midpoint < m[c + 1]);
      // A tie: the search ends on the even code of the two, and keeps it.
      CHECK(b8::quantize(m, midpoint) == (c % 2 == 0 ? c : c + 1));
      CHECK(b8::quantize(m, std::nextafter(midpoint, inf)) == c + 1);
      CHECK(b8::quantize(m, std::nextafter(midpoint, -inf)) == c);
      // Just inside each code.
      CHECK(b8::quantize(m, std::nextafter(m[c], inf)) == c);
      CHECK(b8::quantize(m, std::nextafter(m[c + 1], -inf)) == c + 1);
    }
    // Beyond the ends: the end codes.
    CHECK(b8::quantize(m, 1.5f) == 255);
    CHECK(b8::quantize(m, std::nextafter(1.0f, inf)) == 255);
    CHECK(b8::quantize(m, -1.0f) == 0);
    CHECK(b8::quantize(m, -2.0f) == 0);

    // Values spread over every decade of the map, on both sides: the rule, and the nearest code.
    std::mt19937 rng(1234);
    std::uniform_real_distribution<double> exponent(-8.0, 0.0);
    for (int n = 0; n < 200000; ++n) {
      float x = static_cast<float>(std::pow(10.0, exponent(rng)));
      if (m[0] < 0 && (n & 1)) x = -x;
      const int code = b8::quantize(m, x);
      INFO("x = " << x);
      REQUIRE(code == expected_code(m, x));
      // Nearest: no code is closer (up to the float rounding of the midpoint).
      const double error = std::fabs(static_cast<double>(x) - m[code]);
      for (int other : {code - 1, code + 1}) {
        if (other < 0 || other > 255) continue;
        const double slack = std::ldexp(std::fabs(static_cast<double>(x)), -23);
        REQUIRE(error <= std::fabs(static_cast<double>(x) - m[other]) + slack);
      }
    }
  }
}

TEST_CASE("blockwise8: the kernels' quantiser (a slot's code and one bound) gives quantize's code", "[blockwise8]") {
  // magnitude_code takes the code of |x|'s slot from the slot table and adds one if |x| is above
  // the code bound that follows (compared as bits, where the entry holds it). That is quantize's
  // code for every float exactly when each table entry is slot_entry of the code of its slot's
  // least value and the bound above that code, and the slot's last value has at most the next code
  // (codes rise with x): checked here for every slot, so for every float. Then samples, every bound
  // and its neighbours, the ends, NaN, and the state quantisers built on it.
  const float inf = std::numeric_limits<float>::infinity();
  STATIC_REQUIRE(b8::kSlots == 3072);
  STATIC_REQUIRE(sizeof(b8::kSignedSlots) == b8::kSlots * sizeof(unsigned));
  STATIC_REQUIRE(sizeof(b8::kUnsignedSlots) == b8::kSlots * sizeof(unsigned));
  CHECK(b8::slot_start(0) == std::ldexp(1.0f, -24));
  CHECK(b8::slot_start(b8::kSlots - 1) == 1.0f - std::ldexp(1.0f, -8));
  for (int which = 0; which < 2; ++which) {
    const bool is_signed = which == 0;
    const float* m = is_signed ? b8::kSignedMap : b8::kUnsignedMap;
    const unsigned* slots = is_signed ? b8::kSignedSlots : b8::kUnsignedSlots;
    INFO((is_signed ? "kSignedMap" : "kUnsignedMap"));
    float bounds[257];
    unsigned bound_bits[257] = {};
    bounds[0] = -inf;
    bounds[256] = inf;
    for (int k = 1; k <= 256; ++k) bound_bits[k] = b8::code_bound_bits(m, k);
    CHECK(bound_bits[256] == 0x7fffffffu);
    for (int k = 1; k < 256; ++k) {
      bounds[k] = b8::code_bound(m, k);
      // Above the bound code k or more, at or below it k - 1 or less: a tie goes to the even code.
      INFO("bound " << k);
      REQUIRE(bound_bits[k] == bits(bounds[k]));
      REQUIRE(b8::quantize(m, bounds[k]) == k - 1);
      REQUIRE(b8::quantize(m, std::nextafter(bounds[k], inf)) == k);
    }
    for (int s = 0; s < b8::kSlots; ++s) {
      INFO("slot " << s);
      const float first = b8::slot_start(s);
      const float last = s + 1 < b8::kSlots ? std::nextafter(b8::slot_start(s + 1), -inf) : std::nextafter(1.0f, inf);
      const int code = b8::quantize(m, first);
      REQUIRE(slots[s] == b8::slot_entry(s, code, bound_bits[code + 1]));
      REQUIRE(b8::quantize(m, last) <= code + 1);
    }
    // Below the first slot, the code of 0; at and past 1, and a NaN's magnitude, 255.
    CHECK(b8::quantize(m, std::nextafter(b8::slot_start(0), 0.0f)) == (slots[0] & 0xffu));
    CHECK((slots[0] & 0xffu) == (is_signed ? 127u : 0u));
    for (float x : {1.0f, 1e30f, inf, std::numeric_limits<float>::quiet_NaN()})
      CHECK(b8::magnitude_code(slots, bits(x) & 0x7fffffffu) == 255);

    long long mismatches = 0;
    const auto compare = [&](float x) {
      // normalize(x, reciprocal(1)) is x: the codes of x itself, sign rule and mirror included.
      const int expected = is_signed ? b8::quantize_signed_state(m, x, 1.0f) : b8::quantize_unsigned_state(m, x, 1.0f);
      const int code = is_signed ? b8::signed_state_code(slots, x, 1.0f) : b8::unsigned_state_code(slots, x, 1.0f);
      if (code != expected) ++mismatches;
    };
    for (std::uint32_t u = 0; u <= bits(1.0f) + 8; u += 61) {
      float x;
      std::memcpy(&x, &u, sizeof x);
      compare(x);
      compare(-x);
    }
    for (int k = 1; k < 256; ++k)
      for (float x : {bounds[k], std::nextafter(bounds[k], inf), std::nextafter(bounds[k], -inf), m[k - 1], m[k]}) {
        compare(x);
        compare(-x);
      }
    for (float x :
         {0.0f, -0.0f, 1.0f, -1.0f, 1e-30f, -1e-30f, std::nextafter(1.0f, inf), std::nextafter(-1.0f, -inf), inf, -inf})
      compare(x);
    CHECK(mismatches == 0);

    // The state quantisers built on it match the plain ones, NaN and a block of zeros included.
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<std::pair<float, float>> cases = {{0.0f, 0.0f}, {-0.0f, 0.0f}, {nan, 1.0f}, {-nan, 1.0f},
                                                  {1.0f, 1.0f}, {-1.0f, 1.0f}, {-inf, inf}, {-2.0f, inf}};
    for (int n = 0; n < 20000; ++n) {
      const float value = normal(rng) * std::pow(10.0f, static_cast<float>(n % 9) - 8.0f);
      cases.push_back({value, std::fabs(value) * (1.0f + static_cast<float>(n % 7))});
    }
    if (is_signed) {
      // The one place they part: a state of +inf (its block's absmax inf, x = inf * 0 = NaN).
      // quantize gives NaN code 0 and the sign rule moves it up to 1 (kSignedMap[1] * inf = -inf);
      // the kernels' quantiser gives 255, +inf (see signed_state_code).
      CHECK(b8::quantize_signed_state(m, inf, inf) == 1);
      CHECK(b8::signed_state_code(slots, inf, b8::reciprocal(inf)) == 255);
    }
    for (const auto& [value, absmax] : cases) {
      INFO("value " << value << ", absmax " << absmax);
      const float inverse = b8::reciprocal(absmax);
      if (is_signed)
        REQUIRE(b8::signed_state_code(slots, value, inverse) == int(b8::quantize_signed_state(m, value, absmax)));
      else
        REQUIRE(b8::unsigned_state_code(slots, std::fabs(value), inverse) ==
                int(b8::quantize_unsigned_state(m, std::fabs(value), absmax)));
    }
  }
}

TEST_CASE("blockwise8: state1's sign rule keeps a value's sign bit in its code", "[blockwise8]") {
  const float* m = b8::kSignedMap;
  // A small negative value rounds to code 127 (+0); bitsandbytes moves it to 126, the negative
  // value nearest 0. A small positive one stays at +0, and so does +0; -0 goes to 126 too.
  CHECK(b8::quantize(m, -1e-9f) == 127);
  CHECK(b8::quantize_signed_state(m, -1e-9f, 1.0f) == 126);
  CHECK(b8::quantize_signed_state(m, 1e-9f, 1.0f) == 127);
  CHECK(b8::quantize_signed_state(m, 0.0f, 1.0f) == 127);
  CHECK(b8::quantize_signed_state(m, -0.0f, 1.0f) == 126);
  CHECK(b8::keep_sign(m, 0, 0.0f) == 255);  // unsigned char arithmetic: 0 - 1 wraps, as in bitsandbytes
  // signed_state_code folds the rule in, reading no map: it relies on exactly the codes
  // below 127 (+0) having their sign bit set.
  for (int c = 0; c < 256; ++c) {
    INFO("code " << c);
    CHECK(b8::sign_bit(m[c]) == (c < 127));
  }
  CHECK(b8::keep_sign(m, 200, 0.5f) == 200);
  CHECK(b8::keep_sign(m, 50, -0.5f) == 50);

  std::mt19937 rng(99);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int n = 0; n < 100000; ++n) {
    const float value = normal(rng) * std::pow(10.0f, static_cast<float>(n % 10) - 9.0f);
    const unsigned char code = b8::quantize_signed_state(m, value, 1.0f);
    INFO("value " << value << ", code " << int(code));
    REQUIRE(b8::sign_bit(m[code]) == b8::sign_bit(value));
    // The sign rule moves a code only out of +0, and only by one.
    const int plain = b8::quantize(m, value);
    REQUIRE((code == plain || (plain == 127 && code == 126)));
  }
  // The unsigned map: non-negative values never move.
  for (float value : {0.0f, 1e-30f, 1e-7f, 0.3f, 1.0f}) {
    CHECK(b8::quantize_unsigned_state(b8::kUnsignedMap, value, 1.0f) == b8::quantize(b8::kUnsignedMap, value));
  }
}

TEST_CASE("blockwise8: blockwise round trips of random data are within half the local gap", "[blockwise8]") {
  std::mt19937 rng(2024);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> log_scale(-12.0f, 3.0f), log_spread(-4.0f, 0.0f);
  for (long long numel : {1LL, 7LL, 255LL, 256LL, 257LL, 1000LL, 4096LL + 17}) {
    // Each block its own scale (1e-12 to 1e3), and within a block values over four decades.
    std::vector<float> first(static_cast<size_t>(numel)), second(static_cast<size_t>(numel));
    float scale = 1.0f;
    for (long long i = 0; i < numel; ++i) {
      if (i % b8::kBlockSize == 0) scale = std::pow(10.0f, log_scale(rng));
      first[i] = normal(rng) * scale * std::pow(10.0f, log_spread(rng));
      second[i] = first[i] * first[i];  // exp_avg_sq-like: non-negative
    }
    for (bool is_signed : {true, false}) {
      const float* map = is_signed ? b8::kSignedMap : b8::kUnsignedMap;
      const std::vector<float>& values = is_signed ? first : second;
      const long long blocks = b8::num_blocks(numel);
      REQUIRE(blocks == (numel + 255) / 256);
      std::vector<unsigned char> codes(static_cast<size_t>(numel));
      std::vector<float> absmax(static_cast<size_t>(blocks)), back(static_cast<size_t>(numel));
      b8::quantize_blockwise(map, is_signed, values.data(), numel, codes.data(), absmax.data());
      b8::dequantize_blockwise(map, codes.data(), absmax.data(), numel, back.data());
      INFO("numel " << numel << (is_signed ? ", signed" : ", unsigned"));
      for (long long b = 0; b < blocks; ++b) {
        float expected = 0.0f;
        for (long long i = b * 256; i < std::min(numel, (b + 1) * 256); ++i) {
          expected = std::max(expected, std::fabs(values[i]));
        }
        REQUIRE(absmax[b] == expected);  // the last block's absmax is over its own elements
      }
      for (long long i = 0; i < numel; ++i) {
        const float a = absmax[i / 256];
        const double x = static_cast<double>(values[i]) / a;
        const double error = std::fabs(static_cast<double>(back[i]) - values[i]);
        // The float rounding of v / absmax, of the midpoint and of map[code] * absmax.
        const double slack = 4.0 * std::numeric_limits<float>::epsilon() * (std::fabs(values[i]) + std::fabs(back[i]));
        double allowed;
        if (x < b8::kSignedMap[0]) {
          // Only the signed map: the block's absmax element is negative; x is -1 and the map has no
          // -1, so it comes back as -0.99296874 * absmax.
          allowed = (1.0 + b8::kSignedMap[0]) * a;
        } else if (is_signed && x < 0 && x > b8::kSignedMap[126] * 0.5) {
          // The sign rule sends (map[126] / 2, 0) to map[126]: up to a whole gap.
          allowed = -static_cast<double>(b8::kSignedMap[126]) * a;
        } else {
          allowed = 0.5 * local_gap(map, x) * a;
        }
        INFO("element " << i << ": " << values[i] << " came back as " << back[i] << ", code " << int(codes[i])
                        << ", absmax " << a);
        REQUIRE(error <= allowed + slack);
        REQUIRE(codes[i] == (is_signed ? b8::quantize_signed_state(map, values[i], a)
                                       : b8::quantize_unsigned_state(map, values[i], a)));
      }
      // The element that is the absmax itself comes back exactly when it is positive (map[255] = 1).
      for (long long i = 0; i < numel; ++i) {
        if (values[i] == absmax[i / 256] && values[i] > 0) CHECK(back[i] == values[i]);
      }
    }
  }
}

TEST_CASE("blockwise8: a block of zeros (absmax 0) quantises as bitsandbytes does and comes back as zeros",
          "[blockwise8]") {
  // bitsandbytes divides 0 by an absmax of 0: NaN. Every comparison of its search is false, so
  // quantize_2D returns code 0; state1's sign rule turns that into 255 for +0 (qmap1[0] is negative)
  // and keeps 0 for -0; state2 keeps 0. map[code] * 0 is zero: no NaN in the states.
  CHECK(std::isnan(b8::normalize(0.0f, b8::reciprocal(0.0f))));
  CHECK(b8::quantize(b8::kSignedMap, std::numeric_limits<float>::quiet_NaN()) == 0);
  CHECK(b8::quantize(b8::kUnsignedMap, std::numeric_limits<float>::quiet_NaN()) == 0);
  CHECK(b8::quantize_signed_state(b8::kSignedMap, 0.0f, 0.0f) == 255);
  CHECK(b8::quantize_signed_state(b8::kSignedMap, -0.0f, 0.0f) == 0);
  CHECK(b8::quantize_unsigned_state(b8::kUnsignedMap, 0.0f, 0.0f) == 0);

  // Two blocks and a short third: zeros, then values, then zeros again.
  const long long numel = 2 * 256 + 44;
  std::vector<float> values(static_cast<size_t>(numel), 0.0f);
  for (int i = 256; i < 512; ++i) values[i] = 0.001f * static_cast<float>(i - 300);
  for (bool is_signed : {true, false}) {
    const float* map = is_signed ? b8::kSignedMap : b8::kUnsignedMap;
    std::vector<float> input = values;
    if (!is_signed) {
      for (float& v : input) v = v * v;
    }
    std::vector<unsigned char> codes(static_cast<size_t>(numel));
    std::vector<float> absmax(3), back(static_cast<size_t>(numel));
    b8::quantize_blockwise(map, is_signed, input.data(), numel, codes.data(), absmax.data());
    b8::dequantize_blockwise(map, codes.data(), absmax.data(), numel, back.data());
    INFO((is_signed ? "signed" : "unsigned"));
    CHECK(absmax[0] == 0.0f);
    CHECK(absmax[1] > 0.0f);
    CHECK(absmax[2] == 0.0f);
    for (long long i = 0; i < numel; ++i) {
      INFO("element " << i);
      REQUIRE(!std::isnan(back[i]));
      if (i < 256 || i >= 512) {
        REQUIRE(codes[i] == (is_signed ? 255 : 0));
        REQUIRE(back[i] == 0.0f);
      }
    }
  }
}

TEST_CASE("blockwise8: bitsandbytes keeps tensors under min_8bit_size = 4096 elements in float32", "[blockwise8]") {
  STATIC_REQUIRE(b8::kMin8bitSize == 4096);
  CHECK_FALSE(b8::uses_8bit_states(0));
  CHECK_FALSE(b8::uses_8bit_states(4095));
  CHECK(b8::uses_8bit_states(4096));
  CHECK(b8::uses_8bit_states(1LL << 40));
  CHECK_FALSE(b8::uses_8bit_states(100, 101));
  CHECK(b8::uses_8bit_states(101, 101));
  CHECK(b8::num_blocks(0) == 0);
  CHECK(b8::num_blocks(1) == 1);
  CHECK(b8::num_blocks(256) == 1);
  CHECK(b8::num_blocks(257) == 2);
  CHECK(b8::num_blocks(4096) == 16);
}

TEST_CASE("blockwise8: the header included from the device library compiles with NVRTC", "[blockwise8][nvrtc]") {
  std::string why;
  REQUIRE(optgen::nvrtc::available(&why));
  // As bitsandbytes' kernel does: the maps in shared memory, a block of 256 threads per 256 values.
  const std::string kernel = R"(#include "optgen/blockwise8.h"
namespace b8 = optgen::blockwise8;
extern "C" __global__ void roundtrip(const float* values, int n, unsigned char* c1, unsigned char* c2, float* absmax,
                                     float* out) {
  __shared__ float map1[256], map2[256];
  __shared__ float block_max;
  map1[threadIdx.x] = b8::kSignedMap[threadIdx.x];
  map2[threadIdx.x] = b8::kUnsignedMap[threadIdx.x];
  if (threadIdx.x == 0) block_max = 0.0f;
  const int i = blockIdx.x * b8::kBlockSize + threadIdx.x;
  const float v = i < n ? values[i] : 0.0f;
  __syncthreads();
  atomicMax(reinterpret_cast<int*>(&block_max), __float_as_int(fabsf(v)));
  __syncthreads();
  if (i >= n) return;
  c1[i] = b8::quantize_signed_state(map1, v, block_max);
  c2[i] = b8::quantize_unsigned_state(map2, v * v, block_max * block_max);
  out[i] = b8::dequantize(map1, c1[i], block_max) + b8::dequantize(map2, c2[i], block_max * block_max);
  if (threadIdx.x == 0) absmax[blockIdx.x] = block_max;
  if (!b8::uses_8bit_states(n)) out[i] += b8::quantize(b8::kSignedMap, b8::normalize(v, b8::reciprocal(block_max)));
  // The kernels' quantiser (its slot table read from device memory).
  c1[i] = b8::signed_state_code(b8::kSignedSlots, v, b8::reciprocal(block_max));
}
)";
  optgen::nvrtc::Compiled compiled;
  REQUIRE_NOTHROW(compiled =
                      optgen::nvrtc::compile(kernel, "blockwise8_kernels.cu", optgen::kernel_compile_options(), 90));
  CHECK(!compiled.image.empty());
}

TEST_CASE("blockwise8: the kernels' quantisers give the host's codes on the GPU, -0, NaN and infinities included",
          "[blockwise8][gpu]") {
  // The device's arithmetic where the host emulates it: saturate (__saturatef, which the host
  // writes as comparisons), |value| times the reciprocal, a NaN's bits.
  OPTGEN_REQUIRE_GPU();
  const std::string source = R"(#include "optgen/blockwise8.h"
namespace b8 = optgen::blockwise8;
extern "C" __global__ void codes(int n, const float* values, const float* absmax, int* signed_codes,
                                 int* unsigned_codes) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float inverse = b8::reciprocal(absmax[i]);
  signed_codes[i] = b8::signed_state_code(b8::kSignedSlots, values[i], inverse);
  unsigned_codes[i] = b8::unsigned_state_code(b8::kUnsignedSlots, values[i], inverse);
}
)";
  const optgen::Module module =
      optgen_test::compile_for_device(source, "blockwise8_codes.cu", optgen::kernel_compile_options());
  CUfunction function = module.function("codes");

  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float specials[] = {0.0f,
                            -0.0f,
                            nan,
                            -nan,
                            inf,
                            -inf,
                            1.0f,
                            -1.0f,
                            std::nextafter(1.0f, inf),
                            1e-30f,
                            -1e-30f,
                            std::numeric_limits<float>::denorm_min(),
                            -std::numeric_limits<float>::denorm_min(),
                            std::numeric_limits<float>::max()};
  std::vector<float> values, absmax;
  for (float value : specials)
    for (float block : {0.0f, 1.0f, 1e-30f, 3.5f, inf, nan}) {
      values.push_back(value);
      absmax.push_back(block);
    }
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int n = 0; n < (1 << 16); ++n) {
    const float value = normal(rng) * std::pow(10.0f, static_cast<float>(n % 9) - 8.0f);
    values.push_back(value);
    absmax.push_back(std::fabs(value) * (1.0f + static_cast<float>(n % 5)));
  }
  int n = static_cast<int>(values.size());
  optgen_test::DeviceMemory values_device(values.size() * 4), absmax_device(values.size() * 4),
      signed_device(values.size() * 4), unsigned_device(values.size() * 4);
  values_device.upload(values);
  absmax_device.upload(absmax);
  CUdeviceptr pointers[] = {values_device.get(), absmax_device.get(), signed_device.get(), unsigned_device.get()};
  void* arguments[] = {&n, &pointers[0], &pointers[1], &pointers[2], &pointers[3]};
  const optgen::driver::Api& cuda = optgen::driver::api();
  optgen::driver::check(cuda.cuLaunchKernel(function, static_cast<unsigned>((n + 255) / 256), 1, 1, 256, 1, 1, 0,
                                            nullptr, arguments, nullptr),
                        "cuLaunchKernel");
  optgen::driver::check(cuda.cuCtxSynchronize(), "cuCtxSynchronize");
  const auto signed_codes = signed_device.download<int>(values.size());
  const auto unsigned_codes = unsigned_device.download<int>(values.size());
  long long wrong = 0;
  for (int i = 0; i < n; ++i) {
    const float inverse = b8::reciprocal(absmax[i]);
    const int expected_signed = b8::signed_state_code(b8::kSignedSlots, values[i], inverse);
    const int expected_unsigned = b8::unsigned_state_code(b8::kUnsignedSlots, values[i], inverse);
    if (signed_codes[i] != expected_signed || unsigned_codes[i] != expected_unsigned) {
      if (++wrong <= 8) {
        INFO("value " << std::hexfloat << values[i] << ", absmax " << absmax[i] << ": signed " << signed_codes[i]
                      << " (host " << expected_signed << "), unsigned " << unsigned_codes[i] << " (host "
                      << expected_unsigned << ")");
        CHECK(false);
      }
    }
  }
  CHECK(wrong == 0);
  // Values at or below 0, NaN among them, have unsigned code 0; -0 too, which saturates to +0.
  CHECK(unsigned_codes[1 * 6 + 1] == 0);
  CHECK(unsigned_codes[2 * 6 + 1] == 0);
}
