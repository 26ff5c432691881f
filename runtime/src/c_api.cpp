#include "optgen/c_api.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "optgen/blockwise8.h"
#include "optgen/error.h"
#include "optgen/nccl.h"
#include "optgen/optimizers.h"

struct optgen_optimizer {
  /// What engine's OptimizerInfo points into when that is not a launcher's static tables (a spec
  /// loaded at run time); declared first, so it outlives the engine.
  std::shared_ptr<const void> owner;
  optgen::FusedOptimizer engine;
  std::string warnings;               ///< optgen_warnings: the spec's, for one loaded at run time
  mutable std::string matrix_values;  ///< optgen_matrix_values, made at its first call
};

struct optgen_optimizers {
  optgen::Optimizers optimizers;
};

namespace {

thread_local std::string last_error;

/// Runs `f`, turning any exception into -1 and the thread's last error.
template <typename F>
int guarded(F&& f) {
  last_error.clear();
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    last_error = e.what();
  } catch (...) {
    last_error = "unknown error";
  }
  return -1;
}

void require(bool ok, const char* call, const char* what) {
  if (!ok) throw optgen::Error(call, what);
}

/// A state's dtype.
optgen::DType dtype_of(int32_t value, const char* call) {
  switch (value) {
    case OPTGEN_F32: return optgen::DType::F32;
    case OPTGEN_BF16: return optgen::DType::BF16;
    case OPTGEN_F16: return optgen::DType::F16;
    case OPTGEN_Q8: return optgen::DType::Q8;
    case OPTGEN_UQ8: return optgen::DType::UQ8;
  }
  throw optgen::Error(call, "unknown dtype " + std::to_string(value),
                      "use OPTGEN_F32, OPTGEN_BF16, OPTGEN_F16, OPTGEN_Q8 or OPTGEN_UQ8");
}

/// A param's or grad's dtype.
optgen::DType tensor_dtype_of(int32_t value, const char* call) {
  const optgen::DType dtype = dtype_of(value, call);
  if (optgen::is_blockwise(dtype))
    throw optgen::Error(call, std::string("a param or grad of dtype ") + optgen::to_string(dtype),
                        "8-bit blockwise dtypes are for states; params and grads are OPTGEN_F32, OPTGEN_BF16 or "
                        "OPTGEN_F16");
  return dtype;
}

int32_t c_dtype(optgen::DType dtype) {
  switch (dtype) {
    case optgen::DType::F32: return OPTGEN_F32;
    case optgen::DType::BF16: return OPTGEN_BF16;
    case optgen::DType::F16: return OPTGEN_F16;
    case optgen::DType::Q8: return OPTGEN_Q8;
    case optgen::DType::UQ8: return OPTGEN_UQ8;
  }
  throw optgen::Error("optgen", "unknown dtype " + std::to_string(static_cast<int>(dtype)));
}

optgen::ParamWrite param_write_of(int32_t value, const char* call) {
  switch (value) {
    case OPTGEN_PARAM_NEAREST: return optgen::ParamWrite::Nearest;
    case OPTGEN_PARAM_MASTER: return optgen::ParamWrite::Master;
    case OPTGEN_PARAM_STOCHASTIC: return optgen::ParamWrite::Stochastic;
  }
  throw optgen::Error(call, "unknown param_write " + std::to_string(value),
                      "use OPTGEN_PARAM_NEAREST, OPTGEN_PARAM_MASTER or OPTGEN_PARAM_STOCHASTIC");
}

/// The C struct as the engine's options (NULL: the defaults).
optgen::StorageOptions storage_of(const optgen_storage* storage, const char* call) {
  optgen::StorageOptions options;
  if (!storage) return options;
  options.states = dtype_of(storage->state_dtype, call);
  require(storage->num_state_dtypes == 0 || (storage->state_names && storage->state_dtypes), call,
          "optgen_storage: state_names or state_dtypes is NULL");
  for (size_t i = 0; i < storage->num_state_dtypes; ++i) {
    require(storage->state_names[i] != nullptr, call, "optgen_storage: a state name is NULL");
    options.state_dtypes.emplace_back(storage->state_names[i], dtype_of(storage->state_dtypes[i], call));
  }
  options.param_write = param_write_of(storage->param_write, call);
  options.seed = storage->seed;
  return options;
}

}  // namespace

