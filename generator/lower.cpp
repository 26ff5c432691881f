#include "lower.h"

#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "clipping.h"
#include "evaluate.h"
#include "expr_printer.h"
#include "matrices.h"
#include "matrix_programs.h"
#include "names.h"

namespace optgen {
namespace {

/// A hyperparameter's default as written: an integer without an exponent.
std::string default_text(double value) {
  return value == std::floor(value) && std::fabs(value) < 1e15 ? std::to_string(static_cast<long long>(value))
                                                               : format_number(value);
}

enum class NameKind { Hyperparameter, Step, ScalarState, PerStepValue, Numel, Shape, Param, Grad, State, Local };

struct Binding {
  NameKind kind;
  Expr value;
  SourceLoc loc;  ///< declaration, or the statement that last assigned it
};

const char* describe(NameKind kind) {
  switch (kind) {
    case NameKind::Hyperparameter: return "hyperparameter";
    case NameKind::Step: return "the step counter";
    case NameKind::ScalarState: return "scalar state";
    case NameKind::PerStepValue: return "per-step value";
    case NameKind::Numel: return "the tensor's element count";
    case NameKind::Shape: return "a dimension of the tensor's matrices";
    case NameKind::Param: return "the parameter";
    case NameKind::Grad: return "the gradient";
    case NameKind::State: return "state buffer";
    case NameKind::Local: return "local value";
  }
  return "name";
}

const char* type_name(ValueType t) { return t == ValueType::Bool ? "a bool" : "a number"; }

bool is_factored(const Expr& e) { return e->kind == NodeKind::Var && e->var == VarKind::Factored; }
bool is_not_factored(const Expr& e) {
  return e->kind == NodeKind::Unary && e->unary_op() == UnaryOp::Not && is_factored(e->args[0]);
}
/// Whether `e` reads `factored` anywhere.
bool reads_factored(const Expr& e) {
  bool found = false;
  for_each_node(e, [&](const Expr& node) { found = found || is_factored(node); });
  return found;
}
/// Whether the bool `e` can hold only for a factored tensor (`factored`, `factored && x`), or only
/// for one that is not (`!factored`, `!factored && x`).
bool requires_factored(const Expr& e, bool factored) {
  if (factored ? is_factored(e) : is_not_factored(e)) return true;
  return e->kind == NodeKind::Binary && e->binary_op() == BinaryOp::And &&
         (requires_factored(e->args[0], factored) || requires_factored(e->args[1], factored));
}

/// What the code being lowered knows about its tensor: nothing, that it is factored (inside
/// `when: factored` or the true branch of `factored ? a : b`), or that it is not.
enum class Guard { None, Factored, NotFactored };

/// The guard inside code run only when `condition` holds (`holds`) or only when it does not.
Guard guard_under(const Expr& condition, bool holds, Guard outer) {
  if (holds) {
    if (requires_factored(condition, true)) return Guard::Factored;
    if (requires_factored(condition, false)) return Guard::NotFactored;
    return outer;
  }
  if (is_factored(condition)) return Guard::NotFactored;
  if (is_not_factored(condition)) return Guard::Factored;
  return outer;
}

const char* per(Domain level) {
  switch (level) {
    case Domain::Optimizer: return "one value per optimizer";
    case Domain::Group: return "one value per param group";
    case Domain::Tensor: return "one value per tensor";
    case Domain::Matrix: return "one value per matrix";
    case Domain::Row: return "one value per row";
    case Domain::Column: return "one value per column";
    case Domain::Element: return "one value per element";
  }
  return "?";
}

class Lowering {
 public:
  explicit Lowering(const Spec& spec) : spec_(spec) {}

  /// per(level), where the rows of a spec of blocks (Spec::block_elements) are its blocks.
  std::string per_level(Domain level) const {
    return blocks() && level == Domain::Row ? "one value per block" : per(level);
  }
  bool blocks() const { return spec_.block_elements > 0; }
  /// What a `factored` tensor is (`plural`: tensors): of two or more dimensions, or a whole number of blocks.
  std::string factored_tensor(bool plural = false) const {
    const std::string s = plural ? "s" : "";
    return blocks()
               ? "tensor" + s + " of whole blocks (a multiple of " + std::to_string(spec_.block_elements) + " elements)"
               : "factored tensor" + s + " (two or more dimensions)";
  }
  /// The tensors that are not `factored`, and (`short_form`) the fallback a `factored` guard asks for.
  std::string other_tensors(bool short_form = true) const {
    if (blocks()) return "tensors that are not a whole number of blocks";
    return short_form ? "tensors of fewer dimensions" : "tensors that are not factored (fewer than two dimensions)";
  }

  Program run() {
    Program program;
    program.spec = &spec_;
    program.variant = spec_.name;
    bind_group_inputs();
    lower_derived_flags(program);
    lower_state_conditions(program);
    lower_per_step(program);
    bind_element_inputs();
    lower_update(program);
    return program;
  }

  /// One of the spec's programs (`programs:`), for every variant: what it assigns, from the
  /// hyperparameters, the scalar state, param and the state buffers.
  Program run(const ProgramSpec& code) {
    Program program;
    program.spec = &spec_;
    program.variant = spec_.name;
    program.entry = code.name;
    bind_group_inputs();
    lower_derived_flags(program);
    lower_state_conditions(program);
    bind_element_inputs();  // `step` and `grad` bound for a state's `init: param`, then taken away
    env_.erase("step");
    env_.erase("grad");
    lower_program(program, code);
    return program;
  }

 private:
  enum class Section { Flag, StateCondition, PerStep, Update, Program };

  /// What every section reads: hyperparameters, the step counter and the scalar state.
  void bind_group_inputs() {
    for (const auto& h : spec_.hyperparameters)
      env_[h.name] = {NameKind::Hyperparameter, Node::make_var(VarKind::Hyperparameter, h.name, h.type), h.loc};
    env_["step"] = {NameKind::Step, Node::make_var(VarKind::Step, "step", ValueType::Int), {}};
    for (const auto& s : spec_.scalar_states)
      env_[s.name] = {NameKind::ScalarState, Node::make_var(VarKind::ScalarState, s.name, ValueType::Float), s.loc};
  }

