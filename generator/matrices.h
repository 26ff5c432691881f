#pragma once
/// The spec language's matrix functions, listed once (`kMatrixFunctions` in matrices.cpp): functions
/// of a whole matrix rather than of one element. A tensor of two or more dimensions is a batch of
/// matrices over its last two (optgen/domain.h); a matrix function maps each matrix of its argument,
/// an element value of `update`, to a matrix of the same shape, read element by element after it.
/// The step computes its argument in a Reduce stage, which stores it (bf16, one buffer per tensor),
/// and the runtime applies the function there before the next stage, to every matrix of one shape
/// at once (batched GEMMs through cuBLAS): launches grow with the shapes, not with the tensors.
///
/// Its other arguments are hyperparameters or numbers: the runtime hands them to cuBLAS on the host.
/// Like the reductions, the names are not reserved.

#include <string>
#include <vector>

#include "optgen/matrix_function.h"

namespace optgen {

struct MatrixFunctionInfo {
  MatrixFunction op;
  const char* name;  ///< as a spec writes it
  /// Its arguments after the matrix, each a hyperparameter or a number; `integral`: an int one.
  struct Parameter {
    const char* name;
    bool integral;
  };
  std::vector<Parameter> parameters;
  const char* meaning;  ///< for the documentation and messages
};

const std::vector<MatrixFunctionInfo>& matrix_functions();
const MatrixFunctionInfo& matrix_function_info(MatrixFunction op);
/// The matrix function called `name`, or null.
const MatrixFunctionInfo* find_matrix_function(const std::string& name);

}  // namespace optgen
