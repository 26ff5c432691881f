#include "expr_printer.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "names.h"

namespace optgen {

std::string format_number(double value) {
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[40];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buffer, sizeof buffer, "%.*g", digits, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  std::string s = buffer;
  return s;
}

std::string ExprPrinter::constant(const Node& c) const {
  if (c.type == ValueType::Bool) return c.value != 0 ? "true" : "false";
  std::string s = format_number(c.value);
  if (c.type == ValueType::Float && s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string ExprPrinter::call(Builtin fn, const std::vector<std::string>& args) const {
  std::string out = std::string(spelling(fn)) + "(";
  for (size_t i = 0; i < args.size(); ++i) out += (i ? ", " : "") + args[i];
  return out + ")";
}

std::string reduction_name(const Node& reduce) {
  const char* prefix = reduce.scope == Domain::Group ? "group_" : reduce.scope == Domain::Optimizer ? "optimizer_" : "";
  return prefix + std::string(to_string(reduce.reduce_op()));
}

std::string ExprPrinter::print(const Expr& e) const { return print(e, 0, false); }

std::string ExprPrinter::print_body(const Expr& e) const {
  int precedence;
  return expand(*e, &precedence);
}

std::string ExprPrinter::print(const Expr& e, int context, bool right_side) const {
  int precedence;
  std::string text = operand(e, &precedence);
  return needs_parentheses(precedence, context, right_side) ? "(" + text + ")" : text;
}

std::string ExprPrinter::operand(const Expr& e, int* precedence) const {
  if (auto it = names.find(e.get()); it != names.end()) {
    *precedence = kAtomPrecedence;
    return it->second;
  }
  return expand(*e, precedence);
}

std::string ExprPrinter::expand(const Node& n, int* precedence) const {
  *precedence = kAtomPrecedence;
  switch (n.kind) {
    case NodeKind::Const: {
      std::string s = constant(n);
      if (!s.empty() && s[0] == '-') *precedence = kUnaryPrecedence;
      return s;
    }
    case NodeKind::Var: return leaf(n);
    case NodeKind::Unary:
      *precedence = kUnaryPrecedence;
      return std::string(spelling(n.unary_op())) + print(n.args[0], kUnaryPrecedence, true);
    case NodeKind::Binary: {
      // Each operand is printed once: printing it again for the infix form doubled the time per
      // level of a chain (a sum of 24 terms took minutes).
      BinaryOp op = n.binary_op();
      int p = operator_info(op).precedence;
      int pa, pb;
      std::string a = operand(n.args[0], &pa), b = operand(n.args[1], &pb);
      if (auto as_call = binary_as_call(op, a, b)) return *as_call;
      *precedence = p;
      if (needs_parentheses(pa, p, false)) a = "(" + a + ")";
      if (needs_parentheses(pb, p, true)) b = "(" + b + ")";
      return a + " " + spelling(op) + " " + b;
    }
    case NodeKind::Select:
      // A conditional in either branch is parenthesized too, though ?: groups to the right: it
      // reads better.
      *precedence = kTernaryPrecedence;
      return print(n.args[0], kTernaryPrecedence, false) + " ? " + print(n.args[1], kTernaryPrecedence + 1, false) +
             " : " + print(n.args[2], kTernaryPrecedence + 1, false);
    case NodeKind::Call: {
      std::vector<std::string> args;
      for (const auto& a : n.args) args.push_back(print(a));
      return call(n.builtin(), args);
    }
    case NodeKind::Reduce: return reduction_name(n) + "(" + print(n.args[0]) + ")";
    case NodeKind::Matrix: {
      std::string text = n.name + "(";
      for (size_t i = 0; i < n.args.size(); ++i) text += (i ? ", " : "") + print(n.args[i]);
      return text + ")";
    }
  }
  throw InternalError("ExprPrinter: unknown node kind");
}

std::vector<Expr> schedule_temporaries(const std::vector<Expr>& roots, bool keep_named,
                                       const std::function<bool(const Expr&)>& eligible) {
  std::unordered_map<const Node*, int> uses;
  std::unordered_set<const Node*> seen;
  std::function<void(const Expr&)> count = [&](const Expr& e) {
    for (const auto& a : e->args) {
      ++uses[a.get()];
      if (seen.insert(a.get()).second) count(a);
    }
  };
  for (const auto& r : roots) {
    ++uses[r.get()];
    if (seen.insert(r.get()).second) count(r);
  }
  std::vector<Expr> order;
  std::unordered_set<const Node*> placed;
  std::function<void(const Expr&)> visit = [&](const Expr& e) {
    if (e->kind == NodeKind::Const || e->kind == NodeKind::Var || !placed.insert(e.get()).second) return;
    for (const auto& a : e->args) visit(a);
    bool wanted = uses[e.get()] > 1 || (keep_named && !e->hint.empty());
    if (wanted && eligible(e)) order.push_back(e);
  };
  for (const auto& r : roots) visit(r);
  return order;
}

namespace {
/// Another constant as a name can hold it: 0.5 as c0p5, 1e-08 as c1em08; "" when it is long.
std::string constant_word(double value) {
  if (!std::isfinite(value)) return "";
  std::ostringstream text;
  text << value;
  std::string word = "c";
  for (char c : text.str()) {
    if (c == '.')
      word += 'p';
    else if (c == '-')
      word += 'm';
    else if (c == '+')
      continue;
    else
      word += c;
  }
  return word.size() <= 8 ? word : "";
}

std::string composed_name(const Expr& e) {
  if (!e->hint.empty() || e->kind == NodeKind::Var) return e->kind == NodeKind::Var ? e->name : e->hint;
  std::string name;
  switch (e->kind) {
    case NodeKind::Const:
      if (e->value == 0) return "zero";
      if (e->value == 1) return "one";
      if (e->value == 2) return "two";
      return constant_word(e->value);
    case NodeKind::Var: break;
    case NodeKind::Unary: {
      std::string a = composed_name(e->args[0]);
      if (!a.empty()) name = std::string(operator_info(e->unary_op()).word) + "_" + a;
      break;
    }
    case NodeKind::Binary: {
      // The right operand is named only if the left one was: on a DAG of shared operands, naming
      // both every time took time exponential in its depth.
      std::string a = composed_name(e->args[0]);
      std::string b = a.empty() ? "" : composed_name(e->args[1]);
      if (!a.empty() && !b.empty()) name = a + "_" + operator_info(e->binary_op()).word + "_" + b;
      break;
    }
    case NodeKind::Call: {
      name = spelling(e->builtin());
      for (const auto& arg : e->args) {
        std::string a = composed_name(arg);
        if (a.empty()) return "";
        name += "_" + a;
      }
      break;
    }
    case NodeKind::Select: break;
    case NodeKind::Reduce: {
      std::string a = composed_name(e->args[0]);
      if (!a.empty()) name = reduction_name(*e) + "_" + a;
      break;
    }
    case NodeKind::Matrix: {
      std::string a = composed_name(e->args[0]);
      if (!a.empty()) name = e->name + "_" + a;
      break;
    }
  }
  return name.size() <= 64 ? name : "";
}
}  // namespace

std::string descriptive_name(const Expr& e) {
  std::string name = composed_name(e);
  return name_problem(name, NameUse::Value).empty() ? name : "";
}

void name_temporaries(const std::vector<Expr>& nodes, const std::string& prefix, std::set<std::string>& taken,
                      ExprPrinter& printer) {
  int counter = 0;
  for (const auto& e : nodes) {
    std::string base = e->hint.empty() ? descriptive_name(e) : e->hint;
    std::string name;
    if (base.empty()) {
      do name = prefix + std::to_string(counter++);
      while (taken.count(name));
    } else {
      name = base;
      for (int n = 1; taken.count(name); ++n) name = base + "_" + std::to_string(n);
    }
    taken.insert(name);
    printer.names[e.get()] = name;
  }
}

}  // namespace optgen