  void lower_derived_flags(Program& program) {
    for (const auto& h : spec_.hyperparameters) {
      if (!h.derived) continue;
      section_ = Section::Flag;
      Expr value = expression(*h.derived);
      require_bool(value, *h.derived, "the value of a derived flag");
      program.derived_flags[h.name] = value;
    }
  }

  /// Where `syntax` first names `name`, else where it starts.
  static SourceLoc name_loc(const Syntax& syntax, const std::string& name) {
    const std::function<const Syntax*(const Syntax&)> find = [&](const Syntax& at) -> const Syntax* {
      if (at.kind == Syntax::Kind::Name && at.text == name) return &at;
      for (const auto& operand : at.operands)
        if (const Syntax* found = find(*operand)) return found;
      return nullptr;
    };
    const Syntax* named = find(syntax);
    return named ? named->loc : syntax.loc;
  }

  /// A state's `when`: a bool of specialized flags only, so that a variant has the state or not.
  void lower_state_conditions(Program& program) {
    for (const auto& s : spec_.states) {
      if (!s.when) continue;
      section_ = Section::StateCondition;
      Expr value = expression(*s.when);
      require_bool(value, *s.when, "a state's 'when'");
      program.state_conditions[s.name] = value;
      state_conditions_[s.name] = value;
      for_each_node(value, [&](const Expr& e) {
        if (e->kind == NodeKind::Var && !is_factored(e) && !spec_.find_hyperparameter(e->name)->specialize)
          throw SpecError(
              name_loc(*s.when, e->name),
              "a state's 'when' may use only specialized flags and 'factored', and '" + e->name + "' is not one",
              "declare it with 'specialize: true', or add a derived flag");
      });
    }
    // A row or column state exists only where there are rows and columns; a tensor's, for every
    // tensor of the variants that have it.
    for (const auto& s : spec_.states) {
      if (s.shape == StateShape::Elements) continue;
      auto it = program.state_conditions.find(s.name);
      if (s.shape == StateShape::Tensor) {
        if (it != program.state_conditions.end() && reads_factored(it->second))
          throw SpecError(s.when->loc,
                          "state '" + s.name + "' has one value per tensor, so its 'when' may use only flags",
                          "a tensor of any shape has one; read 'factored' where the state is used instead");
        continue;
      }
      if (it == program.state_conditions.end() || !requires_factored(it->second, true))
        throw SpecError(s.shape_loc,
                        "state '" + s.name + "' has " + per_level(level_of(s.shape)) + " of a " + factored_tensor() +
                            ", so it must say 'when: factored'",
                        other_tensors() + (blocks() ? " have none" : " have no rows and columns") +
                            "; give them a state of their own ('when: \"!factored\"')");
    }
  }

  /// `per_step`, and the new value of each scalar state it assigns.
  void lower_per_step(Program& program) {
    section_ = Section::PerStep;
    collect_targets(spec_.per_step);
    block(spec_.per_step);
    for (const auto& s : spec_.scalar_states) {
      const Binding& b = env_.at(s.name);
      if (s.per_optimizer && !s.init.hyperparameter.empty())
        program.optimizer_hyperparameters.insert(s.init.hyperparameter);
      if (!assigned_.count(s.name)) continue;
      if (s.per_optimizer) check_optimizer_value(program, s.name, b);
      program.scalar_state_updates.push_back({s.name, b.value, b.loc});
    }
  }

  /// What `update` reads besides: per_step's values (read-only there), numel, param, grad and the
  /// state buffers.
  void bind_element_inputs() {
    for (auto& [name, b] : env_)
      if (b.kind == NameKind::Local) b.kind = NameKind::PerStepValue;
    env_["numel"] = {NameKind::Numel, Node::make_var(VarKind::Numel, "numel", ValueType::Int), {}};
    env_["rows"] = {NameKind::Shape, Node::make_var(VarKind::Rows, "rows", ValueType::Int), {}};
    env_["cols"] = {NameKind::Shape, Node::make_var(VarKind::Cols, "cols", ValueType::Int), {}};
    env_["param"] = {NameKind::Param, Node::make_var(VarKind::Param, "param", ValueType::Float), {}};
    Expr grad = Node::make_var(VarKind::Grad, "grad", ValueType::Float);
    if (spec_.grad_clipping)
      grad = clipping::gradient(spec_, grad, env_.at(clipping::kMaxNorm).value, env_.at(clipping::kFlag).value);
    env_["grad"] = {NameKind::Grad, grad, {}};
    for (const auto& s : spec_.states) {
      Expr value = Node::make_state(s.name, level_of(s.shape));
      if (s.init.param)  // spec.h, Init: the parameter at the group's first step
        value = with_provenance(Node::make_select(Node::make_binary(BinaryOp::Eq, env_.at("step").value,
                                                                    Node::make_const(1, ValueType::Int)),
                                                  env_.at("param").value, value),
                                s.name, s.loc);
      env_[s.name] = {NameKind::State, value, s.loc};
    }
  }

  /// `update`, and the element outputs: param, then every state (each must be written there).
  void lower_update(Program& program) {
    section_ = Section::Update;
    targets_.clear();
    collect_targets(spec_.update);
    block(spec_.update);
    const Binding& param = env_.at("param");
    if (!assigned_.count("param")) throw SpecError(update_loc(), "'update' never assigns 'param'");
    program.element_outputs.push_back({"param", param.value, param.loc});
    std::set<std::string> read;  // the states the outputs read
    for (const auto& [name, b] : env_) {
      const bool output = b.kind == NameKind::Param || b.kind == NameKind::State || b.kind == NameKind::ScalarState;
      if (!output || !assigned_.count(name)) continue;
      for_each_node(b.value, [&](const Expr& e) {
        if (e->kind == NodeKind::Var && e->var == VarKind::State) read.insert(e->name);
      });
    }
    for (const auto& s : spec_.states) {
      const Binding& b = env_.at(s.name);
      const bool assigned = assigned_.count(s.name) > 0;
      if (!assigned && !read.count(s.name))
        throw SpecError(s.loc, "state '" + s.name + "' is never written by 'update', and no output reads it");
      // A state 'update' only reads is never stored, except that one with `init: param` is written
      // at the group's first step: the parameter it reads as then.
      program.element_outputs.push_back(
          {s.name, b.value, assigned ? b.loc : s.loc, level_of(s.shape), !assigned && s.init.param});
      program.states.push_back(s.name);
    }
    for (const auto& s : spec_.scalar_states) {
      const Binding& b = env_.at(s.name);
      if (!assigned_.count(s.name))
        throw SpecError(s.loc, "scalar state '" + s.name + "' is never assigned in 'per_step' or 'update'");
      if (assigned_in_update_.count(s.name)) {
        check_commit(s.name, b, s.per_optimizer);
        if (s.per_optimizer) check_optimizer_value(program, s.name, b);
        program.scalar_state_commits.push_back({s.name, b.value, b.loc});
      }
    }
  }

