#include "unsigned_states.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>

#include "expr_printer.h"

namespace optgen {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// The values an expression may take: [lo, hi], either end possibly infinite.
struct Range {
  double lo = -kInf, hi = kInf;
  bool non_negative() const { return lo >= 0; }
  bool within_unit() const { return lo >= 0 && hi <= 1; }
};

const Range kAny{};
const Range kBool{0, 1};
const Range kNonNegative{0, kInf};

/// a + b with inf - inf taken as either end (the sum is then of unknown sign).
double add_end(double a, double b, double fallback) {
  double r = a + b;
  return std::isnan(r) ? fallback : r;
}

/// a * b with 0 * inf taken as 0: a value of one range times a finite value of the other.
double mul_end(double a, double b) { return (a == 0 || b == 0) ? 0 : a * b; }

Range multiply(Range a, Range b) {
  const double ends[] = {mul_end(a.lo, b.lo), mul_end(a.lo, b.hi), mul_end(a.hi, b.lo), mul_end(a.hi, b.hi)};
  return {*std::min_element(std::begin(ends), std::end(ends)), *std::max_element(std::begin(ends), std::end(ends))};
}

/// x ** n for a whole n >= 2: non-negative when n is even, of x's sign when odd.
Range power(Range x, int n) {
  if (n % 2 == 0) return x.lo >= -1 && x.hi <= 1 ? kBool : kNonNegative;
  if (x.non_negative()) return x.hi <= 1 ? kBool : kNonNegative;
  if (x.hi <= 0) return {-kInf, 0};
  return kAny;
}

class SignAnalysis {
 public:
  SignAnalysis(const Program& program, const std::set<std::string>& unsigned_states)
      : program_(program), unsigned_(unsigned_states) {
    for (const auto& list : program.values)
      for (const auto& v : list) hoisted_[v.name] = v.value;
    for (const auto& r : program.reductions) reductions_[r.name] = &r;
  }

  Range range(const Expr& e) {
    if (auto it = memo_.find(e.get()); it != memo_.end()) return it->second;
    Range r = compute(*e);
    memo_[e.get()] = r;
    return r;
  }

  Range hyperparameter(const std::string& name) const {
    const Hyperparameter* h = program_.spec->find_hyperparameter(name);
    if (!h || h->type == ValueType::Bool) return kBool;  // derived flags are bools too
    if (h->default_value >= 0 && h->default_value <= 1) return kBool;
    if (h->default_value >= 0) return kNonNegative;
    return kAny;
  }

 private:
  Range compute(const Node& n) {
    if (n.type == ValueType::Bool) return kBool;
    switch (n.kind) {
      case NodeKind::Const: return {n.value, n.value};
      case NodeKind::Var: return leaf(n);
      case NodeKind::Unary: {
        const Range a = range(n.args[0]);
        return {-a.hi, -a.lo};
      }
      case NodeKind::Binary: return binary(n);
      case NodeKind::Select: {
        const Range a = range(n.args[1]), b = range(n.args[2]);
        return {std::min(a.lo, b.lo), std::max(a.hi, b.hi)};
      }
      case NodeKind::Call: return call(n);
      case NodeKind::Reduce: return reduced(n.reduce_op(), range(n.args[0]));
      case NodeKind::Matrix: return kAny;
    }
    return kAny;
  }

  Range leaf(const Node& n) {
    switch (n.var) {
      case VarKind::Hyperparameter: return hyperparameter(n.name);
      case VarKind::Step: return {1, kInf};
      case VarKind::Numel:
      case VarKind::Rows:
      case VarKind::Cols: return kNonNegative;
      case VarKind::Factored: return kBool;
      case VarKind::State: return unsigned_.count(n.name) ? kNonNegative : kAny;
      case VarKind::Param:
      case VarKind::Grad:
      case VarKind::ScalarState: return kAny;
      case VarKind::Hoisted: {
        auto it = hoisted_.find(n.name);
        return it == hoisted_.end() ? kAny : range(it->second);
      }
      case VarKind::Reduced: {
        auto it = reductions_.find(n.name);
        return it == reductions_.end() ? kAny : reduced(it->second->op, range(it->second->operand));
      }
      case VarKind::MatrixValue: return kAny;
    }
    return kAny;
  }

  static Range reduced(ReduceOp op, Range operand) {
    if (op == ReduceOp::Max) return operand;
    if (operand.non_negative()) return kNonNegative;
    if (operand.hi <= 0) return {-kInf, 0};
    return kAny;
  }

  /// The factors of a product, through nested products: (1 - b) * g * g is (1 - b), g, g.
  static void factors(const Expr& e, std::vector<Expr>& out) {
    if (e->kind == NodeKind::Binary && e->binary_op() == BinaryOp::Mul) {
      factors(e->args[0], out);
      factors(e->args[1], out);
    } else {
      out.push_back(e);
    }
  }

  Range product(const Node& n) {
    std::vector<Expr> all;
    factors(n.args[0], all);
    factors(n.args[1], all);
    std::map<const Node*, std::pair<Expr, int>> counts;  // by node: after cse, equal values are one node
    for (const Expr& f : all) {
      auto& entry = counts[f.get()];
      entry.first = f;
      ++entry.second;
    }
    Range r{1, 1};
    for (const auto& [node, entry] : counts)
      r = multiply(r, entry.second == 1 ? range(entry.first) : power(range(entry.first), entry.second));
    return r;
  }

