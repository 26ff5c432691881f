#pragma once
/// Global-norm gradient clipping, which every spec has unless it says `grad_clipping: false`:
/// torch.nn.utils.clip_grad_norm_(params, max_grad_norm) on each param group, fused into the step.
///
/// The spec gets two hyperparameters, `max_grad_norm` (float; 0, the default, turns clipping
/// off) and the derived flag `clip_grad_norm` (max_grad_norm > 0), so a variant that does not clip
/// is the spec as written: one launch, no reduction. In a variant that clips, `update` sees the
/// clipped gradient wherever it reads `grad`:
///
///     grad * clamp(max_grad_norm / (group_norm(grad) + 1e-6), max = 1)
///
/// where group_norm runs over the unscaled gradients (AMP's grad_scale is divided out as the
/// gradient is read), and a NaN coefficient stays NaN as in torch. The gradients are never written.
/// The update stage publishes the norm of each group (`Optimizer::grad_norm`).

#include <string>

#include "ir.h"
#include "spec.h"

namespace optgen::clipping {

constexpr const char* kMaxNorm = "max_grad_norm";  ///< the hyperparameter
constexpr const char* kFlag = "clip_grad_norm";    ///< the derived flag: max_grad_norm > 0
constexpr double kEps = 1e-6;                      ///< torch's clip_grad_norm_ adds it to the norm

/// Adds the two hyperparameters to a spec that clips (`spec.grad_clipping`), after its own;
/// `max_grad_norm` defaults to `spec.max_grad_norm_default`. Throws SpecError at the spec's own
/// declaration when it already uses either name.
void add_hyperparameters(Spec& spec);

/// The gradient `update` reads: `grad` itself, or in a spec that clips, `grad` clipped when the
/// flag is set (a Select the specialize pass resolves per variant).
Expr gradient(const Spec& spec, const Expr& grad, const Expr& max_norm, const Expr& flag);

/// Whether a reduction is the squared gradient norm the clipping reads.
bool is_grad_norm(const ReductionValue& r);

/// The index of that reduction in `program.reductions`, or -1 when the variant does not clip.
int grad_norm_slot(const Program& program);

}  // namespace optgen::clipping
