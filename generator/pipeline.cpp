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

std::vector<Program> compile_spec(const Spec& spec, const PassObserver& after_each) {
  Program lowered = lower(spec);
  if (after_each) after_each("lower", lowered);
  std::vector<Program> variants;
  for (const auto& flags : enumerate_variants(spec)) variants.push_back(compile_variant(lowered, flags, after_each));
  return variants;
}

}  // namespace optgen
