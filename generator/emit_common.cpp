#include "emit_common.h"

namespace optgen {

std::string generator_banner() { return std::string("optgen ") + OPTGEN_VERSION; }

std::string spec_file_name(const Spec& spec) {
  const std::string& path = spec.file->path;
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string variant_banner(const Program& variant) {
  std::string flags;
  for (const auto& [flag, value] : variant.flags) flags += (flags.empty() ? "" : ", ") + flag + "=" + (value ? "true" : "false");
  return "// ---- variant " + variant.variant + (flags.empty() ? "" : " (" + flags + ")") + " ----";
}

}  // namespace optgen
