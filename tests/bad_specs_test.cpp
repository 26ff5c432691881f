#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "check.h"

namespace fs = std::filesystem;

namespace {
std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}
}  // namespace

// Each tests/bad_specs/NAME.yaml holds one mistake; NAME.expected beside it holds the exact
// message optgen must print for it.
TEST_CASE("every bad spec gives its exact message", "[errors]") {
  const fs::path dir = fs::path(OPTGEN_SOURCE_DIR) / "tests" / "bad_specs";
  int count = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".yaml") continue;
    fs::path expected = entry.path();
    expected.replace_extension(".expected");
    INFO("spec: " << entry.path().filename().string());
    REQUIRE(fs::exists(expected));
    CHECK(optgen::test::spec_error(entry.path().filename().string(), read(entry.path())) == read(expected));
    ++count;
  }
  CHECK(count >= 30);
}

TEST_CASE("every built-in spec compiles without errors", "[errors]") {
  const fs::path dir = fs::path(OPTGEN_SOURCE_DIR) / "specs";
  int count = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".yaml") continue;
    INFO("spec: " << entry.path().filename().string());
    CHECK(optgen::test::spec_error(entry.path().filename().string(), read(entry.path())) == "");
    ++count;
  }
  CHECK(count >= 15);  // the eleven that match torch.optim, Lion, LAMB, Adan and AdEMAMix, at least
}

TEST_CASE("internal errors are told apart from spec errors", "[errors]") {
  try {
    optgen::Node::make_binary(optgen::BinaryOp::Add, optgen::Node::make_const(1, optgen::ValueType::Bool),
                              optgen::Node::make_const(1, optgen::ValueType::Float));
    FAIL("no error");
  } catch (const optgen::InternalError& e) {
    CHECK(std::string(e.what()).rfind("internal error in optgen", 0) == 0);
  }
}
