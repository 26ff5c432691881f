#pragma once
/// The IR passes, one file each, run in this order by the pipeline (pipeline.h). Each takes a
/// Program and returns a new one; none changes its input.

#include <map>
#include <string>

#include "../ir.h"

namespace optgen {

/// Replaces each specialized flag by its value, drops the states that are absent under these
/// values, and names the variant (`adam_amsgrad`).
Program specialize(const Program& program, const std::map<std::string, bool>& flags);

/// Evaluates operations on constants and removes identities (x * 1, x + 0, true ? a : b, ...).
Program constant_fold(const Program& program);

/// Makes structurally equal subexpressions one node.
Program common_subexpression_elimination(const Program& program);

/// Splits the step by domain: every maximal subexpression of the element code that is computed in
/// a coarser domain (per group, per tensor, ...) becomes a value of that domain, computed once there
/// (`Program::values[domain]`) and read by name; every reduction becomes one of the
/// program's `reductions`, its operand element code, read by the tensor code by name.
Program assign_levels(const Program& program);

/// Drops writes that store a state's own value back, and group values, tensor values and
/// reductions nothing reads.
Program dead_code_elimination(const Program& program);

/// Checks that the variant reads and writes exactly the states it declares present; throws
/// SpecError when a spec writes or reads a state that its flags make absent.
Program verify_states(const Program& program);

/// Splits the step into its stage plan: one kernel launch per stage. Without reductions a step is
/// one Update stage; with them, a Reduce stage per level of reductions that read reductions comes
/// first (ReductionValue::stage).
Program plan_stages(const Program& program);

}  // namespace optgen
