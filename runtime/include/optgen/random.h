#ifndef OPTGEN_RANDOM_H_
#define OPTGEN_RANDOM_H_
// Random bits for the kernels, and bf16 stochastic rounding, defined once for both sides: the host
// (tests, CPU references) and the device compute the same bits from the same arguments. Like
// kernel_abi.h it is plain C++ that host compilers and NVRTC both accept: no includes, built-in types
// only. Kernels include it through the device library (optgen/device/operands.cuh).
//
// The generator is Philox4x32-10, a counter-based generator: a pure function of a 128-bit counter
// and a 64-bit key, with no state to keep, so any thread can draw the bits of any element in any
// step directly. See J. K. Salmon, M. A. Moraes, R. O. Dror, D. E. Shaw, "Parallel random
// numbers: as easy as 1, 2, 3", SC 2011; the constants and round structure are those of the
// Random123 library (github.com/DEShawResearch/random123, include/Random123/philox.h), and
// tests/random_test.cpp checks it against that library's known-answer vectors.
//
// ---- The stream of stochastic rounding. Element i of plan tensor t (its index in the plan's
// TableView), at step `step`, under the 64-bit seed `seed`, rounds with 16 random bits taken from
//   philox4x32_10(counter = {lo32(i / 8), hi32(i / 8), t, lo32(step)},
//                 key     = {lo32(seed), hi32(seed)})
// The four 32-bit output words hold the bits of the 8 elements i / 8 * 8 ... i / 8 * 8 + 7: element
// i takes word (i % 8) / 2, its low 16 bits when i % 8 is even, its high 16 bits when odd. One
// Philox call serves 8 consecutive elements (random_bits16x8); random_bits16 is the same stream
// for one element. Consequences of the contract:
// - every (seed, t, step) names its own stream, and elements of it never share bits;
// - steps 2^32 apart draw the same bits (the counter keeps the step's low 32 bits only);
// - the stream follows the plan's tensor numbering: binding the same tensors in another order
//   gives them other bits.

