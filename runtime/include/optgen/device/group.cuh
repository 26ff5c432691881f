#pragma once
/// optgen's device library: the group table (each param group's values, step counts and scalar
/// state, in two slots), the group kernel, and how one stage lets the next start early.

#include "optgen/device/operands.cuh"

namespace optgen {

// ---- The group table (kernel_abi::GroupTable explains the two slots). ----

__device__ __forceinline__ long long slot_entry(const GroupTable& groups, int slot, int group) {
  return static_cast<long long>(slot) * groups.num_groups + group;
}

template <typename Values>
__device__ __forceinline__ Values* group_values(const GroupTable& groups, int slot, int group) {
  return reinterpret_cast<Values*>(groups.values + slot_entry(groups, slot, group) * groups.values_stride);
}

/// The slot a group's next step reads (between steps: no block of a step is running).
__device__ __forceinline__ int current_slot(const GroupTable& groups, int group) {
  return groups.arrivals[group] >= groups.blocks[group] ? 1 : 0;
}

/// The values the step after `step` steps reads: the group code run on a copy of the scalar state.
template <typename Group>
__device__ void write_values(const GroupTable& groups, int slot, int group) {
  double state[Group::kScalarStates + 1];
  const double* from = groups.scalar_state + slot_entry(groups, slot, group) * groups.num_scalar_states;
  for (int i = 0; i < Group::kScalarStates; ++i) state[i] = from[i];
  const long long step = groups.steps[slot_entry(groups, slot, group)] + 1;
  *group_values<typename Group::Values>(groups, slot, group) =
      Group::step(groups.hyperparameters + static_cast<long long>(group) * groups.num_hyperparameters, state, step);
}

/// The finished results of a plan's reductions that a block of tensor `t` in group `g` reads:
/// of_tensor(r), of_group(r) and of_optimizer(r) for reduction r (kernel_abi::ReductionTable).
struct Results {
  const double* tensor;
  const double* group;
  long long num_tensors;
  long long num_groups;
  const double* groups;  ///< every group's results: group - g
  __device__ __forceinline__ double of_tensor(int r) const { return __ldcg(tensor + r * num_tensors); }
  __device__ __forceinline__ double of_group(int r) const { return __ldcg(group + r * num_groups); }
  /// Over every group of the optimizer: the groups' results combined in group order, the same bits
  /// in every block that asks. Every group is in this plan (FusedOptimizer checks) and has a result
  /// (a group of no tensors steps a placeholder: optimizer.cpp's plan_tensors).
  __device__ __forceinline__ double of_optimizer(int r, bool is_max) const {
    const double* at = groups + r * num_groups;
    double x = __ldcg(at);
    for (long long g = 1; g < num_groups; ++g) {
      const double y = __ldcg(at + g);
      x = is_max ? max(x, y) : x + y;
    }
    return x;
  }
};
__device__ __forceinline__ Results results(const ReductionTable& red, int t, int g) {
  return Results{red.tensor_results + t, red.group_results + g, red.num_tensors, red.num_groups, red.group_results};
}

/// A step's results, written by the block with its first ticket into the slot the step does not
/// read: the step count and scalar state after it (per_step's; where `update` assigns scalar state
/// from the group's reductions, Group::advance computes both), and the values of the step after.
template <typename Group>
__device__ void commit_step(const GroupTable& groups, int slot, int group, [[maybe_unused]] const Results& results) {
  const int next = slot ^ 1;
  double state[Group::kScalarStates + 1];
  const double* from = groups.scalar_state + slot_entry(groups, slot, group) * groups.num_scalar_states;
  for (int i = 0; i < Group::kScalarStates; ++i) state[i] = from[i];
  const long long step = groups.steps[slot_entry(groups, slot, group)] + 1;
  const double* h = groups.hyperparameters + static_cast<long long>(group) * groups.num_hyperparameters;
  if constexpr (Group::kCommits)
    Group::advance(h, from, step, results, state);  // reads the slot's state, writes the copy
  else
    Group::step(h, state, step);
  double* to = groups.scalar_state + slot_entry(groups, next, group) * groups.num_scalar_states;
  for (int i = 0; i < Group::kScalarStates; ++i) to[i] = state[i];
  groups.steps[slot_entry(groups, next, group)] = step;
  write_values<Group>(groups, next, group);
}

/// The group kernel: applies `write` to each of its groups, then recomputes the values of their
/// current slot. One thread per group.
template <typename Group>
__device__ __forceinline__ void group_kernel(const GroupTable& groups, const GroupWrite& write) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= write.num_groups) return;
  const int group = write.first_group + static_cast<int>(i);
  if (groups.variant[group] != write.variant) return;
  const int slot = current_slot(groups, group);
  const long long entry = slot_entry(groups, slot, group);
  switch (write.field) {
    case kernel_abi::kHyperparameter:
      groups.hyperparameters[static_cast<long long>(group) * groups.num_hyperparameters + write.index] = write.value;
      break;
    case kernel_abi::kStepCount: groups.steps[entry] = static_cast<long long>(write.value); break;
    case kernel_abi::kScalarState: groups.scalar_state[entry * groups.num_scalar_states + write.index] = write.value; break;
    default: break;
  }
  write_values<Group>(groups, slot, group);
}

// ---- Stage after stage: a plan's stages after the first may start while the one before ends
// (programmatic dependent launch, compute capability 9.0 on: driver::launch's early_start). ----

/// Lets the next kernel on the stream start its blocks once every block of this one has called
/// this (or ended). Elsewhere (before 9.0, or launched plainly) it does nothing.
__device__ __forceinline__ void allow_next_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/// Waits until the kernel before this one on the stream has ended and its writes are visible. A
/// stage calls it before it reads an earlier stage's results or the group table's tickets, which
/// the stage before may still be using; loads of operands that no stage writes may go first.
__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

}  // namespace optgen
