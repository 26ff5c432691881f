#pragma once
/// optgen's device library: operands and codecs. How a stage loads and stores an operand (param,
/// grad, a state) of any storage type: vectors of 16 bytes, the element codecs, 8-bit blockwise
/// states, stochastic rounding and master copies, a tile held as loaded, and the operand table.

#include "optgen/codec.h"
#include "optgen/kernel_abi.h"
#include "optgen/random.h"
#include "optgen/blockwise8.h"
#include "optgen/device/math.cuh"

namespace optgen {

using kernel_abi::Chunk;
using kernel_abi::GroupTable;
using kernel_abi::GroupWrite;
using kernel_abi::ReductionTable;
using kernel_abi::StepInputs;
using kernel_abi::TableView;

typedef unsigned long long uintptr;

/// `V` elements of type T, moved as one access of up to 16 bytes.
template <typename T, int V>
struct alignas(sizeof(T) * V < 16 ? sizeof(T) * V : 16) Pack {
  T x[V];
};

template <typename T, int V>
__device__ __forceinline__ void load_vector(const void* base, long long i, float* out) {
  const Pack<T, V> p = *reinterpret_cast<const Pack<T, V>*>(static_cast<const T*>(base) + i);
#pragma unroll
  for (int e = 0; e < V; ++e) out[e] = to_float(p.x[e]);
}

/// Stores `p` at element i of `base`; 16 bytes of 2-byte values (bf16, f16) as one st.v4.b32.
/// Stored as a Pack, the compiler splits it into its elements and merges them again only within a
/// short stretch of code: in the 8-bit Update stage's loop body a bf16 parameter's 16 bytes went
/// out as four 4-byte stores. (Floats come out of the compiler as 16-byte stores there.)
template <typename T, int V>
__device__ __forceinline__ void store_pack(void* base, long long i, const Pack<T, V>& p) {
  T* const to = static_cast<T*>(base) + i;
  if constexpr (sizeof(T) == 2 && sizeof(p) % 16 == 0) {
    const unsigned* const w = reinterpret_cast<const Pack<unsigned, sizeof(p) / 4>&>(p).x;
#pragma unroll
    for (int k = 0; k < static_cast<int>(sizeof(p) / 16); ++k)
      asm volatile("st.v4.b32 [%0], {%1, %2, %3, %4};"
                   :
                   : "l"(reinterpret_cast<unsigned*>(to) + 4 * k), "r"(w[4 * k]), "r"(w[4 * k + 1]), "r"(w[4 * k + 2]),
                     "r"(w[4 * k + 3])
                   : "memory");
  } else {
    *reinterpret_cast<Pack<T, V>*>(to) = p;
  }
}

template <typename T, int V>
__device__ __forceinline__ void store_vector(void* base, long long i, const float* in) {
  Pack<T, V> p;
#pragma unroll
  for (int e = 0; e < V; ++e) p.x[e] = from_float<T>(in[e]);
  store_pack(base, i, p);
}

// An operand's codec is its optgen::DType (optgen/codec.h): loads decode to float, stores round to
// nearest even. A kernel's operand table (the generated Operands_<storage> structs) gives each
// operand's; a codec is a compile-time constant wherever the operand loops are unrolled. Q8 and UQ8
// are 8-bit blockwise states (optgen/blockwise8.h), whose values need their block's absmax:
// load_operand and the Update stage's store_blockwise read and write them, not load_codec and
// store_codec. How the param is written is optgen::ParamWrite: rounded to nearest; from an fp32
// master copy, which is then operand 0 (the update reads and writes the master); or rounded
// stochastically (bf16).

/// A blockwise codec where an element codec was asked for: never, by construction (load_operand
/// and the Update stage route 8-bit operands to their own code; the stages of rows and columns,
/// which call load_codec directly, static_assert that they have none). Telling the compiler so
/// keeps these switches free: a __trap() here cost spills in kernels at the register cap.
__device__ __forceinline__ void blockwise_codec_misused() { __builtin_unreachable(); }

template <int V>
__device__ __forceinline__ void load_codec(DType codec, const void* base, long long i, float* out) {
  switch (codec) {
    case DType::F32: load_vector<float, V>(base, i, out); return;
    case DType::BF16: load_vector<bf16, V>(base, i, out); return;
    case DType::F16: load_vector<f16, V>(base, i, out); return;
    case DType::Q8:
    case DType::UQ8: blockwise_codec_misused(); return;
  }
}
template <int V>
__device__ __forceinline__ void store_codec(DType codec, void* base, long long i, const float* in) {
  switch (codec) {
    case DType::F32: store_vector<float, V>(base, i, in); return;
    case DType::BF16: store_vector<bf16, V>(base, i, in); return;
    case DType::F16: store_vector<f16, V>(base, i, in); return;
    case DType::Q8:
    case DType::UQ8: blockwise_codec_misused(); return;
  }
}

// ---- 8-bit blockwise states (DType::Q8, UQ8; optgen/blockwise8.h). ----

/// bitsandbytes' dynamic maps, copied into shared memory by every block of a stage that reads an
/// 8-bit state (load_blockwise_maps): [0] the signed map (kQ8), [1] the unsigned map (kUQ8).
__shared__ float blockwise_maps[2][256];
/// What an Update stage quantises by (load_blockwise_quantiser; blockwise8::magnitude_code): each
/// map's slot table, [0] kSignedSlots, [1] kUnsignedSlots.
__shared__ alignas(16) unsigned blockwise_slots[2][blockwise8::kSlots];

/// Slot table m of blockwise_slots as blockwise8's quantisers read it (slots[s]), through its 32-bit
/// shared address: an entry's address is one LEA of the slot and the table's base. Indexing the
/// array compiled to three instructions on the integer pipe, the pipe whose instructions bound the
/// 8-bit Update stage: the compiler's (s << 2) as a shift and a mask of the distance the slot came
/// from, then the base added.
struct SharedSlots {
  unsigned base;
  __device__ __forceinline__ explicit SharedSlots(int m)
      : base(static_cast<unsigned>(__cvta_generic_to_shared(blockwise_slots[m]))) {}
  __device__ __forceinline__ unsigned operator[](unsigned s) const {
    unsigned entry;
    asm("{\n\t.reg .u32 a;\n\tmad.lo.u32 a, %1, 4, %2;\n\tld.shared.u32 %0, [a];\n\t}" : "=r"(entry) : "r"(s), "r"(base));
    return entry;
  }
};

/// Copies the maps into blockwise_maps (the block's threads each a share; no barrier).
__device__ __forceinline__ void copy_blockwise_maps() {
  for (int i = threadIdx.x; i < 2 * 256; i += OPTGEN_BLOCK_SIZE)
    blockwise_maps[i / 256][i % 256] = (i < 256 ? blockwise8::kSignedMap : blockwise8::kUnsignedMap)[i % 256];
}

/// Copies the maps; every thread must call it (it synchronises the block).
__device__ __forceinline__ void load_blockwise_maps() {
  copy_blockwise_maps();
  __syncthreads();
}

/// load_blockwise_maps, and the slot tables; every thread must call it.
__device__ __forceinline__ void load_blockwise_quantiser() {
  copy_blockwise_maps();
  typedef Pack<unsigned, 4> Words;  // both tables are 16-byte aligned
  constexpr int kWords = blockwise8::kSlots / 4;
  static_assert(kWords * 4 == blockwise8::kSlots, "slot tables copy in 16-byte words");
  for (int i = threadIdx.x; i < 2 * kWords; i += OPTGEN_BLOCK_SIZE) {
    const int m = i < kWords ? 0 : 1;
    const unsigned* table = m == 0 ? blockwise8::kSignedSlots : blockwise8::kUnsignedSlots;
    reinterpret_cast<Words*>(blockwise_slots[m])[i - kWords * m] = reinterpret_cast<const Words*>(table)[i - kWords * m];
  }
  __syncthreads();
}

/// Where tensor t's 8-bit state `data` keeps its block absmax (blockwise8::absmax_offset), or null
/// when the tensor is too small for 8 bits and the state is f32 (blockwise8::uses_8bit_states).
__device__ __forceinline__ float* blockwise_absmax(void* data, long long numel) {
  if (!blockwise8::uses_8bit_states(numel)) return nullptr;
  return reinterpret_cast<float*>(static_cast<unsigned char*>(data) + blockwise8::absmax_offset(numel));
}

/// The quantisation block of element i >= 0 (unsigned: a signed division by 256 costs a fix-up).
__device__ __forceinline__ unsigned long long blockwise_block(long long i) {
  return static_cast<unsigned long long>(i) / blockwise8::kBlockSize;
}

/// An 8-bit state's value: its code's map entry times its block's absmax (blockwise8::dequantize).
__device__ __forceinline__ float blockwise_value(DType codec, unsigned code, float scale) {
  return blockwise_maps[codec == DType::Q8 ? 0 : 1][code] * scale;
}

/// Elements i .. i + V - 1 (one quantisation block's) of an 8-bit state.
template <int V>
__device__ __forceinline__ void load_blockwise(DType codec, const void* base, long long i, float* out,
                                               const float* absmax) {
  const Pack<unsigned char, V> p = *reinterpret_cast<const Pack<unsigned char, V>*>(static_cast<const unsigned char*>(base) + i);
  const float scale = absmax[blockwise_block(i)];
#pragma unroll
  for (int e = 0; e < V; ++e) out[e] = blockwise_value(codec, p.x[e], scale);
}

/// The new absmax of a warp's quantisation block of an 8-bit state: the maximum |value| over the
/// warp, each lane holding V of the block's 256 values (`count` of them the tensor's: the rest of a
/// tensor's last, shorter block is passed over). Every lane of the warp must call this.
template <int V>
__device__ __forceinline__ float warp_block_absmax(const float* in, int count) {
  // The lane's maximum as a tree (a chain of V dependent maxima stalled the warp). NaN is passed
  // over, as blockwise8::block_absmax does: fmaxf gives NaN only where both values are, so the tree
  // gives NaN only where every value is, and 0 then.
  float lane_max[V];
#pragma unroll
  for (int e = 0; e < V; ++e) lane_max[e] = e < count ? fabsf(in[e]) : 0.0f;
#pragma unroll
  for (int width = V / 2; width > 0; width /= 2)
#pragma unroll
    for (int e = 0; e < width; ++e) lane_max[e] = fmaxf(lane_max[e], lane_max[e + width]);
  float block_max = fmaxf(lane_max[0], 0.0f);
#if __CUDA_ARCH__ >= 800
  // A lane's maximum is +0 or more and not NaN, so its bits order as unsigned ints as the floats
  // do: the warp's maximum is one REDUX, where five shuffles and maxima were a chain of ten.
  return __uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(block_max)));
