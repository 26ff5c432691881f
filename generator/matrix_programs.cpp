#include "matrix_programs.h"

#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "operators.h"

namespace optgen {
namespace {

const char* dimension(MatrixDimension d) { return d == MatrixDimension::R ? "R" : "C"; }

/// A scalar of matrix code: a number times at most one argument.
MatrixScalar number(double value) { return {value, -1}; }

struct Operand {
  int var;
  bool transposed;
};

/// coeff op(a) (op(b) where b is given: a product).
struct Term {
  MatrixScalar coeff;
  Operand a;
  std::optional<Operand> b;
};

/// What an expression of matrix code is: a scalar, or a sum of terms of one shape.
struct Value {
  bool matrix = false;
  MatrixScalar scalar = number(0);
  std::vector<Term> terms;
  MatrixDimension rows = MatrixDimension::R, cols = MatrixDimension::C;
};

class Compiler {
 public:
  explicit Compiler(const MatrixFunctionSpec& f) : f_(f) {
    p_.name = f.name;
    p_.doc = f.doc;
    p_.transpose_tall = f.transpose_tall;
    p_.parameters.assign(f.parameters.begin() + 1, f.parameters.end());
    p_.counts.assign(p_.parameters.size(), false);
    p_.variables.push_back({f.parameters[0], MatrixDimension::R, MatrixDimension::C});
    vars_[f.parameters[0]] = 0;
  }

  CompiledMatrixProgram compile() {
    block(f_.body);
    auto it = vars_.find(f_.result);
    if (it == vars_.end())
      throw SpecError(f_.result_loc, "matrix function '" + f_.name + "' returns '" + f_.result +
                                         "', which none of its statements assigns" + unknown_because(f_.result));
    const auto& v = p_.variables[static_cast<size_t>(it->second)];
    if (v.rows != MatrixDimension::R || v.cols != MatrixDimension::C)
      throw SpecError(f_.result_loc, "matrix function '" + f_.name + "' returns '" + f_.result + "', which is " +
                                         shape_text(v.rows, v.cols) +
                                         ": a matrix function returns a matrix of its "
                                         "argument's shape, R x C");
    p_.result = it->second;
    return std::move(p_);
  }

 private:
  const MatrixFunctionSpec& f_;
  CompiledMatrixProgram p_;
  std::map<std::string, int> vars_;
  std::set<std::string> in_repeat_;  ///< names first assigned in a repeat, unknown after it
  int temporaries_ = 0;

  /// " (...)": why `name` is unknown here, where a repeat assigned it first.
  std::string unknown_because(const std::string& name) const {
    return in_repeat_.count(name) ? " (a repeat assigns it first, and may run no times: assign it before)" : "";
  }

  std::string in_function() const { return " in matrix function '" + f_.name + "'"; }

  void block(const Block& b) {
    for (const BlockItem& item : b.items) {
      if (item.statement) {
        statement(*item.statement);
        continue;
      }
      const size_t at = p_.code.size();
      p_.code.push_back({MatrixOp::Repeat, 0, -1, -1, -1, false, false, count(*item.repeat), number(0)});
      // A name a repeat assigns first is its own: after it, it may not have run.
      const std::map<std::string, int> before = vars_;
      block(*item.body);
      for (auto it = vars_.begin(); it != vars_.end();)
        if (!before.count(it->first)) {
          in_repeat_.insert(it->first);
          it = vars_.erase(it);
        } else {
          ++it;
        }
      p_.code[at].target = static_cast<int>(p_.code.size() - at - 1);
    }
  }

  /// A repeat's count: a whole number, or a parameter (which then counts repetitions).
  MatrixScalar count(const Syntax& s) {
    if (s.kind == Syntax::Kind::Number && s.is_integer && s.number <= kMaxRepeat) return number(s.number);
    if (s.kind == Syntax::Kind::Name)
      if (int p = scalar_parameter(s.text); p >= 0) {
        p_.counts[static_cast<size_t>(p)] = true;
        return {1, p};
      }
    throw SpecError(s.loc, "a repeat's count is a whole number from 0 to " + std::to_string(kMaxRepeat) +
                               " or a parameter of the function, not '" + to_string(s) + "'");
  }

  /// The index of parameter `name` after the matrix, or -1.
  int scalar_parameter(const std::string& name) const {
    for (size_t i = 1; i < f_.parameters.size(); ++i)
      if (f_.parameters[i] == name) return static_cast<int>(i - 1);
    return -1;
  }

