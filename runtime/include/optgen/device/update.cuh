#pragma once
/// optgen's device library: what every Update stage does (tickets, the group's step committed by
/// its last block, AMP's skip, which operands it stores) and its element walk, with each element's
/// row, column and matrix where the variant has rows and columns. The driver is update_stage.cuh's.

#include "optgen/element_math.h"
#include "optgen/device/reduce.cuh"

namespace optgen {

/// How tensor t's parameter is written in this step (ParamStore).
template <typename Ops>
__device__ __forceinline__ ParamStore param_store(const TableView& table, const GroupTable& groups, int slot, int t,
                                                  int g) {
  ParamStore ps{nullptr, 0, t, 0};
  if constexpr (Ops::kParamWrite == ParamWrite::Master) ps.param = table.pointers[t];
  if constexpr (Ops::kParamWrite == ParamWrite::Stochastic) {
    ps.seed = table.seed;
    ps.step = groups.steps[slot_entry(groups, slot, g)] + 1;
  }
  return ps;
}

/// An Update-stage block's ticket (kernel_abi::GroupTable): the slot its step reads, and whether
/// it writes the step's results (read from shared memory where asked: not a register held through
/// the stage's loop).
struct Ticket {
  int slot;
  const int* commit_flag;
  __device__ __forceinline__ bool commits() const { return *commit_flag != 0; }
};

/// Takes the block's ticket; the block that commits the step publishes again the gradient norm of a
/// clipping variant (a reduction hook may have all-reduced the results since the Reduce stage
/// published them; here, not at the end of the stage: fewer live registers). Every thread must
/// call it.
template <typename Update>
__device__ __forceinline__ Ticket take_ticket(const GroupTable& groups, const ReductionTable& red, int t, int g) {
  __shared__ int slot_shared, commit_shared;
  if (threadIdx.x == 0) {
    const unsigned int blocks = groups.blocks[g];
    const unsigned int ticket = atomicInc(&groups.arrivals[g], 2u * blocks - 1u);  // wraps to 0 after 2 * blocks - 1
    slot_shared = ticket >= blocks ? 1 : 0;
    commit_shared = ticket == 0 || ticket == blocks;
  }
  __syncthreads();
  const Ticket ticket{slot_shared, &commit_shared};
  if (Update::kGradNormSlot >= 0 && threadIdx.x == 0 && ticket.commits())
    red.grad_norms[g] = static_cast<float>(sqrt(results(red, t, g).of_group(Update::kGradNormSlot)));
  return ticket;
}

/// An Update stage's operands of tensor t (operand_pointer); returns whether they, and the
/// parameter behind a master copy, are all 16-byte aligned, as vector accesses need.
template <typename Ops, int kOps>
__device__ __forceinline__ bool update_operands(const TableView& table, int t, void* (&ptr)[kOps]) {
  bool aligned = true;
#pragma unroll
  for (int op = 0; op < kOps; ++op) {
    ptr[op] = operand_pointer<Ops, kOps>(table, op, t);
    aligned = aligned && reinterpret_cast<uintptr>(ptr[op]) % 16 == 0;
  }
  if (Ops::kParamWrite == ParamWrite::Master) aligned = aligned && reinterpret_cast<uintptr>(table.pointers[t]) % 16 == 0;
  return aligned;
}

/// Where an Update stage's elements are, V at a time: its row and column states, where its code
/// reads them, as the first Reduce stage's snapshot holds them.
template <typename Update, typename Ops, int V = Ops::kVector>
using UpdatePosition = Position<Update, Update, Ops, Update::kShaped, V, true>;

/// What an Update stage's elements need beyond their operands, read once its block holds the
/// tensor's ticket (begin_update): the group's values `k`, the tensor's `tv`, how the parameter is
/// written, AMP's gradient scale, and whether this is the group's first step.
template <typename Update, typename Group>
struct UpdateStep {
  Ticket ticket;
  typename Group::Values k;
  typename Update::TensorValues tv;
  ParamStore ps;
  bool scaled;
  float grad_scale;
  bool first_step;
};

/// Whether the Update stage writes operand `op` back: an output of the step (Update::kStores), or
/// a state the step only reads, with `init: param`, at its group's first step
/// (Update::kFirstStepStores). The gradient and other read-only states are never written.
template <typename Update>
__device__ __forceinline__ constexpr bool stores(int op, bool first_step) {
  return ((Update::kStores >> op) & 1u) != 0 || (first_step && ((Update::kFirstStepStores >> op) & 1u) != 0);
}

/// The values of a program (the spec's `programs:`) for group g, whose next step reads `slot`:
/// computed by thread 0 from the group's hyperparameters and scalar state as a step's are
/// (Group::step, with the next step's count: a state with `init: param` reads as the parameter
/// before the group's first step). Every thread must call it.
template <typename Group>
__device__ __forceinline__ typename Group::Values program_values(const GroupTable& groups, int slot, int g) {
  __shared__ typename Group::Values values;
  if (threadIdx.x == 0) {
    double state[Group::kScalarStates + 1];
    const double* from = groups.scalar_state + slot_entry(groups, slot, g) * groups.num_scalar_states;
    for (int i = 0; i < Group::kScalarStates; ++i) state[i] = from[i];
    values = Group::step(groups.hyperparameters + static_cast<long long>(g) * groups.num_hyperparameters, state,
                         groups.steps[slot_entry(groups, slot, g)] + 1);
  }
  __syncthreads();
  return values;
}

/// Waits for the kernel before (a Reduce stage still reads the group table's tickets, and its
/// results are not all written yet), takes the block's ticket and reads its UpdateStep. A program's
/// block (Update::kProgram) takes no ticket: it reads the slot of the group's next step, and
/// commits nothing. Every thread must call it.
template <typename Update, typename Group, typename Ops, typename At>
__device__ __forceinline__ UpdateStep<Update, Group> begin_update(const TableView& table, const GroupTable& groups,
                                                                  const StepInputs& inputs, const ReductionTable& red,
                                                                  const At& at, int t, int g) {
  wait_for_previous_kernel();
  UpdateStep<Update, Group> step;
  if constexpr (Update::kProgram) {
    step.ticket = Ticket{current_slot(groups, g), nullptr};
    step.k = program_values<Group>(groups, step.ticket.slot, g);
  } else {
    step.ticket = take_ticket<Update>(groups, red, t, g);
    step.k = *group_values<typename Group::Values>(groups, step.ticket.slot, g);
  }
  step.tv = at.tensor(step.k, table.whole_numel[t], results(red, t, g), TensorStates<Ops, Update::kOperands>{table, t});
  step.ps = param_store<Ops>(table, groups, step.ticket.slot, t, g);
  step.scaled = inputs.grad_scale != 0;
  step.grad_scale = step.scaled ? *inputs.grad_scale : 1.0f;
  step.first_step = groups.steps[slot_entry(groups, step.ticket.slot, g)] == 0;
  return step;
}

/// An Update stage's block is done: the tensor's last one stores its states of one value per tensor
/// (Update::kTensorStates: every block of the tensor has loaded the old values by then; counted in
/// the reduction table's tensor arrivals, which the runtime gives such a variant, Reduce stage or
/// not), and the group's last one publishes the step (a program's: nothing). Every thread must call
/// it.
template <typename Update, typename Group, typename Ops, typename At>
__device__ __forceinline__ void end_update(const TableView& table, const GroupTable& groups,
                                           const ReductionTable& red, const At& at,
                                           const UpdateStep<Update, Group>& step, int t, int g) {
  if constexpr (Update::kProgram) return;  // a program counts no step
  if constexpr (Update::kTensorStates) {
    if (last_to_arrive(&red.tensor_arrivals[t], static_cast<unsigned>(red.chunks[t])) && threadIdx.x == 0)
      at.store_tensor_states(step.k, table.whole_numel[t], results(red, t, g),
                             TensorStates<Ops, Update::kOperands>{table, t});
  }
  if (threadIdx.x == 0 && step.ticket.commits()) commit_step<Group>(groups, step.ticket.slot, g, results(red, t, g));
}

/// An Update stage's block, once it has read the plan's own tables (which no kernel writes) and
/// before it reads anything else: lets the next kernel on the stream (the next step, another plan)
/// start its blocks while this stage's last ones run; and, where no Reduce stage came before
/// (Update::kFirstStage), waits for the kernel before it, under whose tail it may have started and
/// which may write the gradients, AMP's found_inf or (the step before) the params and states. A
/// stage after a Reduce stage loads its first tile first and waits in begin_update: the Reduce
/// stage let it start only once its own wait was over, so every kernel that writes what the tile
/// reads has ended (a wait covers only the kernel just before; reduce_stage says why it matters).
template <typename Update>
__device__ __forceinline__ void enter_update_stage() {
  allow_next_kernel();
  if constexpr (Update::kFirstStage) wait_for_previous_kernel();
}

/// AMP: an overflow (a nonzero found_inf) skips the whole step. An Update stage reads it after
/// enter_update_stage.
__device__ __forceinline__ bool skips_step(const StepInputs& inputs) {
  return inputs.found_inf != nullptr && *inputs.found_inf != 0.0f;
}

/// The first `count` of a thread's V elements, every operand in `v`, updated in place: the gradient
/// unscaled (AMP), then Update::apply, dividing and taking roots with `math` (element_math.h).
template <typename Update, typename Group, int kOps, int V, typename Math>
__device__ __forceinline__ void update_elements(const UpdateStep<Update, Group>& step, float (&v)[kOps][V], int count,
                                                Math& math) {
#pragma unroll
  for (int e = 0; e < V; ++e) {
    if (e >= count) continue;
    float x[kOps];
#pragma unroll
    for (int op = 0; op < kOps; ++op) x[op] = v[op][e];
    if (step.scaled) x[1] = math.div(x[1], step.grad_scale);
    Update::apply(step.k, step.tv, x, math);
#pragma unroll
    for (int op = 0; op < kOps; ++op) v[op][e] = x[op];
  }
}

/// The element walk of an Update stage (update_stage.cuh): a block's threads take V consecutive
/// elements each (the operand table's kVector, or update_stage's), U tiles of them at a time,
/// kStride apart, across its chunk of one tensor; each element's row, column and matrix from
/// Position where the variant has them, and each row's (column's) new state stored at the row's
/// column 0 (the column's row 0), in Update::apply.
/// Constructed before the stage waits (it reads only the plan's tables); start() issues the first
/// tile's loads, run() updates and stores the chunk.
template <typename Update, typename Ops, int kVector = Ops::kVector>
struct ElementWalk {
  static constexpr int kOps = Update::kOperands;
  static constexpr int V = kVector;
  static constexpr int U = update_tiles<Ops, V>();
  static constexpr long long kStride = static_cast<long long>(OPTGEN_BLOCK_SIZE) * V;
  // The first tile's loads are issued before the block waits for its ticket, and each next tile's
  // as soon as the last is stored, unless the stage computes values per tensor (a trust ratio, a
  // clipping factor): then each iteration loads its own tile. The tile and that double math live
  // at once, or a tile live across the loop's back edge, would cost the registers of a fourth block
  // per SM (LAMB's 68 against 64), which the overlap does not win back. (Measured again for code
  // of rows and columns, 2026-11-29: loading first made Adam-mini 1.5% faster in f32 and 7-8% slower
  // with bf16 params, Adafactor 2% slower, and spilled in Adafactor's master-copy kernels.)
  static constexpr bool kTileFirst = !Update::kTensorValues;
  // The tile: decoded into floats as it is loaded, or, where narrow operands take more tiles than
  // OPTGEN_ELEMENTS_PER_THREAD elements (update_tiles), held as loaded (a bf16 operand fills half
  // of its V words) and decoded as it is used. Decoding late costs registers where no more tiles
  // are taken (8 bytes of spills in adam_amsgrad_bf16_f32), so only those sets do.
  static constexpr bool kWords = U > element_tiles<V>();

