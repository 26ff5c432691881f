#pragma once
/// The engine behind every generated launcher: binds tensor lists, builds the device-resident
/// tables once, allocates and initialises state buffers, computes per-step scalars on the host
/// and launches one fused kernel per step (one per distinct variant and dtype among the param
/// groups; one in the usual case).
///
/// A generated launcher (e.g. optgen::Adam in adam.h) describes its optimizer with an
/// OptimizerInfo and wraps a FusedOptimizer in a typed API; the C ABI (optgen/c_api.h) wraps the
/// same object for other languages.

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "optgen/dtype.h"
#include "optgen/kernel_images.h"
#include "optgen/reference.h"

namespace optgen {

/// One parameter tensor as the caller hands it over; every pointer is device memory.
struct Tensor {
  void* param = nullptr;
  const void* grad = nullptr;
  std::int64_t numel = 0;
  DType dtype = DType::F32;        ///< of param and grad
  /// The caller's own state buffers, one per state the spec declares (declaration order; entries
  /// for states the variant does not use are ignored), taken as they are: not initialised. Null:
  /// optgen allocates and initialises them.
  void* const* states = nullptr;
  std::int64_t grad_numel = -1;    ///< when the caller knows it: must equal numel (-1: not given)
};

/// A state buffer of one tensor.
struct StateBuffer {
  void* data;
  std::int64_t numel;
  DType dtype;
};

/// One kernel variant of a spec (a combination of specialized flags).
struct VariantInfo {
  const char* name;              ///< e.g. adam_amsgrad
  const int* states;             ///< the spec's state indices it uses, in operand order
  int num_states;
  int step_scalars_size;         ///< sizeof its StepScalars
  /// Advances the group's scalar state and writes the StepScalars for step `step` (from 1).
  void (*per_step)(const double* h, double* scalar_state, std::int64_t step, void* step_scalars);
};

struct KernelInfo {
  const char* name;              ///< e.g. adam_amsgrad_bf16_f32
  int variant;
  DType param;                   ///< params and grads
  DType state;
};

/// What a generated launcher tells the engine about its optimizer.
struct OptimizerInfo {
  const char* name;              ///< the class, e.g. AdamW
  const char* spec;              ///< the spec's file stem, e.g. adamw
  const reference::HyperparameterInfo* hyperparameters;
  int num_hyperparameters;
  const reference::StateInfo* states;
  int num_states;
  const reference::StateInfo* scalar_states;
  int num_scalar_states;
  void (*derive_flags)(double* h);
  int (*select_variant)(const double* h);  ///< h with derived flags filled in
  const VariantInfo* variants;
  int num_variants;
  const KernelInfo* kernels;
  int num_kernels;
  const KernelImages& (*images)();         ///< defined by the build (<spec>_images.cpp)
  int block_size;
  int inline_groups;
  long long chunk_size;                    ///< default elements per block
};

/// Every hyperparameter's default from the spec, in declaration order (derived flags as 0).
std::vector<double> default_hyperparameters(const OptimizerInfo& info);

class FusedOptimizer {
 public:
  /// Hyperparameters by name, e.g. {{"lr", 1e-3}, {"weight_decay", 0.1}}.
  using Overrides = std::vector<std::pair<std::string, double>>;

  /// `defaults`: every hyperparameter in declaration order (bools 0/1; derived flags ignored).
  FusedOptimizer(const OptimizerInfo& info, std::vector<double> defaults, DType state_dtype = DType::F32);
  FusedOptimizer(FusedOptimizer&&) noexcept;
  FusedOptimizer& operator=(FusedOptimizer&&) noexcept;
  ~FusedOptimizer();

  /// Adds a param group with these hyperparameters (every one, declaration order); returns its
  /// index. Checks every tensor and throws optgen::Error naming the tensor and the problem.
  std::size_t add_param_group(const std::vector<Tensor>& tensors, std::vector<double> hyperparameters);
  /// Same, with the optimizer's defaults except the named overrides.
  std::size_t add_param_group(const std::vector<Tensor>& tensors, const Overrides& overrides);

  /// One optimizer step for every group: one kernel launch per distinct (variant, dtype), on
  /// `stream`. Steps must be ordered on the device (one stream, or synchronised).
  void step(CUstream stream = nullptr);

  /// Sets a hyperparameter of every group, or of one. Specialized flags (and values that would
  /// change a derived flag) select kernels and state buffers, so they cannot change after the
  /// group is added: optgen::Error then.
  void set(const std::string& name, double value);
  void set(const std::string& name, double value, std::size_t group);
  double get(const std::string& name, std::size_t group) const;
  std::vector<double> hyperparameters(std::size_t group) const;

  StateBuffer state(const std::string& name, std::size_t group, std::size_t tensor) const;
  double scalar_state(const std::string& name, std::size_t group) const;
  std::int64_t step_count(std::size_t group) const;

  std::size_t num_groups() const;
  std::size_t num_tensors(std::size_t group) const;
  /// Kernel launches the last step made (for tests).
  int launches_last_step() const;
  /// Elements per block; changes take effect at the next step (tables are rebuilt).
  void set_chunk_size(long long elements);
  const OptimizerInfo& info() const;
  /// Where the kernels came from (an embedded cubin, NVRTC, the cache); loaded at the first step.
  ModuleOrigin module_origin() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace optgen