  void statement(const Statement& s) {
    if (scalar_parameter(s.target) >= 0)
      throw SpecError(s.target_loc, "'" + s.target + "' is a number the call gives" + in_function() +
                                        ": statements assign matrices, not its parameters");
    Value v = expression(*s.value);
    if (!v.matrix)
      throw SpecError(s.value->loc, "'" + s.target + "' is assigned a number" + in_function() +
                                        ": its statements assign matrices (numbers go where they are used)");
    auto it = vars_.find(s.target);
    int target;
    if (it == vars_.end()) {
      target = static_cast<int>(p_.variables.size());
      vars_[s.target] = target;
      p_.variables.push_back({s.target, v.rows, v.cols});
    } else {
      target = it->second;
      const auto& var = p_.variables[static_cast<size_t>(target)];
      if (var.rows != v.rows || var.cols != v.cols)
        throw SpecError(s.target_loc,
                        "'" + s.target + "' is " + shape_text(var.rows, var.cols) + ", assigned a " +
                            shape_text(v.rows, v.cols) + " matrix" + in_function(),
                        "give the new value a name of its own");
    }
    assign(target, v);
  }

  int temporary(MatrixDimension rows, MatrixDimension cols) {
    p_.variables.push_back({"tmp#" + std::to_string(++temporaries_), rows, cols});
    return static_cast<int>(p_.variables.size() - 1);
  }

  /// `v` into a variable of its own, unless it is one already: the operand and its factor.
  std::pair<MatrixScalar, Operand> single(const Value& v) {
    if (v.terms.size() == 1 && !v.terms[0].b) return {v.terms[0].coeff, v.terms[0].a};
    const int t = temporary(v.rows, v.cols);
    assign(t, v);
    return {number(1), {t, false}};
  }

  /// The instructions that compute `v` into `target`: each product one GEMM that adds what is
  /// left (a matrix, or the sum of the others first combined into a temporary).
  void assign(int target, const Value& v) {
    std::vector<Term> products, leaves;
    for (const Term& t : v.terms) (t.b ? products : leaves).push_back(t);
    auto emit = [&](MatrixOp op, int to, int a, int b, int c, bool ta, bool tb, MatrixScalar alpha, MatrixScalar beta) {
      p_.code.push_back({op, to, a, b, c, ta, tb, alpha, beta});
    };
    if (products.empty()) {
      if (leaves.size() == 1 && leaves[0].coeff.factor == 1 && leaves[0].coeff.argument < 0 &&
          !leaves[0].a.transposed) {
        emit(MatrixOp::Assign, target, leaves[0].a.var, -1, -1, false, false, number(1), number(0));
        return;
      }
      if (leaves.size() == 1) {
        emit(MatrixOp::Combine, target, leaves[0].a.var, -1, -1, leaves[0].a.transposed, false, leaves[0].coeff,
             number(0));
        return;
      }
      // Two at a time: the last sum writes the target.
      Term acc = leaves[0];
      for (size_t i = 1; i < leaves.size(); ++i) {
        const int to = i + 1 == leaves.size() ? target : temporary(v.rows, v.cols);
        emit(MatrixOp::Combine, to, acc.a.var, leaves[i].a.var, -1, acc.a.transposed, leaves[i].a.transposed, acc.coeff,
             leaves[i].coeff);
        acc = {number(1), {to, false}, std::nullopt};
      }
      return;
    }
    int c = -1;
    MatrixScalar beta = number(0);
    if (leaves.size() == 1 && !leaves[0].a.transposed) {
      c = leaves[0].a.var;
      beta = leaves[0].coeff;
    } else if (!leaves.empty()) {  // the sum of the others first
      c = temporary(v.rows, v.cols);
      assign(c, {true, number(0), leaves, v.rows, v.cols});
      beta = number(1);
    }
    for (size_t i = 0; i < products.size(); ++i) {
      const Term& t = products[i];
      const int to = i + 1 == products.size() ? target : temporary(v.rows, v.cols);
      emit(MatrixOp::Product, to, t.a.var, t.b->var, c, t.a.transposed, t.b->transposed, t.coeff, beta);
      c = to;
      beta = number(1);
    }
  }

  [[noreturn]] void not_matrix_code(const Syntax& s, const std::string& what) const {
    throw SpecError(s.loc, what + in_function(),
                    "matrix code has matrices, numbers, '+', '-', '*' by a number, '/' by a number, '@', "
                    "transpose(m) and m / max(frobenius_norm(m), eps)");
  }

