#pragma once
/// What a kernel's constants can describe. The CUDA emitter gives each operand (param, grad, each
/// state and matrix value) and each reduction of a stage a bit of a 32-bit mask (Operands::codec,
/// Update::loads and stores, Reduce::is_max: folded where the loops unroll); a 33rd has no bit, and
/// a shift past 31 is undefined: a 36th reduction's maximum was read as the 4th's, silently. A
/// variant beyond either limit is refused before anything is emitted.

#include <vector>

#include "ir.h"
#include "spec.h"

namespace optgen {

/// Operands of a variant's kernels: param, grad, its states and matrix values.
constexpr int kMaxKernelOperands = 32;
/// Reductions one stage computes.
constexpr int kMaxStageReductions = 32;

/// Throws a SpecError located at the state, matrix function call or reduction that takes a variant
/// (its step on shards, its programs) past kMaxKernelOperands or kMaxStageReductions.
void check_kernel_limits(const Spec& spec, const std::vector<Program>& variants);

}  // namespace optgen
