#include "operators.h"

#include <iterator>

namespace optgen {
namespace {

// One row per operator, in the order of BinaryOp (clang-format would break the columns).
// clang-format off
constexpr BinaryOperatorInfo kBinaryOperators[] = {
  // op              token  precedence  associativity         word
  {BinaryOp::Add,    "+",   5,          Associativity::Left,  "plus"},
  {BinaryOp::Sub,    "-",   5,          Associativity::Left,  "minus"},
  {BinaryOp::Mul,    "*",   6,          Associativity::Left,  "times"},
  {BinaryOp::Div,    "/",   6,          Associativity::Left,  "over"},
  {BinaryOp::Pow,    "**",  8,          Associativity::Right, "pow"},
  {BinaryOp::Lt,     "<",   4,          Associativity::None,  "lt"},
  {BinaryOp::Le,     "<=",  4,          Associativity::None,  "le"},
  {BinaryOp::Gt,     ">",   4,          Associativity::None,  "gt"},
  {BinaryOp::Ge,     ">=",  4,          Associativity::None,  "ge"},
  {BinaryOp::Eq,     "==",  4,          Associativity::None,  "eq"},
  {BinaryOp::Ne,     "!=",  4,          Associativity::None,  "ne"},
  {BinaryOp::And,    "&&",  3,          Associativity::Left,  "and"},
  {BinaryOp::Or,     "||",  2,          Associativity::Left,  "or"},
  {BinaryOp::MatMul, "@",   6,          Associativity::Left,  "matmul"},
  {BinaryOp::Mod,    "%",   6,          Associativity::Left,  "mod"},
};

constexpr UnaryOperatorInfo kUnaryOperators[] = {
  // op            token  word
  {UnaryOp::Neg,   "-",   "neg"},
  {UnaryOp::Not,   "!",   "not"},
};
// clang-format on

template <typename Row, size_t N>
constexpr bool in_enum_order(const Row (&rows)[N]) {
  for (size_t i = 0; i < N; ++i)
    if (static_cast<size_t>(rows[i].op) != i) return false;
  return true;
}
static_assert(in_enum_order(kBinaryOperators), "kBinaryOperators lists the operators in the order of BinaryOp");
static_assert(in_enum_order(kUnaryOperators), "kUnaryOperators lists the operators in the order of UnaryOp");
static_assert(std::size(kBinaryOperators) == static_cast<size_t>(BinaryOp::Mod) + 1, "every BinaryOp has a row");
static_assert(std::size(kUnaryOperators) == static_cast<size_t>(UnaryOp::Not) + 1, "every UnaryOp has a row");

constexpr bool between_ternary_and_unary() {
  for (const auto& row : kBinaryOperators)
    if (row.precedence <= kTernaryPrecedence || row.precedence == kUnaryPrecedence || row.precedence >= kAtomPrecedence)
      return false;
  return true;
}
static_assert(between_ternary_and_unary(), "binary operators bind tighter than ?: and apart from the prefix ones");

/// associativity(precedence) reads one row of a level: all of a level must agree.
constexpr bool levels_agree() {
  for (const auto& a : kBinaryOperators)
    for (const auto& b : kBinaryOperators)
      if (a.precedence == b.precedence && a.associativity != b.associativity) return false;
  return true;
}
static_assert(levels_agree(), "operators of one precedence share their associativity");

}  // namespace

const std::vector<BinaryOperatorInfo>& binary_operators() {
  static const std::vector<BinaryOperatorInfo> list(std::begin(kBinaryOperators), std::end(kBinaryOperators));
  return list;
}

const std::vector<UnaryOperatorInfo>& unary_operators() {
  static const std::vector<UnaryOperatorInfo> list(std::begin(kUnaryOperators), std::end(kUnaryOperators));
  return list;
}

const BinaryOperatorInfo& operator_info(BinaryOp op) { return binary_operators()[static_cast<size_t>(op)]; }
const UnaryOperatorInfo& operator_info(UnaryOp op) { return unary_operators()[static_cast<size_t>(op)]; }

const BinaryOperatorInfo* find_binary_operator(const std::string& token) {
  for (const auto& row : binary_operators())
    if (token == row.token) return &row;
  return nullptr;
}

const UnaryOperatorInfo* find_unary_operator(const std::string& token) {
  for (const auto& row : unary_operators())
    if (token == row.token) return &row;
  return nullptr;
}

Associativity associativity(int precedence) {
  if (precedence == kTernaryPrecedence) return Associativity::Right;
  if (precedence == kUnaryPrecedence) return Associativity::None;  // -(-x), never --x
  for (const auto& row : binary_operators())
    if (row.precedence == precedence) return row.associativity;
  return Associativity::None;
}

bool needs_parentheses(int operand, int context, bool right_side) {
  if (operand != context) return operand < context;
  switch (associativity(context)) {
    case Associativity::Left: return right_side;
    case Associativity::Right: return !right_side;
    case Associativity::None: return true;
  }
  return true;
}

}  // namespace optgen