  /// A program's statements, and its outputs: param and the states it assigns. Every state of the
  /// variant is an operand (the step's operand table), read or not.
  void lower_program(Program& program, const ProgramSpec& code) {
    section_ = Section::Program;
    program_ = code.name;
    targets_.clear();
    collect_targets(code.body);
    block(code.body);
    const Binding& param = env_.at("param");
    if (assigned_.count("param")) program.element_outputs.push_back({"param", param.value, param.loc});
    for (const auto& s : spec_.states) {
      const Binding& b = env_.at(s.name);
      if (assigned_.count(s.name)) program.element_outputs.push_back({s.name, b.value, b.loc, level_of(s.shape)});
      program.states.push_back(s.name);
    }
    if (program.element_outputs.empty())
      throw SpecError(code.loc, "program '" + code.name + "' assigns neither 'param' nor a state");
  }

  /// A scalar state `update` assigns is one value per param group: the value may read what per_step
  /// reads, per_step's values and reductions over the group, not a tensor's or an element's values.
  void check_commit(const std::string& name, const Binding& b, bool per_optimizer) {
    const std::string what =
        "scalar state '" + name + "' is " +
        (per_optimizer ? "one value for the optimizer (scope: optimizer)" : "one value per param group");
    const std::string reduce_first =
        per_optimizer ? "reduce it over the optimizer first (" + reduction_names(Domain::Optimizer) + ")"
                      : "reduce it over the group first (" + reduction_names(Domain::Group) + ")";
    std::set<const Node*> seen;
    std::function<void(const Expr&)> visit = [&](const Expr& e) {
      if (!seen.insert(e.get()).second) return;
      if (e->kind == NodeKind::Reduce) {
        if (!has_group_results(e->scope))
          throw SpecError(b.loc, what + ", but its new value reads a reduction over each " + to_string(e->scope),
                          per_optimizer
                              ? "reduce over every group of the optimizer (" + reduction_names(Domain::Optimizer) + ")"
                              : "reduce over the whole group (" + reduction_names(Domain::Group) +
                                    ") or the optimizer (optimizer_sum, ...)");
        return;  // its operand is element code, as any reduction's
      }
      // A tensor's value (numel, a state of one value per tensor), which no reduction takes.
      if (e->kind == NodeKind::Var && e->level == Domain::Tensor)
        throw SpecError(b.loc, what + ", but its new value reads '" + e->name + "', " + per_level(e->level),
                        "compute it from reductions of element values (" +
                            std::string(per_optimizer ? "optimizer_sum" : "group_sum") +
                            "(...)), or keep the value per tensor (a state of 'shape: tensor')");
      if (e->kind == NodeKind::Var && e->level != Domain::Group)
        throw SpecError(b.loc, what + ", but its new value reads '" + e->name + "', " + per_level(e->level),
                        reduce_first);
      for (const auto& a : e->args) visit(a);
    };
    visit(b.value);
  }

  /// A scalar state of `scope: optimizer` is one value for the optimizer: every group computes its
  /// copy alike, so its new value may read constants, reductions over the optimizer, such states
  /// and hyperparameters (each then one value for the optimizer: Program::optimizer_hyperparameters),
  /// not `step` (a group added later counts from 0), a group's reductions or a group's scalar state.
  void check_optimizer_value(Program& program, const std::string& name, const Binding& b) {
    const std::string what = "scalar state '" + name + "' is one value for the optimizer (scope: optimizer)";
    std::set<const Node*> seen;
    std::function<void(const Expr&)> visit = [&](const Expr& e) {
      if (!seen.insert(e.get()).second) return;
      if (e->kind == NodeKind::Reduce) {
        if (e->scope != Domain::Optimizer)
          throw SpecError(b.loc, what + ", but its new value reads a reduction over each " + to_string(e->scope),
                          "reduce over every group of the optimizer (" + reduction_names(Domain::Optimizer) + ")");
        return;  // its operand is element code, as any reduction's
      }
      if (e->kind == NodeKind::Var && e->var == VarKind::Hyperparameter)
        program.optimizer_hyperparameters.insert(e->name);
      if (e->kind == NodeKind::Var && e->var == VarKind::Step)
        throw SpecError(b.loc, what + ", but its new value reads 'step', which each group counts from its first step",
                        "a group added later would compute another value");
      if (e->kind == NodeKind::Var && e->var == VarKind::ScalarState)
        for (const auto& s : spec_.scalar_states)
          if (s.name == e->name && !s.per_optimizer)
            throw SpecError(b.loc,
                            what + ", but its new value reads scalar state '" + s.name + "', one per param group",
                            "declare '" + s.name + "' with 'scope: optimizer' too");
      for (const auto& a : e->args) visit(a);
    };
    visit(b.value);
  }

  SourceLoc update_loc() const { return spec_.update_loc; }

  /// Names that 'update' gives a per-element or per-tensor meaning.
  bool element_or_tensor_name(const std::string& name) const {
    return name == "param" || name == "grad" || name == "numel" || name == "rows" || name == "cols" ||
           spec_.state_index(name) >= 0;
  }
  /// "tensor" or "element": what such a name has one value per (a state of rows or columns counts
  /// as its elements').
  const char* tensor_or_element(const std::string& name) const {
    const int s = spec_.state_index(name);
    const bool tensor = name == "numel" || name == "rows" || name == "cols" ||
                        (s >= 0 && spec_.states[static_cast<size_t>(s)].shape == StateShape::Tensor);
    return tensor ? "tensor" : "element";
  }

