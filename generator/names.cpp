#include "names.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "builtins.h"
#include "code_writer.h"
#include "optgen/nvrtc.h"

namespace optgen {
namespace {

/// C++20 keywords and alternative tokens.
const std::vector<std::string>& keywords() {
  // Word lists, packed by hand.
  // clang-format off
  static const std::vector<std::string> list = {
      "alignas", "alignof", "and", "and_eq", "asm", "auto", "bitand", "bitor", "bool", "break", "case", "catch", "char",
      "char8_t", "char16_t", "char32_t", "class", "compl", "concept", "const", "consteval", "constexpr", "constinit",
      "const_cast", "continue", "co_await", "co_return", "co_yield", "decltype", "default", "delete", "do", "double",
      "dynamic_cast", "else", "enum", "explicit", "export", "extern", "false", "float", "for", "friend", "goto", "if",
      "inline", "int", "long", "mutable", "namespace", "new", "noexcept", "not", "not_eq", "nullptr", "operator", "or",
      "or_eq", "private", "protected", "public", "register", "reinterpret_cast", "requires", "return", "short", "signed",
      "sizeof", "static", "static_assert", "static_cast", "struct", "switch", "template", "this", "thread_local", "throw",
      "true", "try", "typedef", "typeid", "typename", "union", "unsigned", "using", "virtual", "void", "volatile",
      "wchar_t", "while", "xor", "xor_eq"};
  // clang-format on
  return list;
}

/// Macros of the headers the generated code includes (<cmath>, <cstddef>, <cstdint>, <string>,
/// <cuda.h>, ...): what `g++ -std=c++17 -dM -E` lists for them on Debian 12 (glibc 2.36, CUDA 13.0)
/// but those reserved_prefixes() covers, and the ones GCC predefines outside strict standard mode.
/// tests/macro_names.cmake checks that every macro those headers define is refused.
const std::vector<std::string>& macros() {
  // Word lists, packed by hand.
  // clang-format off
  static const std::vector<std::string> list = {
      "NULL", "INFINITY", "NAN", "MATH_ERRNO", "MATH_ERREXCEPT", "math_errhandling", "assert", "errno", "offsetof",
      "CHAR_BIT", "CHAR_MIN", "CHAR_MAX", "SCHAR_MIN", "SCHAR_MAX", "UCHAR_MAX", "SHRT_MIN", "SHRT_MAX", "USHRT_MAX",
      "INT_MIN", "INT_MAX", "UINT_MAX", "LONG_MIN", "LONG_MAX", "ULONG_MAX", "LLONG_MIN", "LLONG_MAX", "ULLONG_MAX",
      "MB_LEN_MAX", "stdin", "stdout", "stderr", "linux", "unix", "i386", "CUDAAPI", "BIG_ENDIAN", "BUFSIZ",
      "BYTE_ORDER", "CLOCKS_PER_SEC", "CSIGNAL", "FILENAME_MAX", "FOPEN_MAX", "LITTLE_ENDIAN", "L_ctermid",
      "L_cuserid", "L_tmpnam", "MAXFLOAT", "MB_CUR_MAX", "NFDBITS", "PDP_ENDIAN", "P_tmpdir", "RAND_MAX", "TIME_UTC",
      "TMP_MAX", "WCONTINUED", "WEOF", "WEXITED", "WEXITSTATUS", "WIFCONTINUED", "WIFEXITED", "WIFSIGNALED",
      "WIFSTOPPED", "WNOHANG", "WNOWAIT", "WSTOPPED", "WSTOPSIG", "WTERMSIG", "WUNTRACED", "alloca", "be16toh",
      "be32toh", "be64toh", "htobe16", "htobe32", "htobe64", "htole16", "htole32", "htole64", "issubnormal",
      "le16toh", "le32toh", "le64toh", "pthread_cleanup_pop", "pthread_cleanup_pop_restore_np",
      "pthread_cleanup_push", "pthread_cleanup_push_defer_np", "sched_priority", "NDEBUG", "E2BIG",
      "EACCES", "EADDRINUSE", "EADDRNOTAVAIL", "EADV", "EAFNOSUPPORT", "EAGAIN", "EALREADY", "EBADE", "EBADF",
      "EBADFD", "EBADMSG", "EBADR", "EBADRQC", "EBADSLT", "EBFONT", "EBUSY", "ECANCELED", "ECHILD", "ECHRNG", "ECOMM",
      "ECONNABORTED", "ECONNREFUSED", "ECONNRESET", "EDEADLK", "EDEADLOCK", "EDESTADDRREQ", "EDOM", "EDOTDOT",
      "EDQUOT", "EEXIST", "EFAULT", "EFBIG", "EHOSTDOWN", "EHOSTUNREACH", "EHWPOISON", "EIDRM", "EILSEQ",
      "EINPROGRESS", "EINTR", "EINVAL", "EIO", "EISCONN", "EISDIR", "EISNAM", "EKEYEXPIRED", "EKEYREJECTED",
      "EKEYREVOKED", "EL2HLT", "EL2NSYNC", "EL3HLT", "EL3RST", "ELIBACC", "ELIBBAD", "ELIBEXEC", "ELIBMAX", "ELIBSCN",
      "ELNRNG", "ELOOP", "EMEDIUMTYPE", "EMFILE", "EMLINK", "EMSGSIZE", "EMULTIHOP", "ENAMETOOLONG", "ENAVAIL",
      "ENETDOWN", "ENETRESET", "ENETUNREACH", "ENFILE", "ENOANO", "ENOBUFS", "ENOCSI", "ENODATA", "ENODEV", "ENOENT",
      "ENOEXEC", "ENOKEY", "ENOLCK", "ENOLINK", "ENOMEDIUM", "ENOMEM", "ENOMSG", "ENONET", "ENOPKG", "ENOPROTOOPT",
      "ENOSPC", "ENOSR", "ENOSTR", "ENOSYS", "ENOTBLK", "ENOTCONN", "ENOTDIR", "ENOTEMPTY", "ENOTNAM",
      "ENOTRECOVERABLE", "ENOTSOCK", "ENOTSUP", "ENOTTY", "ENOTUNIQ", "ENXIO", "EOF", "EOPNOTSUPP", "EOVERFLOW",
      "EOWNERDEAD", "EPERM", "EPFNOSUPPORT", "EPIPE", "EPROTO", "EPROTONOSUPPORT", "EPROTOTYPE", "ERANGE", "EREMCHG",
      "EREMOTE", "EREMOTEIO", "ERESTART", "ERFKILL", "EROFS", "ESHUTDOWN", "ESOCKTNOSUPPORT", "ESPIPE", "ESRCH",
      "ESRMNT", "ESTALE", "ESTRPIPE", "ETIME", "ETIMEDOUT", "ETOOMANYREFS", "ETXTBSY", "EUCLEAN", "EUNATCH", "EUSERS",
      "EWOULDBLOCK", "EXDEV", "EXFULL",
  };
  // clang-format on
  return list;
}

/// Prefixes the C, C++ and CUDA headers' macros and optgen's own use; and (below, is_cuda_api)
/// `cu` before a capital letter, the CUDA driver API's functions, some of them macros.
const std::vector<std::string>& reserved_prefixes() {
  // Word lists, packed by hand.
  // clang-format off
  static const std::vector<std::string> list = {
      "CU_", "CUDA_", "CUDART_", "NVRTC_", "OPTGEN_", "INT8_", "INT16_", "INT32_", "INT64_", "UINT8_", "UINT16_",
      "UINT32_", "UINT64_", "INT_LEAST", "INT_FAST", "UINT_LEAST", "UINT_FAST", "INTMAX_", "UINTMAX_", "INTPTR_",
      "UINTPTR_", "PTRDIFF_", "SIZE_", "WCHAR_", "WINT_", "SIG_", "FP_", "HUGE_VAL", "SNAN", "M_",
      "EXIT_", "SEEK_", "ATOMIC_", "PTHREAD_", "CLOCK_", "CLONE_", "CPU_", "SCHED_", "LC_", "STA_", "MOD_", "ADJ_",
      "FD_", "RENAME_", "RESOURCE_", "TIMER_",
  };
  // clang-format on
  return list;
}

/// `cu` and a capital letter: the CUDA driver API's names (cuMemAlloc is a macro of cuda.h).
bool is_cuda_api(const std::string& name) {
  return name.size() > 2 && name.compare(0, 2, "cu") == 0 && std::isupper(static_cast<unsigned char>(name[2]));
}

/// Types the generated code declares itself and names after a spec's names are in scope (a
/// variant's group code declares its result after the spec's locals; the Update stage's element
/// code is a function template of `Math`, emit_cuda.cpp, which a local of that name would shadow).
const std::vector<std::string>& generated_code_names() {
  // Word lists, packed by hand.
  // clang-format off
  static const std::vector<std::string> list = {"GroupValues", "TensorValues", "Math"};
  // clang-format on
  return list;
}

/// What the generated code names unqualified inside namespaces a spec's names make (a variant's,
/// `variants::<stem>...`, and a matrix function's, `matrix_programs::<name>`): `optgen` itself and
/// the runtime's types its tables are of. Such a namespace of one of these names hides it.
const std::vector<std::string>& scoped_runtime_names() {
  // Word lists, packed by hand.
  // clang-format off
  static const std::vector<std::string> list = {
      "optgen", "variants", "matrix_programs", "DType", "Domain", "StageKind", "StatePresence", "ReductionSlot",
      "MatrixValueInfo", "MatrixArgument", "BlockKind", "MatrixInstruction", "MatrixOp", "MatrixProgram",
      "MatrixVariable", "MatrixScalar"};
  // clang-format on
  return list;
}

/// What namespace optgen holds (the runtime's headers): the launcher's class must be none of it.
const std::vector<std::string>& runtime_names() {
  // Word lists, packed by hand.
  // clang-format off
  static const std::vector<std::string> list = {
      "Tensor", "StateBuffer", "AmpInputs", "VariantInfo", "KernelInfo", "OptimizerInfo", "FusedOptimizer", "DType",
      "Error", "Module", "ModuleOrigin", "KernelImage", "KernelImages", "KernelCache", "CompiledImage", "Checkpoint",
      "CheckpointTensor", "kernel_images", "kernel_abi", "reference", "driver", "nvrtc", "default_hyperparameters",
      "check_checkpoint_spec", "create_for_c", "guarded_for_c", "new_optimizer_for_c", "to_string", "size_of",
      "float_to_bf16", "bf16_to_float", "float_to_f16", "f16_to_float", "load_module", "read_safetensors",
      "write_safetensors", "dtype_size", "builtin_launchers", "derive_flags", "select_variant", "RuntimeSpec",
      "SpecOptions", "SpecLoadError", "load_spec_at_run_time"};
  // clang-format on
  return list;
}

/// What namespace optgen::reference holds: a spec file's stem names a namespace beside them. The
/// built-in functions' helpers are there too (builtins.h).
const std::vector<std::string>& reference_names() {
  static const std::vector<std::string> list = [] {
    std::vector<std::string> names = {"ValueType", "HyperparameterInfo", "InitInfo",  "StateInfo",
                                      "Tensor",    "VariantInfo",        "Optimizer", "builtin_optimizers"};
    for (const auto& fn : builtins())
      if (!fn.reference) names.push_back(fn.name);
    return names;
  }();
  return list;
}

bool contains(const std::vector<std::string>& list, const std::string& name) {
  return std::find(list.begin(), list.end(), name) != list.end();
}

bool is_ascii_identifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return static_cast<unsigned char>(c) < 0x80 && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
  });
}

