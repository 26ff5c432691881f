// What the launcher tests share (optimizer_harness.h).
#include "optimizer_harness.h"

#include "optgen/blockwise8.h"

#include <cmath>
#include <filesystem>

namespace optgen_test {

std::vector<double> recorded_hyperparameters(const optgen::OptimizerInfo& info, const nlohmann::json& group) {
  std::vector<double> h = optgen::default_hyperparameters(info);
  const auto& recorded = group["hyperparameters"];
  for (int i = 0; i < info.num_hyperparameters; ++i) {
    const auto& hp = info.hyperparameters[i];
    if (hp.derived || !recorded.contains(hp.name)) continue;
    const auto& v = recorded[hp.name];
    h[static_cast<size_t>(i)] = v.is_boolean() ? (v.get<bool>() ? 1 : 0) : v.get<double>();
  }
  optgen::derive_flags(info, h.data());
  return h;
}

std::size_t builtin_spec_count() {
  std::size_t count = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(OPTGEN_SOURCE_DIR) / "specs"))
    if (e.path().extension() == ".yaml") ++count;
  return count;
}

const optgen::OptimizerInfo& launcher(const std::string& name) {
  for (const auto& [spec, info] : optgen::builtin_launchers())
    if (name == spec) return *info;
  throw std::runtime_error("no launcher " + name);
}

const optgen::reference::Optimizer& reference_of(const std::string& name) {
  for (const auto& [spec, ref] : optgen::reference::builtin_optimizers())
    if (name == spec) return *ref;
  throw std::runtime_error("no reference " + name);
}

/// Hyperparameters that select `variant`: the defaults with specialized flags set to its bits,
/// and (to reach derived flags, and to exercise more of each update) floats whose default is 0
/// set to 0.1 and ints whose default is 0 set to 3 (AdEMAMix's warmups, then within a run of a few
/// steps); failing that, with one float at 0 (AdEMAMix's fast_ema is beta1 != 0).
std::vector<double> hyperparameters_for(const optgen::OptimizerInfo& info, int variant) {
  std::vector<int> flags;
  for (int i = 0; i < info.num_hyperparameters; ++i)
    if (info.hyperparameters[i].specialized && !info.hyperparameters[i].derived) flags.push_back(i);
  for (int zero = -1; zero < info.num_hyperparameters; ++zero) {
    if (zero >= 0 && info.hyperparameters[zero].type != optgen::ValueType::Float) continue;
    // max_grad_norm (generator/clipping.h) on its own: 1, which clips gradients drawn in [-1, 1)
    // over more than a few elements, or 0.
    for (double clip : {1.0, 0.0})
      for (bool boost : {true, false})
        for (unsigned bits = 0; bits < (1u << flags.size()); ++bits) {
          std::vector<double> h = optgen::default_hyperparameters(info);
          for (int i = 0; i < info.num_hyperparameters; ++i) {
            const auto type = info.hyperparameters[i].type;
            if (boost && type == optgen::ValueType::Float && h[i] == 0) h[i] = 0.1;
            if (boost && type == optgen::ValueType::Int && h[i] == 0) h[i] = 3;
            if (std::string(info.hyperparameters[i].name) == "max_grad_norm") h[i] = clip;
          }
          if (zero >= 0 && std::string(info.hyperparameters[zero].name) != "max_grad_norm") h[zero] = 0;
          for (size_t f = 0; f < flags.size(); ++f) h[flags[f]] = (bits >> f) & 1;
          optgen::derive_flags(info, h.data());
          if (optgen::select_variant(info, h.data()) == variant) return h;
        }
  }
  throw std::runtime_error(std::string("no hyperparameters select variant ") + info.variants[variant].name);
}

float round_to(DType type, float x) {
  if (type == DType::BF16) return optgen::bf16_to_float(optgen::float_to_bf16(x));
  if (type == DType::F16) return optgen::f16_to_float(optgen::float_to_f16(x));
  return x;
}

