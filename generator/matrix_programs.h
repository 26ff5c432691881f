#pragma once
/// A matrix function's statements compiled into its program (optgen/matrix_program.h): each
/// statement's matrix expression into products (`@`, with a number times each factor and one more
/// matrix added: one GEMM each), sums of the matrices no product adds (two at a time) and norms,
/// with temporaries where an expression needs one. Shapes are checked as R and C (the function's view of its matrix): a
/// product of mismatched inner dimensions, a sum of differing shapes, a number added to a matrix
/// and anything that is not matrix code are located errors.

#include <string>
#include <vector>

#include "optgen/matrix_program.h"
#include "spec.h"

namespace optgen {

struct CompiledMatrixProgram {
  std::string name;
  std::string doc;
  bool transpose_tall = false;
  std::vector<std::string> parameters;  ///< after the matrix
  std::vector<bool> counts;             ///< per parameter after the matrix: it counts repetitions
  struct Variable {
    std::string name;
    MatrixDimension rows, cols;
  };
  std::vector<Variable> variables;  ///< variable 0 is the argument
  std::vector<MatrixInstruction> code;
  int result = 0;
};

/// `f` compiled; throws SpecError located in its statements.
CompiledMatrixProgram compile_matrix_function(const MatrixFunctionSpec& f);

/// A compiled program as the runtime reads it, owning its tables (for a spec loaded at run time,
/// which has no generated code to hold them). Neither copied nor moved: `program` points into it.
struct OwnedMatrixProgram {
  explicit OwnedMatrixProgram(CompiledMatrixProgram compiled);
  OwnedMatrixProgram(const OwnedMatrixProgram&) = delete;
  OwnedMatrixProgram& operator=(const OwnedMatrixProgram&) = delete;

  CompiledMatrixProgram compiled;
  std::vector<MatrixVariable> variables;
  std::vector<const char*> parameters;
  MatrixProgram program;
};

/// "R x C" (or the like) for messages.
std::string shape_text(MatrixDimension rows, MatrixDimension cols);

}  // namespace optgen
