#pragma once
/// optgen's device library: reductions (sums and maxima in a fixed order, results per tensor and
/// group) and the Reduce stage's chunk runs.

#include "optgen/device/group.cuh"
#include "optgen/device/shape.cuh"

namespace optgen {

// ---- Reductions: each is a sum or a maximum (NaN wins, as torch.max); combined in a fixed order. ----

template <typename T> __device__ __forceinline__ T reduce_identity(bool is_max);
template <> __device__ __forceinline__ float reduce_identity<float>(bool is_max) {
  return is_max ? -__int_as_float(0x7f800000) : 0.0f;
}
template <> __device__ __forceinline__ double reduce_identity<double>(bool is_max) {
  return is_max ? -__longlong_as_double(0x7ff0000000000000LL) : 0.0;
}
template <typename T>
__device__ __forceinline__ T reduce_combine(bool is_max, T a, T b) { return is_max ? max(a, b) : a + b; }

/// Combines one value from each thread of the block, always in the same order (a shuffle tree in
/// each warp, then the warps in order); the result is valid in thread 0. Every thread must call it.
template <typename T>
__device__ T block_combine(bool is_max, T x) {
  __shared__ T warps[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) x = reduce_combine(is_max, x, __shfl_down_sync(0xffffffffu, x, offset));
  if (lane == 0) warps[warp] = x;
  __syncthreads();
  if (warp == 0) {
    x = lane < static_cast<int>(blockDim.x >> 5) ? warps[lane] : reduce_identity<T>(is_max);
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) x = reduce_combine(is_max, x, __shfl_down_sync(0xffffffffu, x, offset));
  }
  __syncthreads();  // warps[] is free again
  return x;
}

/// Whether this block is the last to arrive at `counter`, which counts to `expected` and which this
/// block advances by `count`; the last block resets it (for the next step, or the next replay of a
/// captured one). Block-uniform. The writes the block's thread 0 made before are visible to the
/// last block, and the last block sees every other block's.
__device__ __forceinline__ bool last_to_arrive(unsigned int* counter, unsigned int expected, unsigned int count = 1u) {
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();  // thread 0 wrote the results the others' arrivals are about
    last = atomicAdd(counter, count) == expected - count;
    if (last) *counter = 0u;
  }
  __syncthreads();
  if (last) __threadfence();
  return last;
}

/// `x` combined with values[i * step] for i = threadIdx.x, threadIdx.x + the block size, ... below
/// `count`, in that order (the order of a plain strided loop, so the same bits), with eight loads in
/// flight at a time rather than one: a large tensor's finish reads thousands of partials.
__device__ __forceinline__ double combine_strided(bool is_max, double x, const double* values, int count,
                                                  long long step) {
  constexpr int kBatch = 8;
  for (int c = threadIdx.x; c < count; c += kBatch * OPTGEN_BLOCK_SIZE) {
    double y[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = c + j * OPTGEN_BLOCK_SIZE;
      y[j] = i < count ? __ldcg(values + i * step) : 0.0;
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j)
      if (c + j * OPTGEN_BLOCK_SIZE < count) x = reduce_combine(is_max, x, y[j]);
  }
  return x;
}

/// The last block of tensor `t` to arrive: combines the tensor's chunk partials, in chunk order,
/// into its results; then, when it is the group's last tensor to finish, the group's tensors, in
/// tensor order, into the group's results.
template <typename Reduce>
__device__ __forceinline__ void finish_tensor(const ReductionTable& red, int t, int g) {
  constexpr int kR = Reduce::kReductions;
  const long long stride = red.stride;
  const int chunks = red.chunks[t];
  const double* first = red.partials + static_cast<long long>(red.first_chunk[t]) * stride;
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const bool is_max = Reduce::is_max(r);
    double x = combine_strided(is_max, reduce_identity<double>(is_max), first + Reduce::slot(r), chunks, stride);
    x = block_combine(is_max, x);
    if (threadIdx.x == 0) red.tensor_results[static_cast<long long>(Reduce::slot(r)) * red.num_tensors + t] = x;
  }
  if (!Reduce::kGroupScope) return;
  if (!last_to_arrive(&red.group_arrivals[g], static_cast<unsigned>(red.group_tensors[g]))) return;
  const int first_tensor = red.group_first_tensor[g];
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    if (!Reduce::is_group(r)) continue;
    const bool is_max = Reduce::is_max(r);
    double x = combine_strided(is_max, reduce_identity<double>(is_max),
                               red.tensor_results + static_cast<long long>(Reduce::slot(r)) * red.num_tensors +
                                   first_tensor,
                               red.group_tensors[g], 1);
    x = block_combine(is_max, x);
    if (threadIdx.x == 0) red.group_results[static_cast<long long>(Reduce::slot(r)) * red.num_groups + g] = x;
    if (threadIdx.x == 0 && Reduce::slot(r) == Reduce::kGradNormSlot) red.grad_norms[g] = static_cast<float>(sqrt(x));
  }
}

