#pragma once
/// optgen's device library: the block walk of an Update stage with 8-bit blockwise states, a warp
/// per 256-element quantisation block, each element with its row, column and matrix where the
/// variant has them. The driver is update_stage.cuh's.

#include "optgen/device/update.cuh"

namespace optgen {

/// One lane's share of a warp's 256-element quantisation block, every operand as loaded: an
/// element codec's V elements in words (load_operand_words), an 8-bit state's V codes in words and
/// its block's absmax. (The 8-bit states a small tensor keeps in f32 are not walked a block at a
/// time: BlockWalk::start.)
template <int kOps, int V>
struct BlockTile {
  unsigned words[kOps][V];
  float scale[kOps];
};

/// The operands of a chunk of BlockWalk's blocks, from the chunk's first element: a
/// lane's element is then a 32-bit offset from the chunk's start, its address one multiply-add
/// (IMAD.WIDE, on the FMA pipe), where an element index in 64 bits cost an add with carry per
/// operand, and its shifts, on the integer pipe, the pipe whose instructions bound this stage. The
/// pointers are the same for every thread of a block, so that they stay in uniform registers
/// (a lane's own pointers took two vector registers an operand, and Adan's kernels with every
/// state 8-bit spilled).
template <int kOps>
struct ChunkOperands {
  /// Operand op from the chunk's first element.
  void* at[kOps];
  /// An 8-bit state's block absmax from the chunk's first block (a chunk starts on a block); null
  /// for the other operands and for a state kept in f32.
  float* absmax[kOps];
};

/// The operands of the chunk that starts at element `first`: `ptr` and `absmax` as
/// BlockWalk has them, `codes` whether the 8-bit states are codes (else f32). kAbsent: a state may
/// be absent (a null `ptr`, generator/shapes.h's state_presence), and stays null.
template <typename Ops, bool kAbsent, int kOps>
__device__ __forceinline__ ChunkOperands<kOps> chunk_operands(void* const (&ptr)[kOps], float* const (&absmax)[kOps],
                                                              bool codes, long long first) {
  ChunkOperands<kOps> chunk_ops;
#pragma unroll
  for (int op = 0; op < kOps; ++op) {
    const int bytes = Ops::blockwise(op) && !codes ? 4 : size_of(Ops::codec(op));
    chunk_ops.at[op] = kAbsent && !ptr[op] ? nullptr : static_cast<unsigned char*>(ptr[op]) + first * bytes;
    chunk_ops.absmax[op] = absmax[op] ? absmax[op] + blockwise_block(first) : nullptr;
  }
  return chunk_ops;
}

/// The lane's first element of a block: (threadIdx.x % 32) * 8.
__device__ __forceinline__ unsigned lane_first() { return (threadIdx.x & 31u) * (blockwise8::kBlockSize / 32); }

/// Loads the lane's V elements of the block at offset o of every operand the update reads
/// (Update::loads) and the tensor has into `tile`, its 8-bit states as codes; the others' words
/// are 0.
template <typename Update, typename Ops, int kOps, int V>
__device__ __forceinline__ void load_block_tile(BlockTile<kOps, V>& tile, const ChunkOperands<kOps>& chunk_ops,
                                                unsigned o) {
#pragma unroll
  for (int op = 0; op < kOps; ++op) {
    if (!Update::loads(op) || (Update::kShaped && !chunk_ops.at[op])) {  // written, first-step only, or absent
#pragma unroll
      for (int w = 0; w < V; ++w) tile.words[op][w] = 0u;
      tile.scale[op] = 0.0f;
    } else if (!Ops::blockwise(op)) {
      load_operand_words<Ops, V>(op, chunk_ops.at[op], o + lane_first(), tile.words[op]);
    } else {
      load_words<unsigned char, V>(chunk_ops.at[op], o + lane_first(), tile.words[op]);
      tile.scale[op] = chunk_ops.absmax[op][o / blockwise8::kBlockSize];
    }
  }
}

/// Element e of operand `op` of a BlockTile that load_block_tile filled, decoded: the float
/// load_operand gives.
template <typename Ops, int kOps, int V>
__device__ __forceinline__ float block_tile_value(const BlockTile<kOps, V>& tile, int op, int e) {
  if (!Ops::blockwise(op)) return operand_word_value<Ops>(op, tile.words[op], e);
  // The byte by PRMT: the map's address is then one LEA from it (a shift and mask by hand became a
  // shift, a mask and an add).
  const unsigned code = __byte_perm(tile.words[op][e >> 2], 0u, 0x4440u | static_cast<unsigned>(e & 3));
  return blockwise_value(Ops::codec(op), code, tile.scale[op]);
}

/// The V elements of every operand in `tile` (load_block_tile), decoded into `v`.
template <typename Ops, int kOps, int V>
__device__ __forceinline__ void decode_block_tile(const BlockTile<kOps, V>& tile, float (&v)[kOps][V]) {
#pragma unroll
  for (int op = 0; op < kOps; ++op)
#pragma unroll
    for (int e = 0; e < V; ++e) v[op][e] = block_tile_value<Ops>(tile, op, e);
}

/// BlockWalk's blocks wholly in the chunk, from offset o (at which the tile is loaded) up to
/// whole_end, one block after another: each decoded from the tile, the next one loaded into it,
/// then updated and stored by `store_block`. A lane's 8 elements are updated with
/// CheckedMath, whose divisions and roots have no branch, so that their math interleaves; where it
/// was not exact (element_math.h), the block's operands are read again (nothing of the block is
/// stored yet) and updated with IeeeMath. Code of rows and columns (Update::kShaped) updates a
/// lane's elements with `walk`'s update_lane instead (BlockWalk::update_lane), which finds their
/// rows and columns and stores their row and column states, and loads the next block only after:
/// loaded before, the tile and a lane's interleaved elements spilled 24-28 bytes at the register
/// cap (Adam-mini with f32 params, sm_90).
template <typename Ops, typename Update, typename Group, int kOps, int V, typename Walk, typename StoreBlock>
__device__ __forceinline__ void update_whole_blocks(unsigned& o, unsigned whole_end, BlockTile<kOps, V>& tile,
                                                    const ChunkOperands<kOps>& chunk_ops,
                                                    const UpdateStep<Update, Group>& step, Walk& walk,
                                                    const StoreBlock& store_block) {
  constexpr unsigned kBlock = blockwise8::kBlockSize;
  for (; o < whole_end; o += kBlock) {
    float v[kOps][V];
    decode_block_tile<Ops>(tile, v);
    if constexpr (Update::kShaped) {
      walk.template update_lane<Update::kInterleaves>(step, v, o, V);
      if (o + kBlock < whole_end) load_block_tile<Update, Ops>(tile, chunk_ops, o + kBlock);
    } else {
      if (o + kBlock < whole_end) load_block_tile<Update, Ops>(tile, chunk_ops, o + kBlock);
      CheckedMath checked;
      update_elements(step, v, V, checked);
      if (!checked.exact()) {
        BlockTile<kOps, V> again;
        load_block_tile<Update, Ops>(again, chunk_ops, o);
        decode_block_tile<Ops>(again, v);
        IeeeMath ieee;
        update_elements(step, v, V, ieee);
      }
    }
    store_block(v, o, V, true, true);
  }
}

/// The block walk of an Update stage (update_stage.cuh) of a kernel set with 8-bit states
/// (Ops::kBlockwise): each warp updates one quantisation block of 256 elements at a time
/// (blockwise8::kBlockSize), each lane 8 consecutive ones (Ops::kVector), so that a block's new
/// absmax is a maximum over the warp (warp_block_absmax; no shared memory, no barrier). Chunks are whole
/// blocks (a multiple of 256 elements). A warp loads its next block before it updates the one in
/// hand, so that the loads' latency hides behind an update (with one block in flight a warp waited
/// on every load: 26% of the stall samples on gpt2). A tensor's last, shorter block, and every
/// block of a tensor whose operands are not 16-byte aligned, go element by element, masked lane by
/// lane. A tensor too small for 8 bits (blockwise8::uses_8bit_states) has those states in f32, as
/// bitsandbytes keeps them, and goes element by element too: its chunk is at most 4095 elements,
/// and a walk of whole blocks compiled for f32 states as well as codes kept registers at the
/// three-block cap that spilled (bench/RESULTS.md, 2026-12-05). Code of rows and columns finds
/// each lane's elements' row, column and matrix (Position, as ElementWalk does: its 8 elements are
/// consecutive) and stores their row and column states; a state the tensor lacks is read as 0 and
/// not stored.
template <typename Update, typename Ops>
struct BlockWalk {
  static constexpr int kOps = Update::kOperands;
  static constexpr int V = blockwise8::kBlockSize / 32;
  static_assert(Ops::kVector == V, "a lane holds 8 elements of a 256-element block");
  static constexpr unsigned kWarps = OPTGEN_BLOCK_SIZE / 32;
  static constexpr unsigned kBlock = blockwise8::kBlockSize;

