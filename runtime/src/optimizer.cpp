#include "optgen/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "optgen/driver.h"
#include "optgen/error.h"
#include "optgen/kernel_abi.h"

namespace optgen {
namespace {

constexpr std::size_t kStateAlignment = 256;  // bytes; keeps every state buffer 16-byte aligned

/// Device memory that frees itself.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) {
    if (bytes > 0) driver::check(driver::api().cuMemAlloc(&ptr_, bytes), "cuMemAlloc");
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_) { o.ptr_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    return *this;
  }
  ~DeviceBuffer() {
    if (ptr_) driver::api().cuMemFree(ptr_);
  }
  CUdeviceptr get() const { return ptr_; }

 private:
  CUdeviceptr ptr_ = 0;
};

struct BoundTensor {
  void* param;
  const void* grad;
  std::int64_t numel;
  std::vector<void*> states;  ///< per spec state; null when the variant has none
};

struct Group {
  std::vector<double> h;  ///< hyperparameters, derived flags filled in
  std::vector<double> scalar_state;
  std::int64_t step = 0;
  int variant = 0;
  int kernel = 0;
  std::vector<BoundTensor> tensors;
  DeviceBuffer state_memory;
};

/// The groups one kernel updates, and the tables it reads.
struct Launch {
  int kernel;
  CUfunction function = nullptr;
  std::vector<std::size_t> groups;
  DeviceBuffer table_memory;
  kernel_abi::TableView table{};
  std::vector<unsigned char> args;     ///< StepArgs as the kernel receives it
  std::vector<unsigned char> scalars;  ///< every group's StepScalars, when they do not fit inline
  DeviceBuffer device_scalars;
};

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

}  // namespace

struct FusedOptimizer::Impl {
  const OptimizerInfo* info;
  std::vector<double> defaults;
  DType state_dtype;
  long long chunk_size;
  std::vector<Group> groups;
  std::vector<Launch> launches;
  bool tables_stale = true;
  int launches_last_step = 0;
  Module module;
  bool module_loaded = false;

  std::string call(const char* method) const { return std::string(info->name) + "::" + method; }

  int hyperparameter_index(const std::string& name, const char* method) const {
    std::string known;
    for (int i = 0; i < info->num_hyperparameters; ++i) {
      if (name == info->hyperparameters[i].name) return i;
      known += (known.empty() ? "" : ", ") + std::string(info->hyperparameters[i].name);
    }
    throw Error(call(method), std::string(info->name) + " has no hyperparameter '" + name + "'", "its hyperparameters: " + known);
  }

  int state_index(const std::string& name, const char* method) const {
    std::string known;
    for (int i = 0; i < info->num_states; ++i) {
      if (name == info->states[i].name) return i;
      known += (known.empty() ? "" : ", ") + std::string(info->states[i].name);
    }
    throw Error(call(method), std::string(info->name) + " has no state '" + name + "'",
                known.empty() ? "it keeps no per-element state" : "its states: " + known);
  }

  const Group& group_at(std::size_t group, const char* method) const {
    if (group >= groups.size())
      throw Error(call(method), "no param group " + std::to_string(group) + " (there are " + std::to_string(groups.size()) + ")");
    return groups[group];
  }

  int find_kernel(int variant, DType param) const {
    std::string generated;
    for (int k = 0; k < info->num_kernels; ++k) {
      const KernelInfo& kernel = info->kernels[k];
      if (kernel.variant == variant && kernel.param == param && kernel.state == state_dtype) return k;
      generated += (generated.empty() ? "" : ", ") + std::string(kernel.name);
    }
    const std::string storage = std::string(to_string(param)) + (state_dtype == DType::F32 ? "" : std::string(":") + to_string(state_dtype));
    throw Error(call("add_param_group"),
                std::string("no kernel for variant ") + info->variants[variant].name + " with " + to_string(param) + " params and " +
                    to_string(state_dtype) + " states was generated (kernels: " + generated + ")",
                "add \"" + storage + "\" to the spec's 'storage:' list or to STORAGE (and the variant to VARIANTS, if given) in "
                "optgen_add_optimizer(), and rebuild");
  }

