// The group code of every built-in spec (the CPU reference's per_step, which the device code is
// emitted from) against what the launcher computed on the host before the group code moved to the
// device: tests/data/golden/per_step_host_4dfd29b.json, recorded at commit 4dfd29b for every
// hyperparameter set of the torch trajectories and every flag combination, over 12 steps. Values
// are matched by the expression they compute, so renaming a group value does not matter; every
// recorded value must still be computed, and must be bit-identical (float, as the kernel received
// it; scalar state in double).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <map>

#include "builtin_references.h"
#include "expr_printer.h"
#include "pipeline.h"
#include "spec.h"

namespace {

const optgen::reference::Optimizer& reference_named(const std::string& name) {
  for (const auto& [spec, ref] : optgen::reference::builtin_optimizers())
    if (name == spec) return *ref;
  throw std::runtime_error("no reference " + name);
}

}  // namespace

TEST_CASE("the group code reproduces the host's per-step results of every built-in spec bit for bit", "[reference]") {
  std::ifstream in(OPTGEN_SOURCE_DIR "/tests/data/golden/per_step_host_4dfd29b.json");
  REQUIRE(in);
  const nlohmann::json golden = nlohmann::json::parse(in);
  int cases = 0, values = 0;
  for (const auto& spec_entry : golden["specs"]) {
    const std::string name = spec_entry["spec"];
    const auto& ref = reference_named(name);
    const optgen::Spec spec = optgen::load_spec(OPTGEN_SOURCE_DIR "/specs/" + name + ".yaml");
    const auto variants = optgen::compile_spec(spec);
    for (const auto& c : spec_entry["cases"]) {
      std::vector<double> h;
      // Recorded before specs had clipping (clipping.h): max_grad_norm takes its default (off).
      for (int i = 0; i < ref.num_hyperparameters; ++i)
        h.push_back(c["hyperparameters"].value(ref.hyperparameters[i].name, ref.hyperparameters[i].default_value));
      ref.derive_flags(h.data());
      const int v = ref.select_variant(h.data());
      INFO(name << ", variant " << c["variant"].get<std::string>());
      REQUIRE(ref.variants[v].name == c["variant"].get<std::string>());
      // The expression each group value computes, in the IR's notation (the recording's keys).
      std::map<std::string, int> by_expression;
      optgen::ExprPrinter ir;
      for (size_t i = 0; i < variants[v].values[optgen::Domain::Group].size(); ++i)
        by_expression[ir.print(variants[v].values[optgen::Domain::Group][i].value)] = static_cast<int>(i);
      std::vector<double> scalar_state;
      for (int i = 0; i < ref.num_scalar_states; ++i) {
        const auto& init = ref.scalar_states[i].init;
        scalar_state.push_back(init.hyperparameter >= 0 ? h[init.hyperparameter] : init.value);
      }
      scalar_state.push_back(0);
      std::int64_t step = 0;
      for (const auto& recorded : c["steps"]) {
        ++step;
        std::vector<double> out(ref.variants[v].num_group_values + 1);
        ref.variants[v].per_step(h.data(), scalar_state.data(), step, out.data());
        CHECK(recorded["step_scalars"].size() == static_cast<size_t>(ref.variants[v].num_group_values));
        for (const auto& [expression, value] : recorded["step_scalars"].items()) {
          INFO("step " << step << ": " << expression);
          auto found = by_expression.find(expression);
          REQUIRE(found != by_expression.end());
          const double computed = out[found->second];
          if (value.is_boolean()) {
            CHECK((computed != 0) == value.get<bool>());
          } else {
            const float expected = static_cast<float>(value.get<double>());  // 9 digits: the float exactly
            CHECK(static_cast<float>(computed) == expected);
          }
          ++values;
        }
        for (int i = 0; i < ref.num_scalar_states; ++i) {
          INFO("step " << step << ": scalar state " << ref.scalar_states[i].name);
          CHECK(scalar_state[i] == recorded["scalar_state"][ref.scalar_states[i].name].get<double>());
        }
      }
      ++cases;
    }
  }
  CHECK(cases == 123);
  WARN(cases << " hyperparameter sets, " << values << " recorded values reproduced");
}
