#pragma once
/// optgen's device library: the storage number types (bf16, f16) and their conversions, and the
/// spec language's functions in float and double.

namespace optgen {

/// Storage types. Math is always float; loads convert from, stores round to, the storage type.
struct bf16 { unsigned short bits; };
struct f16 { unsigned short bits; };

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(bf16 x) { return __uint_as_float(static_cast<unsigned>(x.bits) << 16); }
__device__ __forceinline__ float to_float(f16 x) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
  return f;
}
template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16 from_float<bf16>(float x) {
  bf16 r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.bits) : "f"(x));
  return r;
}
template <> __device__ __forceinline__ f16 from_float<f16>(float x) {
  f16 r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(x));
  return r;
}

/// The spec language's functions, in float (element and tensor code) and double (group code);
/// min and max propagate NaN like torch.minimum/maximum.
__device__ __forceinline__ float sign(float x) { return static_cast<float>((x > 0.0f) - (x < 0.0f)); }
__device__ __forceinline__ double sign(double x) { return static_cast<double>((x > 0.0) - (x < 0.0)); }
__device__ __forceinline__ float min(float a, float b) { return (a != a || b != b) ? a + b : fminf(a, b); }
__device__ __forceinline__ double min(double a, double b) { return (a != a || b != b) ? a + b : fmin(a, b); }
__device__ __forceinline__ float max(float a, float b) { return (a != a || b != b) ? a + b : fmaxf(a, b); }
__device__ __forceinline__ double max(double a, double b) { return (a != a || b != b) ? a + b : fmax(a, b); }
__device__ __forceinline__ float clamp(float x, float lo, float hi) { return min(max(x, lo), hi); }
__device__ __forceinline__ double clamp(double x, double lo, double hi) { return min(max(x, lo), hi); }
__device__ __forceinline__ float lerp(float start, float end, float weight) { return start + weight * (end - start); }
__device__ __forceinline__ double lerp(double start, double end, double weight) { return start + weight * (end - start); }
/// a % b: the remainder of the floored division, with b's sign (Python's %; +0 for none), exact;
/// NaN for b = 0.
__device__ __forceinline__ float mod(float a, float b) {
  const float r = fmodf(a, b);
  return r == 0.0f ? 0.0f : (r < 0.0f) != (b < 0.0f) ? r + b : r;
}
__device__ __forceinline__ double mod(double a, double b) {
  const double r = fmod(a, b);
  return r == 0.0 ? 0.0 : (r < 0.0) != (b < 0.0) ? r + b : r;
}

}  // namespace optgen
