#pragma once
/// What every emitter prints the same way: the spec's file name for banners, and the comment
/// that opens a variant's section.

#include <string>

#include "ir.h"
#include "spec.h"

namespace optgen {

/// The spec's file name without its directories, e.g. "adam.yaml".
std::string spec_file_name(const Spec& spec);

/// "// ---- variant adam_amsgrad (amsgrad=true) ----"
std::string variant_banner(const Program& variant);

}  // namespace optgen
