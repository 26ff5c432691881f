#pragma once
/// The launcher emitter: `<name>.h` and `<name>.cpp`, the C++ class an application links (plus
/// its C ABI entry point), from templates/launcher.{h,cpp}.in. The class describes the spec to
/// the runtime's engine: the reference's tables (hyperparameters, states, flags, derive_flags) and
/// its own variant and kernel tables, all from optimizer_tables.h.

#include <set>
#include <string>
#include <vector>

#include "emit_cuda.h"
#include "ir.h"
#include "spec.h"
#include "optgen/storage.h"

namespace optgen {

std::string emit_launcher_header(const Spec& spec, const std::vector<Program>& variants);
/// `variants`: every variant of the spec; `with_kernels`: the names of those kernels were
/// generated for (all when empty).
std::string emit_launcher_source(const Spec& spec, const std::vector<Program>& variants,
                                 const std::vector<Storage>& storage, const KernelTuning& tuning,
                                 const std::set<std::string>& with_kernels = {});

}  // namespace optgen