#else
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, offset));
  return block_max;
#endif
}

/// Stores lane's `V` values, elements i .. i + V - 1 of a quantisation block of an 8-bit state
/// (`count` of them in the tensor: the rest of a tensor's last, shorter block is skipped), each
/// code the nearest in the map (bitsandbytes' quantize_2D; kQ8 with its sign rule) to the value
/// times `inverse`, blockwise8::reciprocal of the block's new absmax (warp_block_absmax), as
/// blockwise8::magnitude_code finds it. `whole`: all V values are the
/// tensor's and the codes are 8-byte aligned.
template <int V>
__device__ __forceinline__ void store_blockwise(DType codec, void* base, long long i, const float* in, int count,
                                                bool whole, float inverse) {
  // PRMT gathers the codes (each in the low byte of its word, the rest of the word the slot
  // entry's): two into a half word, then two halves into a word.
  unsigned code[V];
#pragma unroll
  for (int e = 0; e < V; ++e)
    code[e] = codec == DType::Q8 ? blockwise8::signed_state_code_word(SharedSlots(0), in[e], inverse)
                                 : blockwise8::unsigned_state_code_word(SharedSlots(1), in[e], inverse);
  unsigned char* codes = static_cast<unsigned char*>(base) + i;
  if (whole) {
    static_assert(V % 4 == 0, "a lane stores its codes in whole words");
    Pack<unsigned, V / 4> p;
#pragma unroll
    for (int w = 0; w < V / 4; ++w)
      p.x[w] = __byte_perm(__byte_perm(code[4 * w], code[4 * w + 1], 0x0040u),
                           __byte_perm(code[4 * w + 2], code[4 * w + 3], 0x0040u), 0x5410u);
    *reinterpret_cast<Pack<unsigned, V / 4>*>(codes) = p;
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e)
      if (e < count) codes[e] = static_cast<unsigned char>(code[e]);
  }
}