namespace optgen {
int create_for_c(const OptimizerInfo& info, std::vector<double> defaults, const char* const* names,
                 const double* values, size_t count, const optgen_storage* storage, optgen_optimizer** out) {
  return guarded([&] {
    const std::string call = std::string("optgen_") + info.spec + "_create";
    require(out != nullptr, call.c_str(), "out is NULL");
    *out = new_optimizer_for_c(call.c_str(), info, std::move(defaults), names, values, count, storage, nullptr);
  });
}

int guarded_for_c(const std::function<void()>& body) { return guarded(body); }

optgen_optimizer* new_optimizer_for_c(const char* call, const OptimizerInfo& info, std::vector<double> defaults,
                                      const char* const* names, const double* values, size_t count,
                                      const optgen_storage* storage, std::shared_ptr<const void> owner,
                                      std::string warnings) {
  require(count == 0 || (names && values), call, "names or values is NULL");
  FusedOptimizer engine(info, std::move(defaults), storage_of(storage, call));
  for (size_t i = 0; i < count; ++i) {
    require(names[i] != nullptr, call, "a hyperparameter name is NULL");
    engine.set(names[i], values[i]);  // with no group yet: the defaults, checked like any setter
  }
  return new optgen_optimizer{std::move(owner), std::move(engine), std::move(warnings), {}};
}
}  // namespace optgen

