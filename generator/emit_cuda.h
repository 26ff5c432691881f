#pragma once
/// The CUDA emitter: `<name>_kernels.cu`, one horizontally fused kernel per variant and storage
/// type. Each kernel updates every tensor of a bound tensor list in one launch; the per-element
/// code comes from the variant's IR, the indexing from templates/kernel_support.cuh.in.

#include <string>
#include <vector>

#include "ir.h"
#include "spec.h"
#include "storage.h"

namespace optgen {

/// Parameters of the emitted kernels, chosen per build (`optgen emit --block-size ...`).
struct KernelTuning {
  int block_size = 256;           ///< threads per block
  int elements_per_thread = 16;   ///< elements a thread has in flight per loop iteration
  int inline_groups = 16;         ///< groups whose step scalars fit in the kernel's arguments
  long long chunk_size = 4096;    ///< elements per block (the launcher's default; a multiple of 64)

  /// Empty when valid, else what is wrong.
  std::string check() const;
};

/// `<variant>_<param storage>_<state storage>`, e.g. adam_amsgrad_bf16_f32.
std::string kernel_name(const Program& variant, const Storage& storage);

/// A variant's step scalars as struct fields: floats first, then bools, each in hoisting order.
struct StepScalarField {
  std::string name;
  bool is_bool;
  int index;  ///< into Program::step_scalars
};
std::vector<StepScalarField> step_scalar_fields(const Program& variant);
/// sizeof(StepScalars) on host and device alike (floats 4 bytes, bools 1, padded to 4).
int step_scalars_size(const Program& variant);

/// The whole kernel source for a spec.
std::string emit_cuda(const Spec& spec, const std::vector<Program>& variants, const std::vector<Storage>& storage,
                      const KernelTuning& tuning);

}  // namespace optgen
