#include "check.h"

#include "diagnostic.h"
#include "ir_printer.h"
#include "lower.h"
#include "spec.h"

namespace optgen::test {

std::string spec_text(const std::string& body) { return "optimizer: Test\nsummary: a test spec\n" + body; }

std::string ir_after(const std::string& pass, const std::string& body, const FlagValues& flags) {
  // The IR tests are about the spec as written: without the clipping every spec gets (clipping.h),
  // unless the test is about it.
  const bool about_clipping = body.find("grad_clipping") != std::string::npos;
  Spec spec = load_spec_text("test.yaml", spec_text(body) + (about_clipping ? "" : "\ngrad_clipping: false\n"));
  std::string result;
  bool found = false;
  auto observe = [&](const std::string& name, const Program& program) {
    if (name != pass || found || (name != "lower" && program.flags != flags)) return;
    result = dump(program);
    found = true;
  };
  // compile_spec's passes, without its refusal of what the emitters cannot print yet (rows and
  // columns): the passes are tested on everything the language has.
  const Program lowered = lower(spec);
  observe("lower", lowered);
  for (const auto& variant : enumerate_variants(spec)) compile_variant(lowered, variant, observe);
  if (!found) throw InternalError("ir_after: no variant with those flags after " + pass);
  return result;
}

std::string spec_error(const std::string& name, const std::string& text) {
  try {
    Spec spec = load_spec_text(name, text);
    compile_spec(spec);
  } catch (const SpecError& e) {
    return e.what();
  }
  return "";
}

}  // namespace optgen::test