/// Block `block` of a Reduce stage takes ReductionTable::chunks_per_block consecutive entries of the
/// chunk table: read into `chunks` at once, so that finding its runs costs no round trip to memory
/// per chunk. Returns how many it has. Every thread must call it.
__device__ __forceinline__ int read_block_chunks(const TableView& table, const ReductionTable& red, long long block,
                                                 Chunk* chunks) {
  const int first_chunk = static_cast<int>(block) * red.chunks_per_block;
  const int count =
      first_chunk + red.chunks_per_block < table.num_chunks ? red.chunks_per_block : table.num_chunks - first_chunk;
  if (static_cast<int>(threadIdx.x) < count) chunks[threadIdx.x] = table.chunks[first_chunk + threadIdx.x];
  __syncthreads();
  return count;
}

/// The last chunk of the run that starts at chunks[c]: the consecutive chunks of one tensor.
__device__ __forceinline__ int run_end(const Chunk* chunks, int count, int c) {
  int last = c;
  while (last + 1 < count && chunks[last + 1].tensor == chunks[c].tensor &&
         chunks[last + 1].index == chunks[last].index + 1)
    ++last;
  return last;
}

/// A run's totals, combined over the block in a fixed order, as the partials of its first chunk
/// (the identity as the others'); its `run` chunks counted as arrived at once, and the tensor (then
/// its group) finished by the last block to arrive.
template <typename Code>
__device__ __forceinline__ void finish_run(const ReductionTable& red, const float* acc, const Chunk& first,
                                           unsigned int run) {
  if constexpr (Code::kReductions == 0) return;  // a stage that only stores values (Code::kElementStores)
  const int t = first.tensor;
  double* partials = red.partials + (static_cast<long long>(red.first_chunk[t]) + first.index) * red.stride;
#pragma unroll
  for (int r = 0; r < Code::kReductions; ++r) {
    const float total = block_combine(Code::is_max(r), acc[r]);
    if (threadIdx.x == 0) {
      partials[Code::slot(r)] = total;
      for (unsigned int j = 1; j < run; ++j)
        partials[j * red.stride + Code::slot(r)] = reduce_identity<double>(Code::is_max(r));
    }
  }
  if (last_to_arrive(&red.tensor_arrivals[t], static_cast<unsigned>(red.chunks[t]), run))
    finish_tensor<Code>(red, t, first.group);
}

/// Whether a Reduce stage reads an 8-bit state (and needs the maps).
template <typename Reduce, typename Ops>
__device__ __forceinline__ constexpr bool reads_blockwise() {
  for (int op = 0; op < Reduce::kOperands; ++op)
    if (Reduce::loads(op) && Ops::blockwise(op)) return true;
  return false;
}

/// How many operands a Reduce stage reads.
template <typename Reduce>
__device__ __forceinline__ constexpr int loaded_operands() {
  int n = 0;
  for (int op = 0; op < Reduce::kOperands; ++op) n += Reduce::loads(op) ? 1 : 0;
  return n > 0 ? n : 1;
}

template <typename T>
struct VoidOf {
  typedef void type;
};
/// The code of `Stage` (a Reduce stage's struct) for the tensors whose matrices are one element,
/// Stage::Unit, where the generator gave it some (its unit_matrices.h): where its chunk runs read
/// their elements' rows or columns.
template <typename Stage, typename = void>
struct UnitCode {
  static constexpr bool kHas = false;
};
template <typename Stage>
struct UnitCode<Stage, typename VoidOf<typename Stage::Unit>::type> {
  static constexpr bool kHas = true;
  typedef typename Stage::Unit type;
};
/// Whether tensor t runs Stage's code for tensors whose matrices are one element: the plan marked
/// it so (kernel_abi::kUnitMatrices), and Stage has such code.
template <typename Stage>
__device__ __forceinline__ bool runs_unit_code(const TableView& table, int t) {
  if constexpr (UnitCode<Stage>::kHas) return table.shapes->factored[t] == kernel_abi::kUnitMatrices;
  return false;
}

/// Elements of a vector of a Reduce stage's chunk runs: 16 bytes of the parameter, or 32 for code
/// of rows and columns that reads its elements' rows and columns (Code::kIndexed) with f32 params,
/// so that Position's work per vector (finding its row and column, loading their values) serves
/// eight elements, not four.
template <typename Code, typename Ops, bool kShaped>
__device__ __forceinline__ constexpr int chunk_run_vector() {
  if constexpr (kShaped) {
    if constexpr (Code::kIndexed && sizeof(typename Ops::Param) == 4) return 8;
  }
  return reduce_vector<Ops>();
}