/// A template's C++ as tokens: identifiers and single punctuation characters ("::" as one), without
/// comments, string and character literals, preprocessor lines and `${placeholders}`.
std::vector<std::string> code_tokens(const std::string& text) {
  std::vector<std::string> tokens;
  const auto identifier = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      i = text.find('\n', i);
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '*') {
      i = text.find("*/", i + 2);
      if (i != std::string::npos) i += 2;
    } else if (c == '"' || c == '\'') {
      for (++i; i < text.size() && text[i] != c && text[i] != '\n'; ++i)
        if (text[i] == '\\') ++i;
      ++i;
    } else if (c == '#' && (tokens.empty() || text.rfind('\n', i) == std::string::npos ||
                            text.find_first_not_of(" \t", text.rfind('\n', i) + 1) == i)) {
      while ((i = text.find('\n', i)) != std::string::npos && text[i - 1] == '\\') ++i;  // continued lines
    } else if (c == '$' && i + 1 < text.size() && text[i + 1] == '{') {
      i = text.find('}', i);
      if (i != std::string::npos) ++i;
    } else if (identifier(c)) {
      std::size_t end = i;
      while (end < text.size() && identifier(text[end])) ++end;
      tokens.push_back(text.substr(i, end - i));
      i = end;
    } else if (c == ':' && i + 1 < text.size() && text[i + 1] == ':') {
      tokens.push_back("::");
      i += 2;
    } else {
      if (!std::isspace(static_cast<unsigned char>(c))) tokens.push_back(std::string(1, c));
      ++i;
    }
    if (i == std::string::npos) break;
  }
  return tokens;
}

