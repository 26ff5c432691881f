#pragma once
/// What every emitter prints the same way: the generator's version and the spec's file name for
/// banners, and the comment that opens a variant's section.

#include <string>

#include "ir.h"
#include "spec.h"

namespace optgen {

/// "optgen 0.2.0": the generator and its version, for the banner of everything it emits.
std::string generator_banner();

/// The spec's file name without its directories, e.g. "adam.yaml".
std::string spec_file_name(const Spec& spec);

/// "// ---- variant adam_amsgrad (amsgrad=true) ----"
std::string variant_banner(const Program& variant);

}  // namespace optgen