  /// Whether a statement of `b` (or of a block in it) assigns `name`.
  static bool assigns(const Block& b, const std::string& name) {
    for (const auto& item : b.items)
      if (item.statement ? item.statement->target == name : assigns(*item.body, name)) return true;
    return false;
  }

  void collect_targets(const Block& b) {
    for (const auto& item : b.items) {
      if (item.statement)
        targets_.emplace(item.statement->target, item.statement->target_loc);
      else
        collect_targets(*item.body);
    }
  }

  void block(const Block& b) {
    for (const auto& item : b.items) {
      if (item.statement) {
        statement(*item.statement);
        continue;
      }
      Expr condition = expression(*item.when);
      require_bool(condition, *item.when, "'when'");
      auto outer = env_;
      const Guard outer_guard = guard_;
      guard_ = guard_under(condition, true, guard_);
      block(*item.body);
      guard_ = outer_guard;
      std::map<std::string, Binding> merged = outer;
      for (auto& [name, inner] : env_) {
        auto it = merged.find(name);
        if (it == merged.end()) {
          scoped_out_.emplace(name, inner.loc);
          continue;
        }
        if (it->second.value != inner.value) {
          if (inner.kind == NameKind::State) check_state_condition(name, condition, *item.when);
          if ((inner.value->type == ValueType::Bool) != (it->second.value->type == ValueType::Bool))
            throw SpecError(inner.loc,
                            "'" + name + "' is " + to_string(inner.value->type) + " here, inside the 'when', and " +
                                to_string(it->second.value->type) + " where the condition is false",
                            "a name assigned under a 'when' keeps its value otherwise: give it the same type");
          Expr chosen = Node::make_select(condition, inner.value, it->second.value);
          it->second = {inner.kind, with_provenance(chosen, inner.value->hint, inner.loc), inner.loc};
        }
      }
      env_ = std::move(merged);
    }
  }

  void statement(const Statement& s) {
    Expr value = expression(*s.value);
    if (value->height > kMaxProgramHeight)
      throw SpecError(
          s.target_loc,
          "'" + s.target + "' is computed by a chain of more than " + std::to_string(kMaxProgramHeight) +
              " operations, counting the statements it builds on",
          "optimizers are a few dozen operations deep; optgen refuses deeper chains rather than overflow its stack");
    auto it = env_.find(s.target);
    NameKind kind = NameKind::Local;
    if (it != env_.end()) {
      kind = it->second.kind;
      check_assignable(s, kind);
    } else if (section_ == Section::PerStep && element_or_tensor_name(s.target)) {
      throw SpecError(
          s.target_loc,
          "cannot assign to '" + s.target + "' in 'per_step': it is a per-" + tensor_or_element(s.target) + " value",
          "per_step computes values once per param group; give this value a new name");
    } else if (is_reserved_name(s.target)) {
      throw SpecError(s.target_loc,
                      "cannot assign to '" + s.target + "': it is " +
                          (find_builtin(s.target) ? "a built-in function" : "a reserved name of the spec language"));
    } else if (std::string why = name_problem(s.target, NameUse::Value); !why.empty()) {
      throw SpecError(s.target_loc, "'" + s.target + "' cannot be used as a name", why);
    }
    if (kind == NameKind::State) check_state_write(s, value);
    bool numeric_target = kind == NameKind::Param || kind == NameKind::State || kind == NameKind::ScalarState;
    if (numeric_target && value->type == ValueType::Bool)
      throw SpecError(s.value->loc, "cannot assign a bool to " + std::string(describe(kind)) + " '" + s.target + "'");
    if (numeric_target && value->type == ValueType::Int)
      value = Node::make_binary(BinaryOp::Mul, value, Node::make_const(1.0, ValueType::Float));  // widen
    if (kind == NameKind::Local || kind == NameKind::PerStepValue)
      value = with_provenance(value, s.target, s.target_loc);
    if (kind == NameKind::State || kind == NameKind::Param || kind == NameKind::ScalarState)
      value = with_provenance(value, s.target + "_next", s.target_loc);
    env_[s.target] = {kind, value, s.target_loc};
    scoped_out_.erase(s.target);
    // Whether an output was assigned is recorded, not read off its value: `param = grad` assigns
    // param a leaf, and swapping two states through a local leaves each the other's old value.
    if (kind == NameKind::Param || kind == NameKind::State || kind == NameKind::ScalarState) assigned_.insert(s.target);
    if (kind == NameKind::ScalarState && section_ == Section::Update) assigned_in_update_.insert(s.target);
  }

  /// A state that exists for some tensors only is written under the guard it is read under; a row
  /// (column) state is assigned a value of at most one per row (column).
  void check_state_write(const Statement& s, const Expr& value) {
    const ElementState& state = spec_.states.at(spec_.state_index(s.target));
    check_guard(state, s.target_loc, "assigned");
    check_program_state(s.target, s.target_loc, "assigned");
    const Domain level = level_of(state.shape);
    if (!at_or_below(value->level, level)) {
      const Domain over = level == Domain::Row || level == Domain::Column ? level : Domain::Tensor;
      const std::string where = over == Domain::Row      ? blocks() ? "each block" : "each row"
                                : over == Domain::Column ? "each column"
                                                         : "the tensor";
      // A row or column value reduces to its matrix's (sum(r)) and no further: a tensor's value
      // comes from its elements.
      const bool from_lines = over == Domain::Tensor && value->level != Domain::Element;
      // A spec with blocks reduces its tensors with the reductions of every spec (sum, mean, ...).
      const std::string names = reduction_names(over, blocks() && over != Domain::Tensor);
      throw SpecError(
          s.value->loc, "state '" + s.target + "' has " + per_level(level) + ", but this is " + per_level(value->level),
          from_lines ? "a tensor's value is a reduction of its element values (" + names + "), not of its " +
                           (blocks() ? "blocks'" : "rows', columns' or matrices'") + " values"
                     : "reduce it over " + where + " first (" + names + ")");
    }
  }

