#include "pipeline.h"

#include <algorithm>
#include <set>
#include <stdexcept>

#include "lower.h"
#include "matrix_programs.h"
#include "passes/passes.h"
#include "shapes.h"
#include "unit_matrices.h"
#include "blockwise_states.h"
#include "kernel_limits.h"
#include "optimizer_tables.h"
#include "unsigned_states.h"

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

/// The kernels read a row or column state in the Update stage, which writes it, from the snapshot
/// the first Reduce stage takes (kernel_abi::ShapeTable): a variant with such a state and no
/// reduction has no stage to take it in, and is refused where the state is declared.
void refuse_unsnapshotted_states(const Spec& spec, const std::vector<Program>& variants) {
  for (const auto& v : variants) {
    if (!v.reductions.empty()) continue;
    for (const auto& s : spec.states)
      if ((s.shape == StateShape::Rows || s.shape == StateShape::Cols) &&
          std::find(v.states.begin(), v.states.end(), s.name) != v.states.end())
        throw SpecError(
            s.shape_loc,
            "state '" + s.name + "' of shape " + spec.written_shape(s.shape) + " needs a reduction in the step (" +
                v.variant + " has none): the kernels read and update a " +
                (spec.block_elements > 0 ? "block" : "row or column") + " state only in a step with a Reduce stage",
            spec.block_elements > 0 ? "compute it from a block reduction, as block_mean(g * g)"
                                    : "compute it from a row or column reduction, as row_mean(g * g)");
  }
}

/// The spec's storage types (its `storage:`, else default_storage()) name each kernel once; where a
/// variant's name runs into a storage's, the error points at the program whose kernel it is, if
/// one of the two is a program's, else at a flag of the variant.
void check_kernel_names(const Spec& spec, const std::vector<Program>& variants) {
  const std::vector<Storage> storage = storage_to_generate({}, spec.storage);
  std::vector<std::string> written = spec.storage_written;
  if (spec.storage.empty())
    for (const Storage& s : storage) written.push_back(s.text());
  KernelNameClash where;
  const std::string clash = kernel_name_clash(variants, storage, written, &where);
  if (clash.empty()) return;
  for (const ProgramSpec& program : spec.programs)
    if (program.name == where.program)
      throw SpecError(program.loc, clash, "rename the program, or the flag or state whose names run into its name");
  SourceLoc at = spec.update_loc;
  for (const auto& [flag, on] : variants[where.variant].flags)
    if (on)
      if (const Hyperparameter* h = spec.find_hyperparameter(flag)) at = h->loc;
  throw SpecError(at, clash, "rename the flag or the state whose names run together");
}

/// A state whose `when` holds in no variant (`when: false`, `when: a && !a`) would be declared,
/// documented and stored for nothing: it is refused where its `when` is, before the variants are
/// compiled (whose checks would ask for its impossible guard where the state is used).
void refuse_states_of_no_variant(const Spec& spec, const Program& lowered) {
  std::set<std::string> present;
  for (const auto& flags : enumerate_variants(spec))
    for (const std::string& state : specialize(lowered, flags).states) present.insert(state);
  for (const auto& s : spec.states)
    if (s.when && !present.count(s.name))
      throw SpecError(s.when->loc, "state '" + s.name + "' is in no variant: its 'when' is never true",
                      "drop the state, or give it a 'when' that some variant meets");
}

}  // namespace

std::vector<Program> compile_spec(const Spec& spec, const PassObserver& after_each, Emitters emitters) {
  // Every matrix function the spec defines compiles, called or not: `optgen check` reports its errors.
  for (const MatrixFunctionSpec& f : spec.matrix_functions) compile_matrix_function(f);
  Program lowered = lower(spec);
  if (after_each) after_each("lower", lowered);
  refuse_states_of_no_variant(spec, lowered);
  std::vector<Program> programs;
  for (const ProgramSpec& code : spec.programs) programs.push_back(lower(spec, code));
  std::vector<Program> variants;
  for (const auto& flags : enumerate_variants(spec)) {
    variants.push_back(compile_variant(lowered, flags, after_each));
    if (sums_across_shards(variants.back())) {
      Program shards = variants.back();
      shards.for_shards = true;
      variants.back().shard_step = std::make_shared<const Program>(std::move(shards));
    }
    for (const Program& program : programs) {
      variants.back().programs.push_back(compile_variant(program, flags));
      if (variants.back().programs.back().states != variants.back().states)
        throw InternalError("compile_spec: program '" + program.entry + "' of variant " + variants.back().variant +
                            " has other operands than its step");
    }
    variants.back().unit_matrices = unit_matrix_code(variants.back());
  }
  check_emitters(spec, variants, emitters);
  for (size_t i = 0; i < spec.storage.size(); ++i)
    check_storage(spec, variants, spec.storage[i], spec.storage_written[i]);
  check_kernel_names(spec, variants);
  return variants;
}

void check_storage(const Spec& spec, const std::vector<Program>& variants, const Storage& storage,
                   const std::string& written) {
  check_unsigned_states(spec, variants, storage, written);
  check_blockwise_states(spec, variants, storage, written);
}

std::vector<Storage> kernel_storage(const Spec& spec, const std::vector<Program>& variants,
                                    const std::vector<Storage>& requested,
                                    const std::vector<std::string>& requested_written) {
  const std::vector<Storage> to_generate = storage_to_generate(requested, spec.storage);
  std::vector<Storage> storage;
  std::vector<std::string> written;  // each as the user wrote it
  for (size_t i = 0; i < to_generate.size(); ++i) {
    const std::string text = !requested.empty()      ? requested_written[i]
                             : !spec.storage.empty() ? spec.storage_written[i]
                                                     : to_generate[i].text();
    std::string error;
    auto canonical = canonical_storage(to_generate[i], spec.state_names(), spec.matrix_value_names(), &error, text);
    if (!canonical) throw std::invalid_argument(error);
    if (std::string problem = spec.storage_problem(*canonical, text); !problem.empty())
      throw std::invalid_argument(problem);
    // Equal only once canonical (f32 and f32:exp_avg=f32), or naming the same kernels: the same
    // kernels twice, which failed later.
    if (std::string clash = storage_clash(storage, written, *canonical, text); !clash.empty())
      throw std::invalid_argument(clash);
    check_storage(spec, variants, *canonical, text);
    storage.push_back(*canonical);
    written.push_back(text);
  }
  if (std::string clash = kernel_name_clash(variants, storage, written); !clash.empty())
    throw std::invalid_argument(clash);
  return storage;
}

void check_emitters(const Spec& spec, const std::vector<Program>& variants, Emitters emitters) {
  if (emitters != Emitters::All) return;
  refuse_unsnapshotted_states(spec, variants);
  check_kernel_limits(spec, variants);
}

}  // namespace optgen
