#include "../ir_mutator.h"
#include "passes.h"

namespace optgen {
namespace {

class Specializer : public Mutator {
 public:
  explicit Specializer(const std::map<std::string, bool>& flags) : flags_(flags) {}

 protected:
  Expr rewrite(const Expr& e) override {
    if (e->kind != NodeKind::Var || e->var != VarKind::Hyperparameter) return e;
    auto it = flags_.find(e->name);
    return it == flags_.end() ? e : Node::make_const(it->second, ValueType::Bool);
  }

 private:
  const std::map<std::string, bool>& flags_;
};

/// The value of a flag-only bool expression once its flags are constants.
bool evaluate_condition(const Expr& e) {
  switch (e->kind) {
    case NodeKind::Const: return e->value != 0;
    case NodeKind::Unary: return !evaluate_condition(e->args[0]);
    case NodeKind::Binary: {
      bool a = evaluate_condition(e->args[0]), b = evaluate_condition(e->args[1]);
      switch (e->binary_op()) {
        case BinaryOp::And: return a && b;
        case BinaryOp::Or: return a || b;
        case BinaryOp::Eq: return a == b;
        case BinaryOp::Ne: return a != b;
        default: break;
      }
      break;
    }
    case NodeKind::Select:
      return evaluate_condition(e->args[0]) ? evaluate_condition(e->args[1]) : evaluate_condition(e->args[2]);
    default: break;
  }
  throw InternalError("a state condition is not a function of flags alone");
}

}  // namespace

Program specialize(const Program& program, const std::map<std::string, bool>& flags) {
  for (const auto* flag : program.spec->flags())
    if (!flags.count(flag->name)) throw InternalError("specialize: no value for flag '" + flag->name + "'");
  Specializer specializer(flags);
  Program result = map_roots(program, [&](const Expr& e) { return specializer(e); });
  for (auto& [name, value] : result.derived_flags) value = program.derived_flags.at(name);  // stay symbolic
  result.flags = flags;
  result.variant = program.spec->name;
  for (const auto* flag : program.spec->flags())
    if (flags.at(flag->name)) result.variant += "_" + flag->name;
  result.states.clear();
  for (const auto& state : program.states) {
    auto condition = program.state_conditions.find(state);
    if (condition == program.state_conditions.end() || evaluate_condition(specializer(condition->second)))
      result.states.push_back(state);
  }
  return result;
}

}  // namespace optgen