  /// A state assigned under a `when:` keeps its old value where the condition is false: a state of
  /// one value per tensor, row or column cannot be chosen by a condition of each element (or row).
  void check_state_condition(const std::string& name, const Expr& condition, const Syntax& when) const {
    const Domain level = level_of(spec_.states.at(spec_.state_index(name)).shape);
    if (at_or_below(condition->level, level)) return;
    const Domain over = level == Domain::Row || level == Domain::Column ? level : Domain::Tensor;
    throw SpecError(when.loc,
                    "state '" + name + "' has " + per_level(level) + ", and is assigned under this condition of " +
                        per_level(condition->level),
                    "reduce the condition first (" + reduction_names(over, blocks()) + ")");
  }

  /// A program (`programs:`) runs element code only: a state of one value per tensor is the step's.
  void check_program_state(const std::string& name, const SourceLoc& at, const char* what) const {
    if (section_ != Section::Program) return;
    if (spec_.states.at(spec_.state_index(name)).shape != StateShape::Tensor) return;
    throw SpecError(
        at, "state '" + name + "' has one value per tensor and cannot be " + what + " in program '" + program_ + "'",
        "a program runs element by element between steps; only the step reads and writes a tensor's "
        "states");
  }

  /// The guard a read or write of `state` needs: `factored` for a state only factored tensors have,
  /// `!factored` for one only the others have.
  void check_guard(const ElementState& state, const SourceLoc& at, const char* what) {
    auto it = state_conditions_.find(state.name);
    if (it == state_conditions_.end()) return;
    if (section_ == Section::Program && reads_factored(it->second))
      throw SpecError(at,
                      "state '" + state.name + "' exists for some tensors only (its 'when' reads 'factored'), and is " +
                          what + " in program '" + program_ + "', which cannot tell them apart",
                      "a program runs element by element between steps, on the states every tensor of a variant "
                      "has");
    if (requires_factored(it->second, true) && guard_ != Guard::Factored)
      throw SpecError(
          at,
          "state '" + state.name + "' exists only for " + factored_tensor(true) + ", and is " + what +
              " here outside a 'factored' guard",
          "use it inside 'when: factored' or 'factored ? ... : ...', with a fallback for " + other_tensors());
    if (requires_factored(it->second, false) && guard_ != Guard::NotFactored)
      throw SpecError(at,
                      "state '" + state.name + "' exists only for " + other_tensors(false) + ", and is " + what +
                          " here outside a '!factored' guard",
                      "use it inside 'when: \"!factored\"' or in the false branch of 'factored ? ... : ...'");
  }

  [[noreturn]] void cannot_assign(const Statement& s, NameKind kind, const std::string& why) {
    throw SpecError(s.target_loc, "cannot assign to " + std::string(describe(kind)) + " '" + s.target + "'" + why);
  }

  void check_assignable(const Statement& s, NameKind kind) {
    switch (kind) {
      case NameKind::Hyperparameter:
        cannot_assign(s, kind, ": hyperparameters are inputs; assign to a new name instead");
      case NameKind::Step: cannot_assign(s, kind, ": it counts steps by itself");
      case NameKind::Grad: cannot_assign(s, kind, ": the gradient is read-only; assign to a new name (e.g. 'g = ...')");
      case NameKind::Numel:
      case NameKind::Shape: cannot_assign(s, kind, ": it is an input; assign to a new name instead");
      case NameKind::ScalarState:
        if (section_ == Section::Program)
          cannot_assign(
              s, kind,
              " in program '" + program_ + "': a program runs between steps, which alone advance scalar state");
        return;
      case NameKind::PerStepValue:
        cannot_assign(s, kind, " in 'update': it was computed in 'per_step'; use a new name");
      case NameKind::Param:
      case NameKind::State:
      case NameKind::Local: return;
    }
  }

  void require_bool(const Expr& e, const Syntax& at, const std::string& what) {
    if (e->type != ValueType::Bool) throw SpecError(at.loc, what + " must be a bool, but this is a number");
  }

  Expr expression(const Syntax& s) {
    switch (s.kind) {
      case Syntax::Kind::Number: return Node::make_const(s.number, s.is_integer ? ValueType::Int : ValueType::Float);
      case Syntax::Kind::Name: return name(s);
      case Syntax::Kind::Unary: {
        Expr a = expression(*s.operands[0]);
        const UnaryOperatorInfo* info = find_unary_operator(s.text);
        if (!info) throw InternalError("lower: unknown operator '" + s.text + "'");
        if (info->op == UnaryOp::Neg) {
          if (a->type == ValueType::Bool) throw SpecError(s.loc, "unary '-' needs a number, but its operand is a bool");
          return Node::make_unary(UnaryOp::Neg, a);
        }
        if (a->type != ValueType::Bool) throw SpecError(s.loc, "'!' needs a bool, but its operand is a number");
        return Node::make_unary(UnaryOp::Not, a);
      }
      case Syntax::Kind::Binary: return binary(s);
      case Syntax::Kind::Ternary: {
        Expr c = expression(*s.operands[0]);
        if (c->type != ValueType::Bool)
          throw SpecError(s.operands[0]->loc, "the condition of '?' must be a bool, but this is a number");
        const Guard outer = guard_;
        guard_ = guard_under(c, true, outer);
        Expr t = expression(*s.operands[1]);
        guard_ = guard_under(c, false, outer);
        Expr f = expression(*s.operands[2]);
        guard_ = outer;
        if ((t->type == ValueType::Bool) != (f->type == ValueType::Bool))
          throw SpecError(s.loc, std::string("the branches of '?' differ in type: ") + type_name(t->type) + " and " +
                                     type_name(f->type));
        return Node::make_select(c, t, f);
      }
      case Syntax::Kind::Call: return call(s);
    }
    throw InternalError("lower: unknown syntax kind");
  }