bool is_name_token(const std::string& token) {
  return !token.empty() && (std::isalpha(static_cast<unsigned char>(token[0])) || token[0] == '_');
}

/// What the embedded templates declare, found in their text (so that it holds however they are
/// split): `at_namespace_scope`, every type, function, variable, alias and namespace declared
/// outside any class or function; `in_class`, every name the body of a class template written
/// `class ${optimizer}` (the launcher's) declares or names, but for function parameters and names
/// qualified with `::`.
struct TemplateNames {
  std::set<std::string> at_namespace_scope;
  std::set<std::string> in_class;
};

const TemplateNames& template_names() {
  static const TemplateNames names = [] {
    TemplateNames found;
    const std::set<std::string> declarators = {"struct", "class", "union", "enum", "namespace"};
    // The templates the launcher and the reference are printed from, and the device library every
    // kernel source includes.
    std::vector<std::pair<std::string, std::string>> texts = embedded_templates();
    const auto& library = nvrtc::device_library();
    texts.insert(texts.end(), library.begin(), library.end());
    for (const auto& [template_name, text] : texts) {
      std::vector<bool> scopes;  // per open brace: a namespace's
      std::vector<std::string> statement;
      bool first = true;  // `statement` has no `=` or `(` yet: what comes may declare its last name
      int parentheses = 0;
      int launcher_class = -1;  // the depth of `class ${optimizer}`'s body, when inside it
      const std::vector<std::string> tokens = code_tokens(text);
      for (std::size_t t = 0; t < tokens.size(); ++t) {
        const std::string& token = tokens[t];
        const bool namespace_scope = std::all_of(scopes.begin(), scopes.end(), [](bool n) { return n; });
        const bool class_scope = launcher_class >= 0 && static_cast<int>(scopes.size()) == launcher_class;
        const std::string last = statement.empty() ? "" : statement.back();
        const auto declared = [&](const std::string& declared_name) {
          if (!is_name_token(declared_name) || contains(keywords(), declared_name)) return;
          if (namespace_scope) found.at_namespace_scope.insert(declared_name);
        };
        if (class_scope && is_name_token(token) && !contains(keywords(), token)) {
          const std::string next = t + 1 < tokens.size() ? tokens[t + 1] : "";
          const std::string previous = t > 0 ? tokens[t - 1] : "";
          const bool parameter = parentheses > 0 && (next == "," || next == ")" || next == "=");
          if (!parameter && next != "::" && previous != "::") found.in_class.insert(token);
        }
        if (token == "{" && parentheses == 0) {
          // extern "C" { (the string is gone) is at namespace scope too.
          const bool is_namespace = std::find(statement.begin(), statement.end(), "namespace") != statement.end() ||
                                    (statement.size() == 1 && statement[0] == "extern");
          for (std::size_t i = 0; i + 1 < statement.size(); ++i)
            if (declarators.count(statement[i]) && statement[i + 1] != "class") declared(statement[i + 1]);
          // `class ${optimizer} {`: the placeholder is gone, so the class keyword is the statement.
          if (statement.size() == 1 && statement[0] == "class") launcher_class = static_cast<int>(scopes.size()) + 1;
          scopes.push_back(is_namespace);
          statement.clear();
          first = true;
        } else if (token == "}" && parentheses == 0) {
          if (launcher_class == static_cast<int>(scopes.size())) launcher_class = -1;
          if (!scopes.empty()) scopes.pop_back();
          statement.clear();
          first = true;
        } else if (token == ";" && parentheses == 0) {
          const bool alias = !statement.empty() && statement[0] == "using";
          if (alias && std::find(statement.begin(), statement.end(), "=") != statement.end())
            declared(*(std::find(statement.begin(), statement.end(), "=") - 1));
          else if (statement.size() > 1 && !alias && statement[0] != "template" && statement[0] != "friend")
            declared(last);  // a variable, or a type declared ahead: `struct Tensor;`
          statement.clear();
          first = true;
        } else {
          if ((token == "(" || token == "=" || token == "[") && first && parentheses == 0 && last != "operator" &&
              (statement.empty() || statement[0] != "using"))
            declared(last);  // a function, or a variable with its initialiser or its extent
          if (token == "(") ++parentheses;
          if (token == ")") --parentheses;
          if (token == "=" || token == "(") first = false;
          statement.push_back(token);
        }
      }
    }
    return found;
  }();
  return names;
}

}  // namespace

