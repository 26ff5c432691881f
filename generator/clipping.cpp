#include "clipping.h"

#include "diagnostic.h"
#include "syntax.h"

namespace optgen::clipping {

void add_hyperparameters(Spec& spec) {
  if (!spec.grad_clipping) return;
  for (const char* name : {kMaxNorm, kFlag})
    if (const Hyperparameter* own = spec.find_hyperparameter(name))
      throw SpecError(own->loc,
                      std::string("'") + name + "' is a hyperparameter of the global-norm clipping every spec has",
                      "rename it, or turn the clipping off with 'grad_clipping: false'");
  Hyperparameter max_norm;
  max_norm.name = kMaxNorm;
  max_norm.loc = spec.grad_clipping_loc;
  max_norm.type = ValueType::Float;
  max_norm.default_value = spec.max_grad_norm_default;
  max_norm.doc = "clip each group's gradients to this global norm before the step (0: no clipping)";
  spec.hyperparameters.push_back(max_norm);

  Hyperparameter flag;
  flag.name = kFlag;
  flag.loc = spec.grad_clipping_loc;
  flag.type = ValueType::Bool;
  flag.specialize = true;
  flag.derived_text = std::string(kMaxNorm) + " > 0";
  flag.derived = std::shared_ptr<Syntax>(parse_expression(flag.derived_text, spec.grad_clipping_loc));
  flag.doc = "the gradients are clipped: max_grad_norm > 0";
  spec.hyperparameters.push_back(flag);
}

Expr gradient(const Spec& spec, const Expr& grad, const Expr& max_norm, const Expr& flag) {
  if (!spec.grad_clipping) return grad;
  auto squares = std::const_pointer_cast<Node>(
      Node::make_reduce(ReduceOp::Sum, Domain::Group, Node::make_binary(BinaryOp::Mul, grad, grad)));
  squares->hint = "grad_norm_squared";
  squares->loc = spec.grad_clipping_loc;
  Expr norm = Node::make_call(Builtin::Sqrt, {squares});
  Expr coef = Node::make_binary(BinaryOp::Div, max_norm,
                                Node::make_binary(BinaryOp::Add, norm, Node::make_const(kEps, ValueType::Float)));
  // clamp(coef, max = 1) as torch.clamp does it: a NaN coefficient (a NaN norm) stays NaN.
  Expr one = Node::make_const(1, ValueType::Float);
  std::const_pointer_cast<Node>(coef)->hint = "clip_ratio";
  auto clamped =
      std::const_pointer_cast<Node>(Node::make_select(Node::make_binary(BinaryOp::Gt, coef, one), one, coef));
  clamped->hint = "clip_coef";
  auto clipped = std::const_pointer_cast<Node>(Node::make_binary(BinaryOp::Mul, grad, clamped));
  clipped->hint = "clipped_grad";
  return Node::make_select(flag, clipped, grad);
}

bool is_grad_norm(const ReductionValue& r) {
  const Expr& x = r.operand;
  return r.op == ReduceOp::Sum && r.scope == Domain::Group && x->kind == NodeKind::Binary &&
         x->binary_op() == BinaryOp::Mul && x->args[0]->kind == NodeKind::Var && x->args[0]->var == VarKind::Grad &&
         x->args[1]->kind == NodeKind::Var && x->args[1]->var == VarKind::Grad;
}

int grad_norm_slot(const Program& program) {
  if (!program.spec || !program.spec->grad_clipping || !program.is_step()) return -1;  // a program reads no grad
  auto flag = program.flags.find(kFlag);
  if (flag == program.flags.end() || !flag->second) return -1;
  for (std::size_t r = 0; r < program.reductions.size(); ++r)
    if (is_grad_norm(program.reductions[r])) return static_cast<int>(r);
  throw InternalError("clipping: variant '" + program.variant + "' clips but has no gradient norm");
}

}  // namespace optgen::clipping
