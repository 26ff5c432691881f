#ifndef OPTGEN_ELEMENT_MATH_H_
#define OPTGEN_ELEMENT_MATH_H_
// How an Update stage's element code divides and takes square roots: `m_.div(a, b)` and
// `m_.sqrt(x)` in the generated `Update::apply<Math>`, always IEEE-rounded (the CPU reference's
// `a / b` and `std::sqrt`), computed one of two ways. Device code only, part of the device library
// (optgen/device/update.cuh includes it); like random.h it has no includes, so a test can compile
// it alone with NVRTC.
//
// IeeeMath is CUDA's own `a / b` and `sqrtf`. Each compiles to a short sequence (a reciprocal or
// reciprocal square root estimate refined by two or three FMAs), a check of whether its operands
// are in the range where that sequence is exact (FCHK for a division, an exponent compare for a
// square root) and a branch, per operation, to a slow path. The branches cost more than their
// instructions: each is a reconvergence region (BSSY ... BSYNC) the compiler does not schedule
// across, so an element's divisions and root run as one dependent chain and the elements a
// thread holds do not overlap. The 8-bit Update stage, whose lane updates 8 elements at a time and
// is bound by its instructions and their latency, stalled on that dependent math more than on
// anything else (bench/RESULTS.md, 2026-11-26).
//
// CheckedMath runs the same sequences with no branch, and records whether every operand was in a
// range where they are exact; the caller computes a batch of elements so, then, where exact() is
// false (rare: a value beyond 2^+-60, a subnormal, an infinity, a NaN, a negative zero
// dividend), computes the whole batch again with IeeeMath. The two give the same bits wherever
// exact() holds (tests/element_math_test.cpp compares them over random and boundary operands on
// the GPU).
//
// The sequences are the fast paths CUDA 13's div.rn.f32 and sqrt.rn.f32 compile to on sm_90:
// - a / b: r = rcp.approx(b); r = fma(r, fma(-b, r, 1), r); q = a * r; q = fma(fma(-b, q, a), r, q),
//   exact (Markstein's theorem) where no step under- or overflows: here |a| and |b| in
//   [2^-60, 2^60), so that the quotient and the remainder are normal floats; and a = +0, for
//   which every step is +-0 and the result 0 with the quotient's sign. (-0 / b would come out +0.)
// - sqrt(x): y = rsqrt.approx(x); s = x * y; s = fma(fma(-s, s, x), y / 2, s), exact for normal x
//   from 2^-101 up (CUDA's own test: bits(x) - 0x0d000000 <= 0x727fffff); +0 is +0. CheckedMath
//   says exact below 2^120 only, so that the root is +0 or in [2^-50.5, 2^60): in a division's
//   range as a dividend. Its sqrt returns a Root, and div(Root, b) checks only b: Adam's
//   sqrt(v) / sqrt(bias_correction2) costs one check where it cost two.
//
// The checks are comparisons (FSETP with the operand's absolute value, chained). Sums on the FMA
// pipe instead (an `over` sum that overflows, an `under` one that a flushed product leaves
// nonzero) were tried and were slower: more instructions and registers (bench/RESULTS.md,
// 2026-11-26).

namespace optgen {

/// IEEE division and square root as CUDA compiles them (a branch to a slow path in each).
struct IeeeMath {
  __device__ __forceinline__ float div(float a, float b) const { return a / b; }
  __device__ __forceinline__ float sqrt(float x) const { return ::sqrtf(x); }
};

/// The same results with no branch, exact where exact() holds (see above).
class CheckedMath {
 public:
  /// A dividend in a division's range, which div(Root, b) need not check: sqrt's result (a root
  /// of an operand sqrt checked, so +0 or in [2^-50.5, 2^60)), or div(a, b)'s a once checked.
  /// Anywhere else it is its float.
  struct Root {
    float value;
    __device__ __forceinline__ operator float() const { return value; }
  };

  __device__ __forceinline__ bool exact() const { return exact_; }

  __device__ __forceinline__ float div(float a, float b) {
    exact_ = exact_ & (in_range(a) | (__float_as_uint(a) == 0u));
    return div(Root{a}, b);
  }
  __device__ __forceinline__ float div(Root a, float b) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(b));
    r = __fmaf_rn(r, __fmaf_rn(-b, r, 1.0f), r);
    const float q = __fmul_rn(a.value, r);
    const float result = __fmaf_rn(__fmaf_rn(-b, q, a.value), r, q);
    exact_ = exact_ & in_range(b);
    return result;
  }

  __device__ __forceinline__ Root sqrt(float x) {
    // The estimate of x + 2^-126, which is x wherever the sequence is exact (2^-126 is below half
    // an ulp of 2^-101), and for +0 a finite 2^63, so that the root of +0 comes out +0 with no
    // select on the integer pipe (rsqrt(+0) = inf made it NaN).
    float y;
    asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(__fadd_rn(x, 0x1p-126f)));
    const float s = __fmul_rn(x, y);
    const float root = __fmaf_rn(__fmaf_rn(-s, s, x), __fmul_rn(y, 0.5f), s);
    const unsigned bits = __float_as_uint(x);
    // x in [2^-101, 2^120) (bits - 0x0d000000 <= 0x6e7fffff) or +0.
    exact_ = exact_ & ((bits - 0x0d000000u <= 0x6e7fffffu) | (bits == 0u));
    return Root{root};
  }

 private:
  /// |x| in [2^-60, 2^60) (false for NaN).
  static __device__ __forceinline__ bool in_range(float x) { return (fabsf(x) >= 0x1p-60f) & (fabsf(x) < 0x1p60f); }

  bool exact_ = true;
};

}  // namespace optgen

#endif  // OPTGEN_ELEMENT_MATH_H_
