#ifndef OPTGEN_BLOCKWISE8_H_
#define OPTGEN_BLOCKWISE8_H_
// 8-bit blockwise dynamic quantisation of optimizer states, as bitsandbytes' 8-bit blockwise
// optimizers (Adam8bit, AdamW8bit, ...) store exp_avg and exp_avg_sq (Dettmers et al., "8-bit
// Optimizers via Block-wise Quantization", ICLR 2022). Plain C++ that host compilers and NVRTC (with
// no include path) both accept, like kernel_abi.h: no includes, built-in types only. The generator
// copies its text verbatim into generated kernel sources.
//
// Transcribed from bitsandbytes-foundation/bitsandbytes, commit 95f9af309d4d5793847169c39288dcd3fcbdf564:
//
// - The maps. bitsandbytes/optim/optimizer.py, Optimizer8bit.fill_qmap():
//     name2qmap["dynamic"]  = F.create_dynamic_map(signed=True)    -> state["qmap1"], state1 (exp_avg)
//     name2qmap["udynamic"] = F.create_dynamic_map(signed=False)   -> state["qmap2"], state2 (exp_avg_sq)
//   (Optimizer2State.init_state). create_dynamic_map(signed, max_exponent_bits=7, total_bits=8) in
//   bitsandbytes/functional.py: for i = 0..6, the midpoints of torch.linspace(0.1, 1, 2^i + 1) (signed)
//   or of linspace(0.1, 1, 2^(i+1) + 1) (unsigned), in float32, times 10^(i-6) (and, signed, their
//   negatives), then 0 and 1.0, sorted ascending: 256 distinct values each. kSignedMap runs from
//   -0.99296874 (not -1: the signed map has no -1) through 0 (index 127) to 1 (index 255);
//   kUnsignedMap from 0 (index 0) to 1 (index 255). tests/record_blockwise8_maps.py computes them
//   (and checks this header: --check); the values are those torch computes with FMA (its AVX2 and
//   AVX-512 CPU kernels); torch's DEFAULT CPU kernel rounds 42 signed and 31 unsigned entries
//   differently in the last bit (see the script).
//
// - The block: 256 consecutive elements of a tensor, one float absmax per block
//   (Optimizer2State.init_state: blocksize = 256, absmax1/absmax2 of ceil(numel / 256) floats;
//   csrc/ops.cu: BLOCKSIZE_2STATE 256, NUM_2STATE 1 for kOptimizerStatic8bit2StateBlockwise).
//
// - One step, in csrc/kernels.cu, kOptimizerStatic8bit2StateBlockwise (per block of 256):
//     s1 = qmap1[c1] * absmax1[block]            (dequantize: map[code] * absmax)
//     s2 = qmap2[c2] * absmax2[block]
//     the Adam update of s1, s2 in float (s1 = s2 = 0 for an element whose gradient is NaN or inf)
//     absmax1 = max |s1| over the block (new values), absmax2 likewise, both stored
//     c1 = quantize_2D<1>(qmap1, __fdividef(s1, absmax1)), then the sign rule (keep_sign below)
//     c2 = quantize_2D<0>(qmap2, __fdividef(s2, absmax2))
//   The value is divided by the absmax with __fdividef, the fast approximate division (the value
//   times an approximate reciprocal); bitsandbytes' standalone quantize_blockwise (kQuantizeBlockwise)
//   multiplies by 1 / absmax. normalize() below multiplies by the IEEE reciprocal, once per block,
//   the same bits on host and device (a last-bit difference from either of bitsandbytes' moves a
//   value by a code only when it lies within that bit of a midpoint).
//   Rounding is deterministic, to the nearest code: quantize_2D has no stochastic variant (the
//   stochastic dQuantize<1> belongs to kQuantizeBlockwise). bitsandbytes builds with nvcc's default
//   --fmad=true, so its float update of s1 and s2 may fuse multiply-adds; optgen's kernels compile
//   with --fmad=false (kernel_compile_options). Nothing in this header has a multiply-add to fuse.
//
// - absmax 0 (a block whose new values are all zero): bitsandbytes does not guard it. 0 / 0 is NaN,
//   every comparison in the search is false, and quantize_2D returns code 0; the sign rule then turns
//   state1's code 0 (qmap1[0] = -0.99..., sign bit set) for s1 = +0 into 0 - 1 = 255 (unsigned char
//   wraps; qmap1[255] = 1), keeps 0 for s1 = -0, and leaves state2's 0 (qmap2[0] = 0). Dequantized, map[code] * 0 is 0:
//   no NaN reaches the states. quantize() here follows the same comparisons and so does the same.
//
// - Small tensors: Optimizer2State.init_state keeps a tensor's states in float32 (and steps it with
//   the 32-bit optimizer_update_32bit) when p.numel() < config["min_8bit_size"]; the default
//   min_8bit_size is 4096 (Adam8bit, AdamW8bit, Optimizer2State, Optimizer1State), a per-parameter
//   override possible through GlobalOptimManager. kMin8bitSize and uses_8bit_states() below.
//
// - Edges of bitsandbytes' kernel that this header does not reproduce: it loads the missing
//   elements of a tensor's last, shorter block as code 128 (state1) and 0 (state2) with gradient 0,
//   and includes them in that block's absmax (a padding element's s1 is
//   beta1 * qmap1[128] * old absmax1, 5.5e-7 of it); the absmax here is over the block's own
//   elements. Its state buffers start as codes 0 and absmax 0 (torch.zeros), i.e. zero states.

