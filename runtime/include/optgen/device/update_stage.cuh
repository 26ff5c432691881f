#pragma once
/// optgen's device library: the Update stage, one driver for every variant over the walk of its
/// domain: elements (update.cuh; with rows and columns where the variant has them) or 8-bit
/// quantisation blocks (blockwise_update.cuh).

#include "optgen/device/blockwise_update.cuh"

namespace optgen {

/// The walk of an Update stage whose operand table is `Ops`: BlockWalk where it has 8-bit states,
/// else ElementWalk of V elements a thread.
template <typename Update, typename Ops, int V, bool kBlocks = (Ops::kBlockwise != 0)>
struct UpdateWalkOf {
  typedef ElementWalk<Update, Ops, V> type;
};
template <typename Update, typename Ops, int V>
struct UpdateWalkOf<Update, Ops, V, true> {
  static_assert(V == Ops::kVector, "8-bit blocks are walked 8 elements a lane");
  typedef BlockWalk<Update, Ops> type;
};

/// The Update stage: one block updates one chunk of one tensor, in the order of its walk. Operand 0
/// is the parameter (or its master copy) and 1 the gradient; the rest are states, each stored as
/// the operand table `Ops` says. The gradient is only read (and, under AMP, divided by the grad
/// scale in registers); the step's outputs are written back (stores). The walk reads the plan's
/// tables before the stage waits, and its first loads are on their way before the block takes its
/// ticket (begin_update); the group's last block commits the step (end_update). An element walk
/// takes V elements a thread: the operand table's kVector, or kernel_abi::kLongRowVector in the
/// kernel a plan of long rows launches instead (KernelInfo::long_row_update).
template <typename Update, typename Group, typename Ops, int V = Ops::kVector>
__device__ __forceinline__ void update_stage(const TableView& table, const GroupTable& groups, const StepInputs& inputs,
                                             const ReductionTable& red) {
  const Chunk chunk = table.chunks[blockIdx.x];
  const int t = chunk.tensor;
  const int g = chunk.group;
  typename UpdateWalkOf<Update, Ops, V>::type walk(table, chunk);
  enter_update_stage<Update>();
  // AMP: an overflow skips the whole step. Read now, tested once the first loads are on their way.
  if (!walk.start(skips_step(inputs))) return;
  const UpdateStep<Update, Group> step =
      begin_update<Update, Group, Ops>(table, groups, inputs, red, walk.position(), t, g);
  walk.run(step);
  end_update<Update, Group, Ops>(table, groups, red, walk.position(), step, t, g);
}

}  // namespace optgen
