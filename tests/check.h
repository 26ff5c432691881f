#pragma once
/// Helpers shared by the generator tests.

#include <string>

#include "pipeline.h"

namespace optgen::test {

/// A spec named test.yaml made of `body` plus the boilerplate fields every spec needs.
std::string spec_text(const std::string& body);

/// The dump of the variant with `flags` right after `pass` runs on the spec `body`.
std::string ir_after(const std::string& pass, const std::string& body, const FlagValues& flags = {});

/// The full error message for a spec, or "" if it compiles. `name` is the file name in messages.
std::string spec_error(const std::string& name, const std::string& text);

}  // namespace optgen::test

/// `check(pass, input, expected)`: the IR after `pass` must read exactly `expected`.
#define CHECK_PASS(pass, input, expected) CHECK(optgen::test::ir_after(pass, input) == std::string(expected))