  UpdatePosition<Update, Ops> at;  ///< each lane's elements' row, column and matrix (element-wise code: nothing)
  int count;                       ///< the chunk's elements
  long long first;                 ///< the chunk's first element in the tensor
  void* ptr[kOps];
  bool aligned;
  float* absmax[kOps];
  /// Whether the tensor's 8-bit states are codes or (a small tensor) f32, which only the element
  /// by element walk takes.
  bool codes;
  unsigned o, warp_end, whole_end;
  ChunkOperands<kOps> chunk_ops;
  BlockTile<kOps, V> tile;

  __device__ __forceinline__ BlockWalk(const TableView& table, const Chunk& chunk)
      : at(table, chunk.tensor), count(chunk.count) {
    const int t = chunk.tensor;
    first = static_cast<long long>(chunk.index) * table.chunk_size;
    aligned = update_operands<Ops>(table, t, ptr);
#pragma unroll
    for (int op = 0; op < kOps; ++op)
      absmax[op] = Ops::blockwise(op) && at.present(ptr[op]) ? blockwise_absmax(ptr[op], table.numel[t]) : nullptr;
    codes = blockwise8::uses_8bit_states(table.numel[t]);
    if (codes) load_blockwise_quantiser();
  }
  __device__ __forceinline__ const UpdatePosition<Update, Ops>& position() const { return at; }

