#pragma once
/// Support for the CPU reference implementations that optgen emits (<name>_reference.h): the
/// math the spec language offers, and a descriptor that lets generic code (tests, tools) drive
/// any generated reference without knowing its optimizer.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "optgen/matrix_program.h"
#include "optgen/spec_kinds.h"

namespace optgen::reference {

// ---- Built-in functions of the spec language, in the element type T. ----

template <typename T>
T rsqrt(T x) {
  return T(1) / std::sqrt(x);
}
template <typename T>
T sign(T x) {
  return T((x > T(0)) - (x < T(0)));
}
/// a % b: the remainder of the floored division, with b's sign (Python's %; +0 for none), exact;
/// NaN for b = 0. The generator folds constants with it too (evaluate.cpp); the kernels have their
/// own, optgen::mod in device/math.cuh.
template <typename T>
T mod(T a, T b) {
  const T r = std::fmod(a, b);
  return r == T(0) ? T(0) : (r < T(0)) != (b < T(0)) ? r + b : r;
}
/// Like torch.lerp: start + weight * (end - start).
template <typename T>
T lerp(T start, T end, T weight) {
  return start + weight * (end - start);
}
/// Like torch.minimum/maximum: NaN in either operand gives NaN.
template <typename T>
T min(T a, T b) {
  return (a != a || b != b) ? a + b : (b < a ? b : a);
}
template <typename T>
T max(T a, T b) {
  return (a != a || b != b) ? a + b : (b > a ? b : a);
}
template <typename T>
T clamp(T x, T lo, T hi) {
  return min(max(x, lo), hi);
}

// ---- Matrix functions of the spec language: their programs (optgen/matrix_program.h), in T. ----

/// Runs `program` with the call's `arguments` (after the matrix) on each of the `batch` consecutive
/// row-major `rows` x `cols` matrices at `x`, in place, in T: the exact computation that the GPU's
/// bf16 products approximate. Where the program transposes tall matrices and rows > cols, it sees
/// each matrix transposed, and its result is transposed back.
template <typename T>
void run_matrix_program(const MatrixProgram& program, const double* arguments, T* x, std::size_t batch,
                        std::size_t rows, std::size_t cols) {
  struct Matrix {
    std::size_t r = 0, c = 0;
    std::vector<T> v;  // row-major
    T at(bool transposed, std::size_t i, std::size_t j) const { return transposed ? v[j * c + i] : v[i * c + j]; }
  };
  const bool tall = program.transpose_tall && rows > cols;
  const std::size_t R = tall ? cols : rows, C = tall ? rows : cols;
  auto scalar = [&](const MatrixScalar& s) { return T(s.factor * (s.argument < 0 ? 1.0 : arguments[s.argument])); };
  auto extent = [&](MatrixDimension d) { return d == MatrixDimension::R ? R : C; };
  for (std::size_t k = 0; k < batch; ++k) {
    T* matrix = x + k * rows * cols;
    std::vector<Matrix> vars(static_cast<std::size_t>(program.num_variables));
    for (int i = 0; i < program.num_variables; ++i)
      vars[i].r = extent(program.variables[i].rows), vars[i].c = extent(program.variables[i].cols);
    vars[0].v.resize(R * C);
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t j = 0; j < cols; ++j)
        (tall ? vars[0].v[j * C + i] : vars[0].v[i * C + j]) = matrix[i * cols + j];
    auto run = [&](auto& self, int begin, int end) -> void {
      for (int n = begin; n < end; ++n) {
        const MatrixInstruction& in = program.code[n];
        if (in.op == MatrixOp::Repeat) {
          const auto times = static_cast<std::int64_t>(scalar(in.alpha));
          for (std::int64_t t = 0; t < times; ++t) self(self, n + 1, n + 1 + in.target);
          n += in.target;
          continue;
        }
        Matrix out;
        out.r = vars[in.target].r, out.c = vars[in.target].c;
        out.v.assign(out.r * out.c, T(0));
        const Matrix& a = vars[in.a];
        switch (in.op) {
          case MatrixOp::Assign: out.v = a.v; break;
          case MatrixOp::Normalize: {
            T sum = 0;
            for (T e : a.v) sum += e * e;
            const T divisor = std::max(std::sqrt(sum), scalar(in.beta));
            for (std::size_t i = 0; i < a.v.size(); ++i) out.v[i] = a.v[i] / divisor;
            break;
          }
          case MatrixOp::Product: {
            const Matrix& b = vars[in.b];
            const std::size_t inner = in.transpose_a ? a.r : a.c;
            const T alpha = scalar(in.alpha), beta = scalar(in.beta);
            for (std::size_t i = 0; i < out.r; ++i)
              for (std::size_t j = 0; j < out.c; ++j) {
                T sum = 0;
                for (std::size_t q = 0; q < inner; ++q) sum += a.at(in.transpose_a, i, q) * b.at(in.transpose_b, q, j);
                out.v[i * out.c + j] = alpha * sum + (in.c < 0 ? T(0) : beta * vars[in.c].v[i * out.c + j]);
              }
            break;
          }
          case MatrixOp::Combine: {
            const T alpha = scalar(in.alpha), beta = scalar(in.beta);
            for (std::size_t i = 0; i < out.r; ++i)
              for (std::size_t j = 0; j < out.c; ++j)
                out.v[i * out.c + j] =
                    alpha * a.at(in.transpose_a, i, j) + (in.b < 0 ? T(0) : beta * vars[in.b].at(in.transpose_b, i, j));
            break;
          }
          case MatrixOp::Repeat: break;
        }
        vars[in.target] = std::move(out);
      }
    };
    run(run, 0, program.size);
    const Matrix& result = vars[program.result];
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t j = 0; j < cols; ++j) matrix[i * cols + j] = tall ? result.v[j * C + i] : result.v[i * C + j];
  }
}

