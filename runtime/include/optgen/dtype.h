#pragma once
/// Element types of the tensors optgen updates, and of the states it keeps.

#include <cstddef>
#include <cstdint>

namespace optgen {

/// F32, BF16 and F16 are element types of params, grads and states. Q8 and UQ8 are states only:
/// 8-bit blockwise dynamic quantisation as bitsandbytes' 8-bit optimizers store their states
/// (optgen/blockwise8.h): a code byte per element, then one float absmax per block of 256 elements;
/// Q8 with the signed dynamic map (any state; bitsandbytes' state1, exp_avg), UQ8 with the unsigned
/// map (states that are never negative, bitsandbytes' state2, exp_avg_sq: twice the resolution; a
/// negative value is stored as 0). A tensor of fewer than blockwise8::kMin8bitSize elements keeps
/// such a state in F32 (stored_dtype), as bitsandbytes does.
enum class DType : int { F32 = 0, BF16 = 1, F16 = 2, Q8 = 3, UQ8 = 4 };

const char* to_string(DType type);  ///< "f32", "bf16", "f16", "q8", "uq8"
/// Bytes per element: 4, 2, 2, and 1 for Q8 and UQ8 (their codes; storage_bytes adds the scales).
std::size_t size_of(DType type);
/// Whether `type` is 8-bit blockwise (Q8, UQ8).
bool is_blockwise(DType type);
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