  /// Whether the step goes on (`skip`: AMP's overflow); if so, the warp's first block's loads on
  /// their way.
  __device__ __forceinline__ bool start(bool skip) {
    if (skip) return false;
    // Each warp takes a run of consecutive blocks of the chunk, [o, warp_end) as offsets from its
    // start (a chunk's count is an int). Blocks dealt to the warps in turn made a block of 8 warps
    // read one place of each operand at a time, and wait on its loads four times as long as 8
    // blocks of one warp did (bench/RESULTS.md, 2026-11-27).
    const unsigned blocks = (static_cast<unsigned>(count) + kBlock - 1) / kBlock;
    const unsigned per_warp = (blocks + kWarps - 1) / kWarps;
    const unsigned warp = threadIdx.x >> 5;
    o = ::min(warp * per_warp, blocks) * kBlock;
    warp_end = ::min((warp + 1) * per_warp, blocks) * kBlock;
    // The warp's blocks wholly in the chunk (it starts on a block), where every operand is aligned
    // and the 8-bit states are codes.
    whole_end = aligned && codes ? ::min(warp_end, static_cast<unsigned>(count) / kBlock * kBlock) : 0u;
    chunk_ops = chunk_operands<Ops, Update::kShaped>(ptr, absmax, codes, first);
    if (o < whole_end) load_block_tile<Update, Ops>(tile, chunk_ops, o);
    return true;
  }

  /// Element e of the lane's V in `v`, updated in place by code of rows and columns with `math`
  /// (in_row: as Position::in_row said, a constant).
  template <typename Group, typename Math>
  __device__ __forceinline__ void update_element(const UpdateStep<Update, Group>& step, float (&v)[kOps][V], int e,
                                                 bool in_row, Math& math) const {
    float x[kOps];
#pragma unroll
    for (int op = 0; op < kOps; ++op) x[op] = v[op][e];
    if (step.scaled) x[1] = math.div(x[1], step.grad_scale);
    at.apply(step.k, step.tv, x, math, e, in_row);
#pragma unroll
    for (int op = 0; op < kOps; ++op) v[op][e] = x[op];
  }

