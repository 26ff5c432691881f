#include <cmath>

#include "../evaluate.h"
#include "../ir_mutator.h"
#include "passes.h"

namespace optgen {
namespace {

class Folder : public Mutator {
 protected:
  Expr rewrite(const Expr& e) override {
    // A reduction of a constant depends on the tensor's or the group's size: the kernels compute it;
    // a matrix function, on the matrix's shape.
    if (e->args.empty() || e->kind == NodeKind::Reduce || e->kind == NodeKind::Matrix) return e;
    bool all_constant = true;
    std::vector<double> values;
    for (const auto& a : e->args) {
      all_constant = all_constant && a->is_const();
      values.push_back(a->value);
    }
    if (all_constant) {
      double v = apply(*e, values.data());
      if (std::isfinite(v) || e->type == ValueType::Bool) return Node::make_const(v, e->type);
      return e;  // keep 1/0 and friends visible rather than folding to inf
    }
    return simplify(e);
  }

 private:
  /// `x` standing in for `e`: keeps e's name when x has none.
  static Expr keep(const Expr& e, const Expr& x) { return with_provenance(x, e->hint, e->loc); }

  static Expr simplify(const Expr& e) {
    const auto& a = e->args;
    switch (e->kind) {
      case NodeKind::Unary:
        if (a[0]->kind == NodeKind::Unary && a[0]->op == e->op) return keep(e, a[0]->args[0]);  // --x, !!x
        return e;
      case NodeKind::Select:
        if (a[0]->is_const()) return keep(e, a[0]->value != 0 ? a[1] : a[2]);
        if (a[1] == a[2]) return keep(e, a[1]);
        return e;
      case NodeKind::Binary:
        switch (e->binary_op()) {
          case BinaryOp::Add:
            if (a[1]->is_const(0)) return keep(e, a[0]);
            if (a[0]->is_const(0)) return keep(e, a[1]);
            return e;
          case BinaryOp::Sub:
            if (a[1]->is_const(0)) return keep(e, a[0]);
            if (a[0]->is_const(0)) return keep(e, Node::make_unary(UnaryOp::Neg, a[1]));
            return e;
          case BinaryOp::Mul:
            if (a[1]->is_const(1) && e->type == a[0]->type) return keep(e, a[0]);
            if (a[0]->is_const(1) && e->type == a[1]->type) return keep(e, a[1]);
            return e;
          case BinaryOp::Div:
          case BinaryOp::Pow:
            if (a[1]->is_const(1) && a[0]->type == ValueType::Float) return keep(e, a[0]);
            return e;
          case BinaryOp::And:
            if (a[0]->is_const()) return a[0]->value != 0 ? keep(e, a[1]) : a[0];
            if (a[1]->is_const()) return a[1]->value != 0 ? keep(e, a[0]) : a[1];
            return e;
          case BinaryOp::Or:
            if (a[0]->is_const()) return a[0]->value != 0 ? a[0] : keep(e, a[1]);
            if (a[1]->is_const()) return a[1]->value != 0 ? a[1] : keep(e, a[0]);
            return e;
          default: return e;
        }
      default: return e;
    }
  }
};

}  // namespace

Program constant_fold(const Program& program) {
  Folder folder;
  return map_roots(program, [&](const Expr& e) { return folder(e); });
}

}  // namespace optgen