  long long first, end;  ///< the chunk's elements in the tensor
  void* ptr[kOps];
  bool aligned;  ///< every operand (and the parameter behind a master copy) 16-byte aligned
  UpdatePosition<Update, Ops, V> at;
  long long vector_end;  ///< where the elements taken a vector at a time end (start() sets it)
  // The tile, loaded by start() and run(); the thread's next vector is run()'s local (kept here,
  // it cost Adam-mini's f16 Update stage for sm_75 a 4-byte spill at its register cap).
  float v[kWords ? 1 : U][kOps][V];
  unsigned raw[kWords ? U : 1][kOps][V];

  __device__ __forceinline__ ElementWalk(const TableView& table, const Chunk& chunk)
      : first(static_cast<long long>(chunk.index) * table.chunk_size),
        end(first + chunk.count),
        aligned(update_operands<Ops>(table, chunk.tensor, ptr)),
        at(table, chunk.tensor) {}
  __device__ __forceinline__ const UpdatePosition<Update, Ops, V>& position() const { return at; }

  /// The thread's first vector.
  __device__ __forceinline__ long long thread_first() const { return first + static_cast<long long>(threadIdx.x) * V; }

  /// The tile of the thread's vector at `base`: those of its U vectors before vector_end.
  __device__ __forceinline__ void load_tile(long long base) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const long long i = base + u * kStride;
      if (i >= vector_end) continue;
#pragma unroll
      for (int op = 0; op < kOps; ++op) {
        if (!Update::loads(op) || !at.present(ptr[op])) {  // written, only stored at the first step, or absent
#pragma unroll
          for (int e = 0; e < V; ++e) {
            if constexpr (kWords)
              raw[u][op][e] = 0u;
            else
              v[u][op][e] = 0.0f;
          }
        } else if constexpr (kWords) {
          load_operand_words<Ops, V>(op, ptr[op], i, raw[u][op]);
        } else {
          load_operand<Ops, V>(op, ptr[op], i, v[u][op]);
        }
      }
    }
  }

  /// The first tile's loads on their way (where kTileFirst); whether the step goes on (`skip`: AMP's
  /// overflow, read before them and tested after).
  __device__ __forceinline__ bool start(bool skip) {
    vector_end = aligned ? first + (end - first) / V * V : first;
    if (kTileFirst) load_tile(thread_first());
    return !skip;
  }

  template <typename Group>
  __device__ __forceinline__ void run(const UpdateStep<Update, Group>& step) {
    long long base = thread_first();
    while (base < vector_end) {
      if (!kTileFirst) load_tile(base);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const long long i = base + u * kStride;
        if (i >= vector_end) continue;
        // Tile u, updated in place (floats) or into `out` (words), then stored. Its divisions and
        // roots are IeeeMath's: CheckedMath's interleaved elements (the 8-bit walk's) cost this
        // memory-bound loop spills at its register cap (1980 bytes in adam_kernels.cu).
        float out[kWords ? kOps : 1][V];
        at.seek(i);
        // Its elements; with no branch between them where they share a row (in_row constant).
        auto compute = [&](bool in_row) {
#pragma unroll
          for (int e = 0; e < V; ++e) {
            float x[kOps];
#pragma unroll
            for (int op = 0; op < kOps; ++op) {
              if constexpr (kWords)
                x[op] = operand_word_value<Ops>(op, raw[u][op], e);
              else
                x[op] = v[u][op][e];
            }
            if (step.scaled) x[1] = x[1] / step.grad_scale;
            IeeeMath math;
            at.apply(step.k, step.tv, x, math, e, in_row);
            at.store_states(step.k, step.tv, in_row);
            at.next(e, in_row);
#pragma unroll
            for (int op = 0; op < kOps; ++op) {
              if constexpr (kWords)
                out[op][e] = x[op];
              else
                v[u][op][e] = x[op];
            }
          }
        };
        if (at.in_row())
          compute(true);
        else
          compute(false);
#pragma unroll
        for (int op = 0; op < kOps; ++op) {
          if (!stores<Update>(op, step.first_step) || !at.present(ptr[op])) continue;
          if constexpr (kWords)
            store_operand<Ops, V>(op, ptr[op], i, out[op], step.ps);
          else
            store_operand<Ops, V>(op, ptr[op], i, v[u][op], step.ps);
        }
        at.finish_vector(step.k, step.tv);
      }
      base += kStride * U;
      if (kTileFirst) load_tile(base);
    }

    // Misaligned tensors entirely, and the last few elements of aligned ones.
    for (long long i = vector_end + threadIdx.x; i < end; i += OPTGEN_BLOCK_SIZE) {
      float x[kOps];
#pragma unroll
      for (int op = 0; op < kOps; ++op) {
        x[op] = 0.0f;
        if (Update::loads(op) && at.present(ptr[op])) load_operand<Ops, 1>(op, ptr[op], i, &x[op]);
      }
      if (step.scaled) x[1] = x[1] / step.grad_scale;
      IeeeMath math;
      at.seek(i, false);
      at.apply(step.k, step.tv, x, math);
#pragma unroll
      for (int op = 0; op < kOps; ++op)
        if (stores<Update>(op, step.first_step) && at.present(ptr[op]))
          store_operand<Ops, 1>(op, ptr[op], i, &x[op], step.ps);
      at.store_states(step.k, step.tv, false);
    }
    if (first == end) at.store_lines_without_elements(step.k, step.tv);
  }
};

}  // namespace optgen
