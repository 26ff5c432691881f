#ifndef OPTGEN_MATRIX_FUNCTION_H_
#define OPTGEN_MATRIX_FUNCTION_H_
// Matrix functions: what a spec's function of whole matrices computes (generator/matrices.h lists
// them with their arguments). The one definition shared by the generator (its MatrixValue::op), the
// launcher's tables (MatrixValueInfo::function) and the runtime, which applies each between two
// stages of a step:
//   NewtonSchulz  newton_schulz(x, steps, a, b, c, eps): torch.optim.Muon's orthogonalisation
// Plain C++ that host compilers and NVRTC both accept, like kernel_abi.h: no includes.

namespace optgen {

enum class MatrixFunction { NewtonSchulz };

/// "newton_schulz": as a spec writes it.
inline const char* to_string(MatrixFunction function) {
  switch (function) {
    case MatrixFunction::NewtonSchulz: return "newton_schulz";
  }
  return "?";
}

}  // namespace optgen

#endif  // OPTGEN_MATRIX_FUNCTION_H_
