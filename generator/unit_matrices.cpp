#include "unit_matrices.h"

#include <algorithm>
#include <map>
#include <string>

#include "ir_mutator.h"
#include "passes/passes.h"
#include "shapes.h"

namespace optgen {
namespace {

bool shaped_domain(Domain d) { return d == Domain::Matrix || d == Domain::Row || d == Domain::Column; }

/// Rewrites code of any domain as the code of a tensor whose matrices are one element: a reduction
/// over a row, column or matrix becomes its operand, a row, column or matrix value its code, a row or
/// column state a state of the element; `factored` is true, `rows` and `cols` 1, a state the tensor
/// lacks 0, and a tensor value in `constants` that constant.
class Collapse : public Mutator {
 public:
  Collapse(const Program& variant, std::map<std::string, Expr> constants)
      : variant_(variant), constants_(std::move(constants)) {}

 protected:
  Expr rewrite(const Expr& e) override {
    if (e->kind != NodeKind::Var) return e;
    switch (e->var) {
      case VarKind::Factored: return Node::make_const(1, e->type);
      case VarKind::Rows:
      case VarKind::Cols: return Node::make_const(1, e->type);
      case VarKind::Reduced:
        for (const ReductionValue& r : variant_.reductions)
          if (r.name == e->name && shaped_domain(result_level(r.scope))) return (*this)(r.operand);
        return e;
      case VarKind::Hoisted:
        if (e->level == Domain::Tensor && constants_.count(e->name)) return constants_.at(e->name);
        if (!shaped_domain(e->level)) return e;
        for (const HoistedValue& v : variant_.values[e->level])
          if (v.name == e->name) return (*this)(v.value);
        throw InternalError("unit_matrix_code: no " + std::string(to_string(e->level)) + " value '" + e->name + "'");
      case VarKind::State:
        if (state_presence(variant_, e->name) == StatePresence::NotFactored) return Node::make_const(0, e->type);
        if (e->level == Domain::Row || e->level == Domain::Column) return Node::make_state(e->name, Domain::Element);
        return e;
      default: return e;
    }
  }

 private:
  const Program& variant_;
  std::map<std::string, Expr> constants_;
};

}  // namespace

std::shared_ptr<const Program> unit_matrix_code(const Program& variant) {
  // A variant with a matrix value (Muon's) applies its function to every matrix: it keeps them.
  // Nor for one with programs beside the step: their kernels have no such code.
  if (!uses_shapes(variant) || variant.for_shards || !variant.is_step() || !variant.matrix_values.empty() ||
      !variant.programs.empty())
    return nullptr;
  Program unit = variant;
  unit.for_unit_matrices = true;
  unit.programs.clear();
  unit.shard_step = nullptr;
  for (Domain d : {Domain::Matrix, Domain::Row, Domain::Column}) unit.values[d].clear();
  // Tensor values first: those that become constants (`factored`, `rows`, ...) are read as such.
  Collapse tensor_code(variant, {});
  for (HoistedValue& v : unit.values[Domain::Tensor]) v.value = tensor_code(v.value);
  unit = constant_fold(unit);
  std::map<std::string, Expr> constants;
  for (const HoistedValue& v : unit.values[Domain::Tensor])
    if (v.value->is_const()) constants.emplace(v.name, v.value);
  Collapse collapse(variant, constants);
  for (ReductionValue& r : unit.reductions) {
    if (!shaped_domain(result_level(r.scope))) {
      r.operand = collapse(r.operand);
      continue;
    }
    // Computed by no stage (its operand is read where its result was), it keeps its place so that
    // the reductions after it keep their index r: their slots in the reduction table.
    r.scope = Domain::Tensor;
    r.stage = -1;
    r.operand = Node::make_const(0, ValueType::Float);
  }
  unit.element_outputs.clear();
  for (const Output& o : variant.element_outputs) {
    if (state_presence(variant, o.name) == StatePresence::NotFactored) continue;  // absent: never written
    Output out = o;
    out.value = collapse(o.value);
    if (o.level == Domain::Row || o.level == Domain::Column) out.level = Domain::Element;
    unit.element_outputs.push_back(std::move(out));
  }
  // Every state it has exists for every tensor it runs for.
  unit.state_conditions.clear();
  return std::make_shared<const Program>(constant_fold(unit));
}

}  // namespace optgen
