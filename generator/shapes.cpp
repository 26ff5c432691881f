#include "shapes.h"

#include <set>

#include "evaluate.h"
#include "optgen/kernel_abi.h"

namespace optgen {

unsigned stage_blocks(const Program& variant, const Stage& stage) {
  if (stage.kind != StageKind::Reduce || !uses_shapes(variant)) return 0;
  unsigned mask = 0;
  auto add = [&](kernel_abi::BlockKind kind) { mask |= 1u << kind; };
  for (const auto& r : variant.reductions) {
    if (r.stage != stage.number) continue;
    switch (r.scope) {
      case Domain::Tensor:
      case Domain::Group: add(kernel_abi::kChunkRuns); break;
      case Domain::Row: add(kernel_abi::kRowLines); break;
      case Domain::Column: add(kernel_abi::kColumnSegments); break;
      case Domain::Matrix:
        add(r.operand->level == Domain::Column ? kernel_abi::kMatrixColumnLines : kernel_abi::kMatrixRowLines);
        break;
      case Domain::Element: throw InternalError("stage_blocks: a reduction into the element domain");
    }
  }
  // The first Reduce stage copies the row and column states the Update stage reads.
  const bool shaped_states =
      !states_of_shape(variant, StateShape::Rows).empty() || !states_of_shape(variant, StateShape::Cols).empty();
  if (stage.number == 1 && shaped_states) add(kernel_abi::kSnapshot);
  return mask;
}

int scope_index(const Program& variant, size_t r) {
  const Domain scope = variant.reductions.at(r).scope;
  if (scope == Domain::Tensor || scope == Domain::Group) return static_cast<int>(r);
  int index = 0;
  for (size_t i = 0; i < r; ++i) index += variant.reductions[i].scope == scope ? 1 : 0;
  return index;
}

int scope_count(const Program& variant, Domain scope) {
  int count = 0;
  for (const auto& r : variant.reductions) count += r.scope == scope ? 1 : 0;
  return count;
}

std::vector<std::string> states_of_shape(const Program& variant, StateShape shape) {
  std::vector<std::string> list;
  for (const auto& name : variant.states)
    for (const auto& s : variant.spec->states)
      if (s.name == name && s.shape == shape) list.push_back(name);
  return list;
}

std::map<Domain, std::vector<const HoistedValue*>> shaped_values_read(const Program& p, std::vector<Expr> roots) {
  std::map<std::string, const HoistedValue*> definitions;
  for (Domain d : {Domain::Matrix, Domain::Row, Domain::Column})
    for (const auto& v : p.values[d]) definitions.emplace(v.name, &v);
  std::set<std::string> read;
  while (!roots.empty()) {
    Expr root = roots.back();
    roots.pop_back();
    for_each_node(root, [&](const Expr& e) {
      if (e->kind != NodeKind::Var || e->var != VarKind::Hoisted) return;
      auto it = definitions.find(e->name);
      if (it != definitions.end() && read.insert(e->name).second) roots.push_back(it->second->value);
    });
  }
  std::map<Domain, std::vector<const HoistedValue*>> by_level;
  for (Domain level : {Domain::Matrix, Domain::Row, Domain::Column})
    for (const auto& v : p.values[level])
      if (read.count(v.name)) by_level[level].push_back(&v);
  return by_level;
}

Presence state_presence(const Program& variant, const std::string& state) {
  auto it = variant.state_conditions.find(state);
  if (it == variant.state_conditions.end()) return Presence::Always;
  auto present = [&](bool factored) {
    return evaluate(it->second, [&](const Node& var) -> double {
             if (var.var == VarKind::Factored) return factored ? 1 : 0;
             auto flag = variant.flags.find(var.name);
             if (var.var == VarKind::Hyperparameter && flag != variant.flags.end()) return flag->second ? 1 : 0;
             throw InternalError("state_presence: the condition of state '" + state + "' reads '" + var.name +
                                 "', neither a flag nor factored");
           }) != 0;
  };
  const bool when_factored = present(true), when_not = present(false);
  if (when_factored && when_not) return Presence::Always;
  if (when_factored) return Presence::Factored;
  if (when_not) return Presence::NotFactored;
  throw InternalError("state_presence: state '" + state + "' of variant " + variant.variant + " exists for no tensor");
}

}  // namespace optgen