/// Host values <-> device bytes of a dtype.
void upload(DType type, void* device, const std::vector<float>& values) {
  if (values.empty()) return;
  const auto ptr = reinterpret_cast<CUdeviceptr>(device);
  if (optgen::is_blockwise(type)) {
    const long long n = static_cast<long long>(values.size());
    std::vector<unsigned char> bytes(optgen::storage_bytes(type, n));
    quantize_blockwise(type, values.data(), n, bytes.data());
    optgen::driver::check(optgen::driver::api().cuMemcpyHtoD(ptr, bytes.data(), bytes.size()), "cuMemcpyHtoD");
    return;
  }
  if (type == DType::F32) {
    optgen::driver::check(optgen::driver::api().cuMemcpyHtoD(ptr, values.data(), values.size() * 4), "cuMemcpyHtoD");
    return;
  }
  std::vector<std::uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i)
    bits[i] = type == DType::BF16 ? optgen::float_to_bf16(values[i]) : optgen::float_to_f16(values[i]);
  optgen::driver::check(optgen::driver::api().cuMemcpyHtoD(ptr, bits.data(), bits.size() * 2), "cuMemcpyHtoD");
}

std::vector<float> download(DType type, const void* device, size_t count) {
  std::vector<float> values(count);
  if (count == 0) return values;
  const auto ptr = reinterpret_cast<CUdeviceptr>(device);
  if (optgen::is_blockwise(type)) {
    const long long n = static_cast<long long>(count);
    std::vector<unsigned char> bytes(optgen::storage_bytes(type, n));
    optgen::driver::check(optgen::driver::api().cuMemcpyDtoH(bytes.data(), ptr, bytes.size()), "cuMemcpyDtoH");
    return dequantized(type, bytes.data(), n);
  }
  if (type == DType::F32) {
    optgen::driver::check(optgen::driver::api().cuMemcpyDtoH(values.data(), ptr, count * 4), "cuMemcpyDtoH");
    return values;
  }
  std::vector<std::uint16_t> bits(count);
  optgen::driver::check(optgen::driver::api().cuMemcpyDtoH(bits.data(), ptr, count * 2), "cuMemcpyDtoH");
  for (size_t i = 0; i < count; ++i)
    values[i] = type == DType::BF16 ? optgen::bf16_to_float(bits[i]) : optgen::f16_to_float(bits[i]);
  return values;
}

const float* blockwise_map(DType type) {
  return type == DType::Q8 ? optgen::blockwise8::kSignedMap : optgen::blockwise8::kUnsignedMap;
}

void quantize_blockwise(DType type, const float* values, long long numel, unsigned char* bytes) {
  optgen::blockwise8::quantize_blockwise(blockwise_map(type), type == DType::Q8, values, numel, bytes,
                                         reinterpret_cast<float*>(bytes + optgen::blockwise8::absmax_offset(numel)));
}

std::vector<float> dequantized(DType type, const unsigned char* bytes, long long numel) {
  std::vector<float> values(static_cast<size_t>(numel));
  optgen::blockwise8::dequantize_blockwise(
      blockwise_map(type), bytes, reinterpret_cast<const float*>(bytes + optgen::blockwise8::absmax_offset(numel)),
      numel, values.data());
  return values;
}

std::vector<float> requantized(DType type, const std::vector<float>& values) {
  const long long n = static_cast<long long>(values.size());
  std::vector<unsigned char> bytes(optgen::storage_bytes(type, n));
  quantize_blockwise(type, values.data(), n, bytes.data());
  return dequantized(type, bytes.data(), n);
}

/// ‖a − b‖∞ / max(‖b‖∞, 1e-6); NaN when either holds a NaN.
double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return NAN;
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    norm = std::max(norm, std::fabs(static_cast<double>(b[i])));
  }
  return diff / std::max(norm, 1e-6);
}

double tolerance(DType param, const std::vector<DType>& states) {
  const auto any = [&](DType d) { return param == d || std::find(states.begin(), states.end(), d) != states.end(); };
  // An 8-bit state is compared with the reference's value quantised as the kernel does: a last-bit
  // difference in the float state may still move a value across a code's midpoint, by one code
  // (at most 0.9/64 of its block's absmax, the signed map's widest step).
  if (any(DType::Q8) || any(DType::UQ8)) return 1.5e-2;
  if (any(DType::BF16)) return 1e-2;
  if (any(DType::F16)) return 2e-3;
  return 1e-5;
}

double matrix_tolerance(const optgen::OptimizerInfo& info, const optgen::KernelInfo& kernel, double lr,
                        double max_scale, int steps) {
  bool f32 = true;
  for (int j = 0; j < info.variants[kernel.variant].num_matrix_values; ++j)
    f32 = f32 && optgen::matrix_dtype(kernel, j) == DType::F32;
  return tolerance(info, kernel) + (f32 ? 0.01 : 0.1) * lr * max_scale * steps;
}

