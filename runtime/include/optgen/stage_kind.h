#ifndef OPTGEN_STAGE_KIND_H_
#define OPTGEN_STAGE_KIND_H_
// Stage kinds: what one kernel launch of a variant's stage plan does. The one definition shared by
// the generator (its plan, Stage::kind), the launcher's tables (VariantInfo::stage_kinds) and the
// runtime, which launches, sizes and hooks each stage by its kind:
//   Reduce   reads the elements and writes only partial results of reductions (and, with rows
//            and columns, the values stored per row, column or matrix); the runtime's reduction
//            hook runs after it
//   Update   writes the step's outputs, takes the group's tickets and commits its step; the last
//            stage of every plan, and only one
// Plain C++ that host compilers and NVRTC both accept, like kernel_abi.h: no includes.

namespace optgen {

enum class StageKind { Reduce, Update };

/// "reduce", "update": as kernel names and messages say it.
inline const char* to_string(StageKind kind) {
  switch (kind) {
    case StageKind::Reduce: return "reduce";
    case StageKind::Update: return "update";
  }
  return "?";
}

}  // namespace optgen

#endif  // OPTGEN_STAGE_KIND_H_
