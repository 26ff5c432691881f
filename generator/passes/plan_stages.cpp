#include <functional>
#include <map>

#include "passes.h"

namespace optgen {

Program plan_stages(const Program& program) {
  Program result = program;
  for (const auto& v : program.values[Domain::Tensor])
    for_each_node(v.value, [&](const Expr& e) {
      if (e->level == Domain::Element)
        throw InternalError("plan_stages: tensor value '" + v.name + "' reads element values");
    });

  // A reduction runs in the stage after the latest reduction its operand reads, directly or
  // through a tensor, matrix, row or column value: its partial sums need that result in every
  // block. Reductions of one stage share its kernel, so launches per step are the reduce stages
  // plus the Update stage, whatever the number of reductions, tensors or groups.
  std::map<std::string, Expr> tensor_values;  // and matrix, row and column values
  for (Domain d : {Domain::Tensor, Domain::Matrix, Domain::Row, Domain::Column})
    for (const auto& v : program.values[d]) tensor_values.emplace(v.name, v.value);
  // A matrix value's operand is computed as a reduction's is: in the stage after the latest
  // reduction (or matrix value) it reads; the runtime transforms it before the next stage.
  std::map<std::string, Expr> operands;
  for (const auto& r : program.reductions) operands.emplace(r.name, r.operand);
  for (const auto& m : program.matrix_values) operands.emplace(m.name, m.operand);
  std::map<std::string, int> stage_of;
  std::function<int(const std::string&)> stage = [&](const std::string& name) -> int {
    if (auto it = stage_of.find(name); it != stage_of.end()) return it->second;
    int latest = 0;
    std::function<void(const Expr&)> visit = [&](const Expr& root) {
      for_each_node(root, [&](const Expr& e) {
        if (e->kind != NodeKind::Var) return;
        if (e->var == VarKind::Reduced || e->var == VarKind::MatrixValue) latest = std::max(latest, stage(e->name));
        if (e->var == VarKind::Hoisted && e->level != Domain::Group) visit(tensor_values.at(e->name));
      });
    };
    visit(operands.at(name));
    return stage_of[name] = latest + 1;
  };
  int stages = 0;
  for (auto& r : result.reductions) stages = std::max(stages, r.stage = stage(r.name));
  for (auto& m : result.matrix_values) stages = std::max(stages, m.stage = stage(m.name));

  result.stages.clear();
  for (int k = 1; k <= stages; ++k)
    result.stages.push_back({StageKind::Reduce, stages == 1 ? "reduce" : "reduce" + std::to_string(k), k});
  result.stages.push_back({StageKind::Update, program.entry == "step" ? "update" : program.entry, 0});
  return result;
}

}  // namespace optgen