bool steps_matrices(const optgen::OptimizerInfo& info) {
  for (int v = 0; v < info.num_variants; ++v)
    if (info.variants[v].num_matrix_values > 0) return true;
  return false;
}

std::vector<std::int64_t> shape_for(const optgen::OptimizerInfo& info, std::int64_t numel) {
  if (!steps_matrices(info)) return {numel};
  std::int64_t rows = 1;
  for (std::int64_t d = 1; d * d <= numel; ++d)
    if (numel % d == 0) rows = d;
  return {rows, numel / rows};
}

TensorShapes shapes_for(const optgen::OptimizerInfo& info, const std::vector<std::int64_t>& sizes) {
  TensorShapes shapes;
  for (std::int64_t n : sizes) shapes.list.push_back(shape_for(info, n));
  return shapes;
}

int hyperparameter_index(const optgen::OptimizerInfo& info, const std::string& name) {
  for (int i = 0; i < info.num_hyperparameters; ++i)
    if (name == info.hyperparameters[i].name) return i;
  throw std::runtime_error(std::string(info.name) + " has no hyperparameter " + name);
}

double hyperparameter(const optgen::OptimizerInfo& info, const std::vector<double>& h, const std::string& name) {
  return h.at(static_cast<std::size_t>(hyperparameter_index(info, name)));
}

std::vector<DType> state_dtypes(const optgen::OptimizerInfo& info, const optgen::KernelInfo& kernel) {
  return std::vector<DType>(kernel.state_dtypes, kernel.state_dtypes + info.num_states);
}

double tolerance(const optgen::OptimizerInfo& info, const optgen::KernelInfo& kernel) {
  return tolerance(kernel.param, state_dtypes(info, kernel));
}

optgen::StorageOptions storage_of(const optgen::OptimizerInfo& info, const optgen::KernelInfo& kernel) {
  optgen::StorageOptions storage;
  for (int s = 0; s < info.num_states; ++s)
    storage.state_dtypes.emplace_back(info.states[s].name, kernel.state_dtypes[s]);
  const optgen::VariantInfo& variant = info.variants[kernel.variant];
  for (int j = 0; j < variant.num_matrix_values; ++j)
    if (optgen::matrix_dtype(kernel, j) != DType::BF16)
      storage.state_dtypes.emplace_back(variant.matrix_values[j].name, optgen::matrix_dtype(kernel, j));
  storage.param_write = kernel.param_write;
  storage.seed = 0x5eed0f0e7a11ull;
  return storage;
}

DeviceGroup::DeviceGroup(DType type, const std::vector<std::int64_t>& numels, const std::vector<bool>& misaligned,
                         std::mt19937& rng)
    : dtype(type), sizes(numels) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (size_t i = 0; i < sizes.size(); ++i) {
    const size_t offset = misaligned[i] ? 4 : 0;
    const size_t bytes = static_cast<size_t>(sizes[i]) * optgen::size_of(type) + offset;
    auto param = std::make_unique<DeviceMemory>(bytes + 16);
    auto grad = std::make_unique<DeviceMemory>(bytes + 16);
    std::vector<float> p(sizes[i]);
    for (auto& x : p) x = round_to(type, uniform(rng));
    upload(type, param->at(offset), p);
    // A vector of its numel: the shape a spec with rows and columns needs (not factored).
    tensors.push_back({param->at(offset), grad->at(offset), sizes[i], type, nullptr, -1, {sizes[i]}});
    shapes.push_back({sizes[i]});
    params.push_back(p);
    grads.emplace_back(sizes[i]);
    memory.push_back(std::move(param));
    memory.push_back(std::move(grad));
  }
}

namespace {
std::vector<std::int64_t> numels_of(const std::vector<std::vector<std::int64_t>>& shapes) {
  std::vector<std::int64_t> numels;
  for (const auto& shape : shapes) {
    std::int64_t n = 1;
    for (std::int64_t d : shape) n *= d;
    numels.push_back(n);
  }
  return numels;
}
}  // namespace

DeviceGroup::DeviceGroup(DType type, const TensorShapes& tensor_shapes, const std::vector<bool>& misaligned,
                         std::mt19937& rng)
    : DeviceGroup(type, numels_of(tensor_shapes.list), misaligned, rng) {
  shapes = tensor_shapes.list;
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].shape = shapes[i];
}

void DeviceGroup::new_gradients(std::mt19937& rng, float scale) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (size_t i = 0; i < sizes.size(); ++i) {
    for (auto& x : grads[i]) x = round_to(dtype, uniform(rng) * scale);
    upload(dtype, const_cast<void*>(tensors[i].grad), grads[i]);
  }
}

