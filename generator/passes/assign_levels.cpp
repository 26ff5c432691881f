#include <set>
#include <unordered_map>

#include "passes.h"

namespace optgen {
namespace {

/// Walks element expressions top-down: the first node on each path that does not depend on the
/// element becomes a step scalar (constants stay where they are).
class Hoister {
 public:
  explicit Hoister(Program& program) : program_(program) {
    taken_ = {"param", "grad", "step"};
    for (const auto& s : program.spec->states) taken_.insert(s.name);
  }

  Expr operator()(const Expr& e) {
    if (auto it = memo_.find(e.get()); it != memo_.end()) return it->second;
    Expr result;
    if (e->is_const()) {
      result = e;
    } else if (!e->per_element) {
      result = scalar(e);
    } else {
      std::vector<Expr> args;
      bool changed = false;
      for (const auto& a : e->args) {
        args.push_back((*this)(a));
        changed = changed || args.back() != a;
      }
      result = changed ? with_args(e, std::move(args)) : e;
    }
    memo_.emplace(e.get(), result);
    keep_.push_back(e);
    return result;
  }

 private:
  Expr scalar(const Expr& e) {
    std::string base = e->kind == NodeKind::Var ? e->name : e->hint;
    std::string name = base;
    while (name.empty() || taken_.count(name))
      name = base.empty() ? "s" + std::to_string(counter_++) : base + "_" + std::to_string(++counter_);
    taken_.insert(name);
    program_.step_scalars.push_back({name, e});
    return Node::make_var(VarKind::StepScalar, name, e->type);
  }

  Program& program_;
  std::set<std::string> taken_;
  int counter_ = 0;
  std::unordered_map<const Node*, Expr> memo_;
  std::vector<Expr> keep_;
};

}  // namespace

Program hoist(const Program& program) {
  Program result = program;
  result.step_scalars.clear();
  Hoister hoister(result);
  for (auto& o : result.element_outputs) o.value = hoister(o.value);
  return result;
}

}  // namespace optgen
