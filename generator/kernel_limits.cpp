#include "kernel_limits.h"

#include <algorithm>
#include <map>
#include <string>

#include "diagnostic.h"

namespace optgen {
namespace {

void check_operands(const Spec& spec, const Program& p) {
  const int count = 2 + static_cast<int>(p.states.size() + p.matrix_values.size());
  if (count <= kMaxKernelOperands) return;
  // The first operand past the limit, in operand order: param, grad, states, then matrix values.
  const std::size_t past = kMaxKernelOperands - 2;
  const MatrixValue* matrix = past < p.states.size() ? nullptr : &p.matrix_values[past - p.states.size()];
  const std::string name = matrix ? matrix->name : p.states[past];
  SourceLoc loc = matrix ? matrix->loc : SourceLoc{};
  for (const ElementState& s : spec.states)
    if (!matrix && s.name == name) loc = s.loc;
  throw SpecError(loc,
                  std::string(matrix ? "matrix value '" : "state '") + name + "' would be operand " +
                      std::to_string(past + 3) + " of variant " + p.variant + "'s kernels (" + std::to_string(count) +
                      " in all); the kernels take " + std::to_string(kMaxKernelOperands) +
                      " operands at most: param, grad and " + std::to_string(kMaxKernelOperands - 2) +
                      " states and matrix values",
                  "fold states that are always updated together into fewer, or split the optimizer");
}

void check_reductions(const Program& p) {
  std::map<int, int> per_stage;
  for (const ReductionValue& r : p.reductions) {
    if (++per_stage[r.stage] <= kMaxStageReductions) continue;
    throw SpecError(r.loc,
                    "this is reduction " + std::to_string(per_stage[r.stage]) + " of stage " + std::to_string(r.stage) +
                        " of variant " + p.variant + "; a stage computes " + std::to_string(kMaxStageReductions) +
                        " at most",
                    "sum a combination once instead of each part (sum(a * x + b * y) for a * sum(x) + b * sum(y))");
  }
}

}  // namespace

void check_kernel_limits(const Spec& spec, const std::vector<Program>& variants) {
  for (const Program& v : variants)
    for (const Program* p : kernel_programs(v)) {
      check_operands(spec, *p);
      check_reductions(*p);
    }
}

}  // namespace optgen