  Range binary(const Node& n) {
    const BinaryOp op = n.binary_op();
    if (op == BinaryOp::Mul) return product(n);
    const Range a = range(n.args[0]), b = range(n.args[1]);
    switch (op) {
      case BinaryOp::Add: return {add_end(a.lo, b.lo, -kInf), add_end(a.hi, b.hi, kInf)};
      case BinaryOp::Sub: return {add_end(a.lo, -b.hi, -kInf), add_end(a.hi, -b.lo, kInf)};
      case BinaryOp::Div:
        if ((a.non_negative() && b.non_negative()) || (a.hi <= 0 && b.hi <= 0)) return kNonNegative;
        if ((a.non_negative() && b.hi <= 0) || (a.hi <= 0 && b.non_negative())) return {-kInf, 0};
        return kAny;
      case BinaryOp::Pow:
        if (a.within_unit() && b.non_negative()) return kBool;
        if (a.non_negative()) return kNonNegative;
        if (n.args[1]->is_const() && n.args[1]->value >= 2 && n.args[1]->value == std::floor(n.args[1]->value) &&
            n.args[1]->value < 1e9)
          return power(a, static_cast<int>(n.args[1]->value));
        return kAny;
      // With b's sign (b = 0 gives NaN, which the proof passes over as it does 0 / 0).
      case BinaryOp::Mod: return b.non_negative() ? Range{0, b.hi} : b.hi <= 0 ? Range{b.lo, 0} : kAny;
      default: return kBool;  // comparisons and logic
    }
  }

  Range call(const Node& n) {
    std::vector<Range> a;
    for (const auto& arg : n.args) a.push_back(range(arg));
    switch (n.builtin()) {
      case Builtin::Sqrt: return a[0].hi <= 1 ? kBool : kNonNegative;
      case Builtin::Rsqrt:
      case Builtin::Exp: return kNonNegative;
      case Builtin::Log: return kAny;
      case Builtin::Abs: return {0, std::max(std::abs(a[0].lo), std::abs(a[0].hi))};
      case Builtin::Sign: return {a[0].non_negative() ? 0.0 : -1.0, a[0].hi <= 0 ? 0.0 : 1.0};
      case Builtin::Min: return {std::min(a[0].lo, a[1].lo), std::min(a[0].hi, a[1].hi)};
      case Builtin::Max: return {std::max(a[0].lo, a[1].lo), std::max(a[0].hi, a[1].hi)};
      case Builtin::Clamp:
        return {std::min(std::max(a[0].lo, a[1].lo), a[2].hi), std::min(std::max(a[0].hi, a[1].hi), a[2].hi)};
      case Builtin::Lerp:
        if (a[2].within_unit()) return {std::min(a[0].lo, a[1].lo), std::max(a[0].hi, a[1].hi)};
        return kAny;
    }
    return kAny;
  }

  const Program& program_;
  const std::set<std::string>& unsigned_;
  std::map<std::string, Expr> hoisted_;
  std::map<std::string, const ReductionValue*> reductions_;
  std::unordered_map<const Node*, Range> memo_;
};

}  // namespace

void check_unsigned_states(const Spec& spec, const std::vector<Program>& variants, const Storage& storage,
                           const std::string& written) {
  std::set<std::string> unsigned_states;
  for (const auto& s : spec.states)
    if (storage.state_dtype(s.name) == DType::UQ8) unsigned_states.insert(s.name);
  if (unsigned_states.empty()) return;
  const std::string kept = "storage '" + written + "' keeps it in uq8, which stores a negative value as 0";
  const std::string hint = "keep it in q8, the signed 8-bit map, or in f32, bf16 or f16 (STATE=DTYPE)";
  for (const auto& s : spec.states) {
    if (!unsigned_states.count(s.name)) continue;
    const std::string what = "state '" + s.name + "' ";
    if (s.init.param)
      throw SpecError(s.init.loc, what + "starts as the parameter, which can be negative; " + kept, hint);
    if (!s.init.hyperparameter.empty()) {
      const Range r = SignAnalysis(variants.front(), unsigned_states).hyperparameter(s.init.hyperparameter);
      if (!r.non_negative())
        throw SpecError(
            s.init.loc,
            what + "starts as hyperparameter '" + s.init.hyperparameter + "', whose default is negative; " + kept,
            hint);
    } else if (s.init.value < 0) {
      throw SpecError(s.init.loc, what + "starts at " + format_number(s.init.value) + "; " + kept, hint);
    }
  }
  // The step's code and every program's (`programs:`), which stores the same states.
  const auto check_outputs = [&](const Program& code, const std::string& where) {
    SignAnalysis analysis(code, unsigned_states);
    for (const Output& o : code.element_outputs)
      if (unsigned_states.count(o.name) && !analysis.range(o.value).non_negative())
        throw SpecError(
            o.loc, "the value assigned to state '" + o.name + "' here can be negative (" + where + "); " + kept, hint);
  };
  for (const Program& variant : variants) {
    check_outputs(variant, "in variant " + variant.variant);
    for (const Program& program : variant.programs)
      check_outputs(program, "in program '" + program.entry + "' of variant " + variant.variant);
  }
}

}  // namespace optgen
