#pragma once
/// The generator's middle: lower a spec, then run the passes for each variant. Reads as the
/// list of passes, in order; `after_each` sees the program after every step (for `optgen dump`).

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ir.h"
#include "spec.h"

namespace optgen {

using FlagValues = std::map<std::string, bool>;

/// Every combination of the spec's specialized flags, in a fixed order (all false first).
std::vector<FlagValues> enumerate_variants(const Spec& spec);

/// The pass names `--after` accepts, in the order they run: lower, specialize, constant_fold,
/// cse, assign_levels, dce, verify_states, plan_stages.
const std::vector<std::string>& pass_names();

using PassObserver = std::function<void(const std::string& pass, const Program&)>;

/// Runs the passes after lowering for one variant.
Program compile_variant(const Program& lowered, const FlagValues& flags, const PassObserver& after_each = {});

/// What the compiled variants are for: every emitter, or the CPU reference alone (`optgen emit
/// --reference-only`), which is built for more of the language than the kernels are (rows and
/// columns).
enum class Emitters { All, ReferenceOnly };

/// Lowers the spec and compiles every variant; refuses, with a located error, a spec that uses what
/// the `emitters` cannot print yet, or whose `storage:` keeps a state that can be negative in uq8
/// (unsigned_states.h).
std::vector<Program> compile_spec(const Spec& spec, const PassObserver& after_each = {},
                                  Emitters emitters = Emitters::All);

/// compile_spec's refusal alone: throws a located SpecError when the compiled `variants` use what
/// the `emitters` cannot print (the kernels: a state of rows or columns the Update stage would read
/// unsnapshotted; more operands or reductions than a kernel's masks hold, kernel_limits.h).
void check_emitters(const Spec& spec, const std::vector<Program>& variants, Emitters emitters);

/// A storage checked against the compiled `variants` (Spec::storage_problem and canonical_storage
/// need no compilation): throws a located SpecError where a state it keeps in uq8 can become
/// negative (unsigned_states.h) or one it keeps in 8 bits is read other than a block at a time
/// (blockwise_states.h), naming the storage as the user wrote it (`written`). compile_spec checks
/// the spec's own `storage:` list so; a storage asked for at build or run time is checked here too.
void check_storage(const Spec& spec, const std::vector<Program>& variants, const Storage& storage,
                   const std::string& written);

/// The storage types to generate kernels for, as `optgen emit --storage` and load_spec_at_run_time's
/// SpecOptions::storage ask: `requested` (each written by its caller as in `requested_written`), else
/// the spec's `storage:`, else default_storage(); each canonical, and checked against the spec
/// (Spec::storage_problem), the ones before it (storage_clash) and the compiled `variants`
/// (check_storage). Throws std::invalid_argument naming the problem, for the caller to say where
/// the storage came from, or check_storage's located SpecError.
std::vector<Storage> kernel_storage(const Spec& spec, const std::vector<Program>& variants,
                                    const std::vector<Storage>& requested,
                                    const std::vector<std::string>& requested_written);

}  // namespace optgen
