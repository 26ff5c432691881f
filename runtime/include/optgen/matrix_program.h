#ifndef OPTGEN_MATRIX_PROGRAM_H_
#define OPTGEN_MATRIX_PROGRAM_H_
// Matrix programs: what a spec's matrix function (`matrix_functions:`, or a built-in such as
// newton_schulz) computes of each matrix, as a list of instructions over matrix variables. The one
// definition shared by the generator (generator/matrix_programs.h compiles a function's statements
// into it), the launcher's and the reference's tables, the runtime (runtime/src/matrix_program_run.cpp
// runs every matrix of one shape at once: products through cuBLAS, norms in the module's kernels)
// and the CPU reference (optgen/reference.h runs it in double).
//
// A program sees each matrix as R x C: its rows and columns, or, where `transpose_tall` and the
// matrix has more rows than columns, its transpose (the result transposed back). Variable 0 is the
// argument; a variable's shape is two of R and C. Scalars are a number times, at most, one of the
// function's arguments after the matrix, which the runtime reads on the host. A product is one GEMM
// (it adds a matrix as it is); a sum of matrices that no product adds is a kernel of its own.
// Plain C++ that host compilers and NVRTC both accept, like kernel_abi.h: no includes.

namespace optgen {

enum class MatrixOp {
  Assign,     ///< target = a (a name for the same matrix: nothing runs)
  Normalize,  ///< target = a / max(frobenius_norm(a), beta)
  Product,    ///< target = alpha op(a) op(b) + beta c (c: -1 for none), op a transpose where asked
  Combine,    ///< target = alpha op(a) + beta op(b) (b: -1 for none)
  Repeat,     ///< the next `target` instructions, alpha times (a whole number from 0 to kMaxRepeat)
};

/// `factor` times argument `argument` of the call after its matrix (-1: times 1).
struct MatrixScalar {
  double factor;
  int argument;
};

struct MatrixInstruction {
  MatrixOp op;
  int target;  ///< the variable written; for Repeat, how many instructions its body spans
  int a, b, c;
  bool transpose_a, transpose_b;
  MatrixScalar alpha, beta;
};

/// A dimension of a matrix variable: the R or the C of the program's view of its matrix.
enum class MatrixDimension { R, C };

struct MatrixVariable {
  const char* name;  ///< as the spec writes it; a temporary's ends in a number after '#'
  MatrixDimension rows, cols;
};

struct MatrixProgram {
  const char* name;  ///< the function's, as a spec calls it
  bool transpose_tall;
  const MatrixVariable* variables;  ///< variable 0 is the argument, R x C
  int num_variables;
  const MatrixInstruction* code;
  int size;
  int result;                     ///< the variable holding the result, R x C
  const char* const* parameters;  ///< the names of its arguments after the matrix
  int num_arguments;
};

/// The most times a Repeat may run its body.
constexpr int kMaxRepeat = 1000;

}  // namespace optgen

#endif  // OPTGEN_MATRIX_PROGRAM_H_