  /// The first `count` of the lane's elements of the block at offset o, every operand in `v`,
  /// updated in place by code of rows and columns: each with its row, column and matrix, then the
  /// row and column states stored (ElementWalk's order). V elements are found together. Where they
  /// share a row (the tensor's rows hold whole vectors) and kChecked (a whole block of code that
  /// interleaves: Update::kInterleaves), they are updated with CheckedMath, whose divisions and
  /// roots interleave, and where it was not exact again, from the block's operands read again
  /// (nothing of it is stored yet), with IeeeMath; their row and column states are stored once
  /// after (finish_vector). Elsewhere IeeeMath, each element's states stored as it is computed.
  template <bool kChecked, typename Group>
  __device__ __forceinline__ void update_lane(const UpdateStep<Update, Group>& step, float (&v)[kOps][V], unsigned o,
                                              int count) {
    const long long i = first + o + lane_first();
    if (count == V) {
      at.seek(i);
      if (at.in_row()) {
        if constexpr (kChecked) {
          CheckedMath checked;
#pragma unroll
          for (int e = 0; e < V; ++e) {
            update_element(step, v, e, true, checked);
            at.next(e, true);
          }
          if (checked.exact()) return at.finish_vector(step.k, step.tv);
          BlockTile<kOps, V> again;
          load_block_tile<Update, Ops>(again, chunk_ops, o);
          decode_block_tile<Ops>(again, v);
          at.seek(i);
        }
        IeeeMath ieee;
#pragma unroll
        for (int e = 0; e < V; ++e) {
          update_element(step, v, e, true, ieee);
          at.next(e, true);
        }
        return at.finish_vector(step.k, step.tv);
      }
      IeeeMath ieee;
#pragma unroll
      for (int e = 0; e < V; ++e) {
        update_element(step, v, e, false, ieee);
        at.store_states(step.k, step.tv, false);
        at.next(e, false);
      }
      return;
    }
    IeeeMath ieee;
#pragma unroll
    for (int e = 0; e < V; ++e) {
      if (e >= count) continue;
      at.seek(i + e, false);
      update_element(step, v, e, false, ieee);
      at.store_states(step.k, step.tv, false);
    }
  }

  template <typename Group>
  __device__ __forceinline__ void run(const UpdateStep<Update, Group>& step) {
    // The updated values `v` of the block at offset o stored; `count` of the lane's V are the
    // tensor's, `whole` when they are all its and every operand is aligned (aligned && count == V),
    // `as_codes` when its 8-bit states are codes (`codes`). Warp-uniform: every lane of a warp runs
    // it (warp_block_absmax's warp reduction needs them all). Addressed through chunk_ops, except a parameter
    // written from a master copy or rounded stochastically, whose store needs the element's index in
    // the tensor (the master's parameter is another array; the random stream is the element's).
    const auto store_block = [&](const float(&v)[kOps][V], unsigned o, int count, bool whole, bool as_codes) {
      const unsigned r = o + lane_first();
#pragma unroll
      for (int op = 0; op < kOps; ++op) {
        if (!stores<Update>(op, step.first_step) || !at.present(ptr[op])) continue;  // uniform: every lane skips it
        const bool by_index = op == 0 && Ops::kParamWrite != ParamWrite::Nearest;  // the tensor's element
        void* const base = by_index ? ptr[op] : chunk_ops.at[op];
        const long long i = by_index ? first + r : static_cast<long long>(r);
        if (Ops::blockwise(op) && as_codes) {
          const float absmax = warp_block_absmax<V>(v[op], count);
          if ((threadIdx.x & 31) == 0) chunk_ops.absmax[op][o / kBlock] = absmax;
          store_blockwise<V>(Ops::codec(op), chunk_ops.at[op], r, v[op], count, whole, blockwise8::reciprocal(absmax));
        } else if (whole) {
          store_operand<Ops, V>(op, base, i, v[op], step.ps);
        } else {
#pragma unroll
          for (int e = 0; e < V; ++e)
            if (e < count) store_operand<Ops, 1>(op, base, i + e, &v[op][e], step.ps);
        }
      }
    };

    update_whole_blocks<Ops>(o, whole_end, tile, chunk_ops, step, *this, store_block);
    // The rest of the warp's blocks: the chunk's last, shorter one, or every one where an operand is
    // misaligned or the 8-bit states are f32.
    for (; o < warp_end; o += kBlock) {
      const unsigned r = o + lane_first();
      const int left = count - static_cast<int>(r);
      const int lane_count = left < V ? (left > 0 ? left : 0) : V;
      float v[kOps][V];
#pragma unroll
      for (int op = 0; op < kOps; ++op)
#pragma unroll
        for (int e = 0; e < V; ++e) {
          v[op][e] = 0.0f;
          if (e < lane_count && Update::loads(op) && at.present(ptr[op]))
            load_operand<Ops, 1>(op, chunk_ops.at[op], r + e, &v[op][e], chunk_ops.absmax[op]);
        }
      if constexpr (Update::kShaped) {
        update_lane<false>(step, v, o, lane_count);
      } else {
        IeeeMath ieee;
        update_elements(step, v, lane_count, ieee);
      }
      store_block(v, o, lane_count, aligned && lane_count == V, codes);
    }
    if (count == 0) at.store_lines_without_elements(step.k, step.tv);
  }
};

}  // namespace optgen