/// What an Update stage needs to write a parameter beyond its operand: the parameter itself when
/// operand 0 is its master copy, and stochastic rounding's stream (optgen/random.h).
struct ParamStore {
  void* param;
  unsigned long long seed;
  int tensor;
  long long step;
};

/// Elements i .. i + V - 1 rounded stochastically to bf16 (random.h's stream for element i).
template <int V>
__device__ __forceinline__ void store_stochastic(void* base, long long i, const float* in, const ParamStore& ps) {
  Pack<bf16, V> p;
  if (V == 8) {
    unsigned int bits[8];
    random::random_bits16x8(ps.seed, ps.tensor, ps.step, i, bits);
#pragma unroll
    for (int e = 0; e < V; ++e) p.x[e].bits = random::stochastic_round_bf16(in[e], bits[e]);
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e)
      p.x[e].bits = random::stochastic_round_bf16(in[e], random::random_bits16(ps.seed, ps.tensor, ps.step, i + e));
  }
  // Not store_pack: its st.v4.b32 cost adam_amsgrad_bf16_sr_bf16_update spills on sm_80, and no
  // 8-bit kernel rounds stochastically by default.
  *reinterpret_cast<Pack<bf16, V>*>(static_cast<bf16*>(base) + i) = p;
}

/// Elements i .. i + V - 1 of a stage's operand `op` (0 the parameter or its master copy, 1 the
/// gradient, then the states), as the kernel's operand table `Ops` stores them. The gradient is
/// never stored; a parameter with a master copy is stored twice, the master and the parameter.
/// `absmax`: an 8-bit state's block absmax (blockwise_absmax), null for one kept in f32, which is
/// all store_operand stores of an 8-bit state (the Update stage's store_blockwise writes codes).
template <typename Ops, int V>
__device__ __forceinline__ void load_operand(int op, const void* base, long long i, float* out,
                                             const float* absmax = nullptr) {
  if constexpr (Ops::kBlockwise != 0) {
    if (Ops::blockwise(op)) {
      if (absmax) return load_blockwise<V>(Ops::codec(op), base, i, out, absmax);
      return load_vector<float, V>(base, i, out);
    }
  }
  load_codec<V>(Ops::codec(op), base, i, out);
}
template <typename Ops, int V>
__device__ __forceinline__ void store_operand(int op, void* base, long long i, const float* in, const ParamStore& ps) {
  if (op == 1) return;
  if constexpr (Ops::kBlockwise != 0) {
    if (Ops::blockwise(op)) return store_vector<float, V>(base, i, in);  // kept in f32 (else store_blockwise)
  }
  if constexpr (Ops::kParamWrite == ParamWrite::Stochastic) {
    if (op == 0) return store_stochastic<V>(base, i, in, ps);
  }
  store_codec<V>(Ops::codec(op), base, i, in);
  if constexpr (Ops::kParamWrite == ParamWrite::Master) {
    if (op == 0) store_vector<typename Ops::Param, V>(ps.param, i, in);
  }
}