std::vector<std::vector<unsigned char>> DeviceGroup::device_bytes() const {
  std::vector<std::vector<unsigned char>> bytes;
  for (size_t i = 0; i < sizes.size(); ++i)
    for (const void* p : {static_cast<const void*>(tensors[i].param), tensors[i].grad}) {
      bytes.emplace_back(static_cast<size_t>(sizes[i]) * optgen::size_of(dtype));
      if (!bytes.back().empty())
        optgen::driver::check(optgen::driver::api().cuMemcpyDtoH(bytes.back().data(), reinterpret_cast<CUdeviceptr>(p),
                                                                 bytes.back().size()),
                              "cuMemcpyDtoH");
    }
  return bytes;
}

void DeviceGroup::set_device_bytes(const std::vector<std::vector<unsigned char>>& bytes) {
  size_t k = 0;
  for (size_t i = 0; i < sizes.size(); ++i)
    for (const void* p : {static_cast<const void*>(tensors[i].param), tensors[i].grad}) {
      const auto& b = bytes.at(k++);
      if (!b.empty())
        optgen::driver::check(optgen::driver::api().cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(p), b.data(), b.size()),
                              "cuMemcpyHtoD");
    }
  synchronize();  // a copy from pageable memory may still be in flight when it returns
}

StateSnapshot snapshot_states(const optgen::FusedOptimizer& opt, const optgen::reference::Optimizer& ref,
                              std::size_t group, const DeviceGroup& g) {
  const auto& info = opt.info();
  const std::vector<double> h = opt.hyperparameters(group);
  StateSnapshot states(g.sizes.size(), std::vector<std::vector<float>>(info.num_states + 1));
  for (size_t t = 0; t < g.sizes.size(); ++t) {
    for (int s = 0; s < info.num_states; ++s)
      if (ref.state_present(h.data(), s)) {
        // Its own size (a row or column state's), nothing when absent for this tensor.
        const optgen::StateBuffer b = opt.state(info.states[s].name, group, t);
        if (b.data) states[t][s] = download(b.dtype, b.data, static_cast<size_t>(b.numel));
      }
    const optgen::StateBuffer master = opt.master_weights(group, t);
    if (master.data) states[t][info.num_states] = download(DType::F32, master.data, static_cast<size_t>(master.numel));
  }
  return states;
}

