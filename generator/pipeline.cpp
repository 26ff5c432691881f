#include "pipeline.h"

#include "lower.h"
#include "passes/passes.h"

namespace optgen {

std::vector<FlagValues> enumerate_variants(const Spec& spec) {
  auto flags = spec.flags();
  std::vector<FlagValues> variants;
  for (unsigned bits = 0; bits < (1u << flags.size()); ++bits) {
    FlagValues values;
    for (size_t i = 0; i < flags.size(); ++i) values[flags[i]->name] = (bits >> i) & 1;
    variants.push_back(values);
  }
  return variants;
}

const std::vector<std::string>& pass_names() {
  static const std::vector<std::string> names = {"lower",         "specialize", "constant_fold", "cse",
                                                 "assign_levels", "dce",        "verify_states", "plan_stages"};
  return names;
}

Program compile_variant(const Program& lowered, const FlagValues& flags, const PassObserver& after_each) {
  auto observe = [&](const char* pass, Program program) {
    if (after_each) after_each(pass, program);
    return program;
  };
  Program p = observe("specialize", specialize(lowered, flags));
  p = observe("constant_fold", constant_fold(p));
  p = observe("cse", common_subexpression_elimination(p));
  p = observe("assign_levels", assign_levels(p));
  p = observe("dce", dead_code_elimination(p));
  p = observe("verify_states", verify_states(p));
  return observe("plan_stages", plan_stages(p));
}

namespace {

/// Rows, columns and `factored` have a language, an IR and a CPU reference so far: the kernels and
/// the runtime's row and column tables are the next step (docs/DESIGN.md, "Not built yet"), so a
/// spec that uses them is refused where it says so, before the kernel emitter could see it.
void refuse_shapes(const Spec& spec, const std::vector<Program>& variants) {
  bool uses = false;
  for (const auto& v : variants) uses = uses || uses_shapes(v);
  for (const auto& s : spec.states) uses = uses || s.shape != StateShape::Elements;
  if (!uses) return;
  SourceLoc at = spec.update_loc;
  for (const auto& s : spec.states)
    if (s.shape != StateShape::Elements) {
      at = s.shape_loc;
      break;
    }
  throw SpecError(
      at,
      "rows, columns and 'factored' are not built into the kernels yet: optgen emits only the CPU reference "
      "for them (optgen emit --reference-only)",
      "docs/DESIGN.md, \"Not built yet: rows, columns and shapes (Adafactor)\", is the plan");
}

}  // namespace

std::vector<Program> compile_spec(const Spec& spec, const PassObserver& after_each, Emitters emitters) {
  Program lowered = lower(spec);
  if (after_each) after_each("lower", lowered);
  std::vector<Program> variants;
  for (const auto& flags : enumerate_variants(spec)) variants.push_back(compile_variant(lowered, flags, after_each));
  check_emitters(spec, variants, emitters);
  return variants;
}

void check_emitters(const Spec& spec, const std::vector<Program>& variants, Emitters emitters) {
  if (emitters == Emitters::All) refuse_shapes(spec, variants);
}

}  // namespace optgen
