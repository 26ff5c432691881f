#include "ir.h"

#include <algorithm>
#include <functional>
#include <set>
#include <unordered_set>

namespace optgen {

const char* spelling(UnaryOp op) { return operator_info(op).token; }
const char* spelling(BinaryOp op) { return operator_info(op).token; }
const char* spelling(Builtin fn) { return builtin_info(fn).name; }

bool at_or_below(Domain a, Domain b) {
  if (a == b || b == Domain::Element) return true;
  if (a == Domain::Row || a == Domain::Column || a == Domain::Element) return false;
  return a < b;  // Group < Tensor < Matrix < Row, Column
}

Domain join(Domain a, Domain b) {
  if (at_or_below(a, b)) return b;
  if (at_or_below(b, a)) return a;
  return Domain::Element;  // a row value and a column value
}

Domain level_of(StateShape shape) {
  switch (shape) {
    case StateShape::Rows: return Domain::Row;
    case StateShape::Cols: return Domain::Column;
    case StateShape::Tensor: return Domain::Tensor;
    case StateShape::Elements: return Domain::Element;
  }
  return Domain::Element;
}

size_t DomainValues::index(Domain domain) {
  if (domain == Domain::Element) throw InternalError("DomainValues: element code is no list of hoisted values");
  return static_cast<size_t>(domain);
}

Domain result_level(Domain scope) {
  switch (scope) {
    case Domain::Tensor:
    case Domain::Group:
    case Domain::Optimizer: return Domain::Tensor;
    case Domain::Row: return Domain::Row;
    case Domain::Column: return Domain::Column;
    case Domain::Matrix: return Domain::Matrix;
    case Domain::Element: break;
  }
  throw InternalError("result_level: a reduction into the element domain");
}

bool is_comparison(BinaryOp op) { return op >= BinaryOp::Lt && op <= BinaryOp::Ne; }
bool is_logical(BinaryOp op) { return op == BinaryOp::And || op == BinaryOp::Or; }

namespace {
bool is_number(ValueType t) { return t != ValueType::Bool; }

std::shared_ptr<Node> blank(NodeKind kind, ValueType type, const std::vector<Expr>& args) {
  auto n = std::make_shared<Node>();
  n->kind = kind;
  n->type = type;
  n->level = Domain::Group;
  for (const auto& a : args) {
    if (!a) throw InternalError("null operand");
    n->level = join(n->level, a->level);
    n->height = std::max(n->height, a->height + 1);
  }
  n->args = args;
  return n;
}

ValueType arithmetic_type(ValueType a, ValueType b) {
  return a == ValueType::Int && b == ValueType::Int ? ValueType::Int : ValueType::Float;
}
}  // namespace

Expr Node::make_const(double value, ValueType type) {
  auto n = blank(NodeKind::Const, type, {});
  if (type == ValueType::Bool && value != 0 && value != 1) throw InternalError("bool constant not 0 or 1");
  n->value = value;
  return n;
}

Expr Node::make_var(VarKind var, const std::string& name, ValueType type) {
  auto n = blank(NodeKind::Var, type, {});
  n->var = var;
  n->name = name;
  switch (var) {
    case VarKind::Hyperparameter:
    case VarKind::Step:
    case VarKind::ScalarState: n->level = Domain::Group; break;
    case VarKind::Numel:
    case VarKind::Factored:
    case VarKind::Rows:
    case VarKind::Cols: n->level = Domain::Tensor; break;
    case VarKind::Param:
    case VarKind::Grad:
    case VarKind::State: n->level = Domain::Element; break;
    case VarKind::Hoisted: throw InternalError("hoisted value '" + name + "' made without its level");
    case VarKind::Reduced: throw InternalError("reduction result '" + name + "' made as an input");
    case VarKind::MatrixValue: throw InternalError("matrix value '" + name + "' made as an input");
  }
  if (n->level == Domain::Element && type != ValueType::Float)
    throw InternalError("element input '" + name + "' must be float");
  if ((var == VarKind::Factored && type != ValueType::Bool) ||
      ((var == VarKind::Rows || var == VarKind::Cols) && type != ValueType::Int))
    throw InternalError("input '" + name + "' has the wrong type");
  return n;
}

Expr Node::make_state(const std::string& name, Domain level) {
  if (level != Domain::Tensor && level != Domain::Row && level != Domain::Column && level != Domain::Element)
    throw InternalError("state '" + name + "' read at the " + std::string(to_string(level)) + " level");
  auto n = std::const_pointer_cast<Node>(make_var(VarKind::State, name, ValueType::Float));
  n->level = level;
  return n;
}

Expr Node::make_hoisted(const std::string& name, ValueType type, Domain level) {
  if (level == Domain::Element) throw InternalError("hoisted value '" + name + "' at the element level");
  auto n = blank(NodeKind::Var, type, {});
  n->var = VarKind::Hoisted;
  n->name = name;
  n->level = level;
  return n;
}

Expr Node::make_unary(UnaryOp op, Expr a) {
  if ((op == UnaryOp::Neg) != is_number(a->type)) throw InternalError(std::string("operand type of ") + spelling(op));
  auto n = blank(NodeKind::Unary, a->type, {a});
  n->op = static_cast<int>(op);
  return n;
}

Expr Node::make_binary(BinaryOp op, Expr a, Expr b) {
  ValueType type;
  if (is_logical(op)) {
    if (a->type != ValueType::Bool || b->type != ValueType::Bool) throw InternalError("logical operands must be bool");
    type = ValueType::Bool;
  } else if (is_comparison(op)) {
    bool both_numbers = is_number(a->type) && is_number(b->type);
    bool both_bools = a->type == ValueType::Bool && b->type == ValueType::Bool;
    if (!both_numbers && !(both_bools && (op == BinaryOp::Eq || op == BinaryOp::Ne)))
      throw InternalError(std::string("operand types of ") + spelling(op));
    type = ValueType::Bool;
  } else {
    if (!is_number(a->type) || !is_number(b->type))
      throw InternalError(std::string("operand types of ") + spelling(op));
    if (op == BinaryOp::Mod && (a->type != ValueType::Int || b->type != ValueType::Int))
      throw InternalError("operands of % must be ints");
    type = (op == BinaryOp::Div || op == BinaryOp::Pow) ? ValueType::Float : arithmetic_type(a->type, b->type);
  }
  auto n = blank(NodeKind::Binary, type, {a, b});
  n->op = static_cast<int>(op);
  return n;
}

Expr Node::make_select(Expr condition, Expr if_true, Expr if_false) {
  if (condition->type != ValueType::Bool) throw InternalError("select condition must be bool");
  ValueType type;
  if (if_true->type == ValueType::Bool && if_false->type == ValueType::Bool)
    type = ValueType::Bool;
  else if (is_number(if_true->type) && is_number(if_false->type))
    type = arithmetic_type(if_true->type, if_false->type);
  else
    throw InternalError("select branches of different types");
  return blank(NodeKind::Select, type, {condition, if_true, if_false});
}

Expr Node::make_call(Builtin fn, std::vector<Expr> args) {
  const BuiltinInfo& info = builtin_info(fn);
  if (static_cast<int>(args.size()) != info.arity) throw InternalError(std::string("arity of ") + info.name);
  ValueType type = ValueType::Float;
  for (const auto& a : args)
    if (!is_number(a->type)) throw InternalError(std::string("operand type of ") + info.name);
  if (info.keeps_int) {
    type = ValueType::Int;
    for (const auto& a : args) type = arithmetic_type(type, a->type);
  }
  auto n = blank(NodeKind::Call, type, args);
  n->op = static_cast<int>(fn);
  return n;
}

Expr Node::make_reduce(ReduceOp op, Domain scope, Expr operand) {
  if (!is_number(operand->type)) throw InternalError("a reduction's operand must be a number");
  auto n = blank(NodeKind::Reduce, ValueType::Float, {operand});
  n->op = static_cast<int>(op);
  n->scope = scope;
  n->level = result_level(scope);
  return n;
}

Expr Node::make_matrix(const std::string& function, std::vector<Expr> args) {
  for (const auto& a : args)
    if (!is_number(a->type)) throw InternalError("operand type of " + function);
  auto n = blank(NodeKind::Matrix, ValueType::Float, args);
  n->name = function;
  n->level = Domain::Element;
  return n;
}

Expr Node::make_matrix_value(const std::string& name) {
  auto n = blank(NodeKind::Var, ValueType::Float, {});
  n->var = VarKind::MatrixValue;
  n->name = name;
  n->level = Domain::Element;
  return n;
}

Expr Node::make_reduced(const std::string& name, Domain level) {
  if (level == Domain::Group || level == Domain::Element)
    throw InternalError("reduction result '" + name + "' at the " + std::string(to_string(level)) + " level");
  auto n = blank(NodeKind::Var, ValueType::Float, {});
  n->var = VarKind::Reduced;
  n->name = name;
  n->level = level;
  return n;
}

Expr with_args(const Expr& e, std::vector<Expr> args) {
  Expr fresh;
  switch (e->kind) {
    case NodeKind::Const:
    case NodeKind::Var: return e;
    case NodeKind::Unary: fresh = Node::make_unary(e->unary_op(), args.at(0)); break;
    case NodeKind::Binary: fresh = Node::make_binary(e->binary_op(), args.at(0), args.at(1)); break;
    case NodeKind::Select: fresh = Node::make_select(args.at(0), args.at(1), args.at(2)); break;
    case NodeKind::Call: fresh = Node::make_call(e->builtin(), std::move(args)); break;
    case NodeKind::Reduce: fresh = Node::make_reduce(e->reduce_op(), e->scope, args.at(0)); break;
    case NodeKind::Matrix: fresh = Node::make_matrix(e->name, std::move(args)); break;
  }
  auto copy = std::const_pointer_cast<Node>(fresh);
  copy->hint = e->hint;
  copy->loc = e->loc;
  return copy;
}

Expr with_provenance(const Expr& e, const std::string& hint, const SourceLoc& loc) {
  if (!e->hint.empty() || e->kind == NodeKind::Var || e->kind == NodeKind::Const) return e;
  auto copy = std::make_shared<Node>(*e);
  copy->hint = hint;
  copy->loc = loc;
  return copy;
}

bool same_node(const Node& a, const Node& b) {
  if (a.kind != b.kind || a.type != b.type || a.op != b.op || a.args != b.args) return false;
  if (a.kind == NodeKind::Const) return a.value == b.value;
  if (a.kind == NodeKind::Var) return a.var == b.var && a.name == b.name && a.level == b.level;
  if (a.kind == NodeKind::Reduce) return a.scope == b.scope;
  if (a.kind == NodeKind::Matrix) return a.name == b.name;
  return true;
}

size_t shallow_hash(const Node& n) {
  size_t h = std::hash<int>()(static_cast<int>(n.kind)) * 31 + static_cast<size_t>(n.op);
  h = h * 31 + static_cast<size_t>(n.type);
  if (n.kind == NodeKind::Const) h = h * 31 + std::hash<double>()(n.value);
  if (n.kind == NodeKind::Var || n.kind == NodeKind::Matrix)
    h = h * 31 + std::hash<std::string>()(n.name) + static_cast<size_t>(n.var);
  if (n.kind == NodeKind::Reduce) h = h * 31 + static_cast<size_t>(n.scope);
  for (const auto& a : n.args) h = h * 31 + std::hash<const void*>()(a.get());
  return h;
}

namespace {
/// Post-order walk over a DAG, each node once however many roots share it.
class Walk {
 public:
  explicit Walk(const std::function<void(const Expr&)>& f) : f_(f) {}
  void operator()(const Expr& e) {
    if (!seen_.insert(e.get()).second) return;
    for (const auto& a : e->args) (*this)(a);
    f_(e);
  }

