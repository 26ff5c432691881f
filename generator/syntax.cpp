#include "syntax.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "operators.h"

namespace optgen {
namespace {

struct Token {
  enum class Kind { Number, Name, Op, End };
  Kind kind;
  std::string text;
  int offset;  ///< 0-based offset into the scalar
};

/// The operators' tokens (operators.h) and the punctuation, longest first: a token is the longest
/// that matches.
const std::vector<std::string>& operator_tokens() {
  static const std::vector<std::string> tokens = [] {
    std::vector<std::string> list;
    for (const auto& row : binary_operators()) list.push_back(row.token);
    for (const auto& row : unary_operators()) list.push_back(row.token);
    for (const char* punctuation : {"?", ":", "(", ")", ",", "="}) list.push_back(punctuation);
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
    std::stable_sort(list.begin(), list.end(),
                     [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
    return list;
  }();
  return tokens;
}

/// Splits an expression into tokens; operators are the longest match from operator_tokens().
std::vector<Token> tokenize(const std::string& text, const TextPlaces& places) {
  std::vector<Token> tokens;
  size_t i = 0;
  while (i < text.size()) {
    char c = text[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    int start = static_cast<int>(i);
    if (std::isdigit(static_cast<unsigned char>(c)) ||
        (c == '.' && i + 1 < text.size() && std::isdigit(static_cast<unsigned char>(text[i + 1])))) {
      while (i < text.size() && (std::isalnum(static_cast<unsigned char>(text[i])) || text[i] == '.' ||
                                 ((text[i] == '+' || text[i] == '-') && (text[i - 1] == 'e' || text[i - 1] == 'E'))))
        ++i;
      tokens.push_back({Token::Kind::Number, text.substr(start, i - start), start});
      continue;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      while (i < text.size() && (std::isalnum(static_cast<unsigned char>(text[i])) || text[i] == '_')) ++i;
      tokens.push_back({Token::Kind::Name, text.substr(start, i - start), start});
      continue;
    }
    bool matched = false;
    for (const std::string& op : operator_tokens()) {
      size_t n = op.size();
      if (text.compare(i, n, op) == 0) {
        tokens.push_back({Token::Kind::Op, op, start});
        i += n;
        matched = true;
        break;
      }
    }
    if (!matched) {
      // A character outside ASCII is quoted whole: all the bytes of its UTF-8 sequence.
      size_t end = i + 1;
      if (static_cast<unsigned char>(c) >= 0x80)
        while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
      // A control character (a YAML escape such as "\0" makes one) is named by its code, not printed.
      const unsigned char u = static_cast<unsigned char>(c);
      char code[8];
      std::snprintf(code, sizeof code, "0x%02X", static_cast<unsigned>(u));
      const std::string shown = u < 0x20 || u == 0x7f
                                    ? std::string("control character ") + code + (u == 0 ? " (NUL)" : "")
                                    : "'" + text.substr(i, end - i) + "'";
      throw SpecError(places.at(start),
                      "unexpected " + (shown[0] == '\'' ? "character " + shown : shown) + " in expression",
                      u >= 0x80 ? "names are ASCII letters, digits and '_'" : "");
    }
  }
  tokens.push_back({Token::Kind::End, "", static_cast<int>(text.size())});
  return tokens;
}

/// Recursive descent over the grammar in specs/README.md: the conditional, then the binary
/// operators looser than the prefix ones by precedence climbing over the operator table, then the
/// prefix operators, then the operators tighter than them (`**`).
class Parser {
 public:
  Parser(const std::string& text, const TextPlaces& places) : places_(places), tokens_(tokenize(text, places)) {}

  SyntaxPtr expression() { return ternary(); }

  const Token& peek() const { return tokens_[pos_]; }
  bool at(const char* op) const { return peek().kind == Token::Kind::Op && peek().text == op; }
  /// The binary operator at the current token, or null.
  const BinaryOperatorInfo* binary_operator_here() const {
    return peek().kind == Token::Kind::Op ? find_binary_operator(peek().text) : nullptr;
  }
  Token take() { return tokens_[pos_++]; }
  SourceLoc loc_of(const Token& t) const { return places_.at(t.offset); }

  void expect(const char* op, const char* context) {
    if (!at(op)) fail(std::string("expected '") + op + "' " + context);
    take();
  }
  [[noreturn]] void fail(const std::string& message) const {
    const Token& t = peek();
    std::string found = t.kind == Token::Kind::End ? "end of expression" : "'" + t.text + "'";
    throw SpecError(loc_of(t), message + ", found " + found);
  }
  void expect_end() {
    if (peek().kind != Token::Kind::End) fail("expected an operator or the end of the expression");
  }

 private:
  SyntaxPtr make(Syntax::Kind kind, const Token& at_token, std::string text) {
    auto node = std::make_unique<Syntax>();
    node->kind = kind;
    node->loc = loc_of(at_token);
    node->text = std::move(text);
    return node;
  }
  SyntaxPtr binary(const Token& op, SyntaxPtr lhs, SyntaxPtr rhs) {
    auto node = make(Syntax::Kind::Binary, op, op.text);
    node->operands.push_back(std::move(lhs));
    node->operands.push_back(std::move(rhs));
    return measured(std::move(node), op);
  }
  /// `node` with its height set, refused when it is too high.
  SyntaxPtr measured(SyntaxPtr node, const Token& at_token) {
    for (const auto& operand : node->operands) node->height = std::max(node->height, operand->height + 1);
    if (node->height > kMaxExpressionDepth)
      throw SpecError(loc_of(at_token),
                      "expression is more than " + std::to_string(kMaxExpressionDepth) + " operations deep",
                      "split it into statements");
    return node;
  }
  /// Counts the parser's own recursion (parentheses, prefix operators, arguments): a guard, held
  /// while a nested construct is parsed.
  struct Nesting {
    Parser& parser;
    explicit Nesting(Parser& p, const Token& at_token) : parser(p) {
      if (++parser.nesting_ > kMaxExpressionDepth)
        throw SpecError(parser.loc_of(at_token),
                        "expression nests more than " + std::to_string(kMaxExpressionDepth) + " levels deep",
                        "split it into statements");
    }
    ~Nesting() { --parser.nesting_; }
  };

  SyntaxPtr ternary() {
    SyntaxPtr condition = binary_operators_from(kTernaryPrecedence + 1);
    if (!at("?")) return condition;
    Token q = take();
    Nesting nesting(*this, q);
    SyntaxPtr if_true = expression();
    expect(":", "after the true branch of '?'");
    SyntaxPtr if_false = ternary();
    auto node = make(Syntax::Kind::Ternary, q, "?:");
    node->operands.push_back(std::move(condition));
    node->operands.push_back(std::move(if_true));
    node->operands.push_back(std::move(if_false));
    return measured(std::move(node), q);
  }
  /// Operators of precedence `lowest` or tighter, down to the prefix ones: each takes as its
  /// right operand what binds tighter than itself (or as tight, when it groups to the right).
  SyntaxPtr binary_operators_from(int lowest) {
    SyntaxPtr lhs = unary();
    for (const BinaryOperatorInfo* op = binary_operator_here();
         op && op->precedence >= lowest && op->precedence < kUnaryPrecedence; op = binary_operator_here()) {
      Token t = take();
      const bool groups_right = op->associativity == Associativity::Right;
      lhs = binary(t, std::move(lhs), binary_operators_from(groups_right ? op->precedence : op->precedence + 1));
      if (op->associativity == Associativity::None)
        if (const BinaryOperatorInfo* next = binary_operator_here(); next && next->precedence == op->precedence)
          fail("comparisons do not chain; use '&&'");
    }
    return lhs;
  }
  SyntaxPtr unary() {
    if (peek().kind == Token::Kind::Op && find_unary_operator(peek().text)) {
      Token op = take();
      Nesting nesting(*this, op);
      auto node = make(Syntax::Kind::Unary, op, op.text);
      node->operands.push_back(unary());
      return measured(std::move(node), op);
    }
    if (at("+")) {
      Token plus = take();
      Nesting nesting(*this, plus);
      return unary();
    }
    return power();
  }
  /// The operators tighter than the prefix ones (`**`): right-associative, and their right
  /// operand may be a prefix operator (x ** -y); -x ** 2 is -(x ** 2).
  SyntaxPtr power() {
    SyntaxPtr base = primary();
    const BinaryOperatorInfo* op = binary_operator_here();
    if (!op || op->precedence < kUnaryPrecedence) return base;
    Token t = take();
    Nesting nesting(*this, t);
    return binary(t, std::move(base), unary());
  }
  SyntaxPtr primary() {
    const Token& t = peek();
    if (t.kind == Token::Kind::Number) {
      Token number = take();
      auto node = make(Syntax::Kind::Number, number, number.text);
      char* end = nullptr;
      node->number = std::strtod(number.text.c_str(), &end);
      if (end != number.text.c_str() + number.text.size())
        throw SpecError(loc_of(number), "malformed number '" + number.text + "'");
      node->is_integer = number.text.find_first_of(".eE") == std::string::npos;
      return node;
    }
    if (t.kind == Token::Kind::Name) {
      Token name = take();
      if (!at("(")) return make(Syntax::Kind::Name, name, name.text);
      take();
      Nesting nesting(*this, name);
      auto call = make(Syntax::Kind::Call, name, name.text);
      if (!at(")")) {
        call->operands.push_back(expression());
        while (at(",")) {
          take();
          call->operands.push_back(expression());
        }
      }
      expect(")", "to close the argument list of '" + name.text + "'");
      return measured(std::move(call), name);
    }
    if (at("(")) {
      Token open = take();
      Nesting nesting(*this, open);
      SyntaxPtr inner = expression();
      expect(")", "to close '('");
      return inner;
    }
    fail("expected a number, a name or '('");
  }

  void expect(const char* op, const std::string& context) { expect(op, context.c_str()); }

  const TextPlaces& places_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int nesting_ = 0;
};

int precedence(const Syntax& s) {
  switch (s.kind) {
    case Syntax::Kind::Ternary: return kTernaryPrecedence;
    case Syntax::Kind::Unary: return kUnaryPrecedence;
    case Syntax::Kind::Binary: return find_binary_operator(s.text)->precedence;
    default: return kAtomPrecedence;
  }
}

}  // namespace

SourceLoc TextPlaces::at(int offset) const {
  if (bytes.empty()) return start.shifted(offset);
  return bytes[std::min(static_cast<size_t>(std::max(offset, 0)), bytes.size() - 1)];
}

SyntaxPtr parse_expression(const std::string& text, const TextPlaces& places) {
  Parser parser(text, places);
  if (parser.peek().kind == Token::Kind::End) parser.fail("expected an expression");
  SyntaxPtr result = parser.expression();
  parser.expect_end();
  return result;
}

Statement parse_statement(const std::string& text, const TextPlaces& places) {
  Parser parser(text, places);
  if (parser.peek().kind != Token::Kind::Name) parser.fail("expected a statement of the form 'name = expression'");
  Token target = parser.take();
  parser.expect("=", "after the name being assigned (statements read 'name = expression')");
  if (parser.peek().kind == Token::Kind::End) parser.fail("expected an expression after '='");
  Statement statement;
  statement.target = target.text;
  statement.target_loc = parser.loc_of(target);
  statement.value = parser.expression();
  parser.expect_end();
  statement.text = text;
  while (!statement.text.empty() && std::isspace(static_cast<unsigned char>(statement.text.back())))
    statement.text.pop_back();
  return statement;
}

std::string to_string(const Syntax& s) {
  auto operand = [&](const Syntax& child, bool right) {
    return needs_parentheses(precedence(child), precedence(s), right) ? "(" + to_string(child) + ")" : to_string(child);
  };
  switch (s.kind) {
    case Syntax::Kind::Number:
    case Syntax::Kind::Name: return s.text;
    case Syntax::Kind::Unary: return s.text + operand(*s.operands[0], true);
    case Syntax::Kind::Binary:
      return operand(*s.operands[0], false) + " " + s.text + " " + operand(*s.operands[1], true);
    case Syntax::Kind::Ternary:
      return operand(*s.operands[0], false) + " ? " + to_string(*s.operands[1]) + " : " + operand(*s.operands[2], true);
    case Syntax::Kind::Call: {
      std::string out = s.text + "(";
      for (size_t i = 0; i < s.operands.size(); ++i) out += (i ? ", " : "") + to_string(*s.operands[i]);
      return out + ")";
    }
  }
  throw InternalError("to_string: unknown syntax kind");
}

}  // namespace optgen
