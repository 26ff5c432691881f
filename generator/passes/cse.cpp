#include <unordered_map>

#include "../ir_mutator.h"
#include "passes.h"

namespace optgen {
namespace {

/// Hash-consing: operands are canonical by the time a node is seen, so comparing a node's
/// operands by address decides structural equality.
class Canonicalizer : public Mutator {
 protected:
  Expr rewrite(const Expr& e) override {
    auto& bucket = table_[shallow_hash(*e)];
    for (const auto& candidate : bucket)
      if (same_node(*candidate, *e)) return candidate;
    bucket.push_back(e);
    return e;
  }

 private:
  std::unordered_map<size_t, std::vector<Expr>> table_;
};

}  // namespace

Program common_subexpression_elimination(const Program& program) {
  Canonicalizer canonicalizer;
  return map_roots(program, [&](const Expr& e) { return canonicalizer(e); });
}

}  // namespace optgen
