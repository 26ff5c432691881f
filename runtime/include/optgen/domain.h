#ifndef OPTGEN_DOMAIN_H_
#define OPTGEN_DOMAIN_H_
// Index domains: what a value of an optimizer step is one of. The one definition shared by the
// generator (the domain of every IR value and reduction), the runtime (a reduction's result slots)
// and the tables launchers print. From the coarsest to the finest:
//   Optimizer one per optimizer and step: a reduction over every group (optimizer_sum), a scalar
//            state of `scope: optimizer`
//   Group    one per param group and step: hyperparameters, `step`, scalar state
//   Tensor   one per tensor: `numel`, a norm of the tensor
//   Matrix   one per matrix of a factored tensor (its last two dimensions, batched over the others)
//   Row      one per row of each matrix
//   Column   one per column of each matrix
//   Element  one per element: `param`, `grad`, a state buffer
// Row and Column are not ordered: a value that reads both is one per element. A reduction maps a
// value to a coarser domain: its result is one per optimizer, group, tensor, matrix, row or column. Plain C++
// that host compilers and NVRTC both accept, like kernel_abi.h: no includes.

namespace optgen {

enum class Domain { Optimizer, Group, Tensor, Matrix, Row, Column, Element };

/// "optimizer", "group", "tensor", "matrix", "row", "column", "element": as messages and generated names say it.
inline const char* to_string(Domain domain) {
  switch (domain) {
    case Domain::Optimizer: return "optimizer";
    case Domain::Group: return "group";
    case Domain::Tensor: return "tensor";
    case Domain::Matrix: return "matrix";
    case Domain::Row: return "row";
    case Domain::Column: return "column";
    case Domain::Element: return "element";
  }
  return "?";
}

/// Whether a reduction over `scope` leaves one result per param group (ReductionTable::group_results):
/// over a group, or over the optimizer, whose result the kernels that read it add up from its groups'.
inline bool has_group_results(Domain scope) { return scope == Domain::Group || scope == Domain::Optimizer; }

}  // namespace optgen

#endif  // OPTGEN_DOMAIN_H_