const std::vector<std::string>& launcher_member_names() {
  static const std::vector<std::string> list = [] {
    // The class template's own names, and those emit_launcher.cpp prints into it besides the
    // spec's: the state accessors' type.
    std::vector<std::string> names(template_names().in_class.begin(), template_names().in_class.end());
    names.push_back("StateBuffer");
    return names;
  }();
  return list;
}

std::string name_problem(const std::string& name, NameUse use) {
  if (!is_ascii_identifier(name))
    return "'" + name + "' is not a name: names are ASCII letters, digits and '_', and do not start with a digit";
  if (name[0] == '_' || name.find("__") != std::string::npos)
    return "names that start with '_' or hold '__' are reserved by C++";
  if (name.back() == '_') return "names that end in '_' are kept for the names optgen's generated code declares";
  if (contains(keywords(), name)) return "'" + name + "' is a C++ keyword";
  if (contains(macros(), name))
    return "'" + name + "' is a macro of the C, C++ or CUDA headers the generated code includes";
  for (const auto& prefix : reserved_prefixes())
    if (name.compare(0, prefix.size(), prefix) == 0)
      return "names that start with '" + prefix + "' belong to the C, C++ or CUDA headers' macros or to optgen's";
  if (is_cuda_api(name)) return "names of 'cu' and a capital letter belong to the CUDA driver API";
  if (contains(generated_code_names(), name)) return "'" + name + "' names part of the generated code";
  switch (use) {
    case NameUse::Hyperparameter:
      if (contains(launcher_member_names(), "set_" + name))
        return "its setter set_" + name + " would collide with the launcher's own set_" + name;
      if (name == "Options") return "'Options' is the struct the hyperparameters are fields of";
      break;
    case NameUse::State:
    case NameUse::ScalarState:
      if (contains(launcher_member_names(), name))
        return "the launcher class already has a member or type '" + name + "'";
      if (use == NameUse::ScalarState && contains(launcher_member_names(), "set_" + name))
        return "its setter set_" + name + " would collide with the launcher's own set_" + name;
      break;
    case NameUse::Optimizer:
      if (contains(runtime_names(), name) || contains(scoped_runtime_names(), name) ||
          contains(launcher_member_names(), name))
        return "namespace optgen already has '" + name + "' (optgen's runtime)";
      if (template_names().at_namespace_scope.count(name))
        return "the generated code already declares '" + name + "' (templates/)";
      break;
    case NameUse::SpecFile:
      if (contains(reference_names(), name)) return "namespace optgen::reference already has '" + name + "'";
      if (contains(scoped_runtime_names(), name))
        return "the generated code names optgen's '" + name + "' inside namespace variants::" + name +
               ", which this stem would make";
      break;
    case NameUse::MatrixFunction:
      if (contains(scoped_runtime_names(), name))
        return "the generated code names optgen's '" + name + "' inside namespace matrix_programs::" + name +
               ", which this function would make";
      break;
    case NameUse::Value: break;
  }
  return "";
}

}  // namespace optgen