  Expr binary(const Syntax& s) {
    const BinaryOperatorInfo* info = find_binary_operator(s.text);
    if (!info) throw InternalError("lower: unknown operator '" + s.text + "'");
    const BinaryOp op = info->op;
    if (op == BinaryOp::MatMul)
      throw SpecError(s.loc, "'@' multiplies matrices, and only the statements of a matrix function have matrices",
                      "define the product in `matrix_functions:` and call that function from 'update'");
    Expr a = expression(*s.operands[0]);
    Expr b = expression(*s.operands[1]);
    auto check = [&](const Expr& e, const char* side, bool want_bool) {
      if ((e->type == ValueType::Bool) != want_bool)
        throw SpecError(s.loc, "operator '" + s.text + "' needs " + (want_bool ? "bools" : "numbers") + ", but its " +
                                   side + " operand is " + type_name(e->type));
    };
    if (is_logical(op)) {
      check(a, "left", true);
      check(b, "right", true);
    } else if ((op == BinaryOp::Eq || op == BinaryOp::Ne) && a->type == ValueType::Bool) {
      check(b, "right", true);
    } else {
      check(a, "left", false);
      check(b, "right", false);
    }
    if (op == BinaryOp::Mod)
      for (const auto& [e, side] : {std::pair{a, "left"}, std::pair{b, "right"}})
        if (e->type != ValueType::Int)
          throw SpecError(s.loc,
                          std::string("operator '%' takes ints (the remainder of a whole division, as `step % k`), "
                                      "but its ") +
                              side + " operand is a float",
                          "'%' is for whole numbers: `step`, `numel`, `rows`, `cols`, int hyperparameters and "
                          "integers; compare floats with '<' and '>' instead");
    return Node::make_binary(op, a, b);
  }

  Expr call(const Syntax& s) {
    const int given = static_cast<int>(s.operands.size());
    if (const ReductionInfo* r = find_reduction(s.text, given); r && !env_.count(s.text)) return reduction(s, *r);
    if (const MatrixFunctionSpec* m = spec_.find_matrix_function(s.text); m && !env_.count(s.text))
      return matrix_function(s, *m);
    const BuiltinInfo* fn = find_builtin(s.text);
    if (!fn) {
      if (env_.count(s.text))
        throw SpecError(s.loc, "'" + s.text + "' is a " + describe(env_.at(s.text).kind) + ", not a function",
                        is_reduction_name(s.text) ? "this spec uses '" + s.text + "' as a name, so the reduction " +
                                                        s.text + "() cannot be called here; rename the value to use it"
                                                  : "");
      if (is_reduction_name(s.text))
        throw SpecError(s.loc, "'" + s.text + "' takes 1 argument, given " + std::to_string(given));
      std::vector<std::string> functions = builtin_names();
      for (const auto& r : reductions()) functions.push_back(r.name);
      for (const auto& m : builtin_matrix_functions()) functions.push_back(m.name);
      for (const auto& m : spec_.matrix_functions) functions.push_back(m.name);
      throw SpecError(s.loc, "unknown function '" + s.text + "'" + did_you_mean(s.text, functions));
    }
    const int arity = fn->arity;
    if (static_cast<int>(s.operands.size()) != arity)
      throw SpecError(s.loc, "'" + s.text + "' takes " + std::to_string(arity) + " argument" + (arity == 1 ? "" : "s") +
                                 ", given " + std::to_string(s.operands.size()));
    std::vector<Expr> args;
    for (const auto& operand : s.operands) {
      Expr a = expression(*operand);
      if (a->type == ValueType::Bool)
        throw SpecError(operand->loc, "'" + s.text + "' needs numbers, but this argument is a bool");
      args.push_back(a);
    }
    return Node::make_call(fn->id, std::move(args));
  }

  /// A reduction. Over a tensor or a group, or over each row or column: its operand must be an
  /// element value of 'update'. `sum`, `mean`, `norm` and `max` of a row (column) value reduce over
  /// each matrix's rows (columns).
  Expr reduction(const Syntax& s, const ReductionInfo& r) {
    const std::string called = "'" + s.text + "'";
    const bool factored_scope = r.scope == Domain::Row || r.scope == Domain::Column;
    if (r.over_blocks && !blocks())
      throw SpecError(s.loc, called + " reduces over each block of a tensor, but the spec declares no blocks",
                      "declare their size at the top of the spec, e.g. 'block_elements: 256'");
    if (factored_scope && !r.over_blocks && blocks())
      throw SpecError(s.loc,
                      called + " reduces over each " + (r.scope == Domain::Row ? "row" : "column") +
                          " of a tensor's matrices, but this spec views its tensors as blocks of " +
                          std::to_string(spec_.block_elements) + " elements (block_elements)",
                      "reduce over each block instead (" + reduction_names(Domain::Row, true) + ")");
    if (section_ != Section::Update)
      throw SpecError(s.loc, called + " reduces over the elements of " +
                                 (r.scope == Domain::Tensor      ? "a tensor"
                                  : r.scope == Domain::Group     ? "a param group"
                                  : r.scope == Domain::Optimizer ? "every param group"
                                  : r.over_blocks                ? "a tensor's blocks"
                                                                 : "a factored tensor's rows or columns") +
                                 " and can be used only in 'update'");
    if (factored_scope && guard_ != Guard::Factored)
      throw SpecError(
          s.loc,
          called + " reduces over the " +
              (r.over_blocks            ? "blocks"
               : r.scope == Domain::Row ? "rows"
                                        : "columns") +
              " of a " + factored_tensor() + ", and is used here outside a 'factored' guard",
          "use it inside 'when: factored' or 'factored ? ... : ...', with a fallback for " + other_tensors());
    Expr x = expression(*s.operands[0]);
    if (x->type == ValueType::Bool)
      throw SpecError(s.operands[0]->loc, called + " needs a number, but its argument is a bool",
                      "write 'condition ? 1 : 0' to count elements");
    Domain scope = r.scope;
    const bool over_matrix = r.scope == Domain::Tensor && (x->level == Domain::Row || x->level == Domain::Column);
    if (over_matrix) scope = Domain::Matrix;
    if (has_group_results(r.scope) && (x->level == Domain::Row || x->level == Domain::Column))
      throw SpecError(s.operands[0]->loc,
                      "the argument of " + called + " is " + per_level(x->level) +
                          ", but it reduces the elements of every tensor of " +
                          (r.scope == Domain::Group ? "a param group" : "every param group"),
                      "reduce the element values themselves; sum, mean, norm and max reduce a row or column value "
                      "over each matrix");
    if (x->level != Domain::Element && !over_matrix) {
      std::string tensor_state;  // a state of one value per tensor it reads (before or after its assignment)
      for_each_node(x, [&](const Expr& e) {
        if (e->kind == NodeKind::Var && e->var == VarKind::State && e->level == Domain::Tensor) tensor_state = e->name;
      });
      if (!tensor_state.empty())
        throw SpecError(s.operands[0]->loc,
                        "the argument of " + called + " is " + per_level(x->level) + ": it reads state '" +
                            tensor_state + "', which has one value per tensor",
                        "a reduction runs over the elements of a tensor; reduce the element values the state is "
                        "computed from");
      bool reads_reduction = false;
      for_each_node(x, [&](const Expr& e) { reads_reduction = reads_reduction || e->kind == NodeKind::Reduce; });
      if (reads_reduction)
        throw SpecError(s.operands[0]->loc,
                        "a reduction of a reduction: the argument of " + called + " is " + per_level(x->level) +
                            ", with no elements to reduce over",
                        x->level == Domain::Matrix
                            ? "reduce the element values themselves (a row or column value reduces over its matrix), "
                              "or combine the reductions' results"
                            : "reduce the element values themselves, or combine the reductions' results");
      if (x->level == Domain::Row || x->level == Domain::Column)
        throw SpecError(s.operands[0]->loc,
                        "the argument of " + called + " is " + per_level(x->level) +
                            ", but it reduces the elements of each " + (r.scope == Domain::Row ? "row" : "column"),
                        "sum, mean, norm and max reduce a row or column value over each matrix");
      throw SpecError(s.operands[0]->loc,
                      "the argument of " + called +
                          " is the same for every element: it reads no param, grad or state of one value per element",
                      "a reduction runs over the elements of a tensor; use the value itself");
    }
    if (r.scope == Domain::Optimizer) {
      // Every group's part of it is summed before any group's step reads it: it cannot wait on the
      // total of another (the CPU reference computes the parts in one pass).
      for_each_node(x, [&](const Expr& e) {
        if (e->kind == NodeKind::Reduce && e->scope == Domain::Optimizer)
          throw SpecError(s.operands[0]->loc,
                          "the argument of " + called + " reads another reduction over every param group",
                          "reduce over the group (group_sum, ...) inside, or combine the two results");
      });
    }
    using Form = ReductionInfo::Form;
    auto reduce = std::const_pointer_cast<Node>(
        Node::make_reduce(r.op, scope, r.form == Form::Norm ? Node::make_binary(BinaryOp::Mul, x, x) : x));
    reduce->loc = s.loc;  // for messages about the reduction
    Expr value = reduce;
    if (r.form == Form::Norm) return Node::make_call(Builtin::Sqrt, {value});
    if (r.form == Form::Mean) return Node::make_binary(BinaryOp::Div, value, count(scope, x->level));
    return value;
  }