// ---- An Update stage's tile as loaded: its elements in their storage type until they are used. ----

/// V elements of type T at element i, as 4-byte words (little-endian: a bf16 or f16 element e is
/// the low or high half of word e / 2): the bytes load_vector reads, not yet decoded.
template <typename T, int V>
__device__ __forceinline__ void load_words(const void* base, long long i, unsigned* words) {
  constexpr int kWords = static_cast<int>(V * sizeof(T) / 4);
  static_assert(kWords * 4 == static_cast<int>(V * sizeof(T)), "a tile's operand fills whole words");
  const Pack<unsigned, kWords> p = *reinterpret_cast<const Pack<unsigned, kWords>*>(static_cast<const T*>(base) + i);
#pragma unroll
  for (int w = 0; w < kWords; ++w) words[w] = p.x[w];
}

/// load_operand's elements i .. i + V - 1 of operand `op`, undecoded (an element-wise codec's).
template <typename Ops, int V>
__device__ __forceinline__ void load_operand_words(int op, const void* base, long long i, unsigned* words) {
  switch (Ops::codec(op)) {
    case DType::F32: load_words<float, V>(base, i, words); return;
    case DType::BF16: load_words<bf16, V>(base, i, words); return;
    case DType::F16: load_words<f16, V>(base, i, words); return;
    case DType::Q8:
    case DType::UQ8: blockwise_codec_misused(); return;
  }
}

