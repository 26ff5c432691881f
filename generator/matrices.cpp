#include "matrices.h"

#include "diagnostic.h"

namespace optgen {
namespace {

const std::vector<MatrixFunctionInfo> kMatrixFunctions = {
    {MatrixFunction::NewtonSchulz,
     "newton_schulz",
     {{"steps", true}, {"a", false}, {"b", false}, {"c", false}, {"eps", false}},
     "each matrix of x orthogonalised as torch.optim.Muon's _zeropower_via_newtonschulz does: in bf16 (f32 where the "
     "storage says so), divided "
     "by max(its Frobenius norm, eps), then `steps` times X = a X + (b A + c A A) X with A = X Xᵀ (a matrix of "
     "more rows than columns transposed first and back after)"},
};

}  // namespace

const std::vector<MatrixFunctionInfo>& matrix_functions() { return kMatrixFunctions; }

const MatrixFunctionInfo& matrix_function_info(MatrixFunction op) {
  for (const auto& f : kMatrixFunctions)
    if (f.op == op) return f;
  throw InternalError("matrix_function_info: unknown matrix function");
}

const MatrixFunctionInfo* find_matrix_function(const std::string& name) {
  for (const auto& f : kMatrixFunctions)
    if (name == f.name) return &f;
  return nullptr;
}

}  // namespace optgen
