#pragma once
/// Prints IR expressions as infix text. The base class prints the IR's own notation (used by
/// `optgen dump`); backends override the hooks to print C++ or CUDA. Shared nodes can be given
/// names, and are then printed by name: `schedule_temporaries` picks and orders them.

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ir.h"

namespace optgen {

class ExprPrinter {
 public:
  virtual ~ExprPrinter() = default;

  std::string print(const Expr& e) const;       ///< the whole expression (named operands by name)
  std::string print_body(const Expr& e) const;  ///< `e` itself expanded even if it is named

  std::map<const Node*, std::string> names;  ///< nodes printed by name

 protected:
  virtual std::string leaf(const Node& var) const { return var.name; }
  virtual std::string constant(const Node& c) const;
  virtual std::string call(Builtin fn, const std::vector<std::string>& args) const;
  /// An operator this backend prints as a call (C++ has no `**`); nullopt: infix.
  virtual std::optional<std::string> binary_as_call(BinaryOp, const std::string&, const std::string&) const {
    return std::nullopt;
  }

 private:
  std::string print(const Expr& e, int context_precedence, bool right_side) const;
  /// `e` unparenthesized (by name if named), and the precedence its text binds with.
  std::string operand(const Expr& e, int* precedence) const;
  std::string expand(const Node& n, int* precedence) const;
};

/// How the IR's notation names a Reduce node: sum, max, group_sum, group_max.
std::string reduction_name(const Node& reduce);

/// A float in the fewest digits that read back as the same double ("0.9", "1e-08").
std::string format_number(double value);

/// The non-leaf nodes reachable from `roots` that deserve a name: those used more than once, and
/// those the spec named (when `keep_named`). Returned operands-first, in first-use order.
std::vector<Expr> schedule_temporaries(const std::vector<Expr>& roots, bool keep_named,
                                       const std::function<bool(const Expr&)>& eligible);

/// A name that says what `e` computes, from the spec's own names: `one_minus_beta1`,
/// `sqrt_bias_correction2`; the spec's name for it if it has one; empty when that would be
/// unreadably long, or is a name the generated code cannot declare (`not_eq`).
std::string descriptive_name(const Expr& e);

/// Gives each scheduled node a unique C identifier: its hint, else its descriptive_name, else
/// `prefix` and a number; avoiding `taken`. Records the names in `printer.names`.
void name_temporaries(const std::vector<Expr>& nodes, const std::string& prefix, std::set<std::string>& taken,
                      ExprPrinter& printer);

}  // namespace optgen