extern "C" {

int32_t optgen_abi_version(void) { return OPTGEN_ABI_VERSION; }

const char* optgen_version(void) { return OPTGEN_VERSION; }

const char* optgen_last_error(void) { return last_error.c_str(); }

int optgen_add_param_group(optgen_optimizer* optimizer, const optgen_tensor* tensors, size_t count,
                           const char* const* override_names, const double* override_values, size_t num_overrides,
                           size_t* group) {
  return guarded([&] {
    require(optimizer != nullptr, "optgen_add_param_group", "optimizer is NULL");
    require(count == 0 || tensors != nullptr, "optgen_add_param_group", "tensors is NULL");
    require(num_overrides == 0 || (override_names && override_values), "optgen_add_param_group",
            "override names or values is NULL");
    std::vector<optgen::Tensor> list(count);
    for (size_t i = 0; i < count; ++i) {
      const optgen_tensor& t = tensors[i];
      list[i] = {t.param, t.grad, t.numel, tensor_dtype_of(t.dtype, "optgen_add_param_group"), t.states, t.grad_numel};
      list[i].whole_numel = t.whole_numel;
      list[i].shard_dim = t.shard_dim;
      list[i].column_splits = t.column_splits == 0 ? 1 : t.column_splits;
      if (t.ndim < 0 || (t.ndim > 0 && !t.shape))
        throw optgen::Error("optgen_add_param_group",
                            "tensor " + std::to_string(i) + " has ndim " + std::to_string(t.ndim) +
                                (t.ndim < 0 ? "" : " but a NULL shape"),
                            "pass ndim 0 and a NULL shape when the shape is not known");
      if (t.ndim > 0) list[i].shape.assign(t.shape, t.shape + t.ndim);
      if (t.grad_dtype != t.dtype)
        throw optgen::Error("optgen_add_param_group",
                            "tensor " + std::to_string(i) + " has a " +
                                optgen::to_string(tensor_dtype_of(t.dtype, "optgen_add_param_group")) +
                                " param but a " +
                                optgen::to_string(tensor_dtype_of(t.grad_dtype, "optgen_add_param_group")) + " grad",
                            "param and grad must have the same dtype");
    }
    std::vector<std::pair<std::string, double>> overrides;
    for (size_t i = 0; i < num_overrides; ++i) {
      require(override_names[i] != nullptr, "optgen_add_param_group", "an override name is NULL");
      overrides.emplace_back(override_names[i], override_values[i]);
    }
    size_t index = optimizer->engine.add_param_group(list, overrides);
    if (group) *group = index;
  });
}

int optgen_prepare(optgen_optimizer* optimizer, void* stream) {
  return guarded([&] {
    require(optimizer != nullptr, "optgen_prepare", "optimizer is NULL");
    optimizer->engine.prepare(static_cast<CUstream>(stream));
  });
}

int optgen_step(optgen_optimizer* optimizer, void* stream) {
  return guarded([&] {
    require(optimizer != nullptr, "optgen_step", "optimizer is NULL");
    optimizer->engine.step(static_cast<CUstream>(stream));
  });
}

int optgen_step_amp(optgen_optimizer* optimizer, void* stream, const float* grad_scale, const float* found_inf) {
  return guarded([&] {
    require(optimizer != nullptr, "optgen_step_amp", "optimizer is NULL");
    optimizer->engine.step(static_cast<CUstream>(stream), optgen::AmpInputs{grad_scale, found_inf});
  });
}

int optgen_num_programs(const optgen_optimizer* optimizer, size_t* count) {
  return guarded([&] {
    require(optimizer && count, "optgen_num_programs", "optimizer or count is NULL");
    *count = static_cast<size_t>(optimizer->engine.info().num_programs);
  });
}

int optgen_program_name(const optgen_optimizer* optimizer, size_t index, const char** name) {
  return guarded([&] {
    require(optimizer && name, "optgen_program_name", "optimizer or name is NULL");
    const optgen::OptimizerInfo& info = optimizer->engine.info();
    if (index >= static_cast<size_t>(info.num_programs))
      throw optgen::Error("optgen_program_name", "index " + std::to_string(index) + " is out of range: " + info.name +
                                                     " has " + std::to_string(info.num_programs) + " programs");
    *name = info.programs[index];
  });
}

int optgen_run(optgen_optimizer* optimizer, const char* name, void* stream) {
  return guarded([&] {
    require(optimizer && name, "optgen_run", "optimizer or name is NULL");
    optimizer->engine.run(name, static_cast<CUstream>(stream));
  });
}

int optgen_set(optgen_optimizer* optimizer, const char* name, double value, int64_t group) {
  return guarded([&] {
    require(optimizer && name, "optgen_set", "optimizer or name is NULL");
    if (group < 0)
      optimizer->engine.set(name, value);
    else
      optimizer->engine.set(name, value, static_cast<size_t>(group));
  });
}

int optgen_get(const optgen_optimizer* optimizer, const char* name, size_t group, double* value) {
  return guarded([&] {
    require(optimizer && name && value, "optgen_get", "optimizer, name or value is NULL");
    *value = optimizer->engine.get(name, group);
  });
}

int optgen_state(const optgen_optimizer* optimizer, const char* name, size_t group, size_t tensor, void** data) {
  return guarded([&] {
    require(optimizer && name && data, "optgen_state", "optimizer, name or data is NULL");
    *data = optimizer->engine.state(name, group, tensor).data;
  });
}

int optgen_state_buffer(const optgen_optimizer* optimizer, const char* name, size_t group, size_t tensor, void** data,
                        int64_t* numel, int32_t* dtype, size_t* bytes) {
  return guarded([&] {
    require(optimizer && name && data, "optgen_state_buffer", "optimizer, name or data is NULL");
    const optgen::StateBuffer b = optimizer->engine.state(name, group, tensor);
    *data = b.data;
    if (numel) *numel = b.numel;
    if (dtype) *dtype = c_dtype(b.dtype);
    if (bytes) *bytes = b.data ? optgen::storage_bytes(b.dtype, b.numel) : 0;
  });
}

int optgen_step_count(const optgen_optimizer* optimizer, size_t group, int64_t* count) {
  return guarded([&] {
    require(optimizer && count, "optgen_step_count", "optimizer or count is NULL");
    *count = optimizer->engine.step_count(group);
  });
}

int optgen_num_groups(const optgen_optimizer* optimizer, size_t* groups) {
  return guarded([&] {
    require(optimizer && groups, "optgen_num_groups", "optimizer or groups is NULL");
    *groups = optimizer->engine.num_groups();
  });
}

int optgen_set_step_count(optgen_optimizer* optimizer, size_t group, int64_t count) {
  return guarded([&] {
    require(optimizer != nullptr, "optgen_set_step_count", "optimizer is NULL");
    optimizer->engine.set_step_count(count, group);
  });
}

int optgen_scalar_state(const optgen_optimizer* optimizer, const char* name, size_t group, double* value) {
  return guarded([&] {
    require(optimizer && name && value, "optgen_scalar_state", "optimizer, name or value is NULL");
    *value = optimizer->engine.scalar_state(name, group);
  });
}

int optgen_set_scalar_state(optgen_optimizer* optimizer, const char* name, size_t group, double value) {
  return guarded([&] {
    require(optimizer && name, "optgen_set_scalar_state", "optimizer or name is NULL");
    optimizer->engine.set_scalar_state(name, value, group);
  });
}

int optgen_save(const optgen_optimizer* optimizer, const char* path) {
  return guarded([&] {
    require(optimizer && path, "optgen_save", "optimizer or path is NULL");
    optimizer->engine.save(path);
  });
}

int optgen_load(optgen_optimizer* optimizer, const char* path) {
  return guarded([&] {
    require(optimizer && path, "optgen_load", "optimizer or path is NULL");
    optimizer->engine.load(path);
  });
}

int optgen_launches_last_step(const optgen_optimizer* optimizer, int* launches) {
  return guarded([&] {
    require(optimizer && launches, "optgen_launches_last_step", "optimizer or launches is NULL");
    *launches = optimizer->engine.launches_last_step();
  });
}

int optgen_grad_norm(const optgen_optimizer* optimizer, size_t group, const float** norm) {
  return guarded([&] {
    require(optimizer && norm, "optgen_grad_norm", "optimizer or norm is NULL");
    *norm = optimizer->engine.grad_norm(group);
  });
}

int optgen_set_reduction_hook(optgen_optimizer* optimizer, optgen_reduction_hook hook, void* user_data) {
  return guarded([&] {
    require(optimizer != nullptr, "optgen_set_reduction_hook", "optimizer is NULL");
    if (!hook) return optimizer->engine.set_reduction_hook({});
    optimizer->engine.set_reduction_hook([hook, user_data](const optgen::ReductionResults& r) {
      std::vector<optgen_reduction> reductions;
      for (int i = 0; i < r.num_slots; ++i)
        reductions.push_back({r.slots[i].name, r.slots[i].is_max ? 1 : 0, r.slots[i].stage,
                              optgen::has_group_results(r.slots[i].scope) ? 1 : 0});
      static_assert(sizeof(optgen_result_run) == sizeof(optgen::ResultRun), "optgen_result_run is ResultRun");
      const optgen_reduction_results results{r.stage,
                                             r.num_slots,
                                             reductions.data(),
                                             r.tensor_results,
                                             r.num_tensors,
                                             r.group_results,
                                             r.num_groups,
                                             r.stream,
                                             r.row_results,
                                             reinterpret_cast<const optgen_result_run*>(r.row_runs),
                                             r.num_row_runs,
                                             r.col_results,
                                             reinterpret_cast<const optgen_result_run*>(r.col_runs),
                                             r.num_col_runs,
                                             r.matrix_results,
                                             reinterpret_cast<const optgen_result_run*>(r.matrix_runs),
                                             r.num_matrix_runs};
      if (const int status = hook(&results, user_data); status != 0)
        throw optgen::Error("optgen_step", "the reduction hook failed after Reduce stage " + std::to_string(r.stage) +
                                               " (it returned " + std::to_string(status) + ")");
    });
  });
}

int optgen_set_nccl_reduction_hook(optgen_optimizer* optimizer, void* nccl_comm) {
  return guarded([&] {
    require(optimizer && nccl_comm, "optgen_set_nccl_reduction_hook", "optimizer or nccl_comm is NULL");
    optimizer->engine.set_reduction_hook(optgen::nccl::all_reduce_hook(nccl_comm));
  });
}

int optgen_set_nccl_matrix_hook(optgen_optimizer* optimizer, void* nccl_comm) {
  return guarded([&] {
    require(optimizer && nccl_comm, "optgen_set_nccl_matrix_hook", "optimizer or nccl_comm is NULL");
    optimizer->engine.set_matrix_hook(optgen::nccl::matrix_hook(nccl_comm, optimizer->engine));
  });
}

int optgen_set_matrix_hook(optgen_optimizer* optimizer, optgen_matrix_hook hook, void* user_data) {
  return guarded([&] {
    require(optimizer != nullptr, "optgen_set_matrix_hook", "optimizer is NULL");
    if (!hook) return optimizer->engine.set_matrix_hook({});
    optimizer->engine.set_matrix_hook([hook, user_data](const optgen::MatrixWork& w) {
      std::vector<optgen_matrices> matrices;
      for (int i = 0; i < w.num_matrices; ++i) {
        const optgen::MatrixWork::Matrices& t = w.matrices[i];
        matrices.push_back({t.value, t.num_arguments, t.group, t.tensor, reinterpret_cast<void*>(t.x), t.batch, t.rows,
                            t.cols, t.arguments, c_dtype(t.dtype)});
      }
      const optgen_matrix_work work{w.stage, w.num_matrices, matrices.data(), w.stream};
      if (const int status = hook(&work, user_data); status != 0)
        throw optgen::Error("optgen_step", "the matrix hook failed after Reduce stage " + std::to_string(w.stage) +
                                               " (it returned " + std::to_string(status) + ")");
    });
  });
}

size_t optgen_matrix_function_scratch_bytes(optgen_optimizer* optimizer, size_t group, int value, int64_t count,
                                            int64_t rows, int64_t cols, int32_t dtype) {
  if (dtype != OPTGEN_BF16 && dtype != OPTGEN_F32) return 0;
  size_t bytes = 0;
  guarded([&] {
    require(optimizer, "optgen_matrix_function_scratch_bytes", "optimizer is NULL");
    bytes = optimizer->engine.matrix_function_scratch_bytes(
        group, value, count, rows, cols, dtype == OPTGEN_F32 ? optgen::DType::F32 : optgen::DType::BF16);
  });
  return bytes;
}

int optgen_apply_matrix_function(optgen_optimizer* optimizer, size_t group, int value, const double* arguments, void* x,
                                 void* scratch, int64_t count, int64_t rows, int64_t cols, void* stream) {
  return guarded([&] {
    require(optimizer && arguments && x && scratch, "optgen_apply_matrix_function",
            "optimizer, arguments, x or scratch is NULL");
    optimizer->engine.apply_matrix_function(group, value, arguments, reinterpret_cast<CUdeviceptr>(x),
                                            reinterpret_cast<CUdeviceptr>(scratch), count, rows, cols,
                                            static_cast<CUstream>(stream));
  });
}

int optgen_set_chunk_size(optgen_optimizer* optimizer, int64_t elements) {
  return guarded([&] {
    require(optimizer != nullptr, "optgen_set_chunk_size", "optimizer is NULL");
    optimizer->engine.set_chunk_size(elements);
  });
}

int optgen_chunk_size(const optgen_optimizer* optimizer, size_t group, int64_t* elements) {
  return guarded([&] {
    require(optimizer && elements, "optgen_chunk_size", "optimizer or elements is NULL");
    *elements = optimizer->engine.chunk_size(group);
  });
}

int optgen_set_launch_shape(optgen_optimizer* optimizer, int block_size, int elements_per_thread) {
  return guarded([&] {
    require(optimizer != nullptr, "optgen_set_launch_shape", "optimizer is NULL");
    optimizer->engine.set_launch_shape({block_size, elements_per_thread});
  });
}

int optgen_launch_shape(const optgen_optimizer* optimizer, size_t group, int* block_size, int* elements_per_thread) {
  return guarded([&] {
    require(optimizer && block_size && elements_per_thread, "optgen_launch_shape",
            "optimizer, block_size or elements_per_thread is NULL");
    const optgen::LaunchShape shape = optimizer->engine.launch_shape(group);
    *block_size = shape.block_size;
    *elements_per_thread = shape.elements_per_thread;
  });
}

int optgen_rebind(optgen_optimizer* optimizer, size_t group, const size_t* tensors, void* const* params,
                  const void* const* grads, size_t count) {
  return guarded([&] {
    require(optimizer != nullptr, "optgen_rebind", "optimizer is NULL");
    require(count == 0 || (tensors && params && grads), "optgen_rebind", "tensors, params or grads is NULL");
    for (size_t i = 0; i < count; ++i) optimizer->engine.rebind(group, tensors[i], params[i], grads[i]);
  });
}

const char* optgen_name(const optgen_optimizer* optimizer) {
  return optimizer ? optimizer->engine.info().name : nullptr;
}

const char* optgen_spec(const optgen_optimizer* optimizer) {
  return optimizer ? optimizer->engine.info().spec : nullptr;
}

const char* optgen_matrix_values(const optgen_optimizer* optimizer) {
  if (!optimizer) return nullptr;
  if (optimizer->matrix_values.empty())
    for (const std::string& name : optgen::matrix_value_names(optimizer->engine.info()))
      optimizer->matrix_values += (optimizer->matrix_values.empty() ? "" : ",") + name;
  return optimizer->matrix_values.c_str();
}

const char* optgen_warnings(const optgen_optimizer* optimizer) {
  return optimizer ? optimizer->warnings.c_str() : nullptr;
}

int optgen_num_hyperparameters(const optgen_optimizer* optimizer, size_t* count) {
  return guarded([&] {
    require(optimizer && count, "optgen_num_hyperparameters", "optimizer or count is NULL");
    *count = static_cast<size_t>(optimizer->engine.info().num_hyperparameters);
  });
}

int optgen_describe_hyperparameter(const optgen_optimizer* optimizer, size_t index, optgen_hyperparameter_info* info) {
  return guarded([&] {
    require(optimizer && info, "optgen_describe_hyperparameter", "optimizer or info is NULL");
    const optgen::OptimizerInfo& o = optimizer->engine.info();
    require(index < static_cast<size_t>(o.num_hyperparameters), "optgen_describe_hyperparameter", "index out of range");
    const optgen::reference::HyperparameterInfo& h = o.hyperparameters[index];
    *info = {h.name, static_cast<int32_t>(h.type), h.default_value, h.specialized ? 1 : 0, h.derived ? 1 : 0};
  });
}

namespace {
static_assert(OPTGEN_STATE_ELEMENTS == static_cast<int>(optgen::StateShape::Elements) &&
                  OPTGEN_STATE_ROWS == static_cast<int>(optgen::StateShape::Rows) &&
                  OPTGEN_STATE_COLS == static_cast<int>(optgen::StateShape::Cols) &&
                  OPTGEN_STATE_TENSOR == static_cast<int>(optgen::StateShape::Tensor),
              "optgen_state_info::shape is an optgen::StateShape");

void describe(const optgen::reference::StateInfo* states, int count, size_t index, optgen_state_info* info,
              const char* call) {
  require(info != nullptr, call, "info is NULL");
  require(index < static_cast<size_t>(count), call, "index out of range");
  const optgen::reference::StateInfo& s = states[index];
  *info = {s.name, s.init.value, s.init.hyperparameter, s.init.param ? 1 : 0, static_cast<int32_t>(s.shape)};
}
}  // namespace

int optgen_block_elements(const optgen_optimizer* optimizer, size_t* count) {
  return guarded([&] {
    require(optimizer && count, "optgen_block_elements", "optimizer or count is NULL");
    *count = static_cast<size_t>(optimizer->engine.info().block_elements);
  });
}

int optgen_num_states(const optgen_optimizer* optimizer, size_t* count) {
  return guarded([&] {
    require(optimizer && count, "optgen_num_states", "optimizer or count is NULL");
    *count = static_cast<size_t>(optimizer->engine.info().num_states);
  });
}

int optgen_describe_state(const optgen_optimizer* optimizer, size_t index, optgen_state_info* info) {
  return guarded([&] {
    require(optimizer != nullptr, "optgen_describe_state", "optimizer is NULL");
    const optgen::OptimizerInfo& o = optimizer->engine.info();
    describe(o.states, o.num_states, index, info, "optgen_describe_state");
  });
}

int optgen_num_scalar_states(const optgen_optimizer* optimizer, size_t* count) {
  return guarded([&] {
    require(optimizer && count, "optgen_num_scalar_states", "optimizer or count is NULL");
    *count = static_cast<size_t>(optimizer->engine.info().num_scalar_states);
  });
}

int optgen_describe_scalar_state(const optgen_optimizer* optimizer, size_t index, optgen_state_info* info) {
  return guarded([&] {
    require(optimizer != nullptr, "optgen_describe_scalar_state", "optimizer is NULL");
    const optgen::OptimizerInfo& o = optimizer->engine.info();
    describe(o.scalar_states, o.num_scalar_states, index, info, "optgen_describe_scalar_state");
  });
}

int optgen_states_used(const optgen_optimizer* optimizer, const double* hyperparameters, size_t count, int32_t* used) {
  return guarded([&] {
    require(optimizer && used, "optgen_states_used", "optimizer or used is NULL");
    require(count == 0 || hyperparameters, "optgen_states_used", "hyperparameters is NULL");
    const std::vector<bool> flags =
        optimizer->engine.states_used(std::vector<double>(hyperparameters, hyperparameters + count));
    for (size_t i = 0; i < flags.size(); ++i) used[i] = flags[i] ? 1 : 0;
  });
}

int optgen_state_presence(const optgen_optimizer* optimizer, const double* hyperparameters, size_t count,
                          int32_t* presence) {
  return guarded([&] {
    require(optimizer && presence, "optgen_state_presence", "optimizer or presence is NULL");
    require(count == 0 || hyperparameters, "optgen_state_presence", "hyperparameters is NULL");
    const std::vector<std::optional<optgen::StatePresence>> states =
        optimizer->engine.state_presence(std::vector<double>(hyperparameters, hyperparameters + count));
    for (size_t i = 0; i < states.size(); ++i) {
      if (!states[i]) {
        presence[i] = OPTGEN_STATE_ABSENT;
        continue;
      }
      switch (*states[i]) {
        case optgen::StatePresence::Always: presence[i] = OPTGEN_STATE_ALWAYS; break;
        case optgen::StatePresence::Factored: presence[i] = OPTGEN_STATE_FACTORED; break;
        case optgen::StatePresence::NotFactored: presence[i] = OPTGEN_STATE_NOT_FACTORED; break;
      }
    }
  });
}

int optgen_reduces_over_group(const optgen_optimizer* optimizer, const double* hyperparameters, size_t count,
                              int32_t* reduces) {
  return guarded([&] {
    require(optimizer && reduces, "optgen_reduces_over_group", "optimizer or reduces is NULL");
    require(count == 0 || hyperparameters, "optgen_reduces_over_group", "hyperparameters is NULL");
    *reduces =
        optimizer->engine.reduces_over_group(std::vector<double>(hyperparameters, hyperparameters + count)) ? 1 : 0;
  });
}

int optgen_state_dtype(const optgen_optimizer* optimizer, const char* name, int32_t* dtype) {
  return guarded([&] {
    require(optimizer && name && dtype, "optgen_state_dtype", "optimizer, name or dtype is NULL");
    *dtype = c_dtype(optimizer->engine.state_dtype(name));
  });
}

int optgen_master_weights(const optgen_optimizer* optimizer, size_t group, size_t tensor, void** data) {
  return guarded([&] {
    require(optimizer && data, "optgen_master_weights", "optimizer or data is NULL");
    *data = optimizer->engine.master_weights(group, tensor).data;
  });
}

int optgen_blockwise8_layout(int32_t dtype, float* map, int32_t* block_size, int64_t* min_numel) {
  return guarded([&] {
    const optgen::DType type = dtype_of(dtype, "optgen_blockwise8_layout");
    require(optgen::is_blockwise(type), "optgen_blockwise8_layout", "dtype is not OPTGEN_Q8 or OPTGEN_UQ8");
    if (map) {
      const float* codes =
          type == optgen::DType::Q8 ? optgen::blockwise8::kSignedMap : optgen::blockwise8::kUnsignedMap;
      std::copy(codes, codes + 256, map);
    }
    if (block_size) *block_size = optgen::blockwise8::kBlockSize;
    if (min_numel) *min_numel = optgen::blockwise8::kMin8bitSize;
  });
}

void optgen_destroy(optgen_optimizer* optimizer) { delete optimizer; }

int optgen_optimizers_create(optgen_optimizer* const* members, size_t count, optgen_optimizers** out) {
  return guarded([&] {
    require(out != nullptr, "optgen_optimizers_create", "out is NULL");
    require(count == 0 || members != nullptr, "optgen_optimizers_create", "members is NULL");
    std::vector<optgen::FusedOptimizer*> engines;
    for (size_t i = 0; i < count; ++i) engines.push_back(members[i] ? &members[i]->engine : nullptr);
    *out = new optgen_optimizers{optgen::Optimizers(std::move(engines))};
  });
}

int optgen_optimizers_prepare(optgen_optimizers* set, void* stream) {
  return guarded([&] {
    require(set != nullptr, "optgen_optimizers_prepare", "set is NULL");
    set->optimizers.prepare(static_cast<CUstream>(stream));
  });
}

int optgen_optimizers_step(optgen_optimizers* set, void* stream) {
  return guarded([&] {
    require(set != nullptr, "optgen_optimizers_step", "set is NULL");
    set->optimizers.step(static_cast<CUstream>(stream));
  });
}

int optgen_optimizers_step_amp(optgen_optimizers* set, void* stream, const float* grad_scale, const float* found_inf) {
  return guarded([&] {
    require(set != nullptr, "optgen_optimizers_step_amp", "set is NULL");
    set->optimizers.step(static_cast<CUstream>(stream), optgen::AmpInputs{grad_scale, found_inf});
  });
}

int optgen_optimizers_launches_last_step(const optgen_optimizers* set, int* launches) {
  return guarded([&] {
    require(set && launches, "optgen_optimizers_launches_last_step", "set or launches is NULL");
    *launches = set->optimizers.launches_last_step();
  });
}

int optgen_optimizers_save(const optgen_optimizers* set, const char* path) {
  return guarded([&] {
    require(set && path, "optgen_optimizers_save", "set or path is NULL");
    set->optimizers.save(path);
  });
}

int optgen_optimizers_load(optgen_optimizers* set, const char* path) {
  return guarded([&] {
    require(set && path, "optgen_optimizers_load", "set or path is NULL");
    set->optimizers.load(path);
  });
}

void optgen_optimizers_destroy(optgen_optimizers* set) { delete set; }

}  // extern "C"