/// Element e of operand `op`'s words, decoded: the float load_operand gives.
template <typename Ops>
__device__ __forceinline__ float operand_word_value(int op, const unsigned* words, int e) {
  const unsigned short half = static_cast<unsigned short>(words[e >> 1] >> ((e & 1) * 16));
  switch (Ops::codec(op)) {
    case DType::F32: return __uint_as_float(words[e]);
    case DType::BF16: return to_float(bf16{half});
    case DType::F16: return to_float(f16{half});
    case DType::Q8:
    case DType::UQ8: blockwise_codec_misused(); return 0.0f;
  }
  return 0.0f;
}

/// Elements per thread and access. A Reduce stage reads 16 bytes of the gradient (the operand most
/// of its reductions read); an Update stage 16 bytes of operand 0 (Ops::kVector: with a master
/// copy, 4 elements, which keeps the master, the param and the states of a tile within the
/// registers of three blocks per SM), or 8 f32 elements in a kernel set's Update stage for plans
/// of long rows (update_stage's V, kernel_abi::kLongRowVector).
template <typename Ops>
__device__ __forceinline__ constexpr int reduce_vector() {
  return static_cast<int>(16 / sizeof(typename Ops::Param));
}

/// Tiles of V elements that make OPTGEN_ELEMENTS_PER_THREAD elements a thread (at least one).
template <int V>
__device__ __forceinline__ constexpr int element_tiles() {
  return OPTGEN_ELEMENTS_PER_THREAD / V > 0 ? OPTGEN_ELEMENTS_PER_THREAD / V : 1;
}

/// Tiles of V elements an Update stage's thread has in flight per iteration:
/// OPTGEN_ELEMENTS_PER_THREAD elements, or more where the operands are narrow, so that it has at
/// least the bytes f32 Adam has at that many elements (16 an element; Ops::kBytesPerElement is
/// one access of each operand). bf16 params and states (8 bytes an element) take two tiles of 8
/// where one was 64 bytes. A tile is held as loaded (load_operand_words), so a bf16 operand takes
/// the registers of half its floats.
template <typename Ops, int V>
__device__ __forceinline__ constexpr int update_tiles() {
  constexpr int by_elements = element_tiles<V>();
  constexpr int by_bytes = OPTGEN_ELEMENTS_PER_THREAD * 16 / (V * Ops::kBytesPerElement);
  return by_bytes > by_elements ? by_bytes : by_elements;
}

/// Tensor t's operand `op` as a stage reads it: with a master copy, operand 0 is the master
/// (TableView::pointers' row after the states).
template <typename Ops, int kOps>
__device__ __forceinline__ void* operand_pointer(const TableView& table, int op, int t) {
  const int row = op == 0 && Ops::kParamWrite == ParamWrite::Master ? kOps : op;
  return table.pointers[static_cast<long long>(row) * table.num_tensors + t];
}

/// Tensor t's states of one value per tensor (`shape: tensor`), operands whose buffer holds that
/// one value: a stage's tensor() loads those it reads, and the Update stage's last block of the
/// tensor stores their new values (end_update), once every block of it has loaded the old ones. A
/// group of no tensors steps a placeholder without buffers: it reads 0 and stores nothing.
template <typename Ops, int kOps>
struct TensorStates {
  const TableView& table;
  int t;
  __device__ __forceinline__ float load(int op) const {
    const void* data = operand_pointer<Ops, kOps>(table, op, t);
    float x = 0.0f;
    if (data) load_operand<Ops, 1>(op, data, 0, &x);
    return x;
  }
  __device__ __forceinline__ void store(int op, float x) const {
    void* data = operand_pointer<Ops, kOps>(table, op, t);
    if (data) store_operand<Ops, 1>(op, data, 0, &x, ParamStore{nullptr, 0, t, 0});
  }
};

}  // namespace optgen
