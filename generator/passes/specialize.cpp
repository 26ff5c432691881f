#include "../evaluate.h"
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

/// The value of a state's condition once its flags are constants, for a tensor that is `factored`
/// or not: arithmetic of numbers too (`1 + 1 == 2`), which the spec may write.
bool evaluate_condition(const Expr& e, bool factored) {
  return evaluate(e, [&](const Node& var) -> double {
           if (var.var == VarKind::Factored) return factored ? 1 : 0;
           throw InternalError("a state condition is not a function of flags and 'factored' alone");
         }) != 0;
}

}  // namespace

Program specialize(const Program& program, const std::map<std::string, bool>& flags) {
  for (const auto* flag : program.spec->flags())
    if (!flags.count(flag->name)) throw InternalError("specialize: no value for flag '" + flag->name + "'");
  Specializer specializer(flags);
  Program result = map_roots(program, [&](const Expr& e) { return specializer(e); });
  for (auto& [name, value] : result.derived_flags) value = program.derived_flags.at(name);  // stay symbolic
  result.flags = flags;
  result.variant = program.spec->variant_name(flags);
  result.states.clear();
  for (const auto& state : program.states) {
    auto condition = program.state_conditions.find(state);
    if (condition == program.state_conditions.end()) {
      result.states.push_back(state);
      continue;
    }
    // A state present for factored tensors only, or for the others only, is one of the variant's.
    const Expr specialized = specializer(condition->second);
    if (evaluate_condition(specialized, true) || evaluate_condition(specialized, false)) result.states.push_back(state);
  }
  return result;
}

}  // namespace optgen