  void check_tensor(const Tensor& t, std::size_t i, DType dtype) const {
    const std::string which = "tensor " + std::to_string(i) + " of the group";
    const char* method = "add_param_group";
    if (t.numel < 0) throw Error(call(method), which + " has a negative numel (" + std::to_string(t.numel) + ")");
    if (t.grad_numel >= 0 && t.grad_numel != t.numel)
      throw Error(call(method), which + " has " + std::to_string(t.numel) + " parameter elements but " + std::to_string(t.grad_numel) +
                                    " gradient elements", "pass the gradient that belongs to this parameter");
    if (t.dtype != dtype)
      throw Error(call(method), which + " is " + to_string(t.dtype) + " but tensor 0 is " + to_string(dtype),
                  "a param group holds tensors of one dtype; put tensors of another dtype in a group of their own");
    if (t.numel == 0) return;
    auto check_pointer = [&](const void* p, const std::string& what) {
      if (!p) throw Error(call(method), which + " has a null " + what + " pointer", "pass the device address of its data");
      if (reinterpret_cast<std::uintptr_t>(p) % size_of(dtype) != 0)
        throw Error(call(method), which + ": the " + what + " pointer " + std::to_string(reinterpret_cast<std::uintptr_t>(p)) +
                                      " is not aligned to its " + std::to_string(size_of(dtype)) + "-byte " + to_string(dtype) + " elements");
    };
    check_pointer(t.param, "param");
    check_pointer(t.grad, "grad");
    if (t.param == t.grad) throw Error(call(method), which + " has the same pointer for param and grad");
  }

  /// The checks that need the driver: every pointer is device memory.
  void check_device_memory(const Tensor& t, std::size_t i) const {
    if (t.numel == 0) return;
    for (const auto& [p, what] : {std::pair<const void*, const char*>{t.param, "param"}, {t.grad, "grad"}}) {
      unsigned int type = 0;
      CUresult r = driver::api().cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, reinterpret_cast<CUdeviceptr>(p));
      if (r != CUDA_SUCCESS || type == CU_MEMORYTYPE_HOST)
        throw Error(call("add_param_group"), "tensor " + std::to_string(i) + " of the group: the " + what + " pointer is not device memory",
                    "allocate it with cudaMalloc (or torch on a CUDA device)");
    }
  }

  /// The index of hyperparameter `name`, after checking that `value` may be set on it.
  int settable_index(const std::string& name, double value) const {
    const int i = hyperparameter_index(name, "set");
    const auto& hp = info->hyperparameters[i];
    if (hp.derived) throw Error(call("set"), name + " is derived from other hyperparameters", "set those instead");
    if (hp.type == reference::ValueType::Bool && value != 0 && value != 1)
      throw Error(call("set"), name + " is a bool; got " + std::to_string(value));
    if (!std::isfinite(value)) throw Error(call("set"), name + " must be finite; got " + std::to_string(value));
    return i;
  }

  /// Group `group`'s hyperparameters with hyperparameter `i` set to `value`, derived flags
  /// recomputed; throws if that would switch the group's kernel variant.
  std::vector<double> with_value(std::size_t group, const std::string& name, int i, double value) const {
    const Group& g = groups[group];
    std::vector<double> h = g.h;
    h[i] = value;
    info->derive_flags(h.data());
    const int variant = info->select_variant(h.data());
    if (variant != g.variant)
      throw Error(call("set"), "setting " + name + " to " + std::to_string(value) + " would switch param group " +
                                   std::to_string(group) + " from kernel variant " + info->variants[g.variant].name + " to " +
                                   info->variants[variant].name,
                  "variants own different state buffers, so they are fixed when a group is added: pass " + name +
                      " to add_param_group instead");
    return h;
  }

  void ensure_module() {
    if (module_loaded) return;
    module = load_module(info->images(), driver::compute_capability(driver::current_device()));
    module_loaded = true;
  }

  void build_tables();
  void fill_state(void* data, std::int64_t numel, double value) const;
};

std::vector<double> default_hyperparameters(const OptimizerInfo& info) {
  std::vector<double> h;
  for (int i = 0; i < info.num_hyperparameters; ++i) h.push_back(info.hyperparameters[i].default_value);
  return h;
}

FusedOptimizer::FusedOptimizer(const OptimizerInfo& info, std::vector<double> defaults, DType state_dtype)
    : impl_(std::make_unique<Impl>()) {
  impl_->info = &info;
  if (static_cast<int>(defaults.size()) != info.num_hyperparameters)
    throw Error(std::string(info.name) + "::" + info.name, "expected " + std::to_string(info.num_hyperparameters) +
                                                                " hyperparameters, got " + std::to_string(defaults.size()));
  if (state_dtype == DType::F16)
    throw Error(std::string(info.name) + "::" + info.name, "states cannot be stored in f16", "use f32 (the default) or bf16");
  impl_->defaults = std::move(defaults);
  impl_->state_dtype = state_dtype;
  impl_->chunk_size = info.chunk_size;
}