  /// A matrix function (the spec's `matrix_functions:` or matrices.h's built-ins): its first
  /// argument an element value of 'update', each other a hyperparameter or a number, which the
  /// runtime reads on the host.
  Expr matrix_function(const Syntax& s, const MatrixFunctionSpec& f) {
    const std::string called = "'" + s.text + "'";
    if (section_ != Section::Update)
      throw SpecError(s.loc, called + " transforms whole matrices of element values and can be used only in 'update'");
    const CompiledMatrixProgram program = compile_matrix_function(f);
    std::string signature = s.text + "(";
    for (size_t i = 0; i < f.parameters.size(); ++i) signature += (i ? ", " : "") + f.parameters[i];
    signature += ")";
    if (s.operands.size() != f.parameters.size())
      throw SpecError(s.loc,
                      called + " takes " + std::to_string(f.parameters.size()) + " arguments, given " +
                          std::to_string(s.operands.size()),
                      "call it as " + signature);
    if (blocks())
      throw SpecError(s.loc,
                      called + " transforms the matrices of a tensor, but this spec views its tensors as blocks of " +
                          std::to_string(spec_.block_elements) + " elements (block_elements)",
                      "a spec of blocks has no matrices; remove 'block_elements' to take each tensor's own");
    if (guard_ == Guard::NotFactored)
      throw SpecError(s.loc, called +
                                 " transforms the matrices of a tensor of two or more dimensions, and is used "
                                 "here for tensors of fewer");
    std::vector<Expr> args{expression(*s.operands[0])};
    const Expr& x = args[0];
    if (x->type == ValueType::Bool) throw SpecError(s.operands[0]->loc, called + " needs a number, but x is a bool");
    if (x->level != Domain::Element)
      throw SpecError(s.operands[0]->loc, "the argument of " + called + " is " + per_level(x->level) +
                                              ": it transforms a matrix of element values (of param, grad or a state)");
    for (size_t i = 0; i < program.parameters.size(); ++i) {
      const Syntax& operand = *s.operands[i + 1];
      Expr a = expression(operand);
      // A number may be written as arithmetic of numbers (-4.775): its value.
      bool constant = true;
      for_each_node(a, [&](const Expr& e) { constant = constant && e->kind != NodeKind::Var; });
      if (constant && a->type != ValueType::Bool)
        a = Node::make_const(evaluate(a, [](const Node&) -> double { throw InternalError("no leaf"); }), a->type);
      const std::string& name = program.parameters[i];
      const bool counts = program.counts[i];
      const bool hyperparameter = a->kind == NodeKind::Var && a->var == VarKind::Hyperparameter;
      if (a->type == ValueType::Bool)
        throw SpecError(operand.loc, "argument '" + name + "' of " + called + " is a bool: it must be a number",
                        "a matrix function scales by its arguments; choose between calls with 'when' instead");
      if (!(hyperparameter || a->is_const()))
        throw SpecError(operand.loc,
                        "argument '" + name + "' of " + called + " must be " +
                            (counts ? "an int hyperparameter or an integer" : "a hyperparameter or a number") +
                            ": the runtime hands it to the matrix products on the host",
                        "make it a hyperparameter of the spec");
      if (a->is_const() && !std::isfinite(a->value))  // 5 % 0, 1 / 0
        throw SpecError(operand.loc, "argument '" + name + "' of " + called + " is " +
                                         (std::isnan(a->value) ? "NaN" : "infinite") + ": give a finite number");
      if (counts && (a->type != ValueType::Int || (a->is_const() && !(a->value >= 0 && a->value <= kMaxRepeat))))
        throw SpecError(operand.loc, "argument '" + name + "' of " + called +
                                         " counts iterations: give an int hyperparameter or an integer from 0 to " +
                                         std::to_string(kMaxRepeat));
      if (counts && hyperparameter)
        if (const Hyperparameter* h = spec_.find_hyperparameter(a->name);
            h && !(h->default_value >= 0 && h->default_value <= kMaxRepeat))
          throw SpecError(h->loc,
                          "hyperparameter '" + h->name + "' counts the iterations of " + called + ", but its default " +
                              default_text(h->default_value) + " is not a whole number from 0 to " +
                              std::to_string(kMaxRepeat),
                          "the runtime refuses such a count at the first step");
      args.push_back(a);
    }
    auto node = std::const_pointer_cast<Node>(Node::make_matrix(f.name, std::move(args)));
    node->loc = s.loc;
    return node;
  }

