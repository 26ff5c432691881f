#pragma once
/// The syntax tree of one infix expression or statement as written in a spec, before names are
/// resolved. `parse_expression` and `parse_statement` turn a YAML scalar into it.

#include <memory>
#include <string>
#include <vector>

#include "diagnostic.h"

namespace optgen {

struct Syntax;
using SyntaxPtr = std::unique_ptr<Syntax>;

struct Syntax {
  enum class Kind { Number, Name, Unary, Binary, Ternary, Call };
  Kind kind;
  SourceLoc loc;            ///< where the construct starts (the operator for unary/binary)
  std::string text;         ///< the name, the operator spelling, or the function name
  double number = 0;        ///< for Number
  bool is_integer = false;  ///< for Number: written without '.', 'e' or 'E'
  std::vector<SyntaxPtr> operands;
  int height = 1;  ///< 1 for a leaf, else one more than its highest operand
};

/// How deep an expression may nest, in parentheses or in its tree (a chain `a + b + ...` is as
/// deep as it is long): deeper input is a located error, not a stack overflow.
constexpr int kMaxExpressionDepth = 256;

/// `name = expression`, as written in `per_step:` and `update:`.
struct Statement {
  std::string target;
  SourceLoc target_loc;
  SyntaxPtr value;
  std::string text;  ///< the statement as written, for comments in generated code
};

/// Where the bytes of an expression's text stand in the spec: one run of columns from `start`, or,
/// for a YAML scalar whose value is not its source as written (a block scalar, a scalar folded over
/// several lines, escapes), byte by byte (`bytes`: one place per byte, then one for the end).
struct TextPlaces {
  TextPlaces(SourceLoc start = {}, std::vector<SourceLoc> bytes = {})
      : start(std::move(start)), bytes(std::move(bytes)) {}
  SourceLoc at(int offset) const;

  SourceLoc start;
  std::vector<SourceLoc> bytes;
};

/// Parses `text`, which stands at `places` in the spec. Throws SpecError on malformed input.
SyntaxPtr parse_expression(const std::string& text, const TextPlaces& places);
Statement parse_statement(const std::string& text, const TextPlaces& places);

/// Renders a syntax tree back to infix text with minimal parentheses (for tests and comments).
std::string to_string(const Syntax& syntax);

}  // namespace optgen
