#include "optgen/dtype.h"

#include <cstring>

#include "optgen/blockwise8.h"

namespace optgen {

const char* to_string(DType type) {
  switch (type) {
    case DType::F32: return "f32";
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
    case DType::Q8: return "q8";
    case DType::UQ8: return "uq8";
  }
  return "unknown dtype";
}

int minimum_compute_capability(DType type) { return type == DType::BF16 ? 80 : kOldestComputeCapability; }

DType stored_dtype(DType type, std::int64_t numel) {
  return is_blockwise(type) && !blockwise8::uses_8bit_states(numel) ? DType::F32 : type;
}

std::size_t storage_bytes(DType type, std::int64_t numel) {
  if (is_blockwise(type)) return static_cast<std::size_t>(blockwise8::state_bytes(numel));
  return static_cast<std::size_t>(numel) * static_cast<std::size_t>(size_of(type));
}

namespace {
std::uint32_t bits_of(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}
float from_bits(std::uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}
}  // namespace

std::uint16_t float_to_bf16(float value) {
  std::uint32_t bits = bits_of(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40);  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1);
  return static_cast<std::uint16_t>(bits >> 16);
}

float bf16_to_float(std::uint16_t bits) { return from_bits(static_cast<std::uint32_t>(bits) << 16); }

std::uint16_t float_to_f16(float value) {
  const std::uint32_t bits = bits_of(value);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const std::uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to infinity
  if (abs < 0x38800000u) {                              // subnormal in f16 (or zero): round abs * 2^24 to an integer
    const float scaled = from_bits(abs) * 16777216.0f;  // exact: a power-of-two scale
    const float rounded = scaled + 8388608.0f - 8388608.0f;  // round to nearest even
    return static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(rounded));
  }
  std::uint32_t mantissa = abs + 0xfffu + ((abs >> 13) & 1);  // round to nearest even at bit 13
  return static_cast<std::uint16_t>(sign | ((mantissa - 0x38000000u) >> 13));
}

float f16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    const float value = static_cast<float>(mantissa) / 16777216.0f;  // mantissa * 2^-24
    return sign ? -value : value;
  }
  if (exponent == 31) return from_bits(sign | 0x7f800000u | (mantissa << 13));
  return from_bits(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

}  // namespace optgen
