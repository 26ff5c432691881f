#pragma once
/// The matrix programs (optgen/matrix_program.h) of the matrix functions a spec's variants call, as
/// tables of generated code: `namespace matrix_programs::<function>` with its variables, its
/// instructions (each with a comment that reads as the statement it runs) and its MatrixProgram
/// `kProgram`. The CPU reference's header holds them; the launcher, which includes it, points at them.

#include <string>
#include <vector>

#include "code_writer.h"
#include "ir.h"
#include "spec.h"

namespace optgen {

/// The tables of every matrix function `variants` call, in the order of first use.
void emit_matrix_programs(CodeWriter& w, const Spec& spec, const std::vector<Program>& variants);

/// How the launcher names the program of matrix function `function`: the reference's kProgram.
std::string matrix_program_name(const std::string& function);

}  // namespace optgen