// ---- Generic description of a generated reference. ----

struct HyperparameterInfo {
  const char* name;
  ValueType type;
  double default_value;  ///< bools as 0/1; unused for derived flags
  bool specialized;      ///< selects a variant
  bool derived;          ///< computed from other hyperparameters by `derive_flags`
  /// Read by a value of one per optimizer (a scalar state of `scope: optimizer`): every param group
  /// must hold the same value (FusedOptimizer checks before it steps).
  bool per_optimizer = false;
};

/// How a state buffer or scalar state starts: a constant, or a hyperparameter's value.
struct InitInfo {
  double value;
  int hyperparameter;  ///< index into the hyperparameters, or -1 for the constant
  /// Starts as the parameter: the step reads the parameter in its place at the group's first step
  /// (step 1), so its memory may hold anything before (the engine fills it with `value`, 0).
  bool param = false;
};

struct StateInfo {
  const char* name;
  InitInfo init;
  StateShape shape = StateShape::Elements;
  /// A scalar state of `scope: optimizer`: one value for the optimizer, each group holding a copy.
  bool per_optimizer = false;
};

/// The rows of a tensor of `numel` elements in a spec of blocks of `block_elements` elements
/// (OptimizerInfo::block_elements), its blocks: numel / block_elements where that is a positive
/// whole number, else 0 (not factored: one row of numel). The generated reference's step and the
/// engine (block_dims) view a tensor by it, whatever shape it is bound with.
inline std::size_t block_rows(std::size_t numel, std::size_t block_elements) {
  return numel % block_elements == 0 ? numel / block_elements : 0;
}

/// One tensor of a param group: `states` has one pointer per declared state, in declaration
/// order, null for states absent in the active variant (or, for a state that exists for some
/// tensors only, absent for this one). A tensor of two or more dimensions is factored over its
/// last two: `rows` and `cols` are those two dimensions (0: not factored); only a spec with rows
/// and columns reads them (a spec of blocks takes block_rows and block_elements instead).
template <typename T>
struct Tensor {
  std::size_t numel;
  T* param;
  const T* grad;
  T* const* states;
  std::size_t rows = 0;
  std::size_t cols = 0;
};

/// One variant of a generated reference (a combination of specialized flags).
struct VariantInfo {
  const char* name;  ///< e.g. adam_amsgrad
  int num_group_values;
  /// The group code of step `step` (from 1): advances `scalar_state` and writes the group values,
  /// in the order the variant hoisted them.
  void (*per_step)(const double* h, double* scalar_state, std::int64_t step, double* group_values);
  /// Reduces over every group of the optimizer (optimizer_sum, ...): step_groups takes two passes.
  bool reduces_over_optimizer = false;
};

/// The reductions over every group of the optimizer (optimizer_sum, optimizer_norm, optimizer_max)
/// between the two passes of step_groups: the first adds each group's part of each (its group
/// changes nothing), the second steps every group with the totals. Every group must take the same
/// variant, whose reduction indices they share (so must a FusedOptimizer's: one kernel).
struct OptimizerTotals {
  bool adding = true;
  int variant = -1;
  std::vector<double> values;  ///< [r], the variant's reduction index
  std::vector<bool> seen;