  /// The scalar `a` times `b`: at most one of them may be an argument.
  MatrixScalar times(const Syntax& s, MatrixScalar a, MatrixScalar b) const {
    if (a.argument >= 0 && b.argument >= 0)
      throw SpecError(s.loc,
                      "'" + to_string(s) + "' multiplies two parameters" + in_function() +
                          ": a factor of matrix code is a number times at most one parameter",
                      "pass their product as one argument");
    return {a.factor * b.factor, a.argument >= 0 ? a.argument : b.argument};
  }

  Value scaled(const Syntax& s, Value v, MatrixScalar by) const {
    for (Term& t : v.terms) t.coeff = times(s, t.coeff, by);
    return v;
  }

  static Value scalar(MatrixScalar x) { return {false, x, {}, MatrixDimension::R, MatrixDimension::C}; }

  Value expression(const Syntax& s) {
    switch (s.kind) {
      case Syntax::Kind::Number: return scalar(number(s.number));
      case Syntax::Kind::Name: {
        if (auto it = vars_.find(s.text); it != vars_.end()) {
          const auto& var = p_.variables[static_cast<size_t>(it->second)];
          return {true, number(0), {{number(1), {it->second, false}, std::nullopt}}, var.rows, var.cols};
        }
        if (int p = scalar_parameter(s.text); p >= 0) return scalar({1, p});
        throw SpecError(s.loc,
                        "unknown name '" + s.text + "'" + in_function() +
                            ": its statements read its parameters and the matrices they assign" +
                            unknown_because(s.text),
                        "pass a hyperparameter as an argument of the call");
      }
      case Syntax::Kind::Unary: {
        if (s.text != "-") not_matrix_code(s, "'" + s.text + "' is not matrix code");
        Value v = expression(*s.operands[0]);
        if (!v.matrix) return scalar(times(s, v.scalar, number(-1)));
        return scaled(s, v, number(-1));
      }
      case Syntax::Kind::Binary: return binary(s);
      case Syntax::Kind::Call: return call(s);
      case Syntax::Kind::Ternary: not_matrix_code(s, "a conditional is not matrix code");
    }
    throw InternalError("matrix_programs: unknown syntax");
  }

  Value binary(const Syntax& s) {
    const BinaryOp op = find_binary_operator(s.text)->op;
    if (op == BinaryOp::Div && is_normalize(s)) return normalize(s);
    Value a = expression(*s.operands[0]);
    Value b = expression(*s.operands[1]);
    auto numbers_only = [&](const Value& v) {
      if (v.scalar.argument >= 0)
        throw SpecError(s.loc,
                        "'" + to_string(s) + "' computes with a parameter" + in_function() +
                            ": a factor of matrix code is a number times at most one parameter",
                        "pass the value as one argument");
      return v.scalar.factor;
    };
    switch (op) {
      case BinaryOp::Add:
      case BinaryOp::Sub: {
        if (!a.matrix && !b.matrix) {
          const double x = numbers_only(a), y = numbers_only(b);
          return scalar(number(op == BinaryOp::Add ? x + y : x - y));
        }
        if (!a.matrix || !b.matrix)
          throw SpecError(s.loc, "'" + s.text + "' of a matrix and a number" + in_function() +
                                     ": matrix code adds matrices to matrices");
        same_shape(s, a, b);
        if (op == BinaryOp::Sub) b = scaled(s, b, number(-1));
        a.terms.insert(a.terms.end(), b.terms.begin(), b.terms.end());
        return a;
      }
      case BinaryOp::Mul:
        if (a.matrix && b.matrix)
          throw SpecError(s.loc, "'*' of two matrices" + in_function() + ": write '@' for the matrix product");
        if (!a.matrix && !b.matrix) return scalar(times(s, a.scalar, b.scalar));
        return a.matrix ? scaled(s, a, b.scalar) : scaled(s, b, a.scalar);
      case BinaryOp::Div:
        if (b.matrix) not_matrix_code(s, "a division by a matrix is not matrix code");
        if (numbers_only(b) == 0) throw SpecError(s.loc, "'" + to_string(s) + "' divides by zero" + in_function());
        if (!a.matrix) return scalar(times(s, a.scalar, number(1 / b.scalar.factor)));
        return scaled(s, a, number(1 / b.scalar.factor));
      case BinaryOp::Pow:
        if (a.matrix || b.matrix) not_matrix_code(s, "'**' of a matrix is not matrix code");
        return scalar(number(std::pow(numbers_only(a), numbers_only(b))));
      case BinaryOp::MatMul: {
        if (!a.matrix || !b.matrix)
          throw SpecError(s.loc,
                          "'@' multiplies two matrices" + in_function() + "; write '*' to scale one by a number");
        if (a.cols != b.rows)
          throw SpecError(s.loc,
                          "'" + to_string(s) + "' multiplies a " + shape_text(a.rows, a.cols) + " matrix by a " +
                              shape_text(b.rows, b.cols) + " one" + in_function() +
                              ": the left's columns must be the right's rows",
                          "transpose one of them: transpose(m)");
        auto [ca, oa] = single(a);
        auto [cb, ob] = single(b);
        return {true, number(0), {{times(s, ca, cb), oa, ob}}, a.rows, b.cols};
      }
      default: not_matrix_code(s, "'" + s.text + "' is not matrix code");
    }
  }