FusedOptimizer::FusedOptimizer(FusedOptimizer&&) noexcept = default;
FusedOptimizer& FusedOptimizer::operator=(FusedOptimizer&&) noexcept = default;
FusedOptimizer::~FusedOptimizer() = default;

std::size_t FusedOptimizer::add_param_group(const std::vector<Tensor>& tensors, const Overrides& overrides) {
  std::vector<double> h = impl_->defaults;
  for (const auto& [name, value] : overrides) h[impl_->hyperparameter_index(name, "add_param_group")] = value;
  return add_param_group(tensors, std::move(h));
}

std::size_t FusedOptimizer::add_param_group(const std::vector<Tensor>& tensors, std::vector<double> h) {
  Impl& m = *impl_;
  const OptimizerInfo& info = *m.info;
  if (static_cast<int>(h.size()) != info.num_hyperparameters)
    throw Error(m.call("add_param_group"), "expected " + std::to_string(info.num_hyperparameters) + " hyperparameters, got " +
                                               std::to_string(h.size()));
  for (int i = 0; i < info.num_hyperparameters; ++i) {
    const auto& hp = info.hyperparameters[i];
    if (hp.type == reference::ValueType::Bool && h[i] != 0 && h[i] != 1)
      throw Error(m.call("add_param_group"), std::string(hp.name) + " is a bool; got " + std::to_string(h[i]));
    if (!std::isfinite(h[i]))
      throw Error(m.call("add_param_group"), std::string(hp.name) + " is not finite (" + std::to_string(h[i]) + ")");
  }
  info.derive_flags(h.data());
  Group g;
  g.variant = info.select_variant(h.data());
  const VariantInfo& variant = info.variants[g.variant];
  const DType dtype = tensors.empty() ? DType::F32 : tensors[0].dtype;
  g.kernel = m.find_kernel(g.variant, dtype);
  for (std::size_t i = 0; i < tensors.size(); ++i) m.check_tensor(tensors[i], i, dtype);
  driver::current_device();  // a context to allocate in
  for (std::size_t i = 0; i < tensors.size(); ++i) m.check_device_memory(tensors[i], i);

  // States: the caller's buffers, or slices of one allocation initialised here.
  const std::size_t state_bytes = size_of(m.state_dtype);
  std::size_t total = 0;
  for (const Tensor& t : tensors)
    if (!t.states) total += round_up(static_cast<std::size_t>(t.numel) * state_bytes, kStateAlignment) * variant.num_states;
  g.state_memory = DeviceBuffer(total);
  std::size_t offset = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    BoundTensor b{t.param, t.grad, t.numel, std::vector<void*>(info.num_states, nullptr)};
    for (int j = 0; j < variant.num_states; ++j) {
      const int s = variant.states[j];
      if (t.states) {
        void* p = t.states[s];
        if (t.numel > 0 && (!p || reinterpret_cast<std::uintptr_t>(p) % state_bytes != 0))
          throw Error(m.call("add_param_group"), "tensor " + std::to_string(i) + ": the caller's '" + info.states[s].name +
                                                     "' buffer is null or misaligned",
                      "pass a device buffer of " + std::to_string(t.numel) + " " + to_string(m.state_dtype) + " elements");
        b.states[s] = p;
        continue;
      }
      b.states[s] = reinterpret_cast<void*>(g.state_memory.get() + offset);
      offset += round_up(static_cast<std::size_t>(t.numel) * state_bytes, kStateAlignment);
      const auto& init = info.states[s].init;
      m.fill_state(b.states[s], t.numel, init.hyperparameter >= 0 ? h[init.hyperparameter] : init.value);
    }
    g.tensors.push_back(std::move(b));
  }
  for (int s = 0; s < info.num_scalar_states; ++s) {
    const auto& init = info.scalar_states[s].init;
    g.scalar_state.push_back(init.hyperparameter >= 0 ? h[init.hyperparameter] : init.value);
  }
  g.h = std::move(h);
  m.groups.push_back(std::move(g));
  m.tables_stale = true;
  return m.groups.size() - 1;
}

void FusedOptimizer::Impl::fill_state(void* data, std::int64_t numel, double value) const {
  if (numel == 0) return;
  const auto ptr = reinterpret_cast<CUdeviceptr>(data);
  const float f = static_cast<float>(value);
  if (state_dtype == DType::F32) {
    std::uint32_t bits;
    std::memcpy(&bits, &f, 4);
    driver::check(driver::api().cuMemsetD32(ptr, bits, static_cast<std::size_t>(numel)), "cuMemsetD32");
  } else {
    driver::check(driver::api().cuMemsetD16(ptr, float_to_bf16(f), static_cast<std::size_t>(numel)), "cuMemsetD16");
  }
}

