#include <set>

#include "passes.h"

namespace optgen {
namespace {
bool is_own_value(const Output& o, VarKind kind) {
  return o.value->kind == NodeKind::Var && o.value->var == kind && o.value->name == o.name;
}

void collect_hoisted(const Expr& root, std::set<std::string>& used) {
  for_each_node(root, [&](const Expr& e) {
    if (e->kind == NodeKind::Var && e->var == VarKind::Hoisted) used.insert(e->name);
  });
}

/// The values of `all` that `used` names, in their order.
std::vector<HoistedValue> kept(const std::vector<HoistedValue>& all, const std::set<std::string>& used) {
  std::vector<HoistedValue> result;
  for (const auto& v : all)
    if (used.count(v.name)) result.push_back(v);
  return result;
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

  std::set<std::string> used;  // element code reads tensor and group values; tensor values read group values
  for (const auto& o : result.element_outputs) collect_hoisted(o.value, used);
  result.tensor_values = kept(program.tensor_values, used);
  for (const auto& v : result.tensor_values) collect_hoisted(v.value, used);
  result.group_values = kept(program.group_values, used);
  return result;
}

}  // namespace optgen
