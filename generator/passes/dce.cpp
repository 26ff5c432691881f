#include <set>

#include "passes.h"

namespace optgen {
namespace {
bool is_own_value(const Output& o, VarKind kind) {
  return o.value->kind == NodeKind::Var && o.value->var == kind && o.value->name == o.name;
}
}  // namespace

Program dead_code_elimination(const Program& program) {
  Program result = program;
  result.element_outputs.clear();
  for (const auto& o : program.element_outputs)
    if (!is_own_value(o, o.name == "param" ? VarKind::Param : VarKind::State)) result.element_outputs.push_back(o);
  result.scalar_state_updates.clear();
  for (const auto& o : program.scalar_state_updates)
    if (!is_own_value(o, VarKind::ScalarState)) result.scalar_state_updates.push_back(o);

  std::set<std::string> used;
  for (const auto& o : result.element_outputs)
    for_each_node(o.value, [&](const Expr& e) {
      if (e->kind == NodeKind::Var && e->var == VarKind::StepScalar) used.insert(e->name);
    });
  result.step_scalars.clear();
  for (const auto& s : program.step_scalars)
    if (used.count(s.name)) result.step_scalars.push_back(s);
  return result;
}

}  // namespace optgen