void FusedOptimizer::Impl::build_tables() {
  launches.clear();
  for (std::size_t gi = 0; gi < groups.size(); ++gi) {
    auto it = std::find_if(launches.begin(), launches.end(), [&](const Launch& l) { return l.kernel == groups[gi].kernel; });
    if (it == launches.end()) {
      launches.emplace_back();
      launches.back().kernel = groups[gi].kernel;
      it = launches.end() - 1;
    }
    it->groups.push_back(gi);
  }
  for (Launch& launch : launches) {
    const KernelInfo& kernel = info->kernels[launch.kernel];
    const VariantInfo& variant = info->variants[kernel.variant];
    const int operands = 2 + variant.num_states;
    std::vector<const BoundTensor*> tensors;
    std::vector<int> group_of;
    for (std::size_t local = 0; local < launch.groups.size(); ++local)
      for (const BoundTensor& t : groups[launch.groups[local]].tensors) {
        tensors.push_back(&t);
        group_of.push_back(static_cast<int>(local));
      }
    const std::size_t n = tensors.size();
    std::vector<void*> pointers(operands * n);
    std::vector<long long> numel(n);
    std::vector<kernel_abi::Chunk> chunks;
    for (std::size_t t = 0; t < n; ++t) {
      pointers[0 * n + t] = tensors[t]->param;
      pointers[1 * n + t] = const_cast<void*>(tensors[t]->grad);
      for (int j = 0; j < variant.num_states; ++j) pointers[(2 + j) * n + t] = tensors[t]->states[variant.states[j]];
      numel[t] = tensors[t]->numel;
      const long long count = (numel[t] + chunk_size - 1) / chunk_size;
      for (long long c = 0; c < count; ++c) chunks.push_back({static_cast<int>(t), static_cast<int>(c)});
    }
    // One allocation: pointers | numel | group | chunks, each 8-byte aligned.
    const std::size_t pointers_at = 0;
    const std::size_t numel_at = pointers_at + pointers.size() * sizeof(void*);
    const std::size_t group_at = numel_at + numel.size() * sizeof(long long);
    const std::size_t chunks_at = round_up(group_at + group_of.size() * sizeof(int), 8);
    const std::size_t bytes = chunks_at + chunks.size() * sizeof(kernel_abi::Chunk);
    std::vector<unsigned char> host(bytes);
    std::memcpy(host.data() + pointers_at, pointers.data(), pointers.size() * sizeof(void*));
    std::memcpy(host.data() + numel_at, numel.data(), numel.size() * sizeof(long long));
    std::memcpy(host.data() + group_at, group_of.data(), group_of.size() * sizeof(int));
    std::memcpy(host.data() + chunks_at, chunks.data(), chunks.size() * sizeof(kernel_abi::Chunk));
    launch.table_memory = DeviceBuffer(bytes);
    const CUdeviceptr base = launch.table_memory.get();
    if (bytes > 0) driver::check(driver::api().cuMemcpyHtoD(base, host.data(), bytes), "cuMemcpyHtoD");
    launch.table = {reinterpret_cast<void* const*>(base + pointers_at), reinterpret_cast<const long long*>(base + numel_at),
                    reinterpret_cast<const int*>(base + group_at), reinterpret_cast<const kernel_abi::Chunk*>(base + chunks_at),
                    chunk_size, static_cast<int>(n), static_cast<int>(chunks.size())};
    launch.args.assign(kernel_abi::step_args_size(variant.step_scalars_size, info->inline_groups), 0);
    if (static_cast<int>(launch.groups.size()) > info->inline_groups) {
      launch.scalars.assign(launch.groups.size() * variant.step_scalars_size, 0);
      launch.device_scalars = DeviceBuffer(launch.scalars.size());
      const CUdeviceptr p = launch.device_scalars.get();
      std::memcpy(launch.args.data(), &p, sizeof p);
    }
    launch.function = module.function(kernel.name);
  }
  tables_stale = false;
}

