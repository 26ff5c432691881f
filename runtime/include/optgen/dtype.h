#pragma once
/// Element types of the tensors optgen updates, and of the states it keeps: DType (optgen/codec.h)
/// and what the host knows of it.

#include <cstddef>
#include <cstdint>

#include "optgen/codec.h"

namespace optgen {

const char* to_string(DType type);  ///< "f32", "bf16", "f16", "q8", "uq8"
/// The oldest GPU optgen's kernels compile for (major * 10 + minor): CUDA 13's NVRTC knows nothing older.
constexpr int kOldestComputeCapability = 75;
/// The oldest GPU whose kernels may hold `type`: 80 for BF16 (PTX's cvt.rn.bf16.f32), else
/// kOldestComputeCapability. Kernel sets with a bf16 operand are compiled empty below 80
/// (generator/emit_cuda.cpp), and the runtime refuses to launch them there.
int minimum_compute_capability(DType type);
/// The dtype a state of dtype `type` is stored in for a tensor of `numel` values: F32 for a
/// blockwise state of a tensor under blockwise8::kMin8bitSize elements, else `type`.
DType stored_dtype(DType type, std::int64_t numel);
/// Bytes of `numel` values of `type` (as stored_dtype gives it): numel * size_of, or for Q8 and
/// UQ8 blockwise8::state_bytes (the codes, padded to 16 bytes, then the absmax of each block).
std::size_t storage_bytes(DType type, std::int64_t numel);

/// Round-to-nearest-even conversions, as the GPU does them.
std::uint16_t float_to_bf16(float value);
float bf16_to_float(std::uint16_t bits);
std::uint16_t float_to_f16(float value);
float f16_to_float(std::uint16_t bits);

}  // namespace optgen
