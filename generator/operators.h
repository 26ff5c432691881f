#pragma once
/// The spec language's operators, listed once (operators.cpp): their tokens, precedence and
/// associativity. The parser (syntax.cpp) reads expressions by this table, and every printer
/// (the spec text of syntax trees, the IR dump, C++ and CUDA) parenthesizes by it, so that what
/// is printed reads back as the tree it was printed from.

#include <string>
#include <vector>

namespace optgen {

enum class UnaryOp { Neg, Not };
/// MatMul (`@`) is the matrix product, which only a matrix function's statements have (matrix_programs.h).
/// Mod (`%`) is the remainder of two ints' floored division, with the divisor's sign (Python's `%`).
enum class BinaryOp { Add, Sub, Mul, Div, Pow, Lt, Le, Gt, Ge, Eq, Ne, And, Or, MatMul, Mod };

/// How operands of equal precedence group.
enum class Associativity {
  Left,   ///< a - b - c is (a - b) - c
  Right,  ///< a ** b ** c is a ** (b ** c); c ? a : b ? d : e is c ? a : (b ? d : e)
  None,   ///< never grouped without parentheses: comparisons do not chain, and -(-x) is not
          ///< printed --x (C++'s decrement)
};

/// Precedence, from the loosest: c ? a : b, then the binary operators by the table, then the
/// prefix operators (looser than ** only: -x ** 2 is -(x ** 2)), then atoms (names, numbers, calls,
/// parenthesized expressions).
constexpr int kTernaryPrecedence = 1;
constexpr int kUnaryPrecedence = 7;
constexpr int kAtomPrecedence = 100;

struct BinaryOperatorInfo {
  BinaryOp op;
  const char* token;  ///< as a spec writes it, and as the IR dump, C++ and CUDA print it
  int precedence;
  Associativity associativity;
  const char* word;  ///< in names of values computed by it: one_minus_beta1
};

struct UnaryOperatorInfo {
  UnaryOp op;
  const char* token;
  const char* word;  ///< neg_, not_
};

const std::vector<BinaryOperatorInfo>& binary_operators();  ///< in the order of BinaryOp
const std::vector<UnaryOperatorInfo>& unary_operators();    ///< in the order of UnaryOp
const BinaryOperatorInfo& operator_info(BinaryOp op);
const UnaryOperatorInfo& operator_info(UnaryOp op);
/// The operator written `token`, or null.
const BinaryOperatorInfo* find_binary_operator(const std::string& token);
const UnaryOperatorInfo* find_unary_operator(const std::string& token);

/// How operands of precedence `precedence` group (kTernaryPrecedence and kUnaryPrecedence included).
Associativity associativity(int precedence);

/// Whether an operand of precedence `operand` needs parentheses as the left or right operand of
/// an operator of precedence `context`.
bool needs_parentheses(int operand, int context, bool right_side);

}  // namespace optgen
