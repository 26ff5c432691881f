#pragma once
/// The spec language's built-in functions, listed once (`kBuiltins` in builtins.cpp): the loader's
/// reserved names, the IR's names and arities, constant folding and both emitters' spellings all
/// read this table. Adding a function is one row here; where a row names a helper instead of a
/// library function, the helper is defined in runtime/include/optgen/device/math.cuh (CUDA, float
/// and double) or runtime/include/optgen/reference.h (the CPU reference, a template), and
/// tests/builtins_test.cpp fails until it is.

#include <string>
#include <vector>

namespace optgen {

enum class Builtin { Sqrt, Rsqrt, Exp, Log, Abs, Sign, Min, Max, Clamp, Lerp };

struct BuiltinInfo {
  Builtin id;
  const char* name;  ///< as a spec writes it; also the helper's name where a spelling below is null
  int arity;
  bool keeps_int;  ///< the result is an int when every argument is (min, max); else always a float
  /// CUDA's math function in float (tensor, element) and double (group) code; null: the helper
  /// `::optgen::<name>` of the kernel support, overloaded for float and double.
  const char* cuda_float;
  const char* cuda_double;
  /// The CPU reference's <cmath> function, one for float and double; null: the helper template
  /// `::optgen::reference::<name><T>`.
  const char* reference;
  /// The value of a call on constants, in double, as constant folding computes it.
  double (*fold)(const double* args);
};

/// Every built-in function, in the order of `Builtin` (also the order messages list them in).
const std::vector<BuiltinInfo>& builtins();
const BuiltinInfo& builtin_info(Builtin fn);
/// The built-in function called `name`, or null.
const BuiltinInfo* find_builtin(const std::string& name);
std::vector<std::string> builtin_names();

/// The function a call of `fn` is printed as, in CUDA (double or float code) and in the CPU
/// reference (`type` is the reference's number type, "T_" or "double").
std::string cuda_function(const BuiltinInfo& fn, bool double_precision);
std::string reference_function(const BuiltinInfo& fn, const std::string& type);

}  // namespace optgen
