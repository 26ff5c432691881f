#pragma once
/// The spec language's built-in matrix functions: functions of a whole matrix rather than of one
/// element, written in the spec language itself (`matrix_functions:`, specs/README.md) and loaded
/// once, so that a spec calls `newton_schulz` as it calls a function of its own. A tensor of two or
/// more dimensions is a batch of matrices over its last two (optgen/domain.h); a matrix function
/// maps each matrix of its argument, an element value of `update`, to a matrix of the same shape,
/// read element by element after it. The step computes its argument in a Reduce stage, which
/// stores it (bf16 or f32, one buffer per shape), and the runtime runs the function's program
/// there before the next stage, on every matrix of one shape at once (batched GEMMs through cuBLAS):
/// launches grow with the shapes, not with the tensors.

#include <string>
#include <vector>

#include "spec.h"

namespace optgen {

/// The built-in matrix functions, in the order they are defined.
const std::vector<MatrixFunctionSpec>& builtin_matrix_functions();
/// The built-in matrix function called `name`, or null.
const MatrixFunctionSpec* find_builtin_matrix_function(const std::string& name);

/// The matrix functions of `text`, a YAML document of one key, `matrix_functions:`, as a spec
/// writes them (spec_loader.cpp). Throws SpecError located in `path`.
std::vector<MatrixFunctionSpec> load_matrix_functions_text(const std::string& path, const std::string& text);

}  // namespace optgen
