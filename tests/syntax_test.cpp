#include <catch2/catch.hpp>

#include "syntax.h"

using optgen::parse_expression;
using optgen::parse_statement;
using optgen::SpecError;

namespace {
std::string round_trip(const std::string& text) { return optgen::to_string(*parse_expression(text, {})); }
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

TEST_CASE("malformed expressions are errors, not crashes", "[syntax]") {
  for (const char* bad : {"", "a +", "(a", "a b", "f(a,", "a ? b", "1.2.3", "a @ b", "a < b < c", "a ="})
    CHECK_THROWS_AS(parse_expression(bad, {}), SpecError);
  CHECK_THROWS_AS(parse_statement("x + 1", {}), SpecError);
  CHECK_THROWS_AS(parse_statement("x =", {}), SpecError);
}
