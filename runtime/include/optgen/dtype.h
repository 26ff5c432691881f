#pragma once
/// Element types of the tensors optgen updates.

#include <cstddef>
#include <cstdint>

namespace optgen {

enum class DType : int { F32 = 0, BF16 = 1, F16 = 2 };

const char* to_string(DType type);  ///< "f32", "bf16", "f16"
std::size_t size_of(DType type);

/// Round-to-nearest-even conversions, as the GPU does them.
std::uint16_t float_to_bf16(float value);
float bf16_to_float(std::uint16_t bits);
std::uint16_t float_to_f16(float value);
float f16_to_float(std::uint16_t bits);

}  // namespace optgen
