#pragma once
/// What the tests of the generated launchers share: the built-in launchers and references by name,
/// tensors on the device with host copies, and one step compared with the CPU reference.

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "builtin_launchers.h"
#include "builtin_references.h"
#include "gpu.h"
#include "optgen/error.h"

namespace optgen_test {

using optgen::DType;

const optgen::OptimizerInfo& launcher(const std::string& name);
/// The hyperparameters of a recorded param group (`{"hyperparameters": {name: value}}`, as the
/// recorders in tests/ write them): the recorded ones, the defaults for the rest (the clipping's
/// max_grad_norm in recordings made without it), derived flags filled in.
std::vector<double> recorded_hyperparameters(const optgen::OptimizerInfo& info, const nlohmann::json& group);
/// The specs in specs/: every one is a built-in launcher.
std::size_t builtin_spec_count();
const optgen::reference::Optimizer& reference_of(const std::string& name);

/// Hyperparameters that select `variant`: the defaults with specialized flags set to its bits,
/// and (to reach derived flags, and to exercise more of each update) floats whose default is 0
/// set to 0.1 and ints whose default is 0 set to 3; failing that, with one float at 0.
std::vector<double> hyperparameters_for(const optgen::OptimizerInfo& info, int variant);

/// `x` rounded to a storage type.
float round_to(DType type, float x);
/// Host values <-> device bytes of a dtype.
void upload(DType type, void* device, const std::vector<float>& values);
std::vector<float> download(DType type, const void* device, size_t count);

/// 8-bit blockwise states (DType::Q8, UQ8) on the host: the map of a dtype; `numel` values
/// quantised into a buffer of optgen::storage_bytes (codes, then block absmax), and such a buffer
/// decoded; and values quantised and back, as a kernel stores them.
const float* blockwise_map(DType type);
void quantize_blockwise(DType type, const float* values, long long numel, unsigned char* bytes);
std::vector<float> dequantized(DType type, const unsigned char* bytes, long long numel);
std::vector<float> requantized(DType type, const std::vector<float>& values);

/// ‖a − b‖∞ / max(‖b‖∞, 1e-6); NaN when either holds a NaN.
double relative_error(const std::vector<float>& a, const std::vector<float>& b);
/// The largest relative error a GPU step may have against the CPU reference in float.
double tolerance(DType param, const std::vector<DType>& states);
double tolerance(const optgen::OptimizerInfo& info, const optgen::KernelInfo& kernel);
/// The largest relative error a GPU run of a spec with a matrix function (muon) may have against the
/// CPU reference after `steps` steps, for params of magnitude up to 1: the GPU orthogonalises in bf16
/// products (as torch does) and the reference exactly, so each step's update, lr * scale * (an
/// orthogonalised matrix, entries within about 1), may differ by a tenth of its largest entry (the
/// iteration multiplies a rounding error in a matrix's small singular values by up to 3.4 a step:
/// torch's own bf16 iteration strays as far from the exact one); by a hundredth in f32 products
/// (a kernel set whose storage keeps its matrix values in f32).
double matrix_tolerance(const optgen::OptimizerInfo& info, const optgen::KernelInfo& kernel, double lr,
                        double max_scale, int steps);
/// Whether some variant of `info` has a matrix function: it steps matrices only.
bool steps_matrices(const optgen::OptimizerInfo& info);
/// A shape of `numel` elements that a spec can step: {numel}, or for a spec that steps matrices only
/// (steps_matrices), the matrix (d, numel / d), d the largest divisor of numel up to its square root.
std::vector<std::int64_t> shape_for(const optgen::OptimizerInfo& info, std::int64_t numel);
/// The index of hyperparameter `name` of `info`; std::runtime_error where it has none.
int hyperparameter_index(const optgen::OptimizerInfo& info, const std::string& name);
/// The value of hyperparameter `name` in `h`.
double hyperparameter(const optgen::OptimizerInfo& info, const std::vector<double>& h, const std::string& name);
/// Each state's dtype in a kernel set (declaration order).
std::vector<DType> state_dtypes(const optgen::OptimizerInfo& info, const optgen::KernelInfo& kernel);
/// The storage options that select `kernel`'s kernel set (its params' dtype comes with the tensors).
optgen::StorageOptions storage_of(const optgen::OptimizerInfo& info, const optgen::KernelInfo& kernel);

/// Tensors' shapes, outermost dimension first (a type of its own: a braced list of sizes is numels).
struct TensorShapes {
  std::vector<std::vector<std::int64_t>> list;
};
/// Each of `sizes` as shape_for makes it.
TensorShapes shapes_for(const optgen::OptimizerInfo& info, const std::vector<std::int64_t>& sizes);

/// Tensors of one param group on the device, `misaligned` ones starting 4 bytes past a 16-byte
/// boundary, with host copies of what the device holds.
struct DeviceGroup {
  DType dtype;
  std::vector<std::int64_t> sizes;
  std::vector<std::unique_ptr<DeviceMemory>> memory;
  std::vector<optgen::Tensor> tensors;
  std::vector<std::vector<float>> params, grads;

