#pragma once
/// Bottom-up rewriting of expression DAGs. A Mutator rebuilds each node once (memoized, so
/// shared subtrees stay shared) and returns the very same node when nothing below it changed.

#include <unordered_map>

#include "ir.h"

namespace optgen {

class Mutator {
 public:
  virtual ~Mutator() = default;

  Expr operator()(const Expr& e) {
    if (auto it = memo_.find(e.get()); it != memo_.end()) return it->second;
    std::vector<Expr> args;
    bool changed = false;
    for (const auto& a : e->args) {
      args.push_back((*this)(a));
      changed = changed || args.back() != a;
    }
    Expr result = rewrite(changed ? with_args(e, std::move(args)) : e);
    memo_.emplace(e.get(), result);
    keep_.push_back(e);
    return result;
  }

 protected:
  /// Called with each node whose operands have already been rewritten.
  virtual Expr rewrite(const Expr& e) = 0;

 private:
  std::unordered_map<const Node*, Expr> memo_;
  std::vector<Expr> keep_;  ///< keeps memo keys alive, so their addresses are not reused
};

}  // namespace optgen