/// After a GPU step: runs the CPU reference for `group` from the values it started from (`g`'s
/// host copies and `states`) and compares the device's params and states with it, recording the
/// worst relative error in `result`. Afterwards `g` holds the device's values.
void check_group(const optgen::FusedOptimizer& opt, const optgen::reference::Optimizer& ref, std::size_t group,
                 DeviceGroup& g, StateSnapshot& states, std::vector<double>& ref_scalar_state, std::int64_t step,
                 Comparison& result, float grad_scale, int program, optgen::reference::OptimizerTotals* totals) {
  const auto& info = opt.info();
  const std::vector<double> h = opt.hyperparameters(group);
  std::vector<std::vector<float*>> state_pointers(g.sizes.size(), std::vector<float*>(info.num_states, nullptr));
  std::vector<optgen::reference::Tensor<float>> tensors;
  // With a master copy, the reference updates the master; the param must be the master rounded.
  const bool master = opt.storage().param_write == optgen::ParamWrite::Master;
  std::vector<DType> dtypes;
  for (int s = 0; s < info.num_states; ++s) dtypes.push_back(opt.state_dtype(info.states[s].name));
  for (size_t t = 0; t < g.sizes.size(); ++t) {
    for (int s = 0; s < info.num_states; ++s)
      state_pointers[t][s] = states[t][s].empty() ? nullptr : states[t][s].data();
    // A tensor of two or more dimensions is factored over its last two (reference::Tensor).
    const bool factored = t < g.shapes.size() && g.shapes[t].size() >= 2;
    const size_t rows = factored ? static_cast<size_t>(g.shapes[t][g.shapes[t].size() - 2]) : 0;
    const size_t cols = factored ? static_cast<size_t>(g.shapes[t].back()) : 0;
    float* param = master ? states[t][info.num_states].data() : g.params[t].data();
    tensors.push_back(
        {static_cast<size_t>(g.sizes[t]), param, g.grads[t].data(), state_pointers[t].data(), rows, cols});
  }
  if (program < 0)
    ref.step_float(h.data(), ref_scalar_state.data(), step, tensors.data(), tensors.size(), grad_scale, totals);
  else
    ref.run_float(program, h.data(), ref_scalar_state.data(), step, tensors.data(), tensors.size());
  if (totals && totals->adding) return;

  const double limit = tolerance(g.dtype, dtypes);
  for (size_t t = 0; t < g.sizes.size(); ++t) {
    auto check = [&](const std::string& what, DType type, const void* device, std::vector<float>& expected) {
      std::vector<float> actual = download(type, device, expected.size());
      const double error = relative_error(actual, expected);
      if (!(error <= result.worst)) {
        result.worst = std::isnan(error) ? INFINITY : error;
        result.where = what + " of tensor " + std::to_string(t) + " (" + std::to_string(g.sizes[t]) +
                       " elements) of group " + std::to_string(group) + " at step " + std::to_string(step);
      }
      if (!(error <= limit)) {
        for (size_t i = 0; i < actual.size(); ++i)
          if (!(std::fabs(actual[i] - expected[i]) <= limit * std::max(1.0f, std::fabs(expected[i])))) {
            UNSCOPED_INFO(what << "[" << i << "]: gpu " << actual[i] << ", reference " << expected[i]);
            break;
          }
      }
      expected = actual;  // the next step starts from the device's values
    };
    if (master) {
      std::vector<float>& expected = states[t][info.num_states];
      for (size_t i = 0; i < expected.size(); ++i) g.params[t][i] = round_to(g.dtype, expected[i]);
      check("master copy", DType::F32, opt.master_weights(group, t).data, expected);
    }
    // Rounded to nearest, the param must be the reference's value rounded (stochastic rounding
    // is compared unrounded: its own tests check its bits).
    if (opt.storage().param_write == optgen::ParamWrite::Nearest)
      for (float& x : g.params[t]) x = round_to(g.dtype, x);
    check("param", g.dtype, g.tensors[t].param, g.params[t]);
    for (int s = 0; s < info.num_states; ++s)
      if (!states[t][s].empty()) {
        const optgen::StateBuffer b = opt.state(info.states[s].name, group, t);
        if (optgen::is_blockwise(b.dtype)) states[t][s] = requantized(b.dtype, states[t][s]);
        check(info.states[s].name, b.dtype, b.data, states[t][s]);
      }
  }
  // The scalar state, compared the same way; the next step starts from the device's too (Prodigy's
  // D, which the device sums in another order than the reference, and which every later step reads).
  for (int s = 0; s < info.num_scalar_states; ++s) {
    const double device = opt.scalar_state(info.scalar_states[s].name, group);
    const double error = std::fabs(device - ref_scalar_state[s]) / std::max(std::fabs(ref_scalar_state[s]), 1e-6);
    if (!(error <= result.worst)) {
      result.worst = std::isnan(error) ? INFINITY : error;
      result.where = std::string("scalar state ") + info.scalar_states[s].name + " of group " + std::to_string(group) +
                     " at step " + std::to_string(step);
    }
    ref_scalar_state[s] = device;
  }
}

void synchronize() { optgen::driver::check(optgen::driver::api().cuCtxSynchronize(), "cuCtxSynchronize"); }

/// One step on the GPU and, from the same starting values, on the CPU reference, for a
/// single-group optimizer.
void compare_step(optgen::FusedOptimizer& opt, const optgen::reference::Optimizer& ref, DeviceGroup& g,
                  std::vector<double>& ref_scalar_state, std::int64_t step, Comparison& result) {
  StateSnapshot states = snapshot_states(opt, ref, 0, g);
  opt.step();
  synchronize();
  check_group(opt, ref, 0, g, states, ref_scalar_state, step, result);
}

void compare_program(optgen::FusedOptimizer& opt, const optgen::reference::Optimizer& ref, DeviceGroup& g,
                     std::vector<double>& ref_scalar_state, std::int64_t steps, int program, Comparison& result) {
  StateSnapshot states = snapshot_states(opt, ref, 0, g);
  opt.run(ref.programs[program]);
  synchronize();
  check_group(opt, ref, 0, g, states, ref_scalar_state, steps, result, 1.0f, program);
}

std::vector<double> initial_scalar_state(const optgen::OptimizerInfo& info, const std::vector<double>& h) {
  std::vector<double> s;
  for (int i = 0; i < info.num_scalar_states; ++i) {
    const auto& init = info.scalar_states[i].init;
    s.push_back(init.hyperparameter >= 0 ? h[init.hyperparameter] : init.value);
  }
  s.push_back(0);  // never empty
  return s;
}