  /// Each tensor's shape, given to the optimizer (a vector of its numel when built from numels).
  std::vector<std::vector<std::int64_t>> shapes;

  DeviceGroup(DType type, const std::vector<std::int64_t>& numels, const std::vector<bool>& misaligned,
              std::mt19937& rng);
  /// Tensors of these shapes (their numel the product; {} is one element).
  DeviceGroup(DType type, const TensorShapes& shapes, const std::vector<bool>& misaligned, std::mt19937& rng);
  /// Draws new gradients in [-1, 1), times `scale` (AMP's scaled gradients), and uploads them.
  void new_gradients(std::mt19937& rng, float scale = 1.0f);
  /// Every param and grad as the device holds them now, bytes and all; and back.
  std::vector<std::vector<unsigned char>> device_bytes() const;
  void set_device_bytes(const std::vector<std::vector<unsigned char>>& bytes);
};

/// The worst relative error seen over a run, and where.
struct Comparison {
  double worst = 0;
  std::string where;
};

/// A group's state buffers as the device holds them before a step: [tensor][state], empty for
/// states the group's variant does not have; then [tensor][number of states]: the param's master
/// copy (empty without one).
using StateSnapshot = std::vector<std::vector<std::vector<float>>>;

StateSnapshot snapshot_states(const optgen::FusedOptimizer& opt, const optgen::reference::Optimizer& ref,
                              std::size_t group, const DeviceGroup& g);

/// After a GPU step: runs the CPU reference for `group` from the values it started from (`g`'s
/// host copies and `states`) and compares the device's params and states with it, recording the
/// worst relative error in `result`. Afterwards `g` holds the device's values. `grad_scale`: the
/// factor the gradients carry (AMP). `program`: the spec's program (an index into ref.programs)
/// the GPU ran, after `step` steps, instead of a step (-1). `totals`: for a spec that reduces over
/// every group (optimizer_sum, ...), the reference's totals (reference::step_groups): in their
/// adding pass the group only adds its parts and nothing is compared; then every group is checked
/// with them.
void check_group(const optgen::FusedOptimizer& opt, const optgen::reference::Optimizer& ref, std::size_t group,
                 DeviceGroup& g, StateSnapshot& states, std::vector<double>& ref_scalar_state, std::int64_t step,
                 Comparison& result, float grad_scale = 1.0f, int program = -1,
                 optgen::reference::OptimizerTotals* totals = nullptr);

void synchronize();

/// One step on the GPU and, from the same starting values, on the CPU reference, for a
/// single-group optimizer.
void compare_step(optgen::FusedOptimizer& opt, const optgen::reference::Optimizer& ref, DeviceGroup& g,
                  std::vector<double>& ref_scalar_state, std::int64_t step, Comparison& result);

/// The spec's program `program` (an index into ref.programs) on the GPU and on the CPU reference,
/// from the same values, for a single-group optimizer that has taken `steps` steps.
void compare_program(optgen::FusedOptimizer& opt, const optgen::reference::Optimizer& ref, DeviceGroup& g,
                     std::vector<double>& ref_scalar_state, std::int64_t steps, int program, Comparison& result);

/// A group's scalar state before its first step.
std::vector<double> initial_scalar_state(const optgen::OptimizerInfo& info, const std::vector<double>& h);

/// `steps` steps of a single-group optimizer that has not stepped yet, each on new gradients from
/// `rng` and compared with the CPU reference (compare_step): the worst relative error over them.
Comparison compare_steps(optgen::FusedOptimizer& opt, const optgen::reference::Optimizer& ref, DeviceGroup& g,
                         int steps, std::mt19937& rng);

/// `steps` steps of `opt`'s groups 0 (`a`, hyperparameters h0) and 1 (`b`, h1), each on new
/// gradients, checked against the CPU reference `ref`: the worst relative error.
Comparison step_two_groups(optgen::FusedOptimizer& opt, const optgen::reference::Optimizer& ref, DeviceGroup& a,
                           DeviceGroup& b, const std::vector<double>& h0, const std::vector<double>& h1, int steps,
                           std::mt19937& rng);

/// A tensor whose pointers look fine but point nowhere: for checks that fail before the driver.
optgen::Tensor fake_tensor(std::int64_t numel = 8);

/// The message of the optgen::Error `f` throws, or "(no error)".
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const optgen::Error& e) {
    return e.what();
  }
  return "(no error)";
}

/// Every state buffer of every tensor of every group, as the device holds it.
std::vector<std::vector<unsigned char>> state_bytes(const optgen::FusedOptimizer& opt);
/// A tensor's fp32 master copy as the device holds it (empty without one).
std::vector<unsigned char> master_bytes(const optgen::FusedOptimizer& opt, std::size_t group, std::size_t tensor);
/// The state buffers a checkpoint holds, in the same order.
std::vector<std::vector<unsigned char>> state_bytes_of(const optgen::Checkpoint& checkpoint);

}  // namespace optgen_test
