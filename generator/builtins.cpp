#include "builtins.h"

#include <cmath>
#include <iterator>

namespace optgen {
namespace {

// Folding computes in double what the helpers of the kernel support and the reference compute.
double sign(double x) { return (x > 0) - (x < 0); }
double min(double a, double b) { return b < a ? b : a; }
double max(double a, double b) { return b > a ? b : a; }
double clamp(double x, double lo, double hi) { return std::fmin(std::fmax(x, lo), hi); }
double lerp(double start, double end, double weight) { return start + weight * (end - start); }

// One row per function, in the order of `Builtin` (clang-format would break the columns).
// clang-format off
constexpr BuiltinInfo kBuiltins[] = {
  // id            name    arity keeps_int cuda_float cuda_double reference; then fold
  {Builtin::Sqrt,  "sqrt",  1, false, "::sqrtf",  "::sqrt",  "::std::sqrt",
   [](const double* v) { return std::sqrt(v[0]); }},
  {Builtin::Rsqrt, "rsqrt", 1, false, "::rsqrtf", "::rsqrt", nullptr,
   [](const double* v) { return 1 / std::sqrt(v[0]); }},
  {Builtin::Exp,   "exp",   1, false, "::expf",   "::exp",   "::std::exp",
   [](const double* v) { return std::exp(v[0]); }},
  {Builtin::Log,   "log",   1, false, "::logf",   "::log",   "::std::log",
   [](const double* v) { return std::log(v[0]); }},
  {Builtin::Abs,   "abs",   1, false, "::fabsf",  "::fabs",  "::std::fabs",
   [](const double* v) { return std::fabs(v[0]); }},
  {Builtin::Sign,  "sign",  1, false, nullptr,    nullptr,   nullptr,
   [](const double* v) { return sign(v[0]); }},
  {Builtin::Min,   "min",   2, true,  nullptr,    nullptr,   nullptr,
   [](const double* v) { return min(v[0], v[1]); }},
  {Builtin::Max,   "max",   2, true,  nullptr,    nullptr,   nullptr,
   [](const double* v) { return max(v[0], v[1]); }},
  {Builtin::Clamp, "clamp", 3, false, nullptr,    nullptr,   nullptr,
   [](const double* v) { return clamp(v[0], v[1], v[2]); }},
  {Builtin::Lerp,  "lerp",  3, false, nullptr,    nullptr,   nullptr,
   [](const double* v) { return lerp(v[0], v[1], v[2]); }},
};
// clang-format on

constexpr size_t kCount = sizeof kBuiltins / sizeof kBuiltins[0];

constexpr bool in_enum_order() {
  for (size_t i = 0; i < kCount; ++i)
    if (static_cast<size_t>(kBuiltins[i].id) != i) return false;
  return true;
}
static_assert(in_enum_order(), "kBuiltins lists the functions in the order of enum Builtin");
static_assert(kCount == static_cast<size_t>(Builtin::Lerp) + 1, "every Builtin has a row in kBuiltins");

}  // namespace

const std::vector<BuiltinInfo>& builtins() {
  static const std::vector<BuiltinInfo> list(std::begin(kBuiltins), std::end(kBuiltins));
  return list;
}

const BuiltinInfo& builtin_info(Builtin fn) { return builtins()[static_cast<size_t>(fn)]; }

const BuiltinInfo* find_builtin(const std::string& name) {
  for (const auto& info : builtins())
    if (name == info.name) return &info;
  return nullptr;
}

std::vector<std::string> builtin_names() {
  std::vector<std::string> names;
  for (const auto& info : builtins()) names.push_back(info.name);
  return names;
}

std::string cuda_function(const BuiltinInfo& fn, bool double_precision) {
  const char* library = double_precision ? fn.cuda_double : fn.cuda_float;
  return library ? library : std::string("::optgen::") + fn.name;
}

std::string reference_function(const BuiltinInfo& fn, const std::string& type) {
  return fn.reference ? fn.reference : "::optgen::reference::" + std::string(fn.name) + "<" + type + ">";
}

}  // namespace optgen
