#include <catch2/catch.hpp>

#include "operators.h"
#include "syntax.h"

using optgen::parse_expression;
using optgen::parse_statement;
using optgen::SpecError;

namespace {
std::string round_trip(const std::string& text) { return optgen::to_string(*parse_expression(text, {})); }

/// The tree's shape: every operation in parentheses.
std::string shape(const optgen::Syntax& s) {
  if (s.operands.empty()) return s.text;
  std::string out = "(" + s.text;
  for (const auto& operand : s.operands) out += " " + shape(*operand);
  return out + ")";
}
}  // namespace

TEST_CASE("expressions parse with C precedence and right-associative **", "[syntax]") {
  CHECK(round_trip("a + b * c") == "a + b * c");
  CHECK(round_trip("(a + b) * c") == "(a + b) * c");
  CHECK(round_trip("a - (b - c)") == "a - (b - c)");
  CHECK(round_trip("a - b - c") == "a - b - c");
  CHECK(round_trip("a ** b ** c") == "a ** b ** c");
  CHECK(round_trip("(a ** b) ** c") == "(a ** b) ** c");
  CHECK(round_trip("-a ** 2") == "-a ** 2");
  CHECK(round_trip("c ? a : b ? d : e") == "c ? a : b ? d : e");
  CHECK(round_trip("x > 0 && !y || z") == "x > 0 && !y || z");
  CHECK(round_trip("lerp(a, b, 1 - w)") == "lerp(a, b, 1 - w)");
  CHECK(round_trip("1.0e-8 + .5") == "1.0e-8 + .5");
}

TEST_CASE("unary minus binds looser than **", "[syntax]") {
  auto tree = parse_expression("-x ** 2", {});
  REQUIRE(tree->kind == optgen::Syntax::Kind::Unary);
  CHECK(tree->operands[0]->text == "**");
}

TEST_CASE("statements are `name = expression`", "[syntax]") {
  auto s = parse_statement("exp_avg = lerp(exp_avg, g, 1 - beta1)  ", {});
  CHECK(s.target == "exp_avg");
  CHECK(optgen::to_string(*s.value) == "lerp(exp_avg, g, 1 - beta1)");
  CHECK(s.text == "exp_avg = lerp(exp_avg, g, 1 - beta1)");
}

TEST_CASE("'@' is the matrix product, as tight as '*'", "[syntax]") {
  CHECK(optgen::to_string(*parse_expression("a * x @ transpose(x) + b", {})) == "a * x @ transpose(x) + b");
  CHECK(optgen::to_string(*parse_expression("a * (x @ y)", {})) == "a * (x @ y)");
}

TEST_CASE("malformed expressions are errors, not crashes", "[syntax]") {
  for (const char* bad : {"", "a +", "(a", "a b", "f(a,", "a ? b", "1.2.3", "a $ b", "a @", "a < b < c", "a ="})
    CHECK_THROWS_AS(parse_expression(bad, {}), SpecError);
  CHECK_THROWS_AS(parse_statement("x + 1", {}), SpecError);
  CHECK_THROWS_AS(parse_statement("x =", {}), SpecError);
}

TEST_CASE("printed expressions read back as the tree they were printed from, for every pair of operators", "[syntax]") {
  // Each operator of the table (generator/operators.h) and the conditional, grouped both ways.
  std::vector<std::string> forms;
  for (const auto& op : optgen::binary_operators()) forms.push_back("A " + std::string(op.token) + " B");
  for (const auto& op : optgen::unary_operators()) forms.push_back(std::string(op.token) + "A");
  forms.push_back("A ? B : C");
  auto fill = [](std::string form, const std::string& a, const std::string& b, const std::string& c) {
    for (auto [hole, text] : {std::pair<char, std::string>{'A', a}, {'B', b}, {'C', c}})
      if (size_t at = form.find(hole); at != std::string::npos) form.replace(at, 1, text);
    return form;
  };
  for (const auto& outer : forms)
    for (const auto& inner : forms)
      for (int hole = 0; hole < 3; ++hole) {
        const std::string nested = "(" + fill(inner, "x", "y", "z") + ")";
        const std::string text =
            fill(outer, hole == 0 ? nested : "a", hole == 1 ? nested : "b", hole == 2 ? nested : "c");
        INFO(text);
        const std::string printed = round_trip(text);
        INFO(printed);
        CHECK(shape(*parse_expression(printed, {})) == shape(*parse_expression(text, {})));
      }
}

TEST_CASE("the printer parenthesizes where the parser would group otherwise", "[syntax]") {
  CHECK(round_trip("(a < b) == c") == "(a < b) == c");
  CHECK(round_trip("a == (b < c)") == "a == (b < c)");
  CHECK(round_trip("(c ? a : b) ? d : e") == "(c ? a : b) ? d : e");
  CHECK(round_trip("-(-x)") == "-(-x)");
  CHECK(round_trip("x ** -y") == "x ** (-y)");
  CHECK(round_trip("(-x) ** 2") == "(-x) ** 2");
}
