#include "matrices.h"

namespace optgen {
namespace {

/// The built-ins, in the spec language. newton_schulz is torch.optim.Muon's
/// _zeropower_via_newtonschulz (torch 2.11): the matrix divided by max(its norm, eps), then
/// `steps` times X = a X + (b A + c A A) X with A = X Xᵀ, a tall matrix transposed first and back.
constexpr char kBuiltins[] = R"(matrix_functions:
  newton_schulz:
    parameters: [x, steps, a, b, c, eps]
    doc: >-
      each matrix of x orthogonalised as torch.optim.Muon's _zeropower_via_newtonschulz does: divided
      by max(its Frobenius norm, eps), then `steps` times X = a X + (b A + c A A) X with A = X Xᵀ (a
      matrix of more rows than columns transposed first and back after)
    transpose_tall: true
    do:
      - x = x / max(frobenius_norm(x), eps)
      - repeat: steps
        do:
          - g = x @ transpose(x)
          - u = b * g + c * g @ g
          - x = a * x + u @ x
    result: x
)";

}  // namespace

const std::vector<MatrixFunctionSpec>& builtin_matrix_functions() {
  static const std::vector<MatrixFunctionSpec> functions =
      load_matrix_functions_text("<optgen's built-in matrix functions>", kBuiltins);
  return functions;
}

const MatrixFunctionSpec* find_builtin_matrix_function(const std::string& name) {
  for (const auto& f : builtin_matrix_functions())
    if (f.name == name) return &f;
  return nullptr;
}

}  // namespace optgen