/// One run of a Reduce stage's block (chunk_runs: the block takes the chunks [block *
/// chunks_per_block, ...) of the chunk table, a run at a time): the consecutive chunks of one
/// tensor among them, `chunk` to `last_chunk`, which are consecutive parts of it, read as one
/// range (the operands of `Code`'s reductions, element by element, from the operands Code::loads;
/// with each element's row, column and matrix where kShaped, Position). It writes the run's
/// partial results as the first chunk's (the identity as the others') and counts the run's chunks
/// as arrived at once; the last block of each tensor, then of each group, finishes them
/// (kernel_abi::ReductionTable). Code's stores (after its reductions among apply's results: its
/// stage's matrix values' operands, and states it stores, Output::stage in the generator) go into
/// their operands at the element's index, in each operand's codec, unless AMP skips the step (a
/// nonzero *found_inf). A run is read as one range so that a block has a run's worth of loads in
/// flight, not a chunk's; and the latency of an arrival (a fence, an atomic) is paid once per run.
/// `Stage` computes the tensor values. kShapedKernel: the stage's kernel is one of rows and columns,
/// whose budget of registers its element-wise runs (code for matrices of one element) keep too.
template <typename Code, typename Stage, typename Group, typename Ops, bool kShaped, bool kShapedKernel = kShaped>
__device__ __forceinline__ void chunk_run(const TableView& table, const GroupTable& groups, const StepInputs& inputs,
                                          const ReductionTable& red, const Chunk& chunk, const Chunk& last_chunk,
                                          unsigned int run) {
  typedef typename Group::Values Values;
  constexpr int kOps = Code::kOperands;
  constexpr int kR = Code::kReductions;
  constexpr int kM = Code::kElementStores;
  constexpr int V = chunk_run_vector<Code, Ops, kShaped>();
  // Elements in flight per thread, spread over the operands read: a reduction of one operand (a
  // gradient norm) holds four times the Update stage's count, with little math per element; one
  // of several (LAMB's norms read four, and recompute the update) twice, which keeps its registers
  // within the launch bounds (NVRTC's no-spill test checks every built-in). Code of rows and
  // columns holds the Update stage's count: its kernel's row lines and column segments are held
  // to the registers its chunk runs take, and with more, Adafactor's steps took 5% (gpt2) to 21%
  // (ghostnet_100) longer (72 registers against 106 in its first Reduce stage).
  constexpr int kLoaded = loaded_operands<Code>();
  constexpr int kInFlight = OPTGEN_ELEMENTS_PER_THREAD * (kLoaded == 1 ? 4 : 2);
  // Element-wise runs in such a kernel take one vector at a time: with more, the kernel's registers
  // grew (Adafactor's first stage 79 -> 110, sm_90) or its norm of the update spilled.
  constexpr int U = kShapedKernel                   ? (kShaped ? element_tiles<V>() : 1)
                    : kInFlight / (V * kLoaded) > 0 ? kInFlight / (V * kLoaded)
                                                    : 1;
  constexpr long long kStride = static_cast<long long>(OPTGEN_BLOCK_SIZE) * V;

  const int t = chunk.tensor;
  const int g = chunk.group;
  const long long start = static_cast<long long>(chunk.index) * table.chunk_size;
  const long long end = static_cast<long long>(last_chunk.index) * table.chunk_size + last_chunk.count;

  Position<Stage, Code, Ops, kShaped, V> at(table, t);
  void* ptr[kOps];
  const float* absmax[kOps];
  bool aligned = true;
#pragma unroll
  for (int op = 0; op < kOps; ++op) {
    ptr[op] = Code::loads(op) ? operand_pointer<Ops, kOps>(table, op, t) : nullptr;
    absmax[op] = Ops::blockwise(op) && ptr[op] ? blockwise_absmax(ptr[op], table.numel[t]) : nullptr;
    aligned = aligned && reinterpret_cast<uintptr>(ptr[op]) % 16 == 0;
  }
  void* stored[kM > 0 ? kM : 1];
#pragma unroll
  for (int j = 0; j < kM; ++j) {
    stored[j] = operand_pointer<Ops, kOps>(table, Code::element_store_operand(j), t);
    aligned = aligned && reinterpret_cast<uintptr>(stored[j]) % 16 == 0;
  }
  const bool stores = kM > 0 && (inputs.found_inf == nullptr || *inputs.found_inf == 0.0f);
  const Values k = *group_values<Values>(groups, current_slot(groups, g), g);
  const typename Stage::TensorValues tv =
      at.tensor(k, table.whole_numel[t], results(red, t, g), TensorStates<Ops, kOps>{table, t});
  // Read per run rather than held across the loop: one register fewer where it counts.
  const bool scaled = inputs.grad_scale != 0;
  const float grad_scale = scaled ? *inputs.grad_scale : 1.0f;
  float acc[kR > 0 ? kR : 1];
#pragma unroll
  for (int r = 0; r < kR; ++r) acc[r] = reduce_identity<float>(Code::is_max(r));
  // Element e of a vector (0 for a single element): its reductions' operands added, the values
  // it stores into to_store[j][e].
  float to_store[kM > 0 ? kM : 1][V];
  auto add = [&](float (&x)[kOps], int e, bool in_row) {
    if (scaled) x[1] = x[1] / grad_scale;
    float value[Code::kResults];
    at.apply(k, tv, x, value, e, in_row);
    at.next(e, in_row);
#pragma unroll
    for (int r = 0; r < kR; ++r) acc[r] = reduce_combine(Code::is_max(r), acc[r], value[r]);
#pragma unroll
    for (int j = 0; j < kM; ++j) to_store[j][e] = value[kR + j];
  };
  // A vector's elements, at i; with no branch between them where they share a row (in_row constant).
  auto add_vector = [&](const float (&operands)[kOps][V], long long i, bool in_row) {
#pragma unroll
    for (int e = 0; e < V; ++e) {
      float x[kOps];
#pragma unroll
      for (int op = 0; op < kOps; ++op) x[op] = operands[op][e];
      add(x, e, in_row);
    }
    if (stores) {
#pragma unroll
      for (int j = 0; j < kM; ++j) store_codec<V>(Ops::codec(Code::element_store_operand(j)), stored[j], i, to_store[j]);
    }
  };

  const long long vector_end = aligned ? start + (end - start) / V * V : start;
  for (long long base = start + static_cast<long long>(threadIdx.x) * V; base < vector_end; base += kStride * U) {
    float v[U][kOps][V];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const long long i = base + u * kStride;
      if (i >= vector_end) continue;
#pragma unroll
      for (int op = 0; op < kOps; ++op) {
        if (Code::loads(op) && at.present(ptr[op])) {  // an absent state reads as 0
          load_operand<Ops, V>(op, ptr[op], i, v[u][op], absmax[op]);
        } else {
#pragma unroll
          for (int e = 0; e < V; ++e) v[u][op][e] = 0.0f;
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (base + u * kStride >= vector_end) continue;
      at.seek(base + u * kStride);
      if (at.in_row())
        add_vector(v[u], base + u * kStride, true);
      else
        add_vector(v[u], base + u * kStride, false);
    }
  }
  for (long long i = vector_end + threadIdx.x; i < end; i += OPTGEN_BLOCK_SIZE) {
    float x[kOps];
#pragma unroll
    for (int op = 0; op < kOps; ++op) {
      x[op] = 0.0f;
      if (Code::loads(op) && at.present(ptr[op])) load_operand<Ops, 1>(op, ptr[op], i, &x[op], absmax[op]);
    }
    at.seek(i, false);
    add(x, 0, false);
    if (stores) {
#pragma unroll
      for (int j = 0; j < kM; ++j) store_codec<1>(Ops::codec(Code::element_store_operand(j)), stored[j], i, to_store[j]);
    }
  }

  finish_run<Code>(red, acc, chunk, run);
}

/// The chunk runs of a Reduce stage's block `block` (chunk_run, one run at a time): the block's
/// entries of the chunk table are read at once, so that finding its runs costs no round trip to
/// memory per chunk. A run of a tensor whose matrices are one element runs Stage's code for them
/// (runs_unit_code).
template <typename Code, typename Stage, typename Group, typename Ops, bool kShaped>
__device__ __forceinline__ void chunk_runs(const TableView& table, const GroupTable& groups, const StepInputs& inputs,
                                           const ReductionTable& red, long long block) {
  __shared__ Chunk block_chunks[kernel_abi::kReduceChunksPerBlock];
  if constexpr (reads_blockwise<Code, Ops>()) load_blockwise_maps();
  const int count = read_block_chunks(table, red, block, block_chunks);
  for (int c = 0; c < count;) {
    const int last = run_end(block_chunks, count, c);
    const unsigned int run = static_cast<unsigned int>(last - c + 1);
    if constexpr (UnitCode<Stage>::kHas) {
      typedef typename UnitCode<Stage>::type Unit;
      if (runs_unit_code<Stage>(table, block_chunks[c].tensor)) {
        chunk_run<typename Unit::Elements, Unit, Group, Ops, false, kShaped>(table, groups, inputs, red,
                                                                             block_chunks[c], block_chunks[last], run);
        c = last + 1;
        continue;
      }
    }
    chunk_run<Code, Stage, Group, Ops, kShaped>(table, groups, inputs, red, block_chunks[c], block_chunks[last], run);
    c = last + 1;
  }
}

}  // namespace optgen