#ifdef __CUDACC__
#define OPTGEN_BLOCKWISE8_FUNCTION __host__ __device__ __forceinline__
// The tables in device memory: nvcc rejects a plain constexpr array indexed in device code ("undefined
// in device code"; it is host memory); NVRTC accepts either. Device code may also copy them into
// shared memory, as bitsandbytes does (smem_quantiles1/2), and pass that to the functions below.
#define OPTGEN_BLOCKWISE8_TABLE __device__ constexpr
#else
#define OPTGEN_BLOCKWISE8_FUNCTION inline
#define OPTGEN_BLOCKWISE8_TABLE constexpr
#endif

namespace optgen {
namespace blockwise8 {

/// Elements per quantisation block; each block has its own absmax.
constexpr int kBlockSize = 256;

/// bitsandbytes' default min_8bit_size: a tensor of fewer elements keeps float32 states.
constexpr long long kMin8bitSize = 4096;

/// Whether bitsandbytes' 8-bit optimizers (at the default min_8bit_size) keep a tensor of `numel`
/// elements in 8 bits: `p.numel() < min_8bit_size` selects float32 (Optimizer2State.init_state).
OPTGEN_BLOCKWISE8_FUNCTION bool uses_8bit_states(long long numel, long long min_8bit_size = kMin8bitSize) {
  return !(numel < min_8bit_size);
}

/// Quantisation blocks of a tensor of `numel` elements: ceil(numel / 256), the last one shorter.
OPTGEN_BLOCKWISE8_FUNCTION long long num_blocks(long long numel) { return (numel + kBlockSize - 1) / kBlockSize; }

/// optgen's layout of one tensor's 8-bit state (DType::Q8, UQ8), one buffer: `numel` code bytes,
/// padded to 16 bytes, then num_blocks(numel) floats, each block's absmax. The generator, kernels,
/// runtime and checkpoints all locate the absmax with absmax_offset.
OPTGEN_BLOCKWISE8_FUNCTION long long absmax_offset(long long numel) { return (numel + 15) / 16 * 16; }
/// Bytes of that buffer.
OPTGEN_BLOCKWISE8_FUNCTION long long state_bytes(long long numel) {
  return absmax_offset(numel) + num_blocks(numel) * static_cast<long long>(sizeof(float));
}

// Printed by tests/record_blockwise8_maps.py, linspace with FMA (torch's AVX2/AVX-512 CPU kernels).
// create_dynamic_map(signed=True): name2qmap["dynamic"], state1
OPTGEN_BLOCKWISE8_TABLE float kSignedMap[256] = {
    -0x1.fc6666p-1f,  -0x1.f53334p-1f,  -0x1.eep-1f,      -0x1.e6ccccp-1f,   // [0, 3]
    -0x1.df999ap-1f,  -0x1.d86666p-1f,  -0x1.d13334p-1f,  -0x1.cap-1f,       // [4, 7]
    -0x1.c2ccccp-1f,  -0x1.bb999ap-1f,  -0x1.b46666p-1f,  -0x1.ad3334p-1f,   // [8, 11]
    -0x1.a6p-1f,      -0x1.9eccccp-1f,  -0x1.97999ap-1f,  -0x1.906666p-1f,   // [12, 15]
    -0x1.893334p-1f,  -0x1.82p-1f,      -0x1.7accccp-1f,  -0x1.73999ap-1f,   // [16, 19]
    -0x1.6c6668p-1f,  -0x1.653334p-1f,  -0x1.5ep-1f,      -0x1.56ccccp-1f,   // [20, 23]
    -0x1.4f999ap-1f,  -0x1.486668p-1f,  -0x1.413334p-1f,  -0x1.3ap-1f,       // [24, 27]
    -0x1.32ccccp-1f,  -0x1.2b999ap-1f,  -0x1.246668p-1f,  -0x1.1d3334p-1f,   // [28, 31]
    -0x1.16p-1f,      -0x1.0eccccp-1f,  -0x1.079998p-1f,  -0x1.006666p-1f,   // [32, 35]
    -0x1.f26664p-2f,  -0x1.e4p-2f,      -0x1.d59998p-2f,  -0x1.c73334p-2f,   // [36, 39]
    -0x1.b8ccccp-2f,  -0x1.aa6666p-2f,  -0x1.9cp-2f,      -0x1.8d9998p-2f,   // [40, 43]
    -0x1.7f3334p-2f,  -0x1.70ccccp-2f,  -0x1.626666p-2f,  -0x1.54p-2f,       // [44, 47]
    -0x1.459998p-2f,  -0x1.373334p-2f,  -0x1.28ccccp-2f,  -0x1.1a6668p-2f,   // [48, 51]
    -0x1.0cp-2f,      -0x1.fb3332p-3f,  -0x1.de6666p-3f,  -0x1.c1999ap-3f,   // [52, 55]
    -0x1.a4ccccp-3f,  -0x1.88p-3f,      -0x1.6b3334p-3f,  -0x1.4e6666p-3f,   // [56, 59]
    -0x1.31999ap-3f,  -0x1.14ccccp-3f,  -0x1.fp-4f,       -0x1.b66668p-4f,   // [60, 63]
    -0x1.93d70ap-4f,  -0x1.8851eep-4f,  -0x1.7ccccep-4f,  -0x1.7147aep-4f,   // [64, 67]
    -0x1.65c29p-4f,   -0x1.5a3d7p-4f,   -0x1.4eb854p-4f,  -0x1.433334p-4f,   // [68, 71]
    -0x1.37ae14p-4f,  -0x1.2c28f6p-4f,  -0x1.20a3d6p-4f,  -0x1.151ebap-4f,   // [72, 75]
    -0x1.09999ap-4f,  -0x1.fc28f6p-5f,  -0x1.e51ebap-5f,  -0x1.ce147ap-5f,   // [76, 79]
    -0x1.b70a3ep-5f,  -0x1.ap-5f,       -0x1.88f5c2p-5f,  -0x1.71eb86p-5f,   // [80, 83]
    -0x1.5ae146p-5f,  -0x1.43d70ap-5f,  -0x1.2ccccep-5f,  -0x1.15c29p-5f,    // [84, 87]
    -0x1.fd70a4p-6f,  -0x1.cf5c2ap-6f,  -0x1.a147aep-6f,  -0x1.733334p-6f,   // [88, 91]
    -0x1.451ebap-6f,  -0x1.170a3ep-6f,  -0x1.d1eb86p-7f,  -0x1.75c29p-7f,    // [92, 95]
    -0x1.3e76c8p-7f,  -0x1.2c083p-7f,   -0x1.19999ap-7f,  -0x1.072b02p-7f,   // [96, 99]
    -0x1.e978d4p-8f,  -0x1.c49ba6p-8f,  -0x1.9fbe76p-8f,  -0x1.7ae148p-8f,   // [100, 103]
    -0x1.56041ap-8f,  -0x1.3126e8p-8f,  -0x1.0c49bap-8f,  -0x1.ced914p-9f,   // [104, 107]
    -0x1.851eb8p-9f,  -0x1.3b645ap-9f,  -0x1.e353f8p-10f, -0x1.4fdf3ap-10f,  // [108, 111]
    -0x1.eecbfep-11f, -0x1.b3d07cp-11f, -0x1.78d5p-11f,   -0x1.3dd982p-11f,  // [112, 115]
    -0x1.02de02p-11f, -0x1.8fc506p-12f, -0x1.19ce0ap-12f, -0x1.47ae16p-13f,  // [116, 119]
    -0x1.743e96p-14f, -0x1.15df66p-14f, -0x1.6f0068p-15f, -0x1.64840cp-16f,  // [120, 123]
    -0x1.040bfep-17f, -0x1.b43528p-19f, -0x1.27476ep-21f, 0.0f,              // [124, 127]
    0x1.27476ep-21f,  0x1.b43528p-19f,  0x1.040bfep-17f,  0x1.64840cp-16f,   // [128, 131]
    0x1.6f0068p-15f,  0x1.15df66p-14f,  0x1.743e96p-14f,  0x1.47ae16p-13f,   // [132, 135]
    0x1.19ce0ap-12f,  0x1.8fc506p-12f,  0x1.02de02p-11f,  0x1.3dd982p-11f,   // [136, 139]
    0x1.78d5p-11f,    0x1.b3d07cp-11f,  0x1.eecbfep-11f,  0x1.4fdf3ap-10f,   // [140, 143]
    0x1.e353f8p-10f,  0x1.3b645ap-9f,   0x1.851eb8p-9f,   0x1.ced914p-9f,    // [144, 147]
    0x1.0c49bap-8f,   0x1.3126e8p-8f,   0x1.56041ap-8f,   0x1.7ae148p-8f,    // [148, 151]
    0x1.9fbe76p-8f,   0x1.c49ba6p-8f,   0x1.e978d4p-8f,   0x1.072b02p-7f,    // [152, 155]
    0x1.19999ap-7f,   0x1.2c083p-7f,    0x1.3e76c8p-7f,   0x1.75c29p-7f,     // [156, 159]
    0x1.d1eb86p-7f,   0x1.170a3ep-6f,   0x1.451ebap-6f,   0x1.733334p-6f,    // [160, 163]
    0x1.a147aep-6f,   0x1.cf5c2ap-6f,   0x1.fd70a4p-6f,   0x1.15c29p-5f,     // [164, 167]
    0x1.2ccccep-5f,   0x1.43d70ap-5f,   0x1.5ae146p-5f,   0x1.71eb86p-5f,    // [168, 171]
    0x1.88f5c2p-5f,   0x1.ap-5f,        0x1.b70a3ep-5f,   0x1.ce147ap-5f,    // [172, 175]
    0x1.e51ebap-5f,   0x1.fc28f6p-5f,   0x1.09999ap-4f,   0x1.151ebap-4f,    // [176, 179]
    0x1.20a3d6p-4f,   0x1.2c28f6p-4f,   0x1.37ae14p-4f,   0x1.433334p-4f,    // [180, 183]
    0x1.4eb854p-4f,   0x1.5a3d7p-4f,    0x1.65c29p-4f,    0x1.7147aep-4f,    // [184, 187]
    0x1.7ccccep-4f,   0x1.8851eep-4f,   0x1.93d70ap-4f,   0x1.b66668p-4f,    // [188, 191]
    0x1.fp-4f,        0x1.14ccccp-3f,   0x1.31999ap-3f,   0x1.4e6666p-3f,    // [192, 195]
    0x1.6b3334p-3f,   0x1.88p-3f,       0x1.a4ccccp-3f,   0x1.c1999ap-3f,    // [196, 199]
    0x1.de6666p-3f,   0x1.fb3332p-3f,   0x1.0cp-2f,       0x1.1a6668p-2f,    // [200, 203]
    0x1.28ccccp-2f,   0x1.373334p-2f,   0x1.459998p-2f,   0x1.54p-2f,        // [204, 207]
    0x1.626666p-2f,   0x1.70ccccp-2f,   0x1.7f3334p-2f,   0x1.8d9998p-2f,    // [208, 211]
    0x1.9cp-2f,       0x1.aa6666p-2f,   0x1.b8ccccp-2f,   0x1.c73334p-2f,    // [212, 215]
    0x1.d59998p-2f,   0x1.e4p-2f,       0x1.f26664p-2f,   0x1.006666p-1f,    // [216, 219]
    0x1.079998p-1f,   0x1.0eccccp-1f,   0x1.16p-1f,       0x1.1d3334p-1f,    // [220, 223]
    0x1.246668p-1f,   0x1.2b999ap-1f,   0x1.32ccccp-1f,   0x1.3ap-1f,        // [224, 227]
    0x1.413334p-1f,   0x1.486668p-1f,   0x1.4f999ap-1f,   0x1.56ccccp-1f,    // [228, 231]
    0x1.5ep-1f,       0x1.653334p-1f,   0x1.6c6668p-1f,   0x1.73999ap-1f,    // [232, 235]
    0x1.7accccp-1f,   0x1.82p-1f,       0x1.893334p-1f,   0x1.906666p-1f,    // [236, 239]
    0x1.97999ap-1f,   0x1.9eccccp-1f,   0x1.a6p-1f,       0x1.ad3334p-1f,    // [240, 243]
    0x1.b46666p-1f,   0x1.bb999ap-1f,   0x1.c2ccccp-1f,   0x1.cap-1f,        // [244, 247]
    0x1.d13334p-1f,   0x1.d86666p-1f,   0x1.df999ap-1f,   0x1.e6ccccp-1f,    // [248, 251]
    0x1.eep-1f,       0x1.f53334p-1f,   0x1.fc6666p-1f,   0x1p+0f,           // [252, 255]
};
// create_dynamic_map(signed=False): name2qmap["udynamic"], state2
OPTGEN_BLOCKWISE8_TABLE float kUnsignedMap[256] = {
    0.0f,
    0x1.5cf754p-22f,
    0x1.a0133p-21f,
    0x1.1d367p-19f,  // [0, 3]
    0x1.2599ecp-18f,
    0x1.bc98a2p-18f,
    0x1.29cbaap-17f,
    0x1.0624dcp-16f,  // [4, 7]
    0x1.c2e34p-16f,
    0x1.3fd0dp-15f,
    0x1.9e3p-15f,
    0x1.fc8f34p-15f,  // [8, 11]
    0x1.2d7732p-14f,
    0x1.5ca6c8p-14f,
    0x1.8bd662p-14f,
    0x1.0cb296p-13f,  // [12, 15]
    0x1.82a994p-13f,
    0x1.f8a092p-13f,
    0x1.374bc8p-12f,
    0x1.724744p-12f,  // [16, 19]
    0x1.ad42c6p-12f,
    0x1.e83e44p-12f,
    0x1.119ce2p-11f,
    0x1.2f1aap-11f,  // [20, 23]
    0x1.4c986p-11f,
    0x1.6a162p-11f,
    0x1.8793dep-11f,
    0x1.a511ap-11f,  // [24, 27]
    0x1.c28f5ep-11f,
    0x1.e00d1cp-11f,
    0x1.fd8adcp-11f,
    0x1.2b020cp-10f,  // [28, 31]
    0x1.74bc6ap-10f,
    0x1.be76c8p-10f,
    0x1.041894p-9f,
    0x1.28f5c2p-9f,  // [32, 35]
    0x1.4dd2fp-9f,
    0x1.72b02p-9f,
    0x1.978d4ep-9f,
    0x1.bc6a8p-9f,  // [36, 39]
    0x1.e147aep-9f,
    0x1.03126ep-8f,
    0x1.158104p-8f,
    0x1.27ef9ep-8f,  // [40, 43]
    0x1.3a5e34p-8f,
    0x1.4cccccp-8f,
    0x1.5f3b64p-8f,
    0x1.71a9fap-8f,  // [44, 47]
    0x1.841894p-8f,
    0x1.96872ap-8f,
    0x1.a8f5c2p-8f,
    0x1.bb645cp-8f,  // [48, 51]
    0x1.cdd2fp-8f,
    0x1.e0418ap-8f,
    0x1.f2b01ep-8f,
    0x1.028f5cp-7f,  // [52, 55]
    0x1.0bc6a8p-7f,
    0x1.14fdf2p-7f,
    0x1.1e354p-7f,
    0x1.276c8ap-7f,  // [56, 59]
    0x1.30a3d6p-7f,
    0x1.39db24p-7f,
    0x1.43126ep-7f,
    0x1.5eb854p-7f,  // [60, 63]
    0x1.8ccccep-7f,
    0x1.bae146p-7f,
    0x1.e8f5c4p-7f,
    0x1.0b851ep-6f,  // [64, 67]
    0x1.228f5ep-6f,
    0x1.39999ap-6f,
    0x1.50a3d6p-6f,
    0x1.67ae16p-6f,  // [68, 71]
    0x1.7eb852p-6f,
    0x1.95c28ep-6f,
    0x1.accccep-6f,
    0x1.c3d70ep-6f,  // [72, 75]
    0x1.dae146p-6f,
    0x1.f1eb86p-6f,
    0x1.047aep-5f,
    0x1.1p-5f,  // [76, 79]
    0x1.1b851ep-5f,
    0x1.270a3ep-5f,
    0x1.328f5ep-5f,
    0x1.3e147ap-5f,  // [80, 83]
    0x1.49999ap-5f,
    0x1.551eb8p-5f,
    0x1.60a3d6p-5f,
    0x1.6c28f6p-5f,  // [84, 87]
    0x1.77ae14p-5f,
    0x1.833334p-5f,
    0x1.8eb85p-5f,
    0x1.9a3d7p-5f,  // [88, 91]
    0x1.a5c28ep-5f,
    0x1.b147aep-5f,
    0x1.bccccep-5f,
    0x1.c851eep-5f,  // [92, 95]
    0x1.d3d70ep-5f,
    0x1.df5c2ap-5f,
    0x1.eae146p-5f,
    0x1.f66666p-5f,  // [96, 99]
    0x1.00f5c4p-4f,
    0x1.06b854p-4f,
    0x1.0c7ae2p-4f,
    0x1.123d7p-4f,  // [100, 103]
    0x1.18p-4f,
    0x1.1dc29p-4f,
    0x1.23852p-4f,
    0x1.2947aep-4f,  // [104, 107]
    0x1.2f0a3ep-4f,
    0x1.34cccep-4f,
    0x1.3a8f5ep-4f,
    0x1.4051ecp-4f,  // [108, 111]
    0x1.46147cp-4f,
    0x1.4bd70ap-4f,
    0x1.51999ap-4f,
    0x1.575c2ap-4f,  // [112, 115]
    0x1.5d1eb8p-4f,
    0x1.62e148p-4f,
    0x1.68a3d6p-4f,
    0x1.6e6666p-4f,  // [116, 119]
    0x1.7428f6p-4f,
    0x1.79eb86p-4f,
    0x1.7fae16p-4f,
    0x1.8570a4p-4f,  // [120, 123]
    0x1.8b3334p-4f,
    0x1.90f5c4p-4f,
    0x1.96b852p-4f,
    0x1.a8p-4f,  // [124, 127]
    0x1.c4ccccp-4f,
    0x1.e1999ap-4f,
    0x1.fe6666p-4f,
    0x1.0d9998p-3f,  // [128, 131]
    0x1.1cp-3f,
    0x1.2a6668p-3f,
    0x1.38ccccp-3f,
    0x1.473334p-3f,  // [132, 135]
    0x1.559998p-3f,
    0x1.64p-3f,
    0x1.726668p-3f,
    0x1.80ccccp-3f,  // [136, 139]
    0x1.8f3334p-3f,
    0x1.9d9998p-3f,
    0x1.acp-3f,
    0x1.ba6668p-3f,  // [140, 143]
    0x1.c8ccccp-3f,
    0x1.d73334p-3f,
    0x1.e59998p-3f,
    0x1.f4p-3f,  // [144, 147]
    0x1.013332p-2f,
    0x1.086666p-2f,
    0x1.0f999ap-2f,
    0x1.16ccccp-2f,  // [148, 151]
    0x1.1ep-2f,
    0x1.253334p-2f,
    0x1.2c6666p-2f,
    0x1.339998p-2f,  // [152, 155]
    0x1.3accccp-2f,
    0x1.42p-2f,
    0x1.493334p-2f,
    0x1.506666p-2f,  // [156, 159]
    0x1.579998p-2f,
    0x1.5eccccp-2f,
    0x1.66p-2f,
    0x1.6d3334p-2f,  // [160, 163]
    0x1.746666p-2f,
    0x1.7b9998p-2f,
    0x1.82ccccp-2f,
    0x1.8ap-2f,  // [164, 167]
    0x1.913334p-2f,
    0x1.986666p-2f,
    0x1.9f9998p-2f,
    0x1.a6ccccp-2f,  // [168, 171]
    0x1.aep-2f,
    0x1.b53334p-2f,
    0x1.bc6666p-2f,
    0x1.c39998p-2f,  // [172, 175]
    0x1.caccccp-2f,
    0x1.d2p-2f,
    0x1.d93334p-2f,
    0x1.e06666p-2f,  // [176, 179]
    0x1.e79998p-2f,
    0x1.eeccccp-2f,
    0x1.f6p-2f,
    0x1.fd3332p-2f,  // [180, 183]
    0x1.023334p-1f,
    0x1.05ccccp-1f,
    0x1.096666p-1f,
    0x1.0dp-1f,  // [184, 187]
    0x1.109998p-1f,
    0x1.143334p-1f,
    0x1.17ccccp-1f,
    0x1.1b6668p-1f,  // [188, 191]
    0x1.1fp-1f,
    0x1.22999ap-1f,
    0x1.263334p-1f,
    0x1.29ccccp-1f,  // [192, 195]
    0x1.2d6668p-1f,
    0x1.31p-1f,
    0x1.34999ap-1f,
    0x1.383334p-1f,  // [196, 199]
    0x1.3bccccp-1f,
    0x1.3f6668p-1f,
    0x1.43p-1f,
    0x1.46999ap-1f,  // [200, 203]
    0x1.4a3334p-1f,
    0x1.4dccccp-1f,
    0x1.516668p-1f,
    0x1.55p-1f,  // [204, 207]
    0x1.58999ap-1f,
    0x1.5c3334p-1f,
    0x1.5fccccp-1f,
    0x1.636668p-1f,  // [208, 211]
    0x1.67p-1f,
    0x1.6a999ap-1f,
    0x1.6e3334p-1f,
    0x1.71ccccp-1f,  // [212, 215]
    0x1.756668p-1f,
    0x1.79p-1f,
    0x1.7c999ap-1f,
    0x1.803334p-1f,  // [216, 219]
    0x1.83ccccp-1f,
    0x1.876668p-1f,
    0x1.8bp-1f,
    0x1.8e9998p-1f,  // [220, 223]
    0x1.923334p-1f,
    0x1.95ccccp-1f,
    0x1.996668p-1f,
    0x1.9dp-1f,  // [224, 227]
    0x1.a09998p-1f,
    0x1.a43334p-1f,
    0x1.a7ccccp-1f,
    0x1.ab6668p-1f,  // [228, 231]
    0x1.afp-1f,
    0x1.b29998p-1f,
    0x1.b63334p-1f,
    0x1.b9ccccp-1f,  // [232, 235]
    0x1.bd6668p-1f,
    0x1.c1p-1f,
    0x1.c49998p-1f,
    0x1.c83334p-1f,  // [236, 239]
    0x1.cbccccp-1f,
    0x1.cf6668p-1f,
    0x1.d3p-1f,
    0x1.d69998p-1f,  // [240, 243]
    0x1.da3334p-1f,
    0x1.ddccccp-1f,
    0x1.e16668p-1f,
    0x1.e5p-1f,  // [244, 247]
    0x1.e89998p-1f,
    0x1.ec3334p-1f,
    0x1.efccccp-1f,
    0x1.f36668p-1f,  // [248, 251]
    0x1.f7p-1f,
    0x1.fa9998p-1f,
    0x1.fe3334p-1f,
    0x1p+0f,  // [252, 255]
};

/// 1 / absmax, rounded once: what a block's values are multiplied by (normalize).
OPTGEN_BLOCKWISE8_FUNCTION float reciprocal(float absmax) { return 1.0f / absmax; }

/// v * (1 / absmax): the value in [-1, 1] (a last-bit rounding may put it just past 1, which
/// quantises as 1) that is quantised. bitsandbytes' optimizer kernel divides with __fdividef(s,
/// absmax), which is itself s times an approximate reciprocal (2 ulp); its quantize_blockwise
/// multiplies by 1 / absmax as here. One reciprocal per block keeps a per-element division out of
/// the kernels, and host and device compute the same bits (two IEEE-rounded operations, nothing
/// to fuse). NaN for a block of zeros (0 * inf), as 0 / 0 is in bitsandbytes.
OPTGEN_BLOCKWISE8_FUNCTION float normalize(float value, float inverse_absmax) { return value * inverse_absmax; }

/// The code of `normalized` in a sorted 256-entry map: csrc/kernels.cu, quantize_2D (whose
/// `quadrants` only cache map[63], map[127], map[191]; dQuantize<0> searches the same way).
/// A binary search from 127 in steps 64, 32, ..., 1 over the odd codes ends at an even code p with
/// map[p - 1] < x <= map[p + 1] (p - 1, p + 1 the last pivots below and above x); then, against the
/// midpoint of the two codes x lies between, computed in float as (a + b) * 0.5f:
///   x >  map[p]: p + 1 if x > midpoint(map[p], map[p + 1]), else p
///   x <= map[p]: p - 1 if x < midpoint(map[p - 1], map[p]), else p
/// So x is rounded to the nearest code, and a tie (x exactly at a midpoint) goes to the even code.
/// Above map[254] the upper bound is bitsandbytes' initial `upper = 1.0f`, which is map[255] for
/// both maps; the initial `lower` (-1 or 0) never decides a code (it is only read when p = 0 and
/// the choice is between lower_pivot = 0 and p = 0), so map[0] stands in for it. NaN gives code 0.
OPTGEN_BLOCKWISE8_FUNCTION unsigned char quantize(const float* map, float normalized) {
  const float x = normalized;
  int pivot = 127;
  int upper_pivot = 255;
  int lower_pivot = 0;
  float lower = map[0];
  float upper = map[255];
  float val = map[pivot];
  for (int i = 64; i > 0; i >>= 1) {
    if (x > val) {
      lower_pivot = pivot;
      lower = val;
      pivot += i;
    } else {
      upper_pivot = pivot;
      upper = val;
      pivot -= i;
    }
    val = map[pivot];
  }
  if (x > val) {
    const float midpoint = (upper + val) * 0.5f;
    return static_cast<unsigned char>(x > midpoint ? upper_pivot : pivot);
  }
  const float midpoint = (lower + val) * 0.5f;
  return static_cast<unsigned char>(x < midpoint ? lower_pivot : pivot);
}

/// quantize()'s rule, nearest code and a tie to the even code, stated over the midpoints it decides
/// by: midpoints[k] = midpoint(map, k) for k = 0 .. 254.
OPTGEN_BLOCKWISE8_FUNCTION float midpoint(const float* map, int k) { return (map[k] + map[k + 1]) * 0.5f; }

/// The code quantize(map, x) gives, found by walking from `guess` (any code) over `midpoints`
/// (midpoint(map, k), k = 0 .. 254): up while x is past the midpoint above (or on it, towards an
/// even code), down while x is before the one below. The walk makes the result exact whatever the
/// guess; a guess within a code or two (signed_code_guess, unsigned_code_guess) makes it one or
/// two comparisons instead of quantize()'s eight dependent reads of the map (bank conflicts
/// included, the cost of an 8-bit Update stage). NaN gives code 0, as in quantize().
OPTGEN_BLOCKWISE8_FUNCTION unsigned char nearest_code(const float* midpoints, float x, int guess) {
  if (x != x) return 0;
  int c = guess;
  while (c < 255 && (x > midpoints[c] || (x == midpoints[c] && (c & 1) != 0))) ++c;
  while (c > 0 && (x < midpoints[c - 1] || (x == midpoints[c - 1] && (c & 1) != 0))) --c;
  return static_cast<unsigned char>(c);
}

/// nearest_code for a guess at most one code off (as signed_code_guess and unsigned_code_guess
/// are for every float in [-1, 1], and for the last-bit overshoot of normalize past 1), without a
/// loop or a branch: the guess, one up or one down, by the two midpoints around it. `bounds` is the
/// midpoints with a sentinel at each end: bounds[0] = -inf, bounds[k + 1] = midpoint(map, k),
/// bounds[256] = +inf. Two independent reads, which the kernels overlap across elements (a
/// walk's dependent reads and branches did not).
OPTGEN_BLOCKWISE8_FUNCTION unsigned char nearest_code_near(const float* bounds, float x, int guess) {
  const float below = bounds[guess];      // the midpoint between guess - 1 and guess
  const float above = bounds[guess + 1];  // between guess and guess + 1
  const int odd = guess & 1;              // a tie goes to the even code
  const int up = (x > above) | ((x == above) & odd);
  const int down = (x < below) | ((x == below) & odd);
  return x != x ? 0 : static_cast<unsigned char>(guess + up - down);
}

/// Where |x| (at most 1) falls among create_dynamic_map's groups, for the guesses below: group i
/// (0 .. 6) holds the map's values in (10^(i-7), 10^(i-6)], `cells` of them (2^i signed, 2^(i+1)
/// unsigned) at the midpoints of linspace(0.1, 1) scaled by 10^(i-6); `*cell` is the one |x| lies
/// in, clamped to the group. Returns i.
OPTGEN_BLOCKWISE8_FUNCTION int dynamic_group(float magnitude, int unsigned_map, int* cell) {
  const float a = magnitude;
  const int i = (a > 1e-6f) + (a > 1e-5f) + (a > 1e-4f) + (a > 1e-3f) + (a > 1e-2f) + (a > 1e-1f);
  const float scale = i == 6   ? 1.0f
                      : i == 5 ? 1e1f
                      : i == 4 ? 1e2f
                      : i == 3 ? 1e3f
                      : i == 2 ? 1e4f
                      : i == 1 ? 1e5f
                               : 1e6f;
  const int cells = 1 << (i + unsigned_map);
  // A guess needs no exact division: times 1 / 0.9 rounded, not a division per value.
  const float position = (a * scale - 0.1f) * static_cast<float>(cells) * 1.11111116f;
  int j = 0;  // also for NaN, before any conversion
  if (position > 0.0f) j = position < static_cast<float>(cells) ? static_cast<int>(position) : cells - 1;
  *cell = j;
  return i;
}

/// A guess of quantize(kSignedMap, x) for x in [-1, 1]: the positive codes are 128 + (2^i - 1) + j
/// for cell j of group i, mirrored below the 0 at 127.
OPTGEN_BLOCKWISE8_FUNCTION int signed_code_guess(float x) {
  int j = 0;
  const int i = dynamic_group(x < 0.0f ? -x : x, 0, &j);
  const int k = (1 << i) - 1 + j;
  return x < 0.0f ? 126 - k : 128 + k;
}

/// A guess of quantize(kUnsignedMap, x) for x in [0, 1]: code 2^(i+1) - 1 + j for cell j of group i.
OPTGEN_BLOCKWISE8_FUNCTION int unsigned_code_guess(float x) {
  int j = 0;
  const int i = dynamic_group(x < 0.0f ? 0.0f : x, 1, &j);
  return (2 << i) - 1 + j;
}

/// The sign bit of x (signbit(): set for -0 and negative values).
OPTGEN_BLOCKWISE8_FUNCTION bool sign_bit(float x) {
#ifdef __CUDA_ARCH__
  return (__float_as_uint(x) >> 31) != 0;
#else
  return __builtin_signbitf(x) != 0;
#endif
}

/// bitsandbytes' sign rule for state1 (kOptimizerStatic8bit2StateBlockwise, "make sure state1 term
/// has still the same sign after quantization"): when map[code] and the unquantised `value` differ
/// in sign bit, the code moves one step towards the value's side: code + 1 if value > 0, else
/// code - 1, in unsigned char (0 - 1 wraps to 255). With the signed map this sends a negative value
/// (or -0) that rounded to code 127 (the map's +0) to code 126, the negative value nearest 0.
OPTGEN_BLOCKWISE8_FUNCTION unsigned char keep_sign(const float* map, unsigned char code, float value) {
  if (sign_bit(map[code]) != sign_bit(value)) {
    return static_cast<unsigned char>(value > 0.0f ? code + 1 : code - 1);
  }
  return code;
}

/// State1 (exp_avg, kSignedMap): the code of `value` in a block of absmax `absmax`, sign rule included.
OPTGEN_BLOCKWISE8_FUNCTION unsigned char quantize_signed_state(const float* signed_map, float value, float absmax) {
  return keep_sign(signed_map, quantize(signed_map, normalize(value, reciprocal(absmax))), value);
}

/// State2 (exp_avg_sq, kUnsignedMap): the code of `value` in a block of absmax `absmax`.
OPTGEN_BLOCKWISE8_FUNCTION unsigned char quantize_unsigned_state(const float* unsigned_map, float value, float absmax) {
  return quantize(unsigned_map, normalize(value, reciprocal(absmax)));
}

/// keep_sign for kSignedMap without reading it: kSignedMap[code] has its sign bit set exactly for
/// codes below 127 (127 is +0; tests/blockwise8_test.cpp checks every code).
OPTGEN_BLOCKWISE8_FUNCTION unsigned char keep_sign_signed_map(unsigned char code, float value) {
  if ((code < 127) != sign_bit(value)) return static_cast<unsigned char>(value > 0.0f ? code + 1 : code - 1);
  return code;
}

/// quantize_signed_state and quantize_unsigned_state through nearest_code_near, for the kernels:
/// the same codes, given the block's reciprocal(absmax) and the `bounds` (nearest_code_near) of
/// kSignedMap and kUnsignedMap respectively.
OPTGEN_BLOCKWISE8_FUNCTION unsigned char quantize_signed_state_fast(const float* bounds, float value,
                                                                    float inverse_absmax) {
  const float x = normalize(value, inverse_absmax);
  return keep_sign_signed_map(nearest_code_near(bounds, x, signed_code_guess(x)), value);
}
OPTGEN_BLOCKWISE8_FUNCTION unsigned char quantize_unsigned_state_fast(const float* bounds, float value,
                                                                      float inverse_absmax) {
  const float x = normalize(value, inverse_absmax);
  return nearest_code_near(bounds, x, unsigned_code_guess(x));
}

/// The value a code stands for: map[code] * absmax (kOptimizerStatic8bit2StateBlockwise:
/// smem_quantiles[c] * absmax[i / BLOCK_SIZE]).
OPTGEN_BLOCKWISE8_FUNCTION float dequantize(const float* map, unsigned char code, float absmax) {
  return map[code] * absmax;
}

#ifndef __CUDACC__
// ---- Host only: whole buffers, block by block (a CPU reference for the kernels that use the above).

/// max |v| over `count` values; NaN values are passed over, as fmaxf does.
inline float block_absmax(const float* values, long long count) {
  float absmax = 0.0f;
  for (long long i = 0; i < count; ++i) {
    const float magnitude = values[i] < 0.0f ? -values[i] : values[i];
    if (magnitude > absmax) absmax = magnitude;
  }
  return absmax;
}

/// Quantises `numel` values: absmax[b] = block_absmax of block b (num_blocks(numel) blocks of
/// kBlockSize, the last one shorter), codes[i] = quantize_signed_state (signed_state, state1) or
/// quantize_unsigned_state (state2) of values[i] in its block.
inline void quantize_blockwise(const float* map, bool signed_state, const float* values, long long numel,
                               unsigned char* codes, float* absmax) {
  for (long long block = 0; block * kBlockSize < numel; ++block) {
    const long long begin = block * kBlockSize;
    const long long count = numel - begin < kBlockSize ? numel - begin : kBlockSize;
    const float block_max = block_absmax(values + begin, count);
    absmax[block] = block_max;
    for (long long i = begin; i < begin + count; ++i) {
      codes[i] = signed_state ? quantize_signed_state(map, values[i], block_max)
                              : quantize_unsigned_state(map, values[i], block_max);
    }
  }
}

/// values[i] = dequantize(map, codes[i], absmax[i / kBlockSize]) for `numel` values.
inline void dequantize_blockwise(const float* map, const unsigned char* codes, const float* absmax, long long numel,
                                 float* values) {
  for (long long i = 0; i < numel; ++i) values[i] = dequantize(map, codes[i], absmax[i / kBlockSize]);
}
#endif  // __CUDACC__

}  // namespace blockwise8
}  // namespace optgen

#endif  // OPTGEN_BLOCKWISE8_H_
