#include "evaluate.h"

#include <cmath>
#include <unordered_map>
#include <vector>

#include "optgen/reference.h"

namespace optgen {

double apply(const Node& n, const double* v) {
  switch (n.kind) {
    case NodeKind::Unary: return n.unary_op() == UnaryOp::Neg ? -v[0] : (v[0] == 0);
    case NodeKind::Select: return v[0] != 0 ? v[1] : v[2];
    case NodeKind::Binary:
      switch (n.binary_op()) {
        case BinaryOp::Add: return v[0] + v[1];
        case BinaryOp::Sub: return v[0] - v[1];
        case BinaryOp::Mul: return v[0] * v[1];
        case BinaryOp::Div: return v[0] / v[1];
        case BinaryOp::Pow: return std::pow(v[0], v[1]);
        case BinaryOp::Lt: return v[0] < v[1];
        case BinaryOp::Le: return v[0] <= v[1];
        case BinaryOp::Gt: return v[0] > v[1];
        case BinaryOp::Ge: return v[0] >= v[1];
        case BinaryOp::Eq: return v[0] == v[1];
        case BinaryOp::Ne: return v[0] != v[1];
        case BinaryOp::And: return (v[0] != 0) && (v[1] != 0);
        case BinaryOp::Or: return (v[0] != 0) || (v[1] != 0);
        case BinaryOp::MatMul: break;                           // matrix code only: never an element value
        case BinaryOp::Mod: return reference::mod(v[0], v[1]);  // the CPU reference's own
      }
      break;
    case NodeKind::Call: return builtin_info(n.builtin()).fold(v);
    default: break;
  }
  throw InternalError("apply: a " + std::string(n.args.empty() ? "leaf" : "node") + " is not an operation");
}

double evaluate(const Expr& root, const std::function<double(const Node& var)>& leaf) {
  std::unordered_map<const Node*, double> values;  // operands are visited before their users
  for_each_node(root, [&](const Expr& e) {
    double value = 0;
    if (e->kind == NodeKind::Const) {
      value = e->value;
    } else if (e->kind == NodeKind::Var) {
      value = leaf(*e);
    } else {
      std::vector<double> operands;
      for (const auto& a : e->args) operands.push_back(values.at(a.get()));
      value = apply(*e, operands.data());
    }
    values[e.get()] = value;
  });
  return values.at(root.get());
}

}  // namespace optgen
