// The built-in functions' table (generator/builtins.h) is the one list of them: every row must
// be usable end to end, and every helper a row names must exist, so that a function added to the
// table and forgotten elsewhere fails here.

#include <catch2/catch.hpp>
#include <fstream>
#include <regex>
#include <sstream>

#include "builtins.h"
#include "check.h"
#include "code_writer.h"
#include "emit_cuda.h"
#include "emit_reference.h"
#include "expr_printer.h"
#include "spec.h"
#include "optgen/storage.h"

namespace {

std::string read_source(const std::string& path) {
  std::ifstream in(std::string(OPTGEN_SOURCE_DIR) + "/" + path, std::ios::binary);
  REQUIRE(in);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

/// `name(arg, arg, ...)` with as many arguments as `fn` takes.
std::string call(const optgen::BuiltinInfo& fn, const std::string& arg) {
  std::string out = std::string(fn.name) + "(";
  for (int i = 0; i < fn.arity; ++i) out += (i ? ", " : "") + arg;
  return out + ")";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("the built-in table is in the order of enum Builtin, and names are unique", "[builtins]") {
  const auto& list = optgen::builtins();
  for (size_t i = 0; i < list.size(); ++i) {
    INFO(list[i].name);
    CHECK(static_cast<size_t>(list[i].id) == i);
    CHECK(&optgen::builtin_info(list[i].id) == &list[i]);
    CHECK(optgen::find_builtin(list[i].name) == &list[i]);
    CHECK(optgen::is_reserved_name(list[i].name));
    CHECK(list[i].fold != nullptr);
  }
  CHECK(optgen::builtin_names().size() == list.size());
  CHECK(optgen::find_builtin("sqrtf") == nullptr);
}

TEST_CASE("every helper a built-in function needs is defined in the device library and the reference", "[builtins]") {
  const std::string device_math = read_source("runtime/include/optgen/device/math.cuh");
  const std::string reference = read_source("runtime/include/optgen/reference.h");
  const std::string language = read_source("specs/README.md");
  for (const auto& fn : optgen::builtins()) {
    INFO(fn.name);
    const std::string name = fn.name;
    if (!fn.cuda_float) CHECK(contains(device_math, "__device__ __forceinline__ float " + name + "(float"));
    if (!fn.cuda_double) CHECK(contains(device_math, "__device__ __forceinline__ double " + name + "(double"));
    // However the header is formatted: "template <typename T>", then "T name(T" on the same line or the next.
    if (!fn.reference) CHECK(std::regex_search(reference, std::regex("template <typename T>\\s+T " + name + "\\(T")));
    CHECK(contains(language, "`" + name + "("));  // specs/README.md's table of functions documents it
  }
}

TEST_CASE("every built-in function parses, lowers and is emitted by both emitters", "[builtins]") {
  for (const auto& fn : optgen::builtins()) {
    INFO(fn.name);
    // Called on grad, in element code (float); on lr, hoisted into the group code (double).
    const std::string update = "  - param = param + " + call(fn, "grad") + " + " + call(fn, "lr") + "\n";
    const std::string text =
        optgen::test::spec_text("hyperparameters:\n  lr: {type: float, default: 0.5}\nupdate:\n" + update);
    optgen::Spec spec = optgen::load_spec_text("test.yaml", text);
    std::vector<optgen::Program> variants = optgen::compile_spec(spec);
    const std::string cuda = optgen::emit_cuda(spec, variants, optgen::default_storage(), optgen::KernelTuning{});
    const std::string reference = optgen::emit_reference(spec, variants);
    // An Update stage's element code takes square roots (and divides) through its math object `m_`
    // (optgen/element_math.h).
    const std::string element = fn.id == optgen::Builtin::Sqrt ? "m_.sqrt" : optgen::cuda_function(fn, false);
    CHECK(contains(cuda, element + "(grad"));
    CHECK(contains(cuda, optgen::cuda_function(fn, true) + "(lr"));
    CHECK(contains(reference, optgen::reference_function(fn, "T_") + "(grad"));
    CHECK(contains(reference, optgen::reference_function(fn, "double") + "(lr"));
  }
}

TEST_CASE("every built-in function on constants folds to the table's value, of the table's type", "[builtins]") {
  const double args[] = {0.5, 0.25, 0.75};
  for (const auto& fn : optgen::builtins()) {
    INFO(fn.name);
    std::string on_constants = std::string(fn.name) + "(";
    for (int i = 0; i < fn.arity; ++i) on_constants += (i ? ", " : "") + optgen::format_number(args[i]);
    const std::string text = optgen::test::spec_text("update:\n  - param = param - grad + " + on_constants + ")\n");
    optgen::Spec spec = optgen::load_spec_text("test.yaml", text);
    bool checked = false;
    optgen::compile_spec(spec, [&](const std::string& pass, const optgen::Program& program) {
      if (pass != "constant_fold") return;
      const optgen::Expr& sum = program.element_outputs.at(0).value;
      REQUIRE(sum->kind == optgen::NodeKind::Binary);
      const optgen::Expr& folded = sum->args.at(1);
      REQUIRE(folded->is_const());
      CHECK(folded->value == fn.fold(args));
      checked = true;
    });
    CHECK(checked);

    std::vector<optgen::Expr> ints(fn.arity, optgen::Node::make_const(2, optgen::ValueType::Int));
    CHECK((optgen::Node::make_call(fn.id, ints)->type == optgen::ValueType::Int) == fn.keeps_int);
  }
}
