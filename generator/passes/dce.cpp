#include <algorithm>
#include <map>
#include <set>

#include "passes.h"

namespace optgen {
namespace {
bool is_own_value(const Output& o, VarKind kind) {
  return o.value->kind == NodeKind::Var && o.value->var == kind && o.value->name == o.name;
}

bool is_var(const Expr& e, VarKind kind, const std::string& name) {
  return e->kind == NodeKind::Var && e->var == kind && e->name == name;
}

/// Whether `o` gives a state with `init: param` the value `update` reads it as, unchanged: `step == 1 ?
/// param : state` (lower.cpp), the condition maybe hoisted to a group value. Absent from a variant,
/// such a state is not written at all (it was refused as written in variants without it).
bool is_unwritten_param_init(const Program& program, const Output& o) {
  const Expr& v = o.value;
  if (v->kind != NodeKind::Select || !is_var(v->args[1], VarKind::Param, "param") ||
      !is_var(v->args[2], VarKind::State, o.name))
    return false;
  Expr condition = v->args[0];
  if (condition->kind == NodeKind::Var && condition->var == VarKind::Hoisted)
    for (const auto& g : program.values[Domain::Group])
      if (g.name == condition->name) condition = g.value;
  return condition->kind == NodeKind::Binary && condition->binary_op() == BinaryOp::Eq &&
         is_var(condition->args[0], VarKind::Step, "step") && condition->args[1]->is_const(1);
}

/// The names of the group values, tensor values, reductions and matrix values that `roots` read,
/// and those read by what they read in turn.
std::set<std::string> values_read(const Program& program, std::vector<Expr> roots) {
  std::map<std::string, Expr> definitions;
  for (const auto& list : program.values)
    for (const auto& v : list) definitions.emplace(v.name, v.value);
  for (const auto& r : program.reductions) definitions.emplace(r.name, r.operand);
  for (const auto& m : program.matrix_values) definitions.emplace(m.name, m.operand);
  std::set<std::string> used;
  while (!roots.empty()) {
    Expr root = roots.back();
    roots.pop_back();
    for_each_node(root, [&](const Expr& e) {
      if (e->kind != NodeKind::Var ||
          (e->var != VarKind::Hoisted && e->var != VarKind::Reduced && e->var != VarKind::MatrixValue))
        return;
      if (used.insert(e->name).second) roots.push_back(definitions.at(e->name));
    });
  }
  return used;
}

/// The entries of `all` that `used` names, in their order.
template <typename T>
std::vector<T> kept(const std::vector<T>& all, const std::set<std::string>& used) {
  std::vector<T> result;
  for (const auto& v : all)
    if (used.count(v.name)) result.push_back(v);
  return result;
}
}  // namespace

Program dead_code_elimination(const Program& program) {
  Program result = program;
  result.element_outputs.clear();
  for (const auto& o : program.element_outputs) {
    if (is_own_value(o, o.name == "param" ? VarKind::Param : VarKind::State)) continue;
    const bool absent =
        o.name != "param" && std::find(program.states.begin(), program.states.end(), o.name) == program.states.end();
    if (absent && is_unwritten_param_init(program, o)) continue;
    result.element_outputs.push_back(o);
  }
  result.scalar_state_updates.clear();
  for (const auto& o : program.scalar_state_updates)
    if (!is_own_value(o, VarKind::ScalarState)) result.scalar_state_updates.push_back(o);
  result.scalar_state_commits.clear();
  for (const auto& o : program.scalar_state_commits)
    if (!is_own_value(o, VarKind::ScalarState)) result.scalar_state_commits.push_back(o);

  std::vector<Expr> roots;
  for (const auto& o : result.element_outputs) roots.push_back(o.value);
  for (const auto& o : result.scalar_state_commits) roots.push_back(o.value);
  const std::set<std::string> used = values_read(program, roots);
  for (Domain d : {Domain::Group, Domain::Tensor, Domain::Matrix, Domain::Row, Domain::Column})
    result.values[d] = kept(program.values[d], used);
  result.reductions = kept(program.reductions, used);
  result.matrix_values = kept(program.matrix_values, used);
  return result;
}

}  // namespace optgen
