#include <set>
#include <unordered_map>

#include "../expr_printer.h"
#include "passes.h"

namespace optgen {
namespace {

/// Splits the outputs by level (an output is code of its own level: element, or a row or column
/// state's row or column). Walking each expression from the top, the first node on every path
/// whose level is below the code being written becomes a HoistedValue of its own level, computed
/// there once and read by name; its own lower-level parts are hoisted in turn. A reduction becomes
/// a ReductionValue whose operand is split the same way as element code (row or column code, for
/// a reduction over each matrix).
class LevelSplitter {
 public:
  explicit LevelSplitter(Program& program) : program_(program) {
    taken_ = {"param", "grad", "step", "numel"};
    for (const auto& h : program.spec->hyperparameters) taken_.insert(h.name);
    for (const auto& s : program.spec->states) taken_.insert(s.name);
    for (const auto& s : program.spec->scalar_states) taken_.insert(s.name);
  }

  /// `e` as code of level `at` writes it.
  Expr at_level(const Expr& e, Domain at) {
    if (e->is_const()) return e;
    if (e->level != at && at_or_below(e->level, at)) return hoist(e);
    if (!at_or_below(e->level, at))
      throw InternalError(std::string("assign_levels: a ") + to_string(e->level) + " value in " + to_string(at) +
                          " code");
    if (e->kind == NodeKind::Reduce) return reduced(e);
    if (e->kind == NodeKind::Matrix) return matrix_value(e);
    if (e->args.empty()) return e;
    auto key = std::make_pair(e.get(), at);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    std::vector<Expr> args;
    bool changed = false;
    for (const auto& a : e->args) {
      args.push_back(at_level(a, at));
      changed = changed || args.back() != a;
    }
    Expr result = changed ? with_args(e, std::move(args)) : e;
    memo_.emplace(key, result);
    keep_.push_back(e);
    return result;
  }

  /// A scalar state's commit, group code as `per_step`'s is (nothing hoisted), in which every
  /// reduction becomes one of the program's reductions, read through a Reduced leaf.
  Expr commit_code(const Expr& e) {
    if (e->kind == NodeKind::Reduce) return reduced(e);
    if (e->args.empty()) return e;
    if (auto it = commit_memo_.find(e.get()); it != commit_memo_.end()) return it->second;
    std::vector<Expr> args;
    bool changed = false;
    for (const auto& a : e->args) {
      args.push_back(commit_code(a));
      changed = changed || args.back() != a;
    }
    Expr result = changed ? with_args(e, std::move(args)) : e;
    commit_memo_.emplace(e.get(), result);
    keep_.push_back(e);
    return result;
  }

 private:
  /// A reduction becomes one of the program's reductions, its operand element code of its own,
  /// and is read through a Reduced leaf by the tensor code.
  Expr reduced(const Expr& e) {
    if (auto it = reduced_.find(e.get()); it != reduced_.end()) return it->second;
    const Expr& argument = e->args[0];
    Expr operand = at_level(argument, e->scope == Domain::Matrix ? argument->level : Domain::Element);
    std::string name = name_for(e);
    program_.reductions.push_back({name, e->reduce_op(), e->scope, operand, e->loc});
    Expr leaf = Node::make_reduced(name, result_level(e->scope));
    reduced_.emplace(e.get(), leaf);
    keep_.push_back(e);
    return leaf;
  }

  /// A matrix function becomes one of the program's matrix values, its operand element code of its
  /// own, and is read through a MatrixValue leaf by the element code. Its other arguments are
  /// hyperparameters and numbers, which the runtime reads as they are.
  Expr matrix_value(const Expr& e) {
    if (auto it = reduced_.find(e.get()); it != reduced_.end()) return it->second;
    Expr operand = at_level(e->args[0], Domain::Element);
    std::string name = name_for(e);
    program_.matrix_values.push_back(
        {name, e->name, operand, std::vector<Expr>(e->args.begin() + 1, e->args.end()), e->loc});
    Expr leaf = Node::make_matrix_value(name);
    reduced_.emplace(e.get(), leaf);
    keep_.push_back(e);
    return leaf;
  }

  Expr hoist(const Expr& e) {
    if (e->kind == NodeKind::Var && e->var == VarKind::Hoisted) return e;
    if (auto it = hoisted_.find(e.get()); it != hoisted_.end()) return it->second;
    Expr value = at_level(e, e->level);
    std::string name = name_for(e);
    program_.values[e->level].push_back({name, value});
    Expr leaf = Node::make_hoisted(name, e->type, e->level);
    hoisted_.emplace(e.get(), leaf);
    keep_.push_back(e);
    return leaf;
  }

  /// An input hoisted as it is keeps its own name (each is hoisted once); anything else is named
  /// after what it computes, made unique.
  std::string name_for(const Expr& e) {
    if (e->kind == NodeKind::Var) return e->name;
    const std::string base = descriptive_name(e);
    std::string name = base;
    if (name.empty() || taken_.count(name)) {
      const std::string prefix = base.empty() ? std::string(to_string(e->level)) + "_value" : base;
      int n = 1;
      do name = prefix + "_" + std::to_string(n++);
      while (taken_.count(name));
    }
    taken_.insert(name);
    return name;
  }

  Program& program_;
  std::set<std::string> taken_;
  std::map<std::pair<const Node*, Domain>, Expr> memo_;
  std::unordered_map<const Node*, Expr> hoisted_;
  std::unordered_map<const Node*, Expr> reduced_;
  std::unordered_map<const Node*, Expr> commit_memo_;
  std::vector<Expr> keep_;  ///< keeps memo keys alive, so their addresses are not reused
};

}  // namespace

Program assign_levels(const Program& program) {
  Program result = program;
  result.values = {};
  result.reductions.clear();
  result.matrix_values.clear();
  LevelSplitter splitter(result);
  for (auto& o : result.element_outputs) o.value = splitter.at_level(o.value, o.level);
  for (auto& o : result.scalar_state_commits) o.value = splitter.commit_code(o.value);
  return result;
}

}  // namespace optgen
