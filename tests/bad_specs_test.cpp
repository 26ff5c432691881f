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

TEST_CASE("a control character is an error that names it, not the character itself", "[errors]") {
  // A NUL reached the messages raw (shown as another character, or none).
  const std::string line = std::string("  - param = param - gr") + '\0' + "ad";
  // The line is quoted with the NUL as its picture, U+2400: a raw NUL ended the message.
  CHECK(optgen::test::spec_error("nul.yaml", optgen::test::spec_text("update:\n" + line + "\n")) ==
        "nul.yaml:4:23: error: control character 0x00 (NUL) in the spec\n  - param = param - gr\u2400ad\n"
        "                      ^\nnote: a spec is text: remove it\n");
}

TEST_CASE("a key longer than YAML reads says so, not 'illegal map value'", "[errors]") {
  const std::string name(5000, 'x');
  const std::string error =
      optgen::test::spec_error("long.yaml", optgen::test::spec_text("hyperparameters:\n  " + name +
                                                                    ": {type: float, default: 1}\n"
                                                                    "update:\n  - param = param - grad\n"));
  CHECK_THAT(error, Catch::StartsWith("long.yaml:4:3: error: this key is 5000 characters long; YAML reads keys of "
                                      "1024 at most\n") &&
                        Catch::EndsWith("note: choose a shorter name\n"));
}

TEST_CASE("a literal that float cannot hold is a located warning", "[errors]") {
  // The double reference keeps it; the kernels' float code made it infinity or 0 without a word.
  const optgen::Spec spec = optgen::load_spec_text(
      "wide.yaml", optgen::test::spec_text("per_step:\n  - big = 1e300 * 1e-290\nupdate:\n"
                                           "  - param = param - 1e39 * grad * 1e-50 + big * 1e30 * grad\n"));
  REQUIRE(spec.warnings.size() == 2);  // not per_step's, computed in double
  CHECK(spec.warnings[0] ==
        "wide.yaml:6:21: warning: '1e39' is beyond float range: it is infinity where the kernels compute in float "
        "(their element code)\n  - param = param - 1e39 * grad * 1e-50 + big * 1e30 * grad\n                    ^\n");
  CHECK_THAT(spec.warnings[1], Catch::StartsWith("wide.yaml:6:35: warning: '1e-50' is beyond float range: it is 0 "
                                                 "where the kernels compute in float"));
}
