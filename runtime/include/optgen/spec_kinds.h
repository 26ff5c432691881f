#ifndef OPTGEN_SPEC_KINDS_H_
#define OPTGEN_SPEC_KINDS_H_
// The kinds of what a spec declares: a hyperparameter's type, a state's shape and when a state
// exists. The one definition shared by the generator (the loaded spec, the IR), the generated CPU
// references and launchers' tables, and the runtime, which allocates and checks states by them.
// Plain C++ that host compilers and NVRTC both accept, like kernel_abi.h: no includes.

namespace optgen {

/// A hyperparameter's (and an IR value's) type.
enum class ValueType { Bool, Int, Float };

/// What a state buffer holds a value for: every element (the default), every row or every column
/// of a factored tensor's matrices (`shape: rows`, `shape: cols`: B matrices of R rows and C columns
/// hold B·R and B·C values), or the whole tensor (`shape: tensor`: one value).
enum class StateShape { Elements, Rows, Cols, Tensor };

/// Whether a variant's state exists for a tensor: always, or only for tensors that are factored
/// (two or more dimensions) or only for those that are not (a `when:` that reads `factored`).
enum class StatePresence { Always, Factored, NotFactored };

/// "bool", "int", "float": as specs and messages spell them.
inline const char* to_string(ValueType type) {
  switch (type) {
    case ValueType::Bool: return "bool";
    case ValueType::Int: return "int";
    case ValueType::Float: return "float";
  }
  return "?";
}

/// "elements", "rows", "cols", "tensor": as a state's `shape:` spells it.
inline const char* to_string(StateShape shape) {
  switch (shape) {
    case StateShape::Elements: return "elements";
    case StateShape::Rows: return "rows";
    case StateShape::Cols: return "cols";
    case StateShape::Tensor: return "tensor";
  }
  return "?";
}

}  // namespace optgen

#endif  // OPTGEN_SPEC_KINDS_H_