void FusedOptimizer::step(CUstream stream) {
  Impl& m = *impl_;
  if (m.tables_stale) {
    m.ensure_module();
    m.build_tables();
  }
  const auto& api = driver::api();
  m.launches_last_step = 0;
  for (Launch& launch : m.launches) {
    const VariantInfo& variant = m.info->variants[m.info->kernels[launch.kernel].variant];
    const std::size_t size = variant.step_scalars_size;
    const bool inline_scalars = launch.scalars.empty();
    unsigned char* out = inline_scalars ? launch.args.data() + kernel_abi::kInlineOffset : launch.scalars.data();
    for (std::size_t local = 0; local < launch.groups.size(); ++local) {
      Group& g = m.groups[launch.groups[local]];
      ++g.step;
      variant.per_step(g.h.data(), g.scalar_state.data(), g.step, out + local * size);
    }
    if (!inline_scalars)
      driver::check(api.cuMemcpyHtoDAsync(launch.device_scalars.get(), launch.scalars.data(), launch.scalars.size(), stream),
                    "cuMemcpyHtoDAsync");
    if (launch.table.num_chunks == 0) continue;
    void* args[] = {&launch.table, launch.args.data()};
    driver::check(api.cuLaunchKernel(launch.function, static_cast<unsigned>(launch.table.num_chunks), 1, 1,
                                     static_cast<unsigned>(m.info->block_size), 1, 1, 0, stream, args, nullptr),
                  "cuLaunchKernel", "check that the tensors are still allocated and that the stream belongs to the current context");
    ++m.launches_last_step;
  }
}

void FusedOptimizer::set(const std::string& name, double value) {
  Impl& m = *impl_;
  const int i = m.settable_index(name, value);
  // Every group is checked before any changes, so a rejected value leaves all of them as they were.
  std::vector<std::vector<double>> updated;
  for (std::size_t g = 0; g < m.groups.size(); ++g) updated.push_back(m.with_value(g, name, i, value));
  for (std::size_t g = 0; g < m.groups.size(); ++g) m.groups[g].h = std::move(updated[g]);
  m.defaults[i] = value;  // for groups added later
}

void FusedOptimizer::set(const std::string& name, double value, std::size_t group) {
  Impl& m = *impl_;
  const int i = m.settable_index(name, value);
  m.group_at(group, "set");
  m.groups[group].h = m.with_value(group, name, i, value);
}

double FusedOptimizer::get(const std::string& name, std::size_t group) const {
  return impl_->group_at(group, "get").h[impl_->hyperparameter_index(name, "get")];
}

std::vector<double> FusedOptimizer::hyperparameters(std::size_t group) const { return impl_->group_at(group, "hyperparameters").h; }

StateBuffer FusedOptimizer::state(const std::string& name, std::size_t group, std::size_t tensor) const {
  const Impl& m = *impl_;
  const int s = m.state_index(name, "state");
  const Group& g = m.group_at(group, "state");
  if (tensor >= g.tensors.size())
    throw Error(m.call("state"), "param group " + std::to_string(group) + " has no tensor " + std::to_string(tensor));
  const BoundTensor& t = g.tensors[tensor];
  if (!t.states[s] && t.numel > 0)
    throw Error(m.call("state"), "param group " + std::to_string(group) + " (variant " + m.info->variants[g.variant].name +
                                     ") has no '" + name + "' buffer");
  return {t.states[s], t.numel, m.state_dtype};
}

double FusedOptimizer::scalar_state(const std::string& name, std::size_t group) const {
  const Group& g = impl_->group_at(group, "scalar_state");
  for (int s = 0; s < impl_->info->num_scalar_states; ++s)
    if (name == impl_->info->scalar_states[s].name) return g.scalar_state[s];
  throw Error(impl_->call("scalar_state"), std::string(impl_->info->name) + " has no scalar state '" + name + "'");
}

std::int64_t FusedOptimizer::step_count(std::size_t group) const { return impl_->group_at(group, "step_count").step; }
std::size_t FusedOptimizer::num_groups() const { return impl_->groups.size(); }
std::size_t FusedOptimizer::num_tensors(std::size_t group) const { return impl_->group_at(group, "num_tensors").tensors.size(); }

int FusedOptimizer::launches_last_step() const { return impl_->launches_last_step; }

void FusedOptimizer::set_chunk_size(long long elements) {
  if (elements < 64 || elements % 64 != 0 || elements > (1LL << 30))
    throw Error(impl_->call("set_chunk_size"), "chunk size " + std::to_string(elements) + " must be a multiple of 64 up to 2^30");
  impl_->chunk_size = elements;
  impl_->tables_stale = true;
}

const OptimizerInfo& FusedOptimizer::info() const { return *impl_->info; }

ModuleOrigin FusedOptimizer::module_origin() const {
  if (!impl_->module_loaded) throw Error(impl_->call("module_origin"), "the kernels are loaded at the first step, which has not run");
  return impl_->module.origin();
}

}  // namespace optgen