  /// In the first pass, adds `part`, a group's result of reduction r of `variant`, to its total
  /// and returns it unchanged; in the second, returns the total.
  double take(int of_variant, int r, bool is_max, double part) {
    if (variant >= 0 && of_variant != variant)
      throw std::invalid_argument("reductions over every param group need every group to take one variant (" +
                                  std::to_string(variant) + " and " + std::to_string(of_variant) + " here)");
    variant = of_variant;
    const std::size_t i = static_cast<std::size_t>(r);
    if (i >= values.size()) values.resize(i + 1), seen.resize(i + 1);
    if (!adding) return values[i];
    values[i] = !seen[i] ? part : is_max ? max<double>(values[i], part) : values[i] + part;
    seen[i] = true;
    return part;
  }
};

/// What a generated reference exports. Hyperparameters travel as doubles in declaration order
/// (bools as 0/1); scalar state likewise, one array per param group.
struct Optimizer {
  const char* name;
  const HyperparameterInfo* hyperparameters;
  int num_hyperparameters;
  const StateInfo* states;
  int num_states;
  const StateInfo* scalar_states;
  int num_scalar_states;
  /// Fills in the derived flags of `h` from the other hyperparameters.
  void (*derive_flags)(double* h);
  /// Whether state `index` exists for these (derived) hyperparameters.
  bool (*state_present)(const double* h, int index);
  /// The variant these (derived) hyperparameters select, an index into `variants`.
  int (*select_variant)(const double* h);
  const VariantInfo* variants;
  int num_variants;
  /// One step of one param group: advances `scalar_state`, updates every tensor in place. The
  /// gradients are divided by `grad_scale` first (AMP; 1 leaves them as they are). `totals`: null
  /// (a reduction over every group is over this one), or step_groups' (the optimizer's groups).
  void (*step_float)(const double* h, double* scalar_state, std::int64_t step, const Tensor<float>* tensors,
                     std::size_t count, float grad_scale, OptimizerTotals* totals);
  void (*step_double)(const double* h, double* scalar_state, std::int64_t step, const Tensor<double>* tensors,
                      std::size_t count, double grad_scale, OptimizerTotals* totals);
  /// For a spec whose states exist for some tensors only (a `when` that reads `factored`): whether
  /// state `index` exists for a tensor that is factored, or not. Null: state_present says it.
  bool (*state_present_in)(const double* h, int index, bool factored) = nullptr;
  /// The spec's programs beside the step (`programs:`), and `run`, which runs program number
  /// `program` of one param group that has taken `steps` steps over its tensors (the scalar state is
  /// only read; a tensor's `grad` may be null).
  const char* const* programs = nullptr;
  int num_programs = 0;
  void (*run_float)(int program, const double* h, const double* scalar_state, std::int64_t steps,
                    const Tensor<float>* tensors, std::size_t count) = nullptr;
  void (*run_double)(int program, const double* h, const double* scalar_state, std::int64_t steps,
                     const Tensor<double>* tensors, std::size_t count) = nullptr;
};

/// One param group of a step of step_groups: as Optimizer::step_float's arguments.
template <typename T>
struct GroupStep {
  const double* h;  ///< derived flags filled in
  double* scalar_state;
  std::int64_t step;
  const Tensor<T>* tensors;
  std::size_t count;
};

/// One step of every param group of an optimizer, in order. Where a group's variant reduces over
/// every group (optimizer_sum, ...), two passes: every group adds its part of each such reduction to
/// the totals, then every group steps with them.
template <typename T>
void step_groups(const Optimizer& opt, const GroupStep<T>* groups, std::size_t count, T grad_scale) {
  auto step = [&](const GroupStep<T>& g, OptimizerTotals* totals) {
    if constexpr (std::is_same_v<T, float>)
      opt.step_float(g.h, g.scalar_state, g.step, g.tensors, g.count, grad_scale, totals);
    else
      opt.step_double(g.h, g.scalar_state, g.step, g.tensors, g.count, grad_scale, totals);
  };
  bool over_optimizer = false;
  for (std::size_t i = 0; i < count; ++i)
    over_optimizer = over_optimizer || opt.variants[opt.select_variant(groups[i].h)].reduces_over_optimizer;
  if (!over_optimizer) {
    for (std::size_t i = 0; i < count; ++i) step(groups[i], nullptr);
    return;
  }
  for (std::size_t i = 1; i < count; ++i)
    if (opt.select_variant(groups[i].h) != opt.select_variant(groups[0].h))
      throw std::invalid_argument(std::string(opt.name) +
                                  " reduces over every param group, so every group must take "
                                  "one variant: groups 0 and " +
                                  std::to_string(i) + " differ in a specialized flag");
  OptimizerTotals totals;
  for (std::size_t i = 0; i < count; ++i) step(groups[i], &totals);
  totals.adding = false;
  for (std::size_t i = 0; i < count; ++i) step(groups[i], &totals);
}

}  // namespace optgen::reference