  /// How many values a reduction over `scope` of values at `level` adds up: a mean divides by it.
  Expr count(Domain scope, Domain level) const {
    auto rows = [] { return Node::make_var(VarKind::Rows, "rows", ValueType::Int); };
    auto cols = [] { return Node::make_var(VarKind::Cols, "cols", ValueType::Int); };
    switch (scope) {
      case Domain::Row: return cols();  // a row's elements, one per column
      case Domain::Column: return rows();
      case Domain::Matrix: return level == Domain::Row ? rows() : cols();
      case Domain::Tensor:
      case Domain::Group:
      case Domain::Optimizer:
      case Domain::Element: break;
    }
    return env_.at("numel").value;
  }

  Expr name(const Syntax& s) {
    if (s.text == "true" || s.text == "false") return Node::make_const(s.text == "true", ValueType::Bool);
    if (s.text == "factored") {
      if (section_ == Section::Update || section_ == Section::StateCondition)
        return Node::make_var(VarKind::Factored, "factored", ValueType::Bool);
      if (section_ == Section::Program)
        throw SpecError(s.loc, "'factored' is the step's and cannot be used in program '" + program_ + "'",
                        "a program runs element by element between steps, on the states every tensor has");
      throw SpecError(s.loc, "'factored' is a per-tensor value and can be used only in 'update' and a state's 'when'",
                      blocks() ? "whether a tensor is a whole number of blocks differs between the tensors of a group"
                               : "whether a tensor has two or more dimensions differs between the tensors of a group");
    }
    if (find_builtin(s.text)) throw SpecError(s.loc, "'" + s.text + "' is a function; call it as " + s.text + "(...)");
    if (section_ == Section::Program && (s.text == "rows" || s.text == "cols"))
      throw SpecError(s.loc, "'" + s.text + "' is a tensor's shape and cannot be used in program '" + program_ + "'",
                      "a program runs element by element between steps, on tensors bound with a shape or without; "
                      "use " +
                          s.text + " in 'update'");
    auto it = env_.find(s.text);
    if (it == env_.end()) {
      if (auto out = scoped_out_.find(s.text); out != scoped_out_.end())
        throw SpecError(
            s.loc,
            "'" + s.text + "' is assigned only inside a 'when' block (line " + std::to_string(out->second.line) + ")",
            "assign it before the block too, or use 'condition ? a : b'");
      if (auto later = targets_.find(s.text); later != targets_.end())
        throw SpecError(
            s.loc, "'" + s.text + "' is used before it is assigned (line " + std::to_string(later->second.line) + ")");
      if (section_ == Section::Program && assigns(spec_.per_step, s.text))
        throw SpecError(
            s.loc, "'" + s.text + "' is computed in 'per_step', for a step: program '" + program_ + "' cannot read it",
            "compute it in the program, from the hyperparameters and the scalar state");
      if (section_ == Section::Program && (s.text == "grad" || s.text == "step"))
        throw SpecError(s.loc, "'" + s.text + "' is not defined in program '" + program_ + "'",
                        "a program runs between steps, where there is no gradient and no step being taken; it "
                        "reads hyperparameters, scalar state, param and the states");
      if (section_ == Section::PerStep && (s.text == "numel" || s.text == "rows" || s.text == "cols"))
        throw SpecError(
            s.loc, "'" + s.text + "' is a per-tensor value and cannot be used in 'per_step'",
            "per_step runs once per param group, whose tensors differ in size; use " + s.text + " in 'update'");
      if (section_ == Section::PerStep && element_or_tensor_name(s.text))
        throw SpecError(
            s.loc, "'" + s.text + "' is a per-" + tensor_or_element(s.text) + " value and cannot be used in 'per_step'",
            "per_step sees hyperparameters, step and scalar state");
      std::vector<std::string> candidates;
      for (const auto& [n, b] : env_) candidates.push_back(n);
      throw SpecError(s.loc, "unknown name '" + s.text + "'" + did_you_mean(s.text, candidates));
    }
    const Binding& b = it->second;
    if (b.kind == NameKind::State && (section_ == Section::Update || section_ == Section::Program)) {
      check_guard(spec_.states.at(spec_.state_index(s.text)), s.loc, "read");
      check_program_state(s.text, s.loc, "read");
    }
    if (section_ == Section::Flag || section_ == Section::StateCondition) {
      const Hyperparameter* h = b.kind == NameKind::Hyperparameter ? spec_.find_hyperparameter(s.text) : nullptr;
      if (!h)
        throw SpecError(s.loc, "'" + s.text + "' cannot be used here: this expression may only use hyperparameters");
      if (h->derived && section_ == Section::Flag)
        throw SpecError(s.loc, "'" + s.text + "' is itself derived; derive from plain hyperparameters only");
    }
    return b.value;
  }

  const Spec& spec_;
  Section section_ = Section::Flag;
  std::string program_;  ///< the program being lowered (Section::Program)
  Guard guard_ = Guard::None;
  std::map<std::string, Expr> state_conditions_;  ///< as Program::state_conditions
  std::map<std::string, Binding> env_;
  std::map<std::string, SourceLoc> targets_;     ///< every name assigned in the current section
  std::map<std::string, SourceLoc> scoped_out_;  ///< locals that ended with their 'when' block
  std::set<std::string> assigned_;               ///< param, states and scalar states assigned so far
  std::set<std::string> assigned_in_update_;     ///< the scalar states 'update' assigns
};

}  // namespace

Program lower(const Spec& spec) { return Lowering(spec).run(); }

Program lower(const Spec& spec, const ProgramSpec& program) { return Lowering(spec).run(program); }

}  // namespace optgen
