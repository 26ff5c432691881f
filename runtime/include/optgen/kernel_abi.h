#pragma once
/// The host's view of what a generated kernel takes: the host mirror of the structs in
/// templates/kernel_support.cuh.in. A kernel is launched as
///   kernel<<<table.num_chunks, block_size>>>(TableView table, StepArgs<StepScalars> args)
/// where StepArgs is { const StepScalars* groups; StepScalars inline_groups[inline_groups]; }.

#include <cstddef>
#include <cstdint>

namespace optgen::kernel_abi {

/// One block's work: elements [index * chunk_size, (index + 1) * chunk_size) of one tensor.
struct Chunk {
  int tensor;
  int index;
};

struct TableView {
  void* const* pointers;        ///< [operand * num_tensors + tensor]: param, grad, then each state
  const long long* numel;       ///< [tensor]
  const int* group;             ///< [tensor]: the tensor's group within the launch
  const Chunk* chunks;          ///< [block]
  long long chunk_size;
  int num_tensors;
  int num_chunks;
};
static_assert(sizeof(TableView) == 48, "TableView must match templates/kernel_support.cuh.in");

/// StepArgs: the device pointer at offset 0, the inline groups from offset 8, padded to 8 bytes.
constexpr std::size_t kInlineOffset = 8;
constexpr std::size_t step_args_size(std::size_t scalars_size, int inline_groups) {
  return (kInlineOffset + scalars_size * static_cast<std::size_t>(inline_groups) + 7) / 8 * 8;
}

}  // namespace optgen::kernel_abi