Comparison step_two_groups(optgen::FusedOptimizer& opt, const optgen::reference::Optimizer& ref, DeviceGroup& a,
                           DeviceGroup& b, const std::vector<double>& h0, const std::vector<double>& h1, int steps,
                           std::mt19937& rng) {
  std::vector<double> state_a = initial_scalar_state(opt.info(), h0), state_b = initial_scalar_state(opt.info(), h1);
  Comparison result;
  for (std::int64_t step = 1; step <= steps; ++step) {
    a.new_gradients(rng);
    b.new_gradients(rng);
    StateSnapshot states_a = snapshot_states(opt, ref, 0, a), states_b = snapshot_states(opt, ref, 1, b);
    opt.step();
    synchronize();
    check_group(opt, ref, 0, a, states_a, state_a, step, result);
    check_group(opt, ref, 1, b, states_b, state_b, step, result);
  }
  return result;
}

Comparison compare_steps(optgen::FusedOptimizer& opt, const optgen::reference::Optimizer& ref, DeviceGroup& g,
                         int steps, std::mt19937& rng) {
  std::vector<double> scalar_state = initial_scalar_state(opt.info(), opt.hyperparameters(0));
  Comparison result;
  for (std::int64_t step = 1; step <= steps; ++step) {
    g.new_gradients(rng);
    compare_step(opt, ref, g, scalar_state, step, result);
  }
  return result;
}

optgen::Tensor fake_tensor(std::int64_t numel) {
  return {reinterpret_cast<void*>(0x10000), reinterpret_cast<const void*>(0x20000), numel, DType::F32};
}

std::vector<unsigned char> master_bytes(const optgen::FusedOptimizer& opt, std::size_t group, std::size_t tensor) {
  const optgen::StateBuffer b = opt.master_weights(group, tensor);
  std::vector<unsigned char> bytes(static_cast<size_t>(b.numel) * sizeof(float));
  if (!bytes.empty())
    optgen::driver::check(
        optgen::driver::api().cuMemcpyDtoH(bytes.data(), reinterpret_cast<CUdeviceptr>(b.data), bytes.size()),
        "cuMemcpyDtoH");
  return bytes;
}

std::vector<std::vector<unsigned char>> state_bytes(const optgen::FusedOptimizer& opt) {
  std::vector<std::vector<unsigned char>> bytes;
  const auto& info = opt.info();
  for (std::size_t g = 0; g < opt.num_groups(); ++g)
    for (std::size_t t = 0; t < opt.num_tensors(g); ++t)
      for (int s = 0; s < info.num_states; ++s) {
        optgen::StateBuffer b{nullptr, 0, DType::F32};
        try {
          b = opt.state(info.states[s].name, g, t);
        } catch (const optgen::Error&) {
          continue;  // a state this group's variant does not have
        }
        bytes.emplace_back(b.data ? optgen::storage_bytes(b.dtype, b.numel) : 0);
        if (!bytes.back().empty())
          optgen::driver::check(optgen::driver::api().cuMemcpyDtoH(
                                    bytes.back().data(), reinterpret_cast<CUdeviceptr>(b.data), bytes.back().size()),
                                "cuMemcpyDtoH");
        if (optgen::is_blockwise(b.dtype))  // the padding after the codes holds nothing
          std::fill(bytes.back().begin() + b.numel, bytes.back().begin() + optgen::blockwise8::absmax_offset(b.numel),
                    0);
      }
  return bytes;
}

std::vector<std::vector<unsigned char>> state_bytes_of(const optgen::Checkpoint& checkpoint) {
  std::vector<std::vector<unsigned char>> bytes;
  const std::string absmax = ".absmax";
  for (const auto& t : checkpoint.tensors) {
    if (t.name.find(".tensor.") == std::string::npos) continue;
    if (t.name.size() > absmax.size() && t.name.compare(t.name.size() - absmax.size(), absmax.size(), absmax) == 0) {
      // An 8-bit state's block absmax, after its codes as the device holds them (blockwise8::absmax_offset).
      std::vector<unsigned char>& codes = bytes.back();
      codes.resize(static_cast<size_t>(optgen::blockwise8::absmax_offset(static_cast<long long>(codes.size()))));
      codes.insert(codes.end(), t.data.begin(), t.data.end());
      continue;
    }
    bytes.push_back(t.data);
  }
  return bytes;
}

}  // namespace optgen_test