namespace optgen {
namespace random {

#ifdef __CUDACC__
#define OPTGEN_RANDOM_FUNCTION __host__ __device__ __forceinline__
#else
#define OPTGEN_RANDOM_FUNCTION inline
#endif

/// Four 32-bit words: a Philox counter, or its output.
struct Philox4x32 {
  unsigned int x[4];
};

/// The Philox4x32 round's multipliers and the key schedule's Weyl increments (Random123's).
enum : unsigned int {
  kPhiloxM0 = 0xD2511F53u,
  kPhiloxM1 = 0xCD9E8D57u,
  kPhiloxW0 = 0x9E3779B9u,
  kPhiloxW1 = 0xBB67AE85u
};

/// The high 32 bits of the 64-bit product a * b.
OPTGEN_RANDOM_FUNCTION unsigned int mulhi32(unsigned int a, unsigned int b) {
#ifdef __CUDA_ARCH__
  return __umulhi(a, b);
#else
  return static_cast<unsigned int>((static_cast<unsigned long long>(a) * b) >> 32);
#endif
}

/// One Philox4x32 round with round key (k0, k1).
OPTGEN_RANDOM_FUNCTION Philox4x32 philox4x32_round(Philox4x32 c, unsigned int k0, unsigned int k1) {
  Philox4x32 out;
  out.x[0] = mulhi32(kPhiloxM1, c.x[2]) ^ c.x[1] ^ k0;
  out.x[1] = kPhiloxM1 * c.x[2];
  out.x[2] = mulhi32(kPhiloxM0, c.x[0]) ^ c.x[3] ^ k1;
  out.x[3] = kPhiloxM0 * c.x[0];
  return out;
}

/// Philox4x32-10: ten rounds of `counter` under the key (key0, key1), the key advanced by the Weyl
/// increments before each round after the first (as Random123's philox4x32(ctr, key)).
OPTGEN_RANDOM_FUNCTION Philox4x32 philox4x32_10(Philox4x32 counter, unsigned int key0, unsigned int key1) {
  Philox4x32 c = philox4x32_round(counter, key0, key1);
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
  for (int round = 1; round < 10; ++round) {
    key0 += kPhiloxW0;
    key1 += kPhiloxW1;
    c = philox4x32_round(c, key0, key1);
  }
  return c;
}

/// The four words that hold the random bits of elements i / 8 * 8 ... i / 8 * 8 + 7 (see the
/// stream's contract above). `i` is an element index, not negative.
OPTGEN_RANDOM_FUNCTION Philox4x32 random_words(unsigned long long seed, int tensor, long long step, long long i) {
  const unsigned long long group = static_cast<unsigned long long>(i) >> 3;
  Philox4x32 counter;
  counter.x[0] = static_cast<unsigned int>(group);
  counter.x[1] = static_cast<unsigned int>(group >> 32);
  counter.x[2] = static_cast<unsigned int>(tensor);
  counter.x[3] = static_cast<unsigned int>(static_cast<unsigned long long>(step));
  return philox4x32_10(counter, static_cast<unsigned int>(seed), static_cast<unsigned int>(seed >> 32));
}

/// The 16 random bits (0 to 65535) of element `i` of plan tensor `tensor` at step `step`.
OPTGEN_RANDOM_FUNCTION unsigned int random_bits16(unsigned long long seed, int tensor, long long step, long long i) {
  const Philox4x32 words = random_words(seed, tensor, step, i);
  const unsigned int lane = static_cast<unsigned int>(i) & 7u;
  // Selects rather than words.x[lane >> 1]: a dynamic index could put the words in local memory.
  const unsigned int word =
      (lane & 4u) ? ((lane & 2u) ? words.x[3] : words.x[2]) : ((lane & 2u) ? words.x[1] : words.x[0]);
  return (lane & 1u) ? word >> 16 : word & 0xFFFFu;
}

/// The 16 random bits of elements i ... i + 7 (out[k] for element i + k), from one Philox call:
/// the same bits as random_bits16 for each. `i` is a multiple of 8.
OPTGEN_RANDOM_FUNCTION void random_bits16x8(unsigned long long seed, int tensor, long long step, long long i,
                                            unsigned int out[8]) {
  const Philox4x32 words = random_words(seed, tensor, step, i);
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
  for (int k = 0; k < 4; ++k) {
    out[2 * k] = words.x[k] & 0xFFFFu;
    out[2 * k + 1] = words.x[k] >> 16;
  }
}

/// The bit pattern of a float.
OPTGEN_RANDOM_FUNCTION unsigned int float_bits(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(x);
#else
  unsigned int bits;
  __builtin_memcpy(&bits, &x, sizeof bits);
  return bits;
#endif
}

/// `x` rounded to bf16 (its bit pattern) stochastically with the random bits `random16` (only its
/// low 16 bits are used): x lies between two adjacent bf16 values, lo (x with its low 16 bits
/// cleared: x truncated towards zero) and hi (the next bf16 away from zero), at lo + f * (hi - lo)
/// with f = (x's low 16 bits) / 2^16, and rounds to hi for f * 2^16 of the 2^16 values of
/// `random16`, to lo for the others: with uniform random bits, E[result] = x exactly. The method
/// adds the random bits to x's bit pattern and truncates the low 16: a carry out of the low 16
/// bits, which happens exactly when random16 >= 2^16 - f * 2^16, steps the bf16 pattern to hi (the
/// float encoding makes "next pattern" "next value away from zero", across binades and from
/// subnormals to normals alike). It is the method of pytorch/ao's _fp32_to_bf16_sr
/// (torchao/optim/quant_utils.py, its "alternative, slightly faster" form of the same
/// distribution); stochastic rounding itself as in Gupta et al., "Deep learning with limited
/// numerical precision", ICML 2015, for bf16 training as in Zamirai et al., "Revisiting BFloat16
/// training", arXiv:2010.06192.
///
/// Special values:
/// - a NaN stays NaN, quiet (bit 6 of the bf16 mantissa set), with its sign and the high bits of
///   its payload, as float_to_bf16 (dtype.h) converts it;
/// - ±inf and every value that is already a bf16 (low 16 bits zero, ±0 included) come back
///   unchanged for every random16: no carry can happen;
/// - the top of the range: a finite x above the largest bf16, 0x7F7F0000 (3.3895e38), up to
///   FLT_MAX, lies between that largest bf16 and 2^128, which bf16 (like float) encodes as inf. It
///   rounds to inf with probability f, as the bits carry into the exponent field, which is what the
///   rest of the range does too: the expectation stays x when inf is read as 2^128, the rule IEEE
///   754 rounding uses at overflow, and round-to-nearest (float_to_bf16) already gives inf for every
///   x from 0x7F7F8000 up. Saturating to the largest bf16 instead would be biased, and needs a
///   branch. Likewise for negative x and -inf. A finite x never becomes NaN: the largest carry
///   reaches 0x7F80 (inf), never a NaN pattern.
OPTGEN_RANDOM_FUNCTION unsigned short stochastic_round_bf16(float x, unsigned int random16) {
  const unsigned int bits = float_bits(x);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<unsigned short>((bits >> 16) | 0x0040u);
  // No overflow: bits <= 0xFF800000 (-inf) here, plus at most 0xFFFF.
  return static_cast<unsigned short>((bits + (random16 & 0xFFFFu)) >> 16);
}

#undef OPTGEN_RANDOM_FUNCTION

}  // namespace random
}  // namespace optgen

#endif  // OPTGEN_RANDOM_H_
