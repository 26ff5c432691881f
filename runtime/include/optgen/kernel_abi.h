#ifndef OPTGEN_KERNEL_ABI_H_
#define OPTGEN_KERNEL_ABI_H_
// The kernel ABI: the arguments of every generated kernel, defined once for both sides. The runtime
// includes this header; the generator copies its text verbatim into every <spec>_kernels.cu, so the
// host and the device compile the same definitions. It is plain C++ that host compilers and NVRTC
// (with no include path) both accept: no includes, built-in types only.
//
// A variant's stage kernels, <variant>_<storage>_<stage>, run one step of the groups they were
// bound to:
//   kernel<<<table.num_chunks, block_size>>>(TableView table, GroupTable groups, StepInputs inputs)
// and its group kernel, <variant>_group, writes a value into the group table and recomputes the
// GroupValues the next step reads (at prepare() time, and for every setter):
//   kernel<<<blocks, kGroupKernelBlock>>>(GroupTable groups, GroupWrite write)

namespace optgen {
namespace kernel_abi {

/// The version of this ABI. A generated launcher records the version it was generated for, and the
/// runtime refuses to run a launcher generated for another (regenerate it with this optgen).
enum { kVersion = 2 };

/// One block's work in a stage: `count` elements of one tensor from element index * chunk_size.
struct Chunk {
  int tensor;
  int index;
  int group;  ///< the tensor's param group, an index into the GroupTable
  int count;  ///< elements: chunk_size, or fewer in a tensor's last chunk (0 for a group with none)
};

/// A bound tensor list: built once by prepare(), resident on the device, never changed by a step.
/// Chunks are ordered by decreasing `count`, so that the short ones fill the last wave.
struct TableView {
  void* const* pointers;  ///< [operand * num_tensors + tensor]: param, grad, then each state
  const long long* numel; ///< [tensor]
  const Chunk* chunks;    ///< [blockIdx.x]
  long long chunk_size;   ///< elements per block, a multiple of 64
  int num_tensors;
  int num_chunks;         ///< the grid size; every group has at least one chunk
};

/// The device-resident state of every param group: hyperparameters, step counts, scalar state and
/// the values the next step's element code reads. A step launches with fixed arguments and reads
/// all of it from here, so it can be captured in a CUDA graph and replayed.
///
/// Step counts, scalar state and values are double-buffered: each group has two slots. Every block
/// of a group's Update stage takes a ticket, arrivals = (arrivals + 1) % (2 * blocks), and reads
/// slot 0 while its ticket is below `blocks`, slot 1 from there on; so a step's blocks all read one
/// slot. The block with the first ticket of a step (0 or `blocks`) writes the step's results (step
/// + 1, the advanced scalar state, and the values of the step after) into the other slot, which no
/// block of that step reads. Once all of a step's blocks have taken their tickets the other slot is
/// current. Nothing else is needed to advance a group: no host work, no second launch, no atomics
/// on floats.
struct GroupTable {
  double* hyperparameters;       ///< [group * num_hyperparameters + i]: declaration order, bools as 0/1
  long long* steps;              ///< [slot * num_groups + group]: steps taken
  double* scalar_state;          ///< [(slot * num_groups + group) * num_scalar_states + i]
  unsigned char* values;         ///< [(slot * num_groups + group) * values_stride]: the group's GroupValues
  unsigned int* arrivals;        ///< [group]: tickets its Update-stage blocks took, modulo 2 * blocks
  const unsigned int* blocks;    ///< [group]: blocks its Update stage launches per step (at least 1)
  const int* variant;            ///< [group]: its variant, an index into the launcher's variant table
  int num_groups;
  int num_hyperparameters;
  int num_scalar_states;
  int values_stride;             ///< bytes per slot entry of `values`, a multiple of 8
};

/// The inputs of one step that may change from step to step: AMP's, as torch.amp.GradScaler hands
/// them to fused optimizers. Both are device pointers; null means not given.
struct StepInputs {
  const float* grad_scale;  ///< the gradients carry this factor: the update sees grad / *grad_scale
  const float* found_inf;   ///< nonzero: skip the whole step (no parameter, state or step count changes)
};

/// What a group kernel writes before it recomputes the GroupValues of the current slot.
enum GroupField { kNoField = 0, kHyperparameter = 1, kStepCount = 2, kScalarState = 3 };
struct GroupWrite {
  double value;
  int variant;      ///< the kernel's own variant: groups of other variants are left alone
  int first_group;  ///< the groups written: [first_group, first_group + num_groups)
  int num_groups;
  int field;        ///< a GroupField
  int index;        ///< of the hyperparameter or scalar state
};

enum { kGroupKernelBlock = 128 };

}  // namespace kernel_abi
}  // namespace optgen

#endif  // OPTGEN_KERNEL_ABI_H_