 private:
  const std::function<void(const Expr&)>& f_;
  std::unordered_set<const Node*> seen_;
};
}  // namespace

void for_each_node(const Expr& root, const std::function<void(const Expr&)>& f) {
  Walk walk(f);
  walk(root);
}

void for_each_node(const Program& program, const std::function<void(const Expr&)>& f) {
  Walk walk(f);
  for (const auto& s : program.scalar_state_updates) walk(s.value);
  for (const auto& s : program.scalar_state_commits) walk(s.value);
  for (const auto& list : program.values)
    for (const auto& v : list) walk(v.value);
  for (const auto& r : program.reductions) walk(r.operand);
  for (const auto& m : program.matrix_values) {
    walk(m.operand);
    for (const auto& a : m.args) walk(a);
  }
  for (const auto& o : program.element_outputs) walk(o.value);
}

Program map_roots(const Program& program, const std::function<Expr(const Expr&)>& f) {
  Program result = program;
  for (auto& [name, value] : result.derived_flags) value = f(value);
  for (auto& o : result.scalar_state_updates) o.value = f(o.value);
  for (auto& o : result.scalar_state_commits) o.value = f(o.value);
  for (auto& list : result.values)
    for (auto& v : list) v.value = f(v.value);
  for (auto& r : result.reductions) r.operand = f(r.operand);
  for (auto& m : result.matrix_values) {
    m.operand = f(m.operand);
    for (auto& a : m.args) a = f(a);
  }
  for (auto& o : result.element_outputs) o.value = f(o.value);
  return result;
}

bool reduces_over_optimizer(const Program& program) {
  for (const auto& r : program.reductions)
    if (r.scope == Domain::Optimizer) return true;
  return false;
}

std::vector<const Program*> kernel_programs(const Program& step) {
  std::vector<const Program*> programs = {&step};
  if (step.shard_step) programs.push_back(step.shard_step.get());
  for (const Program& program : step.programs) programs.push_back(&program);
  return programs;
}

bool uses_shapes(const Program& program) {
  bool uses = false;
  for (Domain d : {Domain::Matrix, Domain::Row, Domain::Column}) uses = uses || !program.values[d].empty();
  for (const auto& o : program.element_outputs) uses = uses || o.level == Domain::Row || o.level == Domain::Column;
  for (const auto& r : program.reductions) uses = uses || result_level(r.scope) != Domain::Tensor;
  for_each_node(program, [&](const Expr& e) {
    uses = uses || (e->kind == NodeKind::Var &&
                    (e->var == VarKind::Factored || e->var == VarKind::Rows || e->var == VarKind::Cols));
  });
  return uses;
}

}  // namespace optgen
