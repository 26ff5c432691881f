#ifndef OPTGEN_CODEC_H_
#define OPTGEN_CODEC_H_
// How optgen stores an operand and writes a param: the dtype an operand's loads decode from and its
// stores encode to (its codec), and the ways a param is written. The one definition shared by the
// generator (the operand tables it prints into kernels), the runtime (storage, allocation, the C
// ABI) and the device library (operands.cuh's loads and stores). Plain C++ that host compilers and
// NVRTC both accept, like kernel_abi.h: no includes. optgen/dtype.h and optgen/storage.h add the
// host's functions.

namespace optgen {

/// F32, BF16 and F16 are element types of params, grads and states. Q8 and UQ8 are states only:
/// 8-bit blockwise dynamic quantisation as bitsandbytes' 8-bit optimizers store their states
/// (optgen/blockwise8.h): a code byte per element, then one float absmax per block of 256 elements;
/// Q8 with the signed dynamic map (any state; bitsandbytes' state1, exp_avg), UQ8 with the unsigned
/// map (states that are never negative, bitsandbytes' state2, exp_avg_sq: twice the resolution; a
/// negative value is stored as 0). A tensor of fewer than blockwise8::kMin8bitSize elements keeps
/// such a state in F32 (stored_dtype), as bitsandbytes does.
enum class DType : int { F32 = 0, BF16 = 1, F16 = 2, Q8 = 3, UQ8 = 4 };

/// How a parameter is written after its update. Values are the C ABI's (optgen_storage).
enum class ParamWrite : int {
  Nearest = 0,     ///< its dtype, rounded to nearest even (an f32 param: as computed)
  Master = 1,      ///< from an fp32 master copy the update runs on (bf16 and f16 params)
  Stochastic = 2,  ///< rounded stochastically (bf16 params)
};

#ifdef __CUDACC__
#define OPTGEN_CODEC_FUNCTION __host__ __device__ __forceinline__ constexpr
#else
#define OPTGEN_CODEC_FUNCTION inline constexpr
#endif

/// Bytes per element: 4, 2, 2, and 1 for Q8 and UQ8 (their codes; dtype.h's storage_bytes adds the
/// scales).
OPTGEN_CODEC_FUNCTION int size_of(DType type) {
  switch (type) {
    case DType::F32: return 4;
    case DType::BF16:
    case DType::F16: return 2;
    case DType::Q8:
    case DType::UQ8: return 1;
  }
  return 0;
}

/// Whether `type` is 8-bit blockwise (Q8, UQ8).
OPTGEN_CODEC_FUNCTION bool is_blockwise(DType type) { return type == DType::Q8 || type == DType::UQ8; }

}  // namespace optgen

#endif  // OPTGEN_CODEC_H_