  void same_shape(const Syntax& s, const Value& a, const Value& b) const {
    if (a.rows != b.rows || a.cols != b.cols)
      throw SpecError(s.loc, "'" + s.text + "' of a " + shape_text(a.rows, a.cols) + " and a " +
                                 shape_text(b.rows, b.cols) + " matrix" + in_function());
  }

  /// `m / max(frobenius_norm(m), eps)` (or max(eps, ...)) of one matrix name m.
  static bool is_normalize(const Syntax& s) {
    const Syntax& d = *s.operands[1];
    if (d.kind != Syntax::Kind::Call || d.text != "max" || d.operands.size() != 2) return false;
    for (const auto& arg : d.operands)
      if (arg->kind == Syntax::Kind::Call && arg->text == "frobenius_norm") return true;
    return false;
  }

  Value normalize(const Syntax& s) {
    const Syntax& d = *s.operands[1];
    const bool first = d.operands[0]->kind == Syntax::Kind::Call && d.operands[0]->text == "frobenius_norm";
    const Syntax& norm = *d.operands[first ? 0 : 1];
    const Syntax& eps = *d.operands[first ? 1 : 0];
    const Syntax& x = *s.operands[0];
    if (norm.operands.size() != 1 || x.kind != Syntax::Kind::Name || norm.operands[0]->kind != Syntax::Kind::Name ||
        norm.operands[0]->text != x.text)
      throw SpecError(s.loc, "'" + to_string(s) + "' divides by a norm" + in_function() +
                                 ": a matrix is divided by its own norm, as m / max(frobenius_norm(m), eps)");
    Value v = expression(x);
    if (!v.matrix) throw SpecError(x.loc, "'" + x.text + "' is a number, not a matrix" + in_function());
    Value e = expression(eps);
    if (e.matrix) throw SpecError(eps.loc, "the least norm '" + to_string(eps) + "' is a matrix" + in_function());
    const int t = temporary(v.rows, v.cols);
    p_.code.push_back({MatrixOp::Normalize, t, v.terms[0].a.var, -1, -1, false, false, number(1), e.scalar});
    return {true, number(0), {{number(1), {t, false}, std::nullopt}}, v.rows, v.cols};
  }

  Value call(const Syntax& s) {
    if (s.text == "transpose") {
      if (s.operands.size() != 1) throw SpecError(s.loc, "transpose takes one matrix" + in_function());
      Value v = expression(*s.operands[0]);
      if (!v.matrix) throw SpecError(s.loc, "transpose of a number" + in_function());
      auto [c, o] = single(v);
      return {true, number(0), {{c, {o.var, !o.transposed}, std::nullopt}}, v.cols, v.rows};
    }
    if (s.text == "frobenius_norm") not_matrix_code(s, "frobenius_norm is used only to divide its matrix by it");
    not_matrix_code(s, "'" + s.text + "' is not a function of matrix code");
  }
};

}  // namespace

std::string shape_text(MatrixDimension rows, MatrixDimension cols) {
  return std::string(dimension(rows)) + " x " + dimension(cols);
}

CompiledMatrixProgram compile_matrix_function(const MatrixFunctionSpec& f) { return Compiler(f).compile(); }

OwnedMatrixProgram::OwnedMatrixProgram(CompiledMatrixProgram p) : compiled(std::move(p)), program{} {
  for (const auto& v : compiled.variables) variables.push_back({v.name.c_str(), v.rows, v.cols});
  for (const auto& a : compiled.parameters) parameters.push_back(a.c_str());
  program = {compiled.name.c_str(),
             compiled.transpose_tall,
             variables.data(),
             static_cast<int>(variables.size()),
             compiled.code.data(),
             static_cast<int>(compiled.code.size()),
             compiled.result,
             parameters.data(),
             static_cast<int>(compiled.parameters.size())};
}

}  // namespace optgen
