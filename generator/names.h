#pragma once
/// Which spec names the generated code can carry. A spec's names become C++ and CUDA identifiers:
/// fields, locals, member functions, namespaces, a class. Every identifier the generated code
/// declares for itself (parameters such as `k_`, the reference's `T_` and `i_`, buffers such as
/// `exp_avg_data_`) ends in '_', which a spec name may not; and every function and type the
/// generated code refers to after a spec's name is in scope is qualified (`::sqrtf`,
/// `::std::sqrt`, `::optgen::lerp`), so a local named `std` does no harm. What is left is what C++
/// and the headers the generated code includes already mean, the two types a variant's code
/// declares after the spec's locals, and the names the launcher's class declares: those are refused
/// here, with the reason.

#include <string>
#include <vector>

namespace optgen {

/// Where a spec name ends up.
enum class NameUse {
  Hyperparameter,  ///< a field of the launcher's Options and a setter set_<name>
  State,           ///< an accessor <name>(group, tensor) of the launcher
  ScalarState,     ///< accessors <name>(group) and set_<name>(value, group)
  Value,           ///< a per-step value or an update local: a local in generated code
  Optimizer,       ///< the launcher's class, in namespace optgen
  SpecFile,        ///< the file's stem: file names, namespace optgen::reference::<stem>, optgen_<stem>_create
  MatrixFunction,  ///< a matrix function: namespace matrix_programs::<name> of the generated code
};

/// Why `name` cannot be used as `use`, or "" when it can.
std::string name_problem(const std::string& name, NameUse use);

/// The names the generated launcher class declares itself (methods, types it uses); a state,
/// a scalar state or a setter set_<name> must not be one of them.
const std::vector<std::string>& launcher_member_names();

}  // namespace optgen
