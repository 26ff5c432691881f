#include <functional>
#include <map>
#include <set>

#include "passes.h"

namespace optgen {
namespace {

/// `e` with every occurrence of the node `from` replaced by `to` (shared subtrees stay shared).
Expr substitute(const Expr& e, const Node* from, const Expr& to, std::map<const Node*, Expr>& memo) {
  if (e.get() == from) return to;
  if (e->args.empty()) return e;
  if (auto it = memo.find(e.get()); it != memo.end()) return it->second;
  std::vector<Expr> args;
  bool changed = false;
  for (const auto& a : e->args) {
    args.push_back(substitute(a, from, to, memo));
    changed = changed || args.back() != a;
  }
  return memo[e.get()] = changed ? with_args(e, std::move(args)) : e;
}

/// Whether `e` reads state `name`'s old value other than inside the node `inside`.
bool reads_state_outside(const Expr& e, const std::string& name, const Node* inside, std::set<const Node*>& seen) {
  if (e.get() == inside || !seen.insert(e.get()).second) return false;
  if (e->kind == NodeKind::Var && e->var == VarKind::State && e->name == name) return true;
  for (const auto& a : e->args)
    if (reads_state_outside(a, name, inside, seen)) return true;
  return false;
}

/// A Reduce stage that stores a matrix value's operand reads and writes every element already: a
/// state whose new value it computes for that operand (Muon's momentum, for its Nesterov update) it
/// stores too, where the stages after it read the state only through that new value; they then
/// load the stored value instead of computing it again from the gradient and the old state
/// (Muon's Update stage reads 10 bytes a parameter instead of 22). Not in a variant that reduces
/// over every group: the CPU reference's first pass over the groups runs its Reduce stages to
/// change nothing (reference::step_groups).
void store_states_early(Program& p) {
  if (reduces_over_optimizer(p)) return;
  for (const MatrixValue& m : p.matrix_values) {
    const int k = m.stage;
    std::set<const Node*> computed;
    for_each_node(m.operand, [&](const Expr& e) { computed.insert(e.get()); });
    for (Output& o : p.element_outputs) {
      if (o.stage != 0 || o.name == "param" || o.level != Domain::Element || o.first_step_only ||
          !computed.count(o.value.get()))
        continue;
      // The code after stage k: the other outputs, and the operands of later reductions and matrices.
      std::vector<Expr*> later;
      for (Output& other : p.element_outputs)
        if (&other != &o && other.stage == 0) later.push_back(&other.value);
      for (ReductionValue& r : p.reductions)
        if (r.stage > k) later.push_back(&r.operand);
      for (MatrixValue& n : p.matrix_values)
        if (n.stage > k) later.push_back(&n.operand);
      std::set<const Node*> seen;
      bool conflict = false;
      for (const Expr* root : later) conflict = conflict || reads_state_outside(*root, o.name, o.value.get(), seen);
      if (conflict) continue;
      std::map<const Node*, Expr> memo;
      const Expr stored = Node::make_state(o.name, Domain::Element);
      for (Expr* root : later) *root = substitute(*root, o.value.get(), stored, memo);
      o.stage = k;
    }
  }
}

}  // namespace

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

  store_states_early(result);

  result.stages.clear();
  for (int k = 1; k <= stages; ++k)
    result.stages.push_back({StageKind::Reduce, stages == 1 ? "reduce" : "reduce" + std::to_string(k), k});
  result.stages.push_back({StageKind::Update, program.is_step() ? "update" : program.entry, 0});
  return result;
}

}  // namespace optgen
