#pragma once
/// What every emitter prints the same way: the generator's version and the spec's file name for
/// banners, the comment that opens a variant's section, number literals, and what code reads.

#include <string>
#include <vector>

#include "ir.h"
#include "spec.h"

namespace optgen {

/// "optgen 0.2.0": the generator and its version, for the banner of everything it emits.
std::string generator_banner();

/// The spec's file name without its directories, e.g. "adam.yaml".
std::string spec_file_name(const Spec& spec);

/// "// ---- variant adam_amsgrad (amsgrad=true) ----"
std::string variant_banner(const Program& variant);

/// `text` made safe for a `//` comment: one line (line breaks become spaces), and no backslash at
/// its end, which would splice the next line of code into the comment.
std::string comment_text(const std::string& text);

/// Number literals of generated code. C++ double: "0.9", "1.0", and infinities through
/// std::numeric_limits (C++ has no literal for them).
std::string cpp_double_literal(double value);
/// CUDA float: `value` rounded to float as a conversion would (the reference's T_(value)), in the
/// fewest digits that read back as that float, with an f: "0.899999976f" is printed "0.9f";
/// infinities, and values beyond float's range, through their bit patterns.
std::string cuda_float_literal(double value);
/// CUDA double: as cpp_double_literal, with CUDA's bit-pattern infinities.
std::string cuda_double_literal(double value);

/// The tensor values (Program::values of Domain::Tensor) that `roots` read, in the program's order.
std::vector<const HoistedValue*> tensor_values_read(const Program& p, const std::vector<Expr>& roots);

}  // namespace optgen
