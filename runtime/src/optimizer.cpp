#include "optgen/optimizer.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "optgen/blockwise8.h"
#include "matrix_values.h"
#include "optimizer_impl.h"

namespace optgen {

int reduce_chunks_per_block(std::size_t chunks, std::size_t resident, bool fill_last_wave) {
  if (resident == 0 || chunks == 0) return 1;
  if (!fill_last_wave)
    return static_cast<int>(std::clamp<std::size_t>(chunks / resident, 1, kernel_abi::kReduceChunksPerBlock));
  int best = 1;
  double best_fill = 0;
  for (int per_block = 1; per_block <= kernel_abi::kReduceChunksPerBlock; ++per_block) {
    const std::size_t blocks = (chunks + static_cast<std::size_t>(per_block) - 1) / static_cast<std::size_t>(per_block);
    const double waves = static_cast<double>(blocks) / static_cast<double>(resident);
    if (per_block > 1 && waves < 1) break;  // fewer blocks than the GPU holds: more chunks a block only idle it
    const double fill = waves / std::ceil(waves);
    if (fill >= 0.9 || fill >= best_fill) {
      best = per_block;
      best_fill = std::max(fill, best_fill);
    }
  }
  return best;
}

long long fitted_chunk_size(long long compiled, long long elements, long long multiprocessors, bool rows_and_columns,
                            long long multiple) {
  const long long wanted = (rows_and_columns ? kRowsAndColumnsChunksPerMultiprocessor : 2) * multiprocessors;
  long long chunk = compiled;
  while (chunk / 2 >= kSmallestFittedChunk && elements / chunk < wanted && (chunk / 2) % multiple == 0) chunk /= 2;
  return chunk;
}

namespace {

constexpr std::size_t kStateAlignment = 256;  // bytes; keeps every state buffer 16-byte aligned

/// A chunk of a kernel set with 8-bit states holds whole quantisation blocks (the Update stage's
/// warps take one each): the rule a chunk size is held to, from set_chunk_size or a tuning table.
bool holds_whole_blocks(long long chunk, const DType* dtypes, std::size_t count) {
  return chunk % blockwise8::kBlockSize == 0 || std::none_of(dtypes, dtypes + count, is_blockwise);
}
constexpr const char* kWholeBlocks = "a chunk of a kernel set with 8-bit states holds whole blocks of 256 elements";

/// The value a state buffer or scalar state starts from, given the group's hyperparameters.
double initial_value(const reference::InitInfo& init, const std::vector<double>& h) {
  return init.hyperparameter >= 0 ? h[init.hyperparameter] : init.value;
}

/// Host images of device arrays, packed into one allocation: each part starts 256-byte aligned.
class PackedUpload {
 public:
  /// Reserves `bytes` and returns their offset.
  std::size_t add(std::size_t bytes) {
    const std::size_t at = round_up(host_.size(), 256);
    host_.resize(at + bytes);
    return at;
  }
  template <typename T>
  std::size_t add(const std::vector<T>& values) {
    const std::size_t at = add(values.size() * sizeof(T));
    if (!values.empty()) std::memcpy(host_.data() + at, values.data(), values.size() * sizeof(T));
    return at;
  }
  unsigned char* at(std::size_t offset) { return host_.data() + offset; }
  std::size_t size() const { return host_.size(); }
  /// Copies the images into `memory`, of at least size() bytes (synchronously).
  void copy_to(const DeviceBuffer& memory) const {
    if (!host_.empty())
      driver::check(driver::api().cuMemcpyHtoD(memory.get(), host_.data(), host_.size()), "cuMemcpyHtoD");
  }
  /// Allocates the device copy and uploads (synchronously).
  DeviceBuffer upload() const {
    DeviceBuffer memory(host_.size());
    copy_to(memory);
    return memory;
  }

 private:
  std::vector<unsigned char> host_;
};

template <typename T>
T* device_pointer(const DeviceBuffer& memory, std::size_t offset) {
  return reinterpret_cast<T*>(memory.get() + offset);
}

}  // namespace

// ---- Lookups ----

int FusedOptimizer::Impl::hyperparameter_index(const std::string& name, const char* method) const {
  std::string known;
  for (int i = 0; i < info->num_hyperparameters; ++i) {
    if (name == info->hyperparameters[i].name) return i;
    known += (known.empty() ? "" : ", ") + std::string(info->hyperparameters[i].name);
  }
  throw Error(call(method), std::string(info->name) + " has no hyperparameter '" + name + "'",
              "its hyperparameters: " + known);
}

int FusedOptimizer::Impl::state_index(const std::string& name, const char* method) const {
  std::string known;
  for (int i = 0; i < info->num_states; ++i) {
    if (name == info->states[i].name) return i;
    known += (known.empty() ? "" : ", ") + std::string(info->states[i].name);
  }
  throw Error(call(method), std::string(info->name) + " has no state '" + name + "'",
              known.empty() ? "it keeps no per-element state" : "its states: " + known);
}

int FusedOptimizer::Impl::program_index(const std::string& name, const char* method) const {
  std::string known;
  for (int i = 0; i < info->num_programs; ++i) {
    if (name == info->programs[i]) return i;
    known += (known.empty() ? "" : ", ") + std::string(info->programs[i]);
  }
  throw Error(call(method), std::string(info->name) + " has no program '" + name + "'",
              known.empty() ? "its spec declares no programs" : "its programs: " + known);
}

int FusedOptimizer::Impl::scalar_state_index(const std::string& name, const char* method) const {
  std::string known;
  for (int i = 0; i < info->num_scalar_states; ++i) {
    if (name == info->scalar_states[i].name) return i;
    known += (known.empty() ? "" : ", ") + std::string(info->scalar_states[i].name);
  }
  throw Error(call(method), std::string(info->name) + " has no scalar state '" + name + "'",
              known.empty() ? "it keeps no scalar state" : "its scalar states: " + known);
}

void FusedOptimizer::Impl::check_hyperparameters(const std::vector<double>& h, const char* method) const {
  if (static_cast<int>(h.size()) != info->num_hyperparameters)
    throw Error(call(method), "expected " + std::to_string(info->num_hyperparameters) + " hyperparameters, got " +
                                  std::to_string(h.size()));
  for (int i = 0; i < info->num_hyperparameters; ++i) check_value(info->hyperparameters[i], h[i], method);
}

void FusedOptimizer::Impl::check_value(const reference::HyperparameterInfo& hp, double value,
                                       const char* method) const {
  if (std::isnan(value))
    throw Error(call(method), std::string(hp.name) + " is NaN", "pass a number (infinities are allowed)");
  if (hp.type == ValueType::Bool && value != 0 && value != 1)
    throw Error(call(method), std::string(hp.name) + " is a bool; got " + std::to_string(value));
  // Its code computes with whole numbers (`step % k`, a repeat's count): a fraction would be
  // taken as it is.
  if (hp.type == ValueType::Int && value != std::floor(value))
    throw Error(call(method), std::string(hp.name) + " is an int; got " + std::to_string(value), "give a whole number");
}

int FusedOptimizer::Impl::variant_of(std::vector<double>& h, const char* method) const {
  check_hyperparameters(h, method);
  derive_flags(*info, h.data());
  const int variant = select_variant(*info, h.data());
  if (std::string why = matrix_argument_problem(*info, info->variants[variant], h); !why.empty())
    throw Error(call(method), why);
  return variant;
}

const Group& FusedOptimizer::Impl::group_at(std::size_t group, const char* method) const {
  if (group >= groups.size())
    throw Error(call(method),
                "no param group " + std::to_string(group) + " (there are " + std::to_string(groups.size()) + ")");
  return groups[group];
}

namespace {

/// The dtype of a group's params and grads: its first tensor's (every tensor is checked to match).
DType group_dtype(const std::vector<Tensor>& tensors) { return tensors.empty() ? DType::F32 : tensors[0].dtype; }

/// Binding: checks of tensors and hyperparameters, kernel choice, state allocation.
struct Binder {
  const FusedOptimizer::Impl& m;
  const char* method = "add_param_group";  ///< the call the errors name

  /// A group of these hyperparameters (checked, derived flags filled in) for tensors of `dtype`:
  /// its variant, its kernel and its initial scalar state; no tensors yet.
  /// `dtype`: the group's tensors'; none (a group of no tensors) takes that of the last group of
  /// its variant, so that it steps in that group's plan rather than in one of its own.
  Group new_group(std::vector<double> h, std::optional<DType> dtype) const {
    const OptimizerInfo& info = *m.info;
    Group g;
    g.variant = m.variant_of(h, "add_param_group");
    for (auto it = m.groups.rbegin(); !dtype && it != m.groups.rend(); ++it)
      if (it->variant == g.variant) dtype = info.kernels[it->kernel].param;
    g.kernel = find_kernel(g.variant, dtype.value_or(DType::F32));
    for (int s = 0; s < info.num_scalar_states; ++s)
      g.scalar_state.push_back(initial_value(info.scalar_states[s].init, h));
    g.h = std::move(h);
    return g;
  }

  /// Every check of the group's tensors for a group of `variant`, those that need no driver first.
  void check_tensors(const std::vector<Tensor>& tensors, int variant) const {
    const DType dtype = group_dtype(tensors);
    for (std::size_t i = 0; i < tensors.size(); ++i) check_tensor(tensors[i], i, dtype);
    for (std::size_t i = 0; i < tensors.size(); ++i) check_shape_given(tensors[i], i, variant);
    driver::current_device();  // a context to allocate in
    for (std::size_t i = 0; i < tensors.size(); ++i) check_device_memory(tensors[i], i);
  }

  /// The kernel set of `variant` for params of `param` and the optimizer's storage options.
  int find_kernel(int variant, DType param) const {
    const OptimizerInfo& info = *m.info;
    if (param == DType::F32 && m.storage.param_write != ParamWrite::Nearest)
      throw Error(m.call("add_param_group"),
                  std::string("the optimizer was created with ") +
                      (m.storage.param_write == ParamWrite::Master ? "an fp32 master copy of the params"
                                                                   : "stochastic rounding of the params") +
                      ", but this group's params are f32",
                  "f32 params need neither: create the optimizer without it for f32 params");
    if (param == DType::F16 && m.storage.param_write == ParamWrite::Stochastic)
      throw Error(m.call("add_param_group"),
                  "the optimizer was created with stochastic rounding of the params, which is for bf16 params; this "
                  "group's are f16",
                  "use an fp32 master copy (ParamWrite::Master) for f16 params");
    const Storage wanted = m.storage.for_params(param);
    std::string generated;
    for (int k = 0; k < info.num_kernels; ++k) {
      const KernelInfo& kernel = info.kernels[k];
      // The states the variant has: a state it does not have may be of any dtype.
      const VariantInfo& v = info.variants[variant];
      bool same = kernel.variant == variant && kernel.param == param && kernel.param_write == wanted.param_write;
      for (int j = 0; same && j < v.num_states; ++j)
        same = kernel.state_dtypes[v.states[j]] == m.state_dtypes[v.states[j]];
      for (int j = 0; same && j < v.num_matrix_values; ++j)
        same = matrix_dtype(kernel, j) == wanted.matrix_dtype(v.matrix_values[j].name);
      if (same) return k;
      if (kernel.variant == variant) generated += (generated.empty() ? "" : ", ") + kernel_storage(kernel).text();
    }
    const std::string text = kernel_storage_text(param);
    throw Error(m.call("add_param_group"),
                std::string("no kernel for variant ") + info.variants[variant].name + " with storage " + text +
                    " was generated (its kernels: " + (generated.empty() ? "none" : generated) + ")",
                "add \"" + text +
                    "\" to the spec's 'storage:' list and load the spec again (a spec loaded at run time: "
                    "optgen.Engine.from_spec, optgen.torch.Optimizer.from_spec; or SpecOptions::storage), or to "
                    "STORAGE (and the variant to VARIANTS, if given) in optgen_add_optimizer() and rebuild");
  }

  /// A kernel set's storage, its state dtypes named (canonical: those of the default dropped).
  Storage kernel_storage(const KernelInfo& kernel) const {
    const OptimizerInfo& info = *m.info;
    Storage storage{kernel.param, kernel.param_write, DType::F32, {}};
    // The states' dtype: the one most states have (ties: the first), as a spec's list would name it.
    int best = 0;
    for (DType d : {DType::F32, DType::BF16, DType::F16, DType::Q8, DType::UQ8}) {
      const int count = static_cast<int>(std::count(kernel.state_dtypes, kernel.state_dtypes + info.num_states, d));
      if (count > best) best = count, storage.states = d;
    }
    for (int s = 0; s < info.num_states; ++s)
      storage.state_dtypes.emplace_back(info.states[s].name, kernel.state_dtypes[s]);
    const VariantInfo& v = info.variants[kernel.variant];
    for (int j = 0; j < v.num_matrix_values; ++j)
      storage.state_dtypes.emplace_back(v.matrix_values[j].name, matrix_dtype(kernel, j));
    return canonical(storage);
  }

  /// The storage text of the kernel set the optimizer's options need for `param` params.
  std::string kernel_storage_text(DType param) const { return canonical(m.storage.for_params(param)).text(); }

  /// `storage`, which names states and matrix values of the optimizer only, as canonical_storage
  /// writes it: the dtypes of their defaults dropped, the rest in declaration order.
  Storage canonical(const Storage& storage) const {
    std::vector<std::string> states;
    for (int s = 0; s < m.info->num_states; ++s) states.push_back(m.info->states[s].name);
    std::string error;
    const std::optional<Storage> result = canonical_storage(storage, states, matrix_value_names(*m.info), &error);
    if (!result) throw std::logic_error("kernel_storage: " + error);
    return *result;
  }

  void check_tensor(const Tensor& t, std::size_t i, DType dtype) const {
    const std::string which = "tensor " + std::to_string(i) + " of the group";
    if (t.numel < 0) throw Error(m.call(method), which + " has a negative numel (" + std::to_string(t.numel) + ")");
    if (t.whole_numel != 0 && t.whole_numel < t.numel)
      throw Error(m.call(method),
                  which + " is a shard of " + std::to_string(t.whole_numel) + " elements (whole_numel) but holds " +
                      std::to_string(t.numel),
                  "pass the whole tensor's element count as whole_numel, or 0 for a tensor that is whole");
    if (t.shard_dim != 0 && t.shard_dim != 1)
      throw Error(m.call(method), which + " has shard_dim " + std::to_string(t.shard_dim),
                  "a shard is cut along dimension 0 (rows) or 1 (columns) of its shape");
    if (t.shard_dim == 1 && t.whole_numel != 0 && t.shape.size() != 2)
      throw Error(m.call(method),
                  which + " is a shard cut along dimension 1 (shard_dim) but is bound with " +
                      std::to_string(t.shape.size()) + " dimensions",
                  "a shard cut along its columns is bound as a matrix: a shape of two dimensions");
    // Rows of a matrix of shape[1] columns, or (shard_dim 1) columns of one of shape[0] rows.
    const std::size_t kept = t.shard_dim == 0 ? 1 : 0;
    if (t.whole_numel > t.numel && t.shape.size() == 2 && t.shape[kept] > 0 && t.whole_numel % t.shape[kept] != 0)
      throw Error(m.call(method),
                  which + " is " + (kept ? "rows" : "columns") + " of a matrix of " + std::to_string(t.shape[kept]) +
                      (kept ? " columns" : " rows") + " (shape), but its whole tensor's " +
                      std::to_string(t.whole_numel) + " elements (whole_numel) are no whole number of " +
                      (kept ? "rows" : "columns"),
                  std::string("a shard of a matrix holds whole ") + (kept ? "rows" : "columns") +
                      ": pass the whole matrix's element count as whole_numel");
    check_column_splits(t, which);
    if (t.grad_numel >= 0 && t.grad_numel != t.numel)
      throw Error(m.call(method),
                  which + " has " + std::to_string(t.numel) + " parameter elements but " +
                      std::to_string(t.grad_numel) + " gradient elements",
                  "pass the gradient that belongs to this parameter");
    check_shape(t, which);
    if (t.dtype != dtype)
      throw Error(m.call(method), which + " is " + to_string(t.dtype) + " but tensor 0 is " + to_string(dtype),
                  "a param group holds tensors of one dtype; put tensors of another dtype in a group of their own");
    if (t.numel == 0) return;
    auto check_pointer = [&](const void* p, const std::string& what) {
      if (!p)
        throw Error(m.call(method), which + " has a null " + what + " pointer", "pass the device address of its data");
      if (reinterpret_cast<std::uintptr_t>(p) % size_of(dtype) != 0)
        throw Error(m.call(method), which + ": the " + what + " pointer " +
                                        std::to_string(reinterpret_cast<std::uintptr_t>(p)) +
                                        " is not aligned to its " + std::to_string(size_of(dtype)) + "-byte " +
                                        to_string(dtype) + " elements");
    };
    check_pointer(t.param, "param");
    check_pointer(t.grad, "grad");
    if (t.param == t.grad) throw Error(m.call(method), which + " has the same pointer for param and grad");
  }

  /// Tensor::column_splits, apart from the spec: a whole tensor of two or more dimensions whose
  /// last they divide.
  void check_column_splits(const Tensor& t, const std::string& which) const {
    if (t.column_splits == 1) return;
    const std::string given = which + " has column_splits " + std::to_string(t.column_splits);
    if (t.column_splits < 1)
      throw Error(m.call(method), given, "give 1 (whole matrices) or more (matrices of consecutive columns)");
    if (t.shape.size() < 2)
      throw Error(m.call(method), given + " but is bound with " + std::to_string(t.shape.size()) + " dimensions",
                  "column splits are of matrices: bind the tensor with its shape of two or more dimensions");
    if (t.shape.back() % t.column_splits != 0)
      throw Error(m.call(method),
                  given + ", which does not divide its " + std::to_string(t.shape.back()) +
                      " columns (its shape's last dimension)",
                  "give a number of splits that divides the columns into matrices of as many columns each");
    if (t.whole_numel != 0 && t.whole_numel != t.numel)
      throw Error(m.call(method), given + " but is a shard of a larger tensor (whole_numel)",
                  "bind whole tensors with column splits, or shards with none");
  }

  /// A shape, when given, has no negative dimension and holds exactly numel elements.
  void check_shape(const Tensor& t, const std::string& which) const {
    if (t.shape.empty()) return;
    std::string text;
    for (std::size_t d = 0; d < t.shape.size(); ++d) text += (d ? ", " : "") + std::to_string(t.shape[d]);
    text = "[" + text + "]";
    for (std::int64_t d : t.shape)
      if (d < 0) throw Error(m.call(method), which + " has a negative dimension in its shape " + text);
    const bool empty = std::find(t.shape.begin(), t.shape.end(), 0) != t.shape.end();
    std::int64_t elements = empty ? 0 : 1;
    bool overflows = false;
    for (std::int64_t d : t.shape) {
      if (empty || overflows) break;
      if (elements > std::numeric_limits<std::int64_t>::max() / d)
        overflows = true;
      else
        elements *= d;
    }
    if (overflows || elements != t.numel)
      throw Error(m.call(method),
                  which + " has shape " + text +
                      (overflows ? ", too many elements to count," : ", " + std::to_string(elements) + " elements,") +
                      " but numel " + std::to_string(t.numel),
                  "pass the parameter's own shape, or none");
  }

  /// A variant with matrix, row or column code splits every tensor into its rows and columns: it
  /// needs the shape of each that has more than one element (one of 0 or 1 elements is a vector).
  void check_shape_given(const Tensor& t, std::size_t i, int variant) const {
    const VariantInfo& v = m.info->variants[variant];
    if (t.column_splits > 1) {
      const std::string given = "tensor " + std::to_string(i) + " of the group has column_splits " +
                                std::to_string(t.column_splits) + ", but variant " + v.name + " of " + m.info->name;
      if (v.num_matrix_values == 0)
        throw Error(m.call(method), given + " has no matrix values (a matrix function such as newton_schulz)",
                    "leave column_splits at 1: it splits the matrices a matrix function takes");
      for (int r = 0; r < v.num_reductions; ++r)
        if (v.reductions[r].scope == Domain::Row || v.reductions[r].scope == Domain::Column ||
            v.reductions[r].scope == Domain::Matrix)
          throw Error(m.call(method), given + " reduces over rows, columns or matrices (" + v.reductions[r].name + ")",
                      "leave column_splits at 1 for this spec: its rows would be the whole matrix's");
      for (int j = 0; j < v.num_states; ++j)
        if (m.info->states[v.states[j]].shape == StateShape::Rows ||
            m.info->states[v.states[j]].shape == StateShape::Cols)
          throw Error(m.call(method),
                      given + " keeps state '" + m.info->states[v.states[j]].name + "' per row or column",
                      "leave column_splits at 1 for this spec: its rows would be the whole matrix's");
    }
    if (m.info->block_elements && t.whole_numel != 0 && t.whole_numel != t.numel)
      throw Error(m.call(method),
                  "tensor " + std::to_string(i) + " of the group is a shard of a larger tensor (whole_numel), and " +
                      m.info->name + " keeps values per block of " + std::to_string(m.info->block_elements) +
                      " elements (block_elements): a shard's blocks are not the whole tensor's",
                  "step the whole tensor on each rank, or a spec without blocks");
    // A spec of blocks views every tensor as its blocks (block_dims): it needs no shape.
    if (!v.stage_blocks || !t.shape.empty() || t.numel <= 1 || m.info->block_elements) return;
    throw Error(m.call(method),
                "tensor " + std::to_string(i) + " of the group (" + std::to_string(t.numel) +
                    " elements) has no shape, and variant " + v.name + " of " + m.info->name +
                    " factors tensors of two or more dimensions into rows and columns",
                "pass its shape (optgen::Tensor::shape, optgen_tensor's ndim and shape: the parameter's dimensions, "
                "outermost first)");
  }

  /// The checks that need the driver: every pointer is device memory.
  void check_device_memory(const Tensor& t, std::size_t i) const {
    if (t.numel == 0) return;
    for (const auto& [p, what] : {std::pair<const void*, const char*>{t.param, "param"}, {t.grad, "grad"}}) {
      unsigned int type = 0;
      CUresult r = driver::api().cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                                       reinterpret_cast<CUdeviceptr>(p));
      if (r != CUDA_SUCCESS || type == CU_MEMORYTYPE_HOST)
        throw Error(m.call(method),
                    "tensor " + std::to_string(i) + " of the group: the " + what + " pointer is not device memory",
                    "allocate it with cudaMalloc (or torch on a CUDA device)");
    }
  }

  /// `numel` values of a state of dtype `dtype` (as stored_dtype gives it) set to `value`.
  void fill_state(void* data, std::int64_t numel, double value, DType dtype) const {
    if (numel == 0) return;
    const auto ptr = reinterpret_cast<CUdeviceptr>(data);
    const auto count = static_cast<std::size_t>(numel);
    const float f = static_cast<float>(value);
    auto fill_f32 = [](CUdeviceptr at, float x, std::size_t n) {
      std::uint32_t bits;
      std::memcpy(&bits, &x, 4);
      driver::check(driver::api().cuMemsetD32(at, bits, n), "cuMemsetD32");
    };
    switch (dtype) {
      case DType::F32: fill_f32(ptr, f, count); return;
      case DType::BF16: driver::check(driver::api().cuMemsetD16(ptr, float_to_bf16(f), count), "cuMemsetD16"); return;
      case DType::F16: driver::check(driver::api().cuMemsetD16(ptr, float_to_f16(f), count), "cuMemsetD16"); return;
      case DType::Q8:
      case DType::UQ8: {
        // Every block's absmax |value| and every code value's (0 for a zero state: any code times 0).
        const float absmax = std::fabs(f);
        const unsigned char code = dtype == DType::Q8
                                       ? blockwise8::quantize_signed_state(blockwise8::kSignedMap, f, absmax)
                                       : blockwise8::quantize_unsigned_state(blockwise8::kUnsignedMap, f, absmax);
        driver::check(driver::api().cuMemsetD8(ptr, code, static_cast<std::size_t>(blockwise8::absmax_offset(numel))),
                      "cuMemsetD8");  // the padding too: a buffer's bytes are all set
        fill_f32(ptr + static_cast<CUdeviceptr>(blockwise8::absmax_offset(numel)), absmax,
                 static_cast<std::size_t>(blockwise8::num_blocks(numel)));
        return;
      }
    }
    throw Error(m.call(method), "unknown state dtype " + std::to_string(static_cast<int>(dtype)));
  }

  /// The fp32 master copy of a bf16 or f16 param: its values, exactly (synchronous, once per tensor).
  void init_master(void* master, const Tensor& t) const {
    if (t.numel == 0) return;
    const auto n = static_cast<std::size_t>(t.numel);
    std::vector<std::uint16_t> bits(n);
    driver::check(
        driver::api().cuMemcpyDtoH(bits.data(), reinterpret_cast<CUdeviceptr>(t.param), n * sizeof(std::uint16_t)),
        "cuMemcpyDtoH");
    std::vector<float> values(n);
    for (std::size_t i = 0; i < n; ++i)
      values[i] = t.dtype == DType::BF16 ? bf16_to_float(bits[i]) : f16_to_float(bits[i]);
    driver::check(driver::api().cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(master), values.data(), n * sizeof(float)),
                  "cuMemcpyHtoD");
  }

  /// The group's states: the caller's buffers, or slices of one allocation initialised here. Each
  /// state holds a value per element, row or column of the tensor (its StateInfo::shape); a state
  /// that does not exist for a tensor (VariantInfo::state_presence) is a null pointer.
  void bind_states(Group& g, const std::vector<Tensor>& tensors) const {
    const VariantInfo& variant = m.info->variants[g.variant];
    std::vector<TensorDims> dims;
    std::size_t total = 0;
    for (const Tensor& t : tensors) {
      dims.push_back(m.info->block_elements
                         ? block_dims(t.numel, m.info->block_elements)
                         : tensor_dims(t.shape, t.numel, t.whole_numel, t.shard_dim, t.column_splits));
      if (t.states) continue;
      for (int j = 0; j < variant.num_states; ++j)
        if (state_present(variant, j, dims.back().factored))
          total += state_slice_bytes(state_numel(m.info->states[variant.states[j]].shape, dims.back(), t.numel),
                                     m.state_dtypes[variant.states[j]]);
    }
    const bool master = m.storage.param_write == ParamWrite::Master;
    if (master)
      for (const Tensor& t : tensors) total += state_slice_bytes(t.numel, DType::F32);
    g.state_memory = DeviceBuffer(total);
    std::size_t offset = 0;  // of the next slice of g.state_memory
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const Tensor& t = tensors[i];
      BoundTensor b{t.param, t.grad, t.numel, std::vector<void*>(m.info->num_states, nullptr), t.shape, dims[i]};
      b.whole_numel = t.whole_numel > 0 ? t.whole_numel : t.numel;
      for (int j = 0; j < variant.num_states; ++j) {
        if (!state_present(variant, j, dims[i].factored)) continue;
        const int s = variant.states[j];
        const std::int64_t numel = state_numel(m.info->states[s].shape, dims[i], t.numel);
        b.states[s] = t.states ? callers_state(t, i, s, numel) : owned_state(g, numel, s, offset);
      }
      if (master) {
        b.master = reinterpret_cast<void*>(g.state_memory.get() + offset);
        offset += state_slice_bytes(t.numel, DType::F32);
        init_master(b.master, t);
      }
      g.tensors.push_back(std::move(b));
    }
  }

  /// Bytes of one tensor's slice of a group's state allocation: rounded up, so every slice starts aligned.
  /// `dtype`: a state's (an 8-bit one is stored_dtype's for its numel).
  std::size_t state_slice_bytes(std::int64_t numel, DType dtype) const {
    return round_up(storage_bytes(stored_dtype(dtype, numel), numel), kStateAlignment);
  }

  /// State `s` of tensor `i` from the caller's buffers, checked: `numel` values of it.
  void* callers_state(const Tensor& t, std::size_t i, int s, std::int64_t numel) const {
    void* p = t.states[s];
    const DType dtype = stored_dtype(m.state_dtypes[s], numel);
    // An 8-bit state's codes are read 8 at a time, and its absmax follow them.
    const std::size_t alignment = is_blockwise(dtype) ? 16 : size_of(dtype);
    if (numel > 0 && (!p || reinterpret_cast<std::uintptr_t>(p) % alignment != 0))
      throw Error(m.call("add_param_group"),
                  "tensor " + std::to_string(i) + ": the caller's '" + m.info->states[s].name +
                      "' buffer is null or misaligned",
                  is_blockwise(dtype)
                      ? "pass a 16-byte aligned device buffer of " + std::to_string(storage_bytes(dtype, numel)) +
                            " bytes: " + std::to_string(numel) + " " + to_string(dtype) +
                            " codes, padded to 16 bytes, then the absmax of each block of 256"
                      : "pass a device buffer of " + std::to_string(numel) + " " + to_string(dtype) + " elements");
    return p;
  }

  /// State `s` of `numel` values: the slice of g's allocation at `offset` (advanced
  /// past it), filled with the state's initial value.
  void* owned_state(const Group& g, std::int64_t numel, int s, std::size_t& offset) const {
    void* p = reinterpret_cast<void*>(g.state_memory.get() + offset);
    offset += state_slice_bytes(numel, m.state_dtypes[s]);
    fill_state(p, numel, initial_value(m.info->states[s].init, g.h), stored_dtype(m.state_dtypes[s], numel));
    return p;
  }
};

}  // namespace

std::vector<double> default_hyperparameters(const OptimizerInfo& info) {
  std::vector<double> h;
  for (int i = 0; i < info.num_hyperparameters; ++i) h.push_back(info.hyperparameters[i].default_value);
  return h;
}

void derive_flags(const OptimizerInfo& info, double* h) {
  if (info.derive_flags != nullptr) info.derive_flags(info.derive_context, h);
}

int select_variant(const OptimizerInfo& info, const double* h) {
  int variant = 0;
  for (int i = 0; i < info.num_flags; ++i)
    if (h[info.flags[i]] != 0) variant |= 1 << i;
  return variant;
}

FusedOptimizer::FusedOptimizer(const OptimizerInfo& info, std::vector<double> defaults, StorageOptions storage)
    : impl_(std::make_unique<Impl>()) {
  const std::string call = std::string(info.name) + "::" + info.name;
  if (info.abi_version != kernel_abi::kVersion)
    throw Error(
        call,
        std::string("this launcher was generated by ") + info.generator + " for kernel ABI " +
            std::to_string(info.abi_version) + ", but the runtime it is linked with speaks ABI " +
            std::to_string(kernel_abi::kVersion),
        "regenerate the launcher with the optgen that matches the runtime (rebuild the optgen_add_optimizer() target)");
  impl_->info = &info;
  for (int v = 0; v < info.num_variants; ++v)
    if (std::string problem = stage_plan_problem(info.variants[v]); !problem.empty())
      throw Error(call, std::string("variant ") + info.variants[v].name + "'s stage plan " + problem,
                  "regenerate the launcher with optgen: its plans end in their one Update stage");
  if (static_cast<int>(defaults.size()) != info.num_hyperparameters)
    throw Error(call, "expected " + std::to_string(info.num_hyperparameters) + " hyperparameters, got " +
                          std::to_string(defaults.size()));
  std::string declared;
  for (int s = 0; s < info.num_states; ++s) declared += (s ? ", " : "") + std::string(info.states[s].name);
  const std::vector<std::string> matrix_values = matrix_value_names(info);
  for (const auto& [name, dtype] : storage.state_dtypes) {
    const auto same = [&, &name = name](const auto& other) { return other.first == name; };
    if (std::count_if(storage.state_dtypes.begin(), storage.state_dtypes.end(), same) > 1)
      throw Error(call, "StorageOptions::state_dtypes gives state '" + name + "' a dtype twice");
    if (std::find(matrix_values.begin(), matrix_values.end(), name) != matrix_values.end()) {
      if (dtype != DType::BF16 && dtype != DType::F32)
        throw Error(call,
                    "StorageOptions::state_dtypes keeps matrix value '" + name + "' in " + to_string(dtype) +
                        ", but a matrix value is bf16 or f32",
                    "give it DType::F32 for its products in fp32 throughout, or leave it out for bf16's");
      continue;
    }
    bool known = false;
    for (int s = 0; s < info.num_states; ++s) known = known || name == info.states[s].name;
    if (!known) {
      std::string values;
      for (const std::string& v : matrix_values) values += (values.empty() ? "" : ", ") + v;
      throw Error(call,
                  "StorageOptions::state_dtypes names state '" + name + "', which " + info.name + " does not have",
                  (declared.empty() ? std::string(info.name) + " keeps no state buffers" : "its states: " + declared) +
                      (values.empty() ? "" : "; its matrix values: " + values));
    }
  }
  for (int s = 0; s < info.num_states; ++s) {
    DType dtype = storage.states;
    for (const auto& [name, d] : storage.state_dtypes)
      if (name == info.states[s].name) dtype = d;
    impl_->state_dtypes.push_back(dtype);
  }
  impl_->defaults = std::move(defaults);
  impl_->storage = std::move(storage);
  impl_->chunk_size = 0;  // each kernel set's own
}

std::vector<std::string> matrix_value_names(const OptimizerInfo& info) {
  std::vector<std::string> names;
  for (int v = 0; v < info.num_variants; ++v)
    for (int j = 0; j < info.variants[v].num_matrix_values; ++j)
      if (std::find(names.begin(), names.end(), info.variants[v].matrix_values[j].name) == names.end())
        names.push_back(info.variants[v].matrix_values[j].name);
  return names;
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
  const Binder binder{m};
  Group g = binder.new_group(std::move(h), tensors.empty() ? std::nullopt : std::optional<DType>(tensors[0].dtype));
  binder.check_tensors(tensors, g.variant);
  binder.bind_states(g, tensors);
  m.unprepare();
  // A scalar state of `scope: optimizer` is one value for the optimizer: a new group takes its copy.
  if (!m.groups.empty())
    for (int s = 0; s < m.info->num_scalar_states; ++s)
      if (m.info->scalar_states[s].per_optimizer) g.scalar_state[s] = m.groups[0].scalar_state[s];
  m.groups.push_back(std::move(g));
  return m.groups.size() - 1;
}

// ---- Preparing: tables, the group table, the first values ----

namespace {

/// One tensor of a plan's table and the group it belongs to.
struct PlanTensor {
  const BoundTensor* tensor;
  int group;
  bool placeholder;  ///< stands for a group without elements: gets a chunk of 0 elements
};

/// The tensors of a plan's groups in order, with a 0-element placeholder for a group that has no
/// elements, so that its step still runs and counts. A plan that reduces gives each empty tensor a
/// chunk of its own (chunk_table), so it needs a placeholder only for a group of no tensors: ranks
/// that hold shards of the same tensors, some of them empty, then number the same tensors alike,
/// as a reduction hook that combines their results needs.
std::vector<PlanTensor> plan_tensors(const FusedOptimizer::Impl& m, const Plan& plan, const BoundTensor& placeholder,
                                     bool reduces) {
  std::vector<PlanTensor> tensors;
  for (std::size_t g : plan.groups) {
    bool has_chunk = false;
    for (const BoundTensor& t : m.groups[g].tensors) {
      tensors.push_back({&t, static_cast<int>(g), false});
      has_chunk = has_chunk || t.numel > 0 || reduces;
    }
    if (!has_chunk) tensors.push_back({&placeholder, static_cast<int>(g), true});
  }
  return tensors;
}

/// TableView::pointers: [operand * n + tensor], operands param, grad, then the variant's states,
/// then its matrix values (null here: build_matrices points them at its buffers), then (`master`)
/// the fp32 master copies.
std::vector<void*> operand_pointers(const std::vector<PlanTensor>& tensors, const VariantInfo& variant, bool master) {
  const std::size_t n = tensors.size();
  const std::size_t master_row = 2 + static_cast<std::size_t>(variant.num_states + variant.num_matrix_values);
  std::vector<void*> pointers((master_row + (master ? 1 : 0)) * n);
  for (std::size_t t = 0; t < n; ++t) {
    const BoundTensor& bound = *tensors[t].tensor;
    pointers[0 * n + t] = bound.param;
    pointers[1 * n + t] = const_cast<void*>(bound.grad);
    for (int j = 0; j < variant.num_states; ++j) pointers[(2 + j) * n + t] = bound.states[variant.states[j]];
    if (master) pointers[master_row * n + t] = bound.master;
  }
  return pointers;
}

/// The chunk table, longest chunks first; adds each group's chunks to `blocks_per_group`, and
/// writes each tensor's chunk count to `chunks_per_tensor`.
std::vector<kernel_abi::Chunk> chunk_table(const std::vector<PlanTensor>& tensors, long long chunk_size,
                                           std::vector<unsigned>& blocks_per_group, std::vector<int>& chunks_per_tensor,
                                           bool reduces) {
  std::vector<kernel_abi::Chunk> chunks;
  chunks_per_tensor.assign(tensors.size(), 0);
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    const long long numel = tensors[t].tensor->numel;
    const int group = tensors[t].group;
    // An empty tensor of a group with elements has no work, unless the plan reduces: then one empty
    // chunk writes its results (the identity) every step, which a reduction hook may all-reduce
    // with other ranks' in place.
    if (numel == 0 && !tensors[t].placeholder && !reduces) continue;
    const long long count = std::max<long long>(1, (numel + chunk_size - 1) / chunk_size);
    chunks_per_tensor[t] = static_cast<int>(count);
    for (long long c = 0; c < count; ++c) {
      const long long elements = std::min(chunk_size, numel - c * chunk_size);
      chunks.push_back({static_cast<int>(t), static_cast<int>(c), group, static_cast<int>(elements)});
    }
    blocks_per_group[group] += static_cast<unsigned>(count);
  }
  // Longest first: the GPU starts blocks in order, so the short chunks (small tensors, the ends of
  // large ones) fill the last wave instead of leaving the end of the step to a few long ones.
  std::stable_sort(chunks.begin(), chunks.end(),
                   [](const kernel_abi::Chunk& a, const kernel_abi::Chunk& b) { return a.count > b.count; });
  return chunks;
}

/// reduce_chunks_per_block for `plan`, of `chunks` chunks. A plan with matrix values fills the last
/// wave of its Reduce stages' blocks (the fewest any of them holds at once): the matrix functions
/// after its stage start when it ends. Others keep eight blocks a multiprocessor busy: the kernel
/// after a Reduce stage starts under its tail (programmatic dependent launch), and filling the wave
/// measured no better (bench/RESULTS.md, 2026-12-01: resnet50's clipped AdamW 2% slower, LAMB 3%
/// faster).
int plan_chunks_per_block(const Plan& plan, std::size_t chunks) {
  const auto multiprocessors = static_cast<std::size_t>(driver::multiprocessor_count(driver::current_device()));
  if (!plan.matrices) return reduce_chunks_per_block(chunks, multiprocessors * 8, false);
  int fewest = INT_MAX;
  for (std::size_t s = 0; s < plan.stages.size(); ++s) {
    if (plan.variant.stage_kinds[s] != StageKind::Reduce) continue;
    int blocks = 0;
    driver::check(
        driver::api().cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, plan.stages[s], plan.shape.block_size, 0),
        "cuOccupancyMaxActiveBlocksPerMultiprocessor");
    fewest = std::min(fewest, blocks);
  }
  return reduce_chunks_per_block(chunks, fewest == INT_MAX ? 0 : static_cast<std::size_t>(fewest) * multiprocessors,
                                 true);
}

/// The results and scratch of a plan's reductions (kernel_abi::ReductionTable), for `reductions`
/// per tensor and group; counters at zero. Nothing for a variant without Reduce stages (`reduces`).
void build_reductions(const FusedOptimizer::Impl& m, Plan& plan, const std::vector<PlanTensor>& tensors,
                      const std::vector<int>& chunks_per_tensor, int reductions, bool reduces) {
  plan.reductions = {};
  plan.reduction_memory = DeviceBuffer();
  if (!reduces) return;
  const std::size_t n = tensors.size(), G = m.groups.size(), R = static_cast<std::size_t>(reductions);
  // chunk_table gave every tensor of a reducing plan a chunk: a group finishes when all its tensors have.
  std::vector<int> first_chunk(n), group_first(G, 0), group_tensors(G, 0);
  std::size_t total_chunks = 0;
  for (std::size_t t = n; t-- > 0;) group_first[static_cast<std::size_t>(tensors[t].group)] = static_cast<int>(t);
  for (std::size_t t = 0; t < n; ++t) {
    first_chunk[t] = static_cast<int>(total_chunks);
    total_chunks += static_cast<std::size_t>(chunks_per_tensor[t]);
    const auto g = static_cast<std::size_t>(tensors[t].group);
    group_tensors[g] += 1;
  }
  PackedUpload upload;
  const std::size_t partials_at = upload.add(total_chunks * R * sizeof(double));
  const std::size_t tensor_at = upload.add(n * R * sizeof(double));
  const std::size_t group_at = upload.add(G * R * sizeof(double));
  const std::size_t tensor_arrivals_at = upload.add(std::vector<unsigned>(n, 0));
  const std::size_t group_arrivals_at = upload.add(std::vector<unsigned>(G, 0));
  const std::size_t first_chunk_at = upload.add(first_chunk);
  const std::size_t chunks_at = upload.add(chunks_per_tensor);
  const std::size_t group_first_at = upload.add(group_first);
  const std::size_t group_tensors_at = upload.add(group_tensors);
  plan.reduction_memory = upload.upload();
  const DeviceBuffer& d = plan.reduction_memory;
  plan.reductions = {device_pointer<double>(d, partials_at),
                     device_pointer<double>(d, tensor_at),
                     device_pointer<double>(d, group_at),
                     device_pointer<unsigned>(d, tensor_arrivals_at),
                     device_pointer<unsigned>(d, group_arrivals_at),
                     device_pointer<const int>(d, first_chunk_at),
                     device_pointer<const int>(d, chunks_at),
                     device_pointer<const int>(d, group_first_at),
                     device_pointer<const int>(d, group_tensors_at),
                     reductions,
                     static_cast<int>(n),
                     static_cast<int>(G),
                     plan_chunks_per_block(plan, total_chunks),
                     reinterpret_cast<float*>(m.grad_norm_memory.get())};
}

/// One float per group for the norms clipping variants publish, NaN until their first step; none
/// when no group clips.
DeviceBuffer upload_grad_norms(const FusedOptimizer::Impl& m) {
  const bool clips = std::any_of(m.groups.begin(), m.groups.end(),
                                 [&](const Group& g) { return m.info->variants[g.variant].grad_norm_slot >= 0; });
  if (!clips) return DeviceBuffer();
  PackedUpload upload;
  upload.add(std::vector<float>(m.groups.size(), std::numeric_limits<float>::quiet_NaN()));
  return upload.upload();
}

/// A plan's kernel_abi::ShapeTable, for a variant with matrix, row or column code: the layout of
/// its tensors (shape_layout.h) and the results and scratch its stages share, in one allocation
/// with the table itself; results and snapshots start at 0, and so must the column arrivals. A
/// buffer of no bytes is a null pointer. Returns the layout (its block counts size the grids); sets
/// where the plan's column and matrix results are, and per stage those each rank holds a part of.
ShapeLayout build_shapes(const FusedOptimizer::Impl& m, Plan& plan, const VariantInfo& variant,
                         const std::vector<TensorDims>& dims) {
  // The GPU's blocks at once, for plan_line_values: 2048 threads a multiprocessor (Ampere's A100
  // and Hopper's; fewer elsewhere, where the rule then keeps more values a lane).
  const long long resident =
      static_cast<long long>(driver::multiprocessor_count(driver::current_device())) * (2048 / plan.shape.block_size);
  ShapeLayout l = shape_layout(*m.info, variant, dims, plan.shape.block_size,
                               plan_line_values(dims, plan.shape.block_size, resident));
  const auto floats = [](long long count, long long per) {
    return static_cast<std::size_t>(count) * static_cast<std::size_t>(per) * sizeof(float);
  };
  PackedUpload upload;
  struct Part {
    std::size_t at, bytes;
  };
  auto part = [&](std::size_t bytes) { return Part{upload.add(bytes), bytes}; };  // zeros
  auto array = [&](const auto& values) { return Part{upload.add(values), values.size() * sizeof(values[0])}; };
  const Part table = part(sizeof(kernel_abi::ShapeTable));
  const Part rows = array(l.rows), cols = array(l.cols), factored = array(l.factored);
  const Part whole_rows = array(l.whole_rows), whole_cols = array(l.whole_cols);
  const Part row_offset = array(l.row_offset), col_offset = array(l.col_offset);
  const Part matrix_offset = array(l.matrix_offset), block_offset = array(l.block_offset);
  const Part row_results = part(floats(l.num_row_reductions, l.num_rows));
  const Part col_results = part(floats(l.num_col_reductions, l.num_cols));
  const Part matrix_results = part(floats(l.num_matrix_reductions, l.num_matrices));
  const Part row_values = part(floats(l.stored_values.row, l.num_rows));
  const Part col_values = part(floats(l.stored_values.col, l.num_cols));
  const Part matrix_values = part(floats(l.stored_values.matrix, l.num_matrices));
  const Part col_partials = part(floats(l.num_col_reductions, l.col_partial_units));
  const Part col_partial_offset = array(l.col_partial_offset);
  // Arrivals count the segments of a tile of columns, which only column reductions have.
  const bool columns = l.num_col_reductions > 0;
  const Part col_arrivals = part(columns ? static_cast<std::size_t>(l.col_tiles) * sizeof(unsigned) : 0);
  const Part col_tile_offset = array(l.col_tile_offset);
  const Part row_partials = part(floats(l.num_row_reductions, l.row_partial_units));
  const Part row_partial_offset = array(l.row_partial_offset);
  const Part row_arrivals = part(static_cast<std::size_t>(l.row_bands) * sizeof(unsigned));
  const Part row_band_offset = array(l.row_band_offset);
  const Part row_snapshot = part(l.snapshot ? floats(l.num_row_states, l.num_rows) : 0);
  const Part col_snapshot = part(l.snapshot ? floats(l.num_col_states, l.num_cols) : 0);
  plan.shape_memory = DeviceBuffer(upload.size());
  const DeviceBuffer& d = plan.shape_memory;
  auto at = [&](const Part& p) { return p.bytes ? d.get() + p.at : CUdeviceptr{0}; };
  const kernel_abi::ShapeTable view = {reinterpret_cast<const long long*>(at(rows)),
                                       reinterpret_cast<const long long*>(at(cols)),
                                       reinterpret_cast<const unsigned char*>(at(factored)),
                                       reinterpret_cast<const long long*>(at(row_offset)),
                                       reinterpret_cast<const long long*>(at(col_offset)),
                                       reinterpret_cast<const long long*>(at(matrix_offset)),
                                       reinterpret_cast<const long long*>(at(block_offset)),
                                       reinterpret_cast<float*>(at(row_results)),
                                       reinterpret_cast<float*>(at(col_results)),
                                       reinterpret_cast<float*>(at(matrix_results)),
                                       reinterpret_cast<float*>(at(row_values)),
                                       reinterpret_cast<float*>(at(col_values)),
                                       reinterpret_cast<float*>(at(matrix_values)),
                                       reinterpret_cast<float*>(at(col_partials)),
                                       reinterpret_cast<const long long*>(at(col_partial_offset)),
                                       reinterpret_cast<unsigned*>(at(col_arrivals)),
                                       reinterpret_cast<const long long*>(at(col_tile_offset)),
                                       reinterpret_cast<float*>(at(row_snapshot)),
                                       reinterpret_cast<float*>(at(col_snapshot)),
                                       reinterpret_cast<const long long*>(at(whole_rows)),
                                       reinterpret_cast<const long long*>(at(whole_cols)),
                                       l.num_rows,
                                       l.num_cols,
                                       l.num_matrices,
                                       l.num_col_reductions,
                                       l.num_tensors,
                                       l.line_values,
                                       l.num_row_reductions,
                                       reinterpret_cast<float*>(at(row_partials)),
                                       reinterpret_cast<const long long*>(at(row_partial_offset)),
                                       reinterpret_cast<unsigned*>(at(row_arrivals)),
                                       reinterpret_cast<const long long*>(at(row_band_offset))};
  std::memcpy(upload.at(table.at), &view, sizeof(view));
  upload.copy_to(d);
  plan.table.shapes = reinterpret_cast<const kernel_abi::ShapeTable*>(at(table));
  plan.row_results = view.row_results;
  plan.col_results = view.col_results;
  plan.matrix_results = view.matrix_results;
  for (int s = 0; s < variant.num_stages; ++s)
    plan.partial_runs[static_cast<std::size_t>(s)] = partial_runs(variant, s + 1, l, dims);
  return l;
}

/// The blocks each stage of a plan launches, by its kind: a Reduce stage's runs of chunks
/// (chunks_per_block each) and, for a variant with matrix, row or column code, the blocks of the
/// other kinds its stage_blocks name (a Reduce stage of only those may have none); the Update stage
/// one per chunk.
std::vector<unsigned> stage_grids(const FusedOptimizer::Impl& m, const Plan& plan, const VariantInfo& variant,
                                  const ShapeLayout* shapes) {
  std::vector<unsigned> grids;
  const long long chunks = plan.table.num_chunks;
  for (int s = 0; s < variant.num_stages; ++s) {
    const bool reduce = variant.stage_kinds[s] == StageKind::Reduce;
    const long long per_block = reduce ? std::max(1, plan.reductions.chunks_per_block) : 1;
    const long long chunk_runs = (chunks + per_block - 1) / per_block;
    const long long blocks =
        reduce && variant.stage_blocks ? stage_grid(variant.stage_blocks[s], chunk_runs, *shapes) : chunk_runs;
    if (blocks > std::numeric_limits<int>::max())
      throw Error(m.call("prepare"),
                  std::string("stage ") + std::to_string(s + 1) + " of variant " + variant.name + " would launch " +
                      std::to_string(blocks) + " blocks, more than a grid holds (2^31 - 1)",
                  "raise the chunk size (set_chunk_size), or step the tensors with more than one optimizer");
    grids.push_back(static_cast<unsigned>(blocks));
  }
  return grids;
}

/// Records, for each group among `tensors` (the tensor list of the plan at `plan`), the plan and
/// where the group's first tensor is in it.
void place_groups(FusedOptimizer::Impl& m, int plan, const std::vector<PlanTensor>& tensors) {
  for (std::size_t t = tensors.size(); t-- > 0;) {
    Group& g = m.groups[static_cast<std::size_t>(tensors[t].group)];
    g.plan = plan;
    g.plan_position = static_cast<int>(t);
  }
}

/// Builds one plan's tables (its tensors, their operands and chunks; uploaded) and looks up its
/// stage kernels; adds the blocks each group's Update stage launches to `blocks_per_group`.
void build_plan(FusedOptimizer::Impl& m, Plan& plan, std::vector<unsigned>& blocks_per_group) {
  const OptimizerInfo& info = *m.info;
  const KernelInfo& kernel = info.kernels[plan.kernel];
  plan.variant = info.variants[kernel.variant];
  const bool on_shards = m.reduction_hook && plan.variant.shard_stage_blocks;
  const char* const* names = on_shards ? kernel.shard_stages : kernel.stages;
  plan.stage_names.assign(names, names + plan.variant.num_stages);
  if (on_shards) {
    plan.variant.stage_blocks = plan.variant.shard_stage_blocks;
    plan.variant.stored_values = {};
    plan.variant.unit_matrices = false;  // the step on shards has no code for them
  }
  const VariantInfo& variant = plan.variant;
  const BoundTensor placeholder{nullptr, nullptr, 0, std::vector<void*>(info.num_states, nullptr), {}, {}, nullptr};
  // A variant with Reduce stages (reductions, or matrix values to store) gives every tensor a chunk,
  // and so does one with states of one value per tensor, which its Update stage counts the blocks
  // of in the reduction table (device/update.cuh's end_update).
  bool reduces = variant.num_stages > 1;
  for (int j = 0; j < variant.num_states; ++j)
    reduces = reduces || info.states[variant.states[j]].shape == StateShape::Tensor;
  const std::vector<PlanTensor> tensors = plan_tensors(m, plan, placeholder, reduces);
  place_groups(m, static_cast<int>(&plan - m.plans.data()), tensors);
  std::vector<long long> numel, whole_numel;
  std::vector<TensorDims> dims;
  for (const PlanTensor& t : tensors) {
    numel.push_back(t.tensor->numel);
    whole_numel.push_back(t.tensor->whole_numel);
    dims.push_back(t.tensor->dims);
  }
  if (kernel.long_row_update && !on_shards && long_rows(dims))
    plan.stage_names[static_cast<std::size_t>(update_stage(variant))] = kernel.long_row_update;
  std::vector<int> chunks_per_tensor;
  const long long chunk_size = m.plan_chunk_size(plan.kernel, numel);
  plan.shape = m.launch_shape_of(plan.kernel);
  std::vector<kernel_abi::Chunk> chunks =
      chunk_table(tensors, chunk_size, blocks_per_group, chunks_per_tensor, reduces);
  // The chunks of tensors whose matrices are one element last, for an Update stage of their own
  // (KernelInfo::unit_update), in the same order among themselves.
  std::size_t unit_chunks = 0;
  if (kernel.unit_update) {
    const auto first_unit = std::stable_partition(chunks.begin(), chunks.end(), [&](const kernel_abi::Chunk& c) {
      return !runs_unit_matrices(variant, dims[static_cast<std::size_t>(c.tensor)]);
    });
    unit_chunks = static_cast<std::size_t>(chunks.end() - first_unit);
  }

  PackedUpload upload;
  const std::size_t numel_at = upload.add(numel);
  const std::size_t chunks_at = upload.add(chunks);
  const std::size_t whole_numel_at = upload.add(whole_numel);
  plan.table_memory = upload.upload();
  plan.module = &m.module_for(plan.shape);
  plan.pointers = operand_pointers(tensors, variant, kernel.param_write == ParamWrite::Master);
  plan.matrices.reset();
  if (variant.num_matrix_values > 0) {
    std::vector<const BoundTensor*> bound;
    std::vector<int> groups;
    for (const PlanTensor& t : tensors) {
      bound.push_back(t.placeholder ? nullptr : t.tensor);
      groups.push_back(t.group);
    }
    auto matrices = std::make_shared<PlanMatrices>(
        build_matrices(variant, kernel, bound, groups, *plan.module, plan.pointers, m.call("prepare"), !m.matrix_hook));
    for (MatrixTensor& t : matrices->tensors)
      t.position = static_cast<std::size_t>(tensors[t.tensor].tensor - m.groups[t.group].tensors.data());
    plan.matrices = std::move(matrices);
    if (!m.cublas) m.cublas = std::make_shared<const cublas::Handle>();
  }
  PackedUpload pointers;
  pointers.add(plan.pointers);
  plan.pointer_memory = pointers.upload();
  plan.table = {device_pointer<void* const>(plan.pointer_memory, 0),
                device_pointer<const long long>(plan.table_memory, numel_at),
                device_pointer<const kernel_abi::Chunk>(plan.table_memory, chunks_at),
                chunk_size,
                static_cast<int>(tensors.size()),
                static_cast<int>(chunks.size()),
                nullptr,
                m.storage.seed,
                device_pointer<const long long>(plan.table_memory, whole_numel_at)};
  plan.stages.clear();
  for (int s = 0; s < variant.num_stages; ++s) plan.stages.push_back(plan.module->function(plan.stage_names[s]));
  build_reductions(m, plan, tensors, chunks_per_tensor, variant.num_reductions, reduces);
  plan.shape_memory = DeviceBuffer();
  plan.row_results = plan.col_results = plan.matrix_results = nullptr;  // build_shapes sets them, and the runs
  plan.partial_runs.assign(static_cast<std::size_t>(variant.num_stages), {});
  ShapeLayout shapes;
  if (variant.stage_blocks) shapes = build_shapes(m, plan, variant, dims);
  plan.grids = stage_grids(m, plan, variant, variant.stage_blocks ? &shapes : nullptr);
  plan.unit_update = unit_chunks > 0 ? plan.module->function(kernel.unit_update) : nullptr;
  plan.unit_grid = static_cast<unsigned>(unit_chunks);
  plan.grids.back() -= plan.unit_grid;
  plan.programs.clear();
  for (int p = 0; p < info.num_programs; ++p) plan.programs.push_back(plan.module->function(kernel.programs[p]));
}

/// The groups in plans, one per kernel (a variant and a dtype), in the order of their first group.
std::vector<Plan> plans_by_kernel(const std::vector<Group>& groups) {
  std::vector<Plan> plans;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    auto it = std::find_if(plans.begin(), plans.end(), [&](const Plan& p) { return p.kernel == groups[g].kernel; });
    if (it == plans.end()) {
      plans.emplace_back();
      plans.back().kernel = groups[g].kernel;
      it = plans.end() - 1;
    }
    it->groups.push_back(g);
  }
  return plans;
}

bool reduces_over_optimizer(const VariantInfo& variant) {
  for (int r = 0; r < variant.num_reductions; ++r)
    if (variant.reductions[r].scope == Domain::Optimizer) return true;
  return false;
}

/// A reduction over every group (optimizer_sum, ...) adds up the group results of one plan's
/// kernels: every group must step with one kernel set (one variant, one dtype).
void check_one_plan_over_optimizer(const FusedOptimizer::Impl& m) {
  if (m.plans.size() < 2) return;
  for (const Plan& plan : m.plans) {
    const KernelInfo& kernel = m.info->kernels[plan.kernel];
    if (!reduces_over_optimizer(m.info->variants[kernel.variant])) continue;
    const Plan& other = &plan == &m.plans[0] ? m.plans[1] : m.plans[0];
    throw Error(m.call("prepare"),
                "param groups " + std::to_string(plan.groups[0]) + " and " + std::to_string(other.groups[0]) +
                    " step with different kernel sets (" + tuning_name(*m.info, kernel) + " and " +
                    tuning_name(*m.info, m.info->kernels[other.kernel]) + "), but " + m.info->name +
                    " reduces over every param group, which one kernel set must step",
                "give every group the same dtype and the same values of the specialized flags");
  }
}

/// A value of one per optimizer (a scalar state of `scope: optimizer`) is computed by every group
/// alike from the hyperparameters it reads (HyperparameterInfo::per_optimizer): every group must
/// hold the same value of each.
void check_per_optimizer_hyperparameters(const FusedOptimizer::Impl& m, const char* method) {
  const OptimizerInfo& info = *m.info;
  auto format_double = [](double x) {
    char text[32];
    std::snprintf(text, sizeof text, "%.9g", x);
    return std::string(text);
  };
  for (int i = 0; i < info.num_hyperparameters; ++i) {
    if (!info.hyperparameters[i].per_optimizer) continue;
    for (std::size_t g = 1; g < m.groups.size(); ++g) {
      const double a = m.groups[0].h[i], b = m.groups[g].h[i];
      if (a == b) continue;  // never NaN (check_hyperparameters)
      std::string states;
      for (int s = 0; s < info.num_scalar_states; ++s)
        if (info.scalar_states[s].per_optimizer)
          states += std::string(states.empty() ? "'" : ", '") + info.scalar_states[s].name + "'";
      throw Error(m.call(method),
                  std::string("hyperparameter '") + info.hyperparameters[i].name + "' is " + format_double(b) +
                      " in param group " + std::to_string(g) + " and " + format_double(a) +
                      " in group 0, but the scalar state " + states +
                      ", one value for the optimizer, is computed from it",
                  std::string("set '") + info.hyperparameters[i].name + "' alike for every group (set(name, value))");
    }
  }
}

/// Bytes per slot entry of the group table's values: the largest GroupValues of any variant,
/// rounded up to 8 so that every entry is aligned for any field.
int values_stride(const OptimizerInfo& info) {
  int stride = 8;
  for (int v = 0; v < info.num_variants; ++v)
    stride = std::max(stride, static_cast<int>(round_up(info.variants[v].group_values_size, 8)));
  return stride;
}

/// The group table: hyperparameters, slot 0 from the groups' host copies, no arrivals yet.
DeviceGroups build_group_table(const FusedOptimizer::Impl& m, const std::vector<unsigned>& blocks) {
  const OptimizerInfo& info = *m.info;
  const std::size_t G = m.groups.size(), H = info.num_hyperparameters, S = info.num_scalar_states;
  const int stride = values_stride(info);
  std::vector<double> h(G * H), scalar_state(2 * G * S);
  std::vector<long long> steps(2 * G);
  std::vector<int> variant(G);
  for (std::size_t g = 0; g < G; ++g) {
    std::copy(m.groups[g].h.begin(), m.groups[g].h.end(), h.begin() + static_cast<std::ptrdiff_t>(g * H));
    std::copy(m.groups[g].scalar_state.begin(), m.groups[g].scalar_state.end(),
              scalar_state.begin() + static_cast<std::ptrdiff_t>(g * S));
    steps[g] = m.groups[g].step;
    variant[g] = m.groups[g].variant;
  }
  PackedUpload upload;
  const std::size_t h_at = upload.add(h);
  const std::size_t steps_at = upload.add(steps);
  const std::size_t scalar_state_at = upload.add(scalar_state);
  const std::size_t values_at = upload.add(2 * G * static_cast<std::size_t>(stride));  // written by the group kernels
  const std::size_t arrivals_at = upload.add(std::vector<unsigned>(G, 0));
  const std::size_t blocks_at = upload.add(blocks);
  const std::size_t variant_at = upload.add(variant);
  DeviceGroups d;
  d.memory = upload.upload();
  d.view = {device_pointer<double>(d.memory, h_at),
            device_pointer<long long>(d.memory, steps_at),
            device_pointer<double>(d.memory, scalar_state_at),
            device_pointer<unsigned char>(d.memory, values_at),
            device_pointer<unsigned>(d.memory, arrivals_at),
            device_pointer<const unsigned>(d.memory, blocks_at),
            device_pointer<const int>(d.memory, variant_at),
            static_cast<int>(G),
            static_cast<int>(H),
            static_cast<int>(S),
            stride};
  return d;
}

/// 80 as "8.0".
std::string capability_text(int compute_capability) {
  return std::to_string(compute_capability / 10) + "." + std::to_string(compute_capability % 10);
}

}  // namespace

void FusedOptimizer::prepare(CUstream stream) {
  Impl& m = *impl_;
  if (m.prepared) {
    m.stream = stream;
    return;
  }
  driver::current_device();
  if (driver::is_capturing(stream))
    throw Error(m.call("prepare"),
                "the stream is being captured into a CUDA graph, and prepare() allocates and synchronizes",
                "call prepare() (or take one step) before beginning the capture");
  const int compute_capability = driver::compute_capability(driver::current_device());
  for (std::size_t g = 0; g < m.groups.size(); ++g) {
    const KernelInfo& kernel = m.info->kernels[m.groups[g].kernel];
    if (const int needed = minimum_compute_capability(*m.info, kernel); needed > compute_capability)
      throw Error(m.call("prepare"),
                  "param group " + std::to_string(g) + " steps with kernel set " + tuning_name(*m.info, kernel) +
                      ", whose bf16 values need a GPU of compute capability " + capability_text(needed) +
                      " or newer; this one is " + capability_text(compute_capability),
                  "keep the group's params and states in f32 or f16 on this GPU");
  }
  if (!m.module_loaded) {
    m.module = load_module(*m.info->images, compute_capability);
    m.module_loaded = true;
  }
  m.early_start = driver::early_start_supported(driver::current_device());
  m.plans = plans_by_kernel(m.groups);
  check_one_plan_over_optimizer(m);
  m.grad_norm_memory = upload_grad_norms(m);
  std::vector<unsigned> blocks(m.groups.size(), 0);
  for (Plan& plan : m.plans) build_plan(m, plan, blocks);
  m.device_groups = build_group_table(m, blocks);
  m.stream = stream;
  // The uploads (and the state initialisation of add_param_group) were issued on the legacy
  // stream and may still be in flight: the group kernels and steps may run on a stream that
  // does not wait for it.
  driver::check(driver::api().cuCtxSynchronize(), "cuCtxSynchronize");
  m.write_groups(0, m.groups.size(), kernel_abi::kNoField, 0, 0);  // the first step's values
  m.prepared = true;
}

bool FusedOptimizer::prepared() const { return impl_->prepared; }

void FusedOptimizer::Impl::write_groups(std::size_t first, std::size_t count, int field, int index, double value) {
  if (count == 0) return;
  const unsigned grid =
      static_cast<unsigned>((count + kernel_abi::kGroupKernelBlock - 1) / kernel_abi::kGroupKernelBlock);
  for (int v = 0; v < info->num_variants; ++v) {
    const bool present = std::any_of(groups.begin() + static_cast<std::ptrdiff_t>(first),
                                     groups.begin() + static_cast<std::ptrdiff_t>(first + count),
                                     [&](const Group& g) { return g.variant == v; });
    if (!present) continue;
    kernel_abi::GroupWrite write{value, v, static_cast<int>(first), static_cast<int>(count), field, index};
    void* args[] = {&device_groups.view, &write};
    driver::launch(module.function(info->variants[v].group_kernel), grid, kernel_abi::kGroupKernelBlock, stream, args,
                   false, "check that the stream belongs to the current context");
  }
}

void FusedOptimizer::Impl::unprepare() {
  if (!prepared) return;
  std::vector<GroupProgress> now = progress();
  for (std::size_t g = 0; g < groups.size(); ++g) {
    groups[g].step = now[g].step;
    groups[g].scalar_state = now[g].scalar_state;
  }
  prepared = false;
  plans.clear();
  device_groups = DeviceGroups();
}

std::vector<GroupProgress> FusedOptimizer::Impl::progress() const {
  std::vector<GroupProgress> result;
  if (!prepared) {
    for (const Group& g : groups) result.push_back({g.step, g.scalar_state});
    return result;
  }
  const auto& api = driver::api();
  driver::check(api.cuStreamSynchronize(stream), "cuStreamSynchronize");
  const kernel_abi::GroupTable& t = device_groups.view;
  const std::size_t G = groups.size(), S = info->num_scalar_states;
  std::vector<unsigned> arrivals(G);
  std::vector<unsigned> blocks(G);
  std::vector<long long> steps(2 * G);
  std::vector<double> scalar_state(2 * G * S);
  auto download = [&](void* host, const void* device, std::size_t bytes) {
    if (bytes) driver::check(api.cuMemcpyDtoH(host, reinterpret_cast<CUdeviceptr>(device), bytes), "cuMemcpyDtoH");
  };
  download(arrivals.data(), t.arrivals, G * sizeof(unsigned));
  download(blocks.data(), t.blocks, G * sizeof(unsigned));
  download(steps.data(), t.steps, 2 * G * sizeof(long long));
  download(scalar_state.data(), t.scalar_state, 2 * G * S * sizeof(double));
  for (std::size_t g = 0; g < G; ++g) {
    const std::size_t entry = (arrivals[g] >= blocks[g] ? 1 : 0) * G + g;
    result.push_back(
        {steps[entry], std::vector<double>(scalar_state.begin() + static_cast<std::ptrdiff_t>(entry * S),
                                           scalar_state.begin() + static_cast<std::ptrdiff_t>((entry + 1) * S))});
  }
  return result;
}

// ---- Stepping ----

void FusedOptimizer::step(CUstream stream) { step(stream, AmpInputs{}); }

void FusedOptimizer::Impl::begin_launches(CUstream on) {
  const bool capturing = (watch_captures || on != stream) && driver::is_capturing(on);
  // A capture on a side stream does not move the optimizer there: its setters and getters stay
  // ordered with the stream the graph is replayed on.
  if (on != stream && !capturing) stream = on;
  for (Plan& plan : plans) {
    if (plan.pointers_changed) upload_pointers(plan, on, capturing);
    plan.pointers_in_graph = plan.pointers_in_graph || capturing;
  }
}

namespace {

/// Hands matrix hook `m.matrix_hook` the matrices Reduce stage `stage` of `plan` stored. Returns the
/// launches of its own (those that move tensors with column splits); the hook's are its own.
int call_matrix_hook(const FusedOptimizer::Impl& m, const Plan& plan, const VariantInfo& variant, int stage,
                     CUstream stream) {
  std::vector<MatrixWork::Matrices> work;
  std::vector<std::vector<double>> arguments;
  arguments.reserve(plan.matrices->tensors.size());
  for (const MatrixTensor& t : plan.matrices->tensors) {
    const MatrixValueInfo& value = variant.matrix_values[t.value];
    if (value.stage != stage) continue;
    arguments.push_back(matrix_arguments(value, m.groups[t.group].h));
    work.push_back({t.value, t.group, t.position, t.x, t.batch, t.rows, t.cols, arguments.back().data(),
                    value.num_arguments, t.dtype});
  }
  int launches = move_column_splits(*plan.matrices, stage, true, stream);
  m.matrix_hook({stage, work.data(), static_cast<int>(work.size()), stream});
  return launches + move_column_splits(*plan.matrices, stage, false, stream);
}

}  // namespace

void FusedOptimizer::step(CUstream stream, const AmpInputs& amp) {
  Impl& m = *impl_;
  check_per_optimizer_hyperparameters(m, "step");
  if (!m.prepared) prepare(stream);
  m.begin_launches(stream);
  m.inputs = {amp.grad_scale, amp.found_inf};
  m.launches_last_step = 0;
  for (Plan& plan : m.plans) {
    void* args[] = {&plan.table, &m.device_groups.view, &m.inputs, &plan.reductions};
    const VariantInfo& variant = plan.variant;
    bool after_matrices = false;  // the stage after matrix functions waits for them to end
    auto launch = [&](CUfunction kernel, unsigned grid, void** kernel_args, bool early_start) {
      driver::launch(kernel, grid, static_cast<unsigned>(plan.shape.block_size), stream, kernel_args, early_start,
                     "check that the tensors are still allocated and that the stream belongs to the current context");
      ++m.launches_last_step;
    };
    for (std::size_t s = 0; s < plan.stages.size(); ++s) {
      // A Reduce stage of only matrix, row or column blocks has none when the plan's tensors have
      // no rows or columns (all empty): nothing to launch. The hook is still called, so that every
      // rank of a sharded model makes the same collective calls.
      if (plan.grids[s] > 0) {
        // Every stage may start while the kernel before it ends, where that kernel allows it (an
        // Update stage does as its blocks start, a Reduce stage once they have waited for the
        // kernel before it): a stage after the first issues its first loads under the last one's
        // tail, a first stage only its reads of the plan's tables. Each waits before it reads what
        // the kernel before may write (optgen/device/group.cuh's wait_for_previous_kernel).
        // The kernels of cuBLAS may let the next kernel start early too, and that one would read
        // their results before they are written: a stage after matrix functions starts after them.
        launch(plan.stages[s], plan.grids[s], args, m.early_start && !after_matrices);
      }
      // Then the Update stage of the tensors whose matrices are one element, over their chunks: it
      // waits for the Update stage before it reads what the Reduce stages wrote.
      if (plan.unit_grid > 0 && variant.stage_kinds[s] == StageKind::Update) {
        kernel_abi::TableView unit_table = plan.table;
        unit_table.chunks += plan.grids[s];
        unit_table.num_chunks = static_cast<int>(plan.unit_grid);
        void* unit_args[] = {&unit_table, &m.device_groups.view, &m.inputs, &plan.reductions};
        launch(plan.unit_update, plan.unit_grid, unit_args, m.early_start);
      }
      after_matrices = false;
      if (m.reduction_hook && variant.stage_kinds[s] == StageKind::Reduce) {
        const kernel_abi::ReductionTable& r = plan.reductions;
        const PartialRuns& runs = plan.partial_runs[s];
        m.reduction_hook({static_cast<int>(s) + 1, variant.reductions, variant.num_reductions, r.tensor_results,
                          r.num_tensors, r.group_results, r.num_groups, stream, plan.row_results, runs.rows.data(),
                          static_cast<int>(runs.rows.size()), plan.col_results, runs.cols.data(),
                          static_cast<int>(runs.cols.size()), plan.matrix_results, runs.matrices.data(),
                          static_cast<int>(runs.matrices.size())});
      }
      if (plan.matrices && variant.stage_kinds[s] == StageKind::Reduce) {
        if (m.matrix_hook)
          m.launches_last_step += call_matrix_hook(m, plan, variant, static_cast<int>(s) + 1, stream);
        else
          m.launches_last_step +=
              apply_matrices(*plan.matrices, variant, static_cast<int>(s) + 1, m.groups, *m.cublas, stream);
        after_matrices = true;
      }
    }
  }
}

void FusedOptimizer::run(const std::string& program, CUstream stream) {
  Impl& m = *impl_;
  const std::size_t index = static_cast<std::size_t>(m.program_index(program, "run"));
  if (!m.prepared) prepare(stream);
  m.begin_launches(stream);
  // No gradient scale, no overflow: a program reads no gradient, and AMP skips steps only.
  kernel_abi::StepInputs inputs{};
  for (Plan& plan : m.plans) {
    const unsigned grid = plan.grids.back() + plan.unit_grid;  // the Update stage's: one block per chunk
    if (grid == 0) continue;
    void* args[] = {&plan.table, &m.device_groups.view, &inputs, &plan.reductions};
    // It waits for the kernel before it (its Update::kFirstStage), as a step's first stage does.
    driver::launch(plan.programs[index], grid, static_cast<unsigned>(plan.shape.block_size), stream, args,
                   m.early_start,
                   "check that the tensors are still allocated and that the stream belongs to the current context");
  }
}

namespace {

/// While it lives, this thread may make calls that CUDA's default (global) capture mode forbids
/// during a capture, such as cuMemAlloc, on streams that are not being captured (torch's caching
/// allocator does the same).
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() {
    driver::check(driver::api().cuThreadExchangeStreamCaptureMode(&previous_), "cuThreadExchangeStreamCaptureMode");
  }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;
  ~RelaxedCaptureMode() { driver::api().cuThreadExchangeStreamCaptureMode(&previous_); }

 private:
  CUstreamCaptureMode previous_ = CU_STREAM_CAPTURE_MODE_RELAXED;
};

}  // namespace

void FusedOptimizer::Impl::upload_pointers(Plan& plan, CUstream stream, bool capturing) {
  const std::size_t bytes = plan.pointers.size() * sizeof(void*);
  const auto& api = driver::api();
  // A table that a graph reads stays as it is; so does the current one while capturing, since
  // freeing memory may synchronize the device, which a capture forbids. Both are freed with the plan.
  if (plan.pointers_in_graph || capturing) {
    plan.retired.push_back(std::move(plan.pointer_memory));
    plan.pointers_in_graph = false;
  }
  if (capturing) {
    // Not a captured copy: the graph would replay it, from host memory that must then outlive the
    // graph. The table is filled now, on a stream of our own, before the captured kernels read it.
    RelaxedCaptureMode relaxed;
    plan.pointer_memory = DeviceBuffer(bytes);
    const CUstream upload = upload_stream.get();
    driver::check(api.cuMemcpyHtoDAsync(plan.pointer_memory.get(), plan.pointers.data(), bytes, upload),
                  "cuMemcpyHtoDAsync");
    driver::check(api.cuStreamSynchronize(upload), "cuStreamSynchronize");
  } else {
    if (!plan.pointer_memory.get()) plan.pointer_memory = DeviceBuffer(bytes);
    // From pageable memory: the driver has copied the source when the call returns.
    driver::check(api.cuMemcpyHtoDAsync(plan.pointer_memory.get(), plan.pointers.data(), bytes, stream),
                  "cuMemcpyHtoDAsync");
  }
  plan.table.pointers = reinterpret_cast<void* const*>(plan.pointer_memory.get());
  plan.pointers_changed = false;
}

// ---- Setters and getters ----

namespace {

/// The index of hyperparameter `name`, after checking that `value` may be set on it.
int settable_index(const FusedOptimizer::Impl& m, const std::string& name, double value) {
  const int i = m.hyperparameter_index(name, "set");
  const auto& hp = m.info->hyperparameters[i];
  if (hp.derived) throw Error(m.call("set"), name + " is derived from other hyperparameters", "set those instead");
  m.check_value(hp, value, "set");
  return i;
}

/// Group `group`'s hyperparameters with hyperparameter `i` set to `value`, derived flags
/// recomputed; throws if that would switch the group's kernel variant.
std::vector<double> with_value(const FusedOptimizer::Impl& m, std::size_t group, const std::string& name, int i,
                               double value) {
  const Group& g = m.groups[group];
  std::vector<double> h = g.h;
  h[i] = value;
  derive_flags(*m.info, h.data());
  const int variant = select_variant(*m.info, h.data());
  if (variant != g.variant)
    throw Error(m.call("set"),
                "setting " + name + " to " + std::to_string(value) + " would switch param group " +
                    std::to_string(group) + " from kernel variant " + m.info->variants[g.variant].name + " to " +
                    m.info->variants[variant].name,
                "variants own different state buffers, so they are fixed when a group is added: pass " + name +
                    " to add_param_group instead");
  if (std::string why = matrix_argument_problem(*m.info, m.info->variants[variant], h); !why.empty())
    throw Error(m.call("set"), why);
  return h;
}

}  // namespace

void FusedOptimizer::set(const std::string& name, double value) {
  Impl& m = *impl_;
  const int i = settable_index(m, name, value);
  // Every group is checked before any changes, so a rejected value leaves all of them as they were.
  std::vector<std::vector<double>> updated;
  for (std::size_t g = 0; g < m.groups.size(); ++g) updated.push_back(with_value(m, g, name, i, value));
  if (m.prepared) m.write_groups(0, m.groups.size(), kernel_abi::kHyperparameter, i, value);
  for (std::size_t g = 0; g < m.groups.size(); ++g) m.groups[g].h = std::move(updated[g]);
  m.defaults[i] = value;  // for groups added later
}

void FusedOptimizer::set(const std::string& name, double value, std::size_t group) {
  Impl& m = *impl_;
  const int i = settable_index(m, name, value);
  m.group_at(group, "set");
  std::vector<double> updated = with_value(m, group, name, i, value);
  if (m.prepared) m.write_groups(group, 1, kernel_abi::kHyperparameter, i, value);
  m.groups[group].h = std::move(updated);
}

double FusedOptimizer::get(const std::string& name, std::size_t group) const {
  return impl_->group_at(group, "get").h[impl_->hyperparameter_index(name, "get")];
}

std::vector<double> FusedOptimizer::hyperparameters(std::size_t group) const {
  return impl_->group_at(group, "hyperparameters").h;
}

std::int64_t FusedOptimizer::step_count(std::size_t group) const {
  impl_->group_at(group, "step_count");
  return impl_->progress()[group].step;
}

void FusedOptimizer::set_step_count(std::int64_t steps, std::size_t group) {
  Impl& m = *impl_;
  m.group_at(group, "set_step_count");
  if (steps < 0 || steps > (std::int64_t{1} << 52))
    throw Error(m.call("set_step_count"), "a step count must be from 0 to 2^52; got " + std::to_string(steps));
  if (m.prepared)
    m.write_groups(group, 1, kernel_abi::kStepCount, 0, static_cast<double>(steps));
  else
    m.groups[group].step = steps;
}

double FusedOptimizer::scalar_state(const std::string& name, std::size_t group) const {
  const int s = impl_->scalar_state_index(name, "scalar_state");
  impl_->group_at(group, "scalar_state");
  return impl_->progress()[group].scalar_state[s];
}

void FusedOptimizer::set_scalar_state(const std::string& name, double value, std::size_t group) {
  Impl& m = *impl_;
  const int s = m.scalar_state_index(name, "set_scalar_state");
  m.group_at(group, "set_scalar_state");
  if (std::isnan(value)) throw Error(m.call("set_scalar_state"), name + " cannot be NaN");
  // One value for the optimizer (`scope: optimizer`): every group's copy.
  const bool every_group = m.info->scalar_states[s].per_optimizer;
  const std::size_t first = every_group ? 0 : group, count = every_group ? m.groups.size() : 1;
  if (m.prepared)
    m.write_groups(first, count, kernel_abi::kScalarState, s, value);
  else
    for (std::size_t g = first; g < first + count; ++g) m.groups[g].scalar_state[s] = value;
}

StateBuffer FusedOptimizer::state(const std::string& name, std::size_t group, std::size_t tensor) const {
  const Impl& m = *impl_;
  const int s = m.state_index(name, "state");
  const Group& g = m.group_at(group, "state");
  if (tensor >= g.tensors.size())
    throw Error(m.call("state"), "param group " + std::to_string(group) + " has no tensor " + std::to_string(tensor));
  const BoundTensor& t = g.tensors[tensor];
  const VariantInfo& variant = m.info->variants[g.variant];
  const int* j = std::find(variant.states, variant.states + variant.num_states, s);
  if (j == variant.states + variant.num_states) {
    if (t.numel > 0)
      throw Error(m.call("state"), "param group " + std::to_string(group) + " (variant " + variant.name + ") has no '" +
                                       name + "' buffer");
    return {nullptr, t.numel, m.state_dtypes[s]};
  }
  // A state that exists for factored tensors only, or for the others only, is absent from the rest.
  if (!state_present(variant, static_cast<int>(j - variant.states), t.dims.factored))
    return {nullptr, 0, m.state_dtypes[s]};
  const std::int64_t numel = state_numel(m.info->states[s].shape, t.dims, t.numel);
  return {t.states[s], numel, stored_dtype(m.state_dtypes[s], numel)};
}

StateBuffer FusedOptimizer::master_weights(std::size_t group, std::size_t tensor) const {
  const Impl& m = *impl_;
  const Group& g = m.group_at(group, "master_weights");
  if (tensor >= g.tensors.size())
    throw Error(m.call("master_weights"),
                "param group " + std::to_string(group) + " has no tensor " + std::to_string(tensor));
  const BoundTensor& t = g.tensors[tensor];
  return {t.master, t.master ? t.numel : 0, DType::F32};
}

void FusedOptimizer::rebind(std::size_t group, std::size_t tensor, void* param, const void* grad) {
  Impl& m = *impl_;
  const Group& g = m.group_at(group, "rebind");
  if (tensor >= g.tensors.size())
    throw Error(m.call("rebind"), "param group " + std::to_string(group) + " has no tensor " + std::to_string(tensor));
  BoundTensor& bound = m.groups[group].tensors[tensor];
  const DType dtype = m.info->kernels[g.kernel].param;
  const Binder binder{m, "rebind"};
  const Tensor t{param, grad, bound.numel, dtype};
  binder.check_tensor(t, tensor, dtype);
  binder.check_device_memory(t, tensor);
  bound.param = param;
  bound.grad = grad;
  m.watch_captures = true;
  if (!m.prepared) return;  // prepare() builds the tables from the bound tensors
  Plan& plan = m.plans[static_cast<std::size_t>(g.plan)];
  const std::size_t n = static_cast<std::size_t>(plan.table.num_tensors);
  const std::size_t position = static_cast<std::size_t>(g.plan_position) + tensor;
  plan.pointers[0 * n + position] = param;
  plan.pointers[1 * n + position] = const_cast<void*>(grad);
  plan.pointers_changed = true;
}

std::vector<std::optional<StatePresence>> FusedOptimizer::state_presence(std::vector<double> hyperparameters) const {
  const Impl& m = *impl_;
  const VariantInfo& variant = m.info->variants[m.variant_of(hyperparameters, "state_presence")];
  std::vector<std::optional<StatePresence>> presence(static_cast<std::size_t>(m.info->num_states));
  for (int j = 0; j < variant.num_states; ++j)
    presence[static_cast<std::size_t>(variant.states[j])] =
        variant.state_presence ? variant.state_presence[j] : StatePresence::Always;
  return presence;
}

std::vector<bool> FusedOptimizer::states_used(std::vector<double> hyperparameters) const {
  const Impl& m = *impl_;
  const VariantInfo& variant = m.info->variants[m.variant_of(hyperparameters, "states_used")];
  std::vector<bool> used(static_cast<std::size_t>(m.info->num_states), false);
  for (int j = 0; j < variant.num_states; ++j) used[static_cast<std::size_t>(variant.states[j])] = true;
  return used;
}

bool FusedOptimizer::reduces_over_group(std::vector<double> hyperparameters) const {
  const Impl& m = *impl_;
  const VariantInfo& variant = m.info->variants[m.variant_of(hyperparameters, "reduces_over_group")];
  // A reduction over every group of the optimizer covers the tensors however they are grouped.
  for (int r = 0; r < variant.num_reductions; ++r)
    if (variant.reductions[r].scope == Domain::Group) return true;
  return false;
}

std::size_t FusedOptimizer::num_groups() const { return impl_->groups.size(); }
std::size_t FusedOptimizer::num_tensors(std::size_t group) const {
  return impl_->group_at(group, "num_tensors").tensors.size();
}

const float* FusedOptimizer::grad_norm(std::size_t group) const {
  const Impl& m = *impl_;
  const Group& g = m.group_at(group, "grad_norm");
  if (m.info->variants[g.variant].grad_norm_slot < 0)
    throw Error(m.call("grad_norm"), "group " + std::to_string(group) + " does not clip its gradients",
                "give it max_grad_norm > 0 when it is added");
  if (!m.prepared)
    throw Error(m.call("grad_norm"), "the optimizer is not prepared: the norms live in the tables prepare() builds",
                "call prepare() or step() first");
  return reinterpret_cast<const float*>(m.grad_norm_memory.get()) + group;
}

void FusedOptimizer::set_matrix_hook(std::function<void(const MatrixWork&)> hook) {
  impl_->matrix_hook = std::move(hook);
}

/// Matrix value `value` of the variant `group` runs, or optgen::Error naming `call`.
const MatrixValueInfo& FusedOptimizer::Impl::matrix_value(std::size_t group, int value, const char* call) const {
  const VariantInfo& variant = info->variants[group_at(group, call).variant];
  if (value < 0 || value >= variant.num_matrix_values)
    throw Error(this->call(call), "group " + std::to_string(group) + " runs variant " + variant.name + ", which has " +
                                      std::to_string(variant.num_matrix_values) + " matrix values; there is no value " +
                                      std::to_string(value));
  return variant.matrix_values[value];
}

std::size_t FusedOptimizer::matrix_function_scratch_bytes(std::size_t group, int value, long long count, long long rows,
                                                          long long cols, DType dtype) const {
  const MatrixValueInfo& v = impl_->matrix_value(group, value, "matrix_function_scratch_bytes");
  return matrix_program_scratch_bytes(*v.program, count, rows, cols, dtype);
}

void FusedOptimizer::apply_matrix_function(std::size_t group, int value, const double* arguments, CUdeviceptr x,
                                           CUdeviceptr scratch, long long count, long long rows, long long cols,
                                           CUstream stream) {
  const Impl& m = *impl_;
  const Group& g = m.group_at(group, "apply_matrix_function");
  if (!m.prepared || g.plan < 0)
    throw Error(m.call("apply_matrix_function"), "the optimizer is not prepared", "call prepare() or step() first");
  const Plan& plan = m.plans[static_cast<std::size_t>(g.plan)];
  const MatrixValueInfo& v = m.matrix_value(group, value, "apply_matrix_function");
  if (std::string why = matrix_program_problem(*v.program, arguments); !why.empty())
    throw Error(m.call("apply_matrix_function"), why);
  const DType dtype = matrix_dtype(m.info->kernels[g.kernel], value);
  // The caller's scratch holds what matrix_function_scratch_bytes said.
  run_matrix_program(*v.program, arguments, dtype, plan.matrices->kernels, *m.cublas, x, scratch,
                     matrix_program_scratch_bytes(*v.program, count, rows, cols, dtype), count, rows, cols, stream);
}

void FusedOptimizer::set_reduction_hook(std::function<void(const ReductionResults&)> hook) {
  Impl& m = *impl_;
  // Plans run a variant's step on shards while a hook is set: one set or removed after prepare()
  // takes new plans.
  const bool shards = std::any_of(m.info->variants, m.info->variants + m.info->num_variants,
                                  [](const VariantInfo& v) { return v.shard_stage_blocks != nullptr; });
  if (shards && static_cast<bool>(hook) != static_cast<bool>(m.reduction_hook)) m.unprepare();
  m.reduction_hook = std::move(hook);
}

int FusedOptimizer::launches_last_step() const { return impl_->launches_last_step; }

void FusedOptimizer::set_chunk_size(long long elements) {
  if (elements < 64 || elements % 64 != 0 || elements > (1LL << 30))
    throw Error(impl_->call("set_chunk_size"),
                "chunk size " + std::to_string(elements) + " must be a multiple of 64 up to 2^30");
  const auto& dtypes = impl_->state_dtypes;
  if (!holds_whole_blocks(elements, dtypes.data(), dtypes.size()))
    throw Error(impl_->call("set_chunk_size"), "chunk size " + std::to_string(elements) + " is not a multiple of 256",
                kWholeBlocks);
  if (elements == impl_->chunk_size) return;
  impl_->unprepare();
  impl_->chunk_size = elements;
}

long long FusedOptimizer::chunk_size(std::size_t group) const {
  const Group& g = impl_->group_at(group, "chunk_size");
  if (impl_->prepared && g.plan >= 0) return impl_->plans[static_cast<std::size_t>(g.plan)].table.chunk_size;
  return impl_->chunk_size_of(g.kernel);
}

const KernelInfo& FusedOptimizer::kernel_set(std::size_t group) const {
  return impl_->info->kernels[impl_->group_at(group, "kernel_set").kernel];
}

std::vector<std::string> FusedOptimizer::stage_kernels(std::size_t group) const {
  const Group& g = impl_->group_at(group, "stage_kernels");
  if (!prepared() || g.plan < 0)
    throw Error(impl_->call("stage_kernels"), "the optimizer is not prepared", "call prepare() or step() first");
  const Plan& plan = impl_->plans[static_cast<std::size_t>(g.plan)];
  std::vector<std::string> names(plan.stage_names.begin(), plan.stage_names.end());
  if (plan.unit_grid > 0) names.push_back(impl_->info->kernels[plan.kernel].unit_update);
  return names;
}

const Tuning::Entry* FusedOptimizer::Impl::tuned(int kernel) const {
  // The device is asked for its name only where a table may apply: without OPTGEN_TUNING this
  // works without a GPU, as before.
  if (!tuning) {
    tuning = std::getenv("OPTGEN_TUNING") ? Tuning::from_environment(driver::device_name(driver::current_device()))
                                          : Tuning();
    tuning->check_kernel_names(*info);
  }
  if (tuning->empty()) return nullptr;
  long long elements = 0;
  for (const Group& g : groups)
    if (g.kernel == kernel)
      for (const BoundTensor& t : g.tensors) elements += t.numel;
  return tuning->find(tuning_name(*info, info->kernels[kernel]), elements);
}

long long FusedOptimizer::Impl::plan_chunk_size(int kernel, const std::vector<long long>& numel) const {
  const long long chunk = chunk_size_of(kernel);
  if (chunk_size > 0 || tuned(kernel)) return chunk;
  const KernelInfo& set = info->kernels[kernel];
  const VariantInfo& variant = info->variants[set.variant];
  long long elements = 0;
  for (long long n : numel) elements += n;
  const bool eight_bit =
      set.state_dtypes && std::any_of(set.state_dtypes, set.state_dtypes + info->num_states, is_blockwise);
  return fitted_chunk_size(chunk, elements, driver::multiprocessor_count(driver::current_device()),
                           variant.stage_blocks && variant.num_matrix_values == 0,
                           eight_bit ? blockwise8::kBlockSize : 64);
}

long long FusedOptimizer::Impl::chunk_size_of(int kernel) const {
  if (chunk_size > 0) return chunk_size;
  const KernelInfo& set = info->kernels[kernel];
  const Tuning::Entry* entry = tuned(kernel);
  if (!entry) return set.chunk_size;
  if (set.state_dtypes &&
      !holds_whole_blocks(entry->chunk_size, set.state_dtypes, static_cast<std::size_t>(info->num_states)))
    throw Error(call("prepare"),
                "the tuning table for " + tuning->device() + " (OPTGEN_TUNING) gives kernel set " +
                    tuning_name(*info, set) + ", which has 8-bit states, chunks of " +
                    std::to_string(entry->chunk_size) + ", not a multiple of 256",
                std::string(kWholeBlocks) + ": measure the table again with optgen_bench --tune");
  return entry->chunk_size;
}

LaunchShape FusedOptimizer::Impl::launch_shape_of(int kernel) const {
  if (launch_shape.block_size > 0) return launch_shape;
  const Tuning::Entry* entry = tuned(kernel);
  if (entry && entry->block_size > 0) return {entry->block_size, entry->elements_per_thread};
  return {info->block_size, info->elements_per_thread};
}

namespace {

/// The NVRTC options that compile a launcher's source for launch shape `shape` (kernel_abi.h).
std::vector<std::string> shape_definitions(LaunchShape shape) {
  return {"-D" + std::string(kernel_abi::kBlockSizeMacro) + "=" + std::to_string(shape.block_size),
          "-D" + std::string(kernel_abi::kElementsPerThreadMacro) + "=" + std::to_string(shape.elements_per_thread)};
}

bool is_generated_shape(const OptimizerInfo& info, LaunchShape shape) {
  return shape == LaunchShape{info.block_size, info.elements_per_thread};
}

}  // namespace

const Module& FusedOptimizer::Impl::module_for(LaunchShape shape) {
  if (is_generated_shape(*info, shape)) return module;
  for (const auto& [s, loaded] : shaped_modules)
    if (s == shape) return *loaded;
  auto loaded = std::make_unique<Module>(
      load_module(*info->images, driver::compute_capability(driver::current_device()), shape_definitions(shape)));
  shaped_modules.emplace_back(shape, std::move(loaded));
  return *shaped_modules.back().second;
}

int minimum_compute_capability(const OptimizerInfo& info, const KernelInfo& kernel) {
  int needed = minimum_compute_capability(kernel.param);
  const VariantInfo& variant = info.variants[kernel.variant];
  if (kernel.state_dtypes)
    for (int j = 0; j < variant.num_states; ++j)
      needed = std::max(needed, minimum_compute_capability(kernel.state_dtypes[variant.states[j]]));
  if (variant.num_matrix_values > 0) needed = std::max(needed, minimum_compute_capability(DType::BF16));
  return needed;
}

bool compile_launch_shape(const OptimizerInfo& info, LaunchShape shape, int compute_capability) {
  if (is_generated_shape(info, shape)) return false;
  return compile_into_cache(*info.images, compute_capability, shape_definitions(shape));
}

std::string stage_plan_problem(const VariantInfo& variant) {
  if (variant.num_stages < 1 || !variant.stage_kinds) return "has no stages";
  for (int s = 0; s + 1 < variant.num_stages; ++s)
    if (variant.stage_kinds[s] != StageKind::Reduce)
      return std::string("has a stage of kind ") + to_string(variant.stage_kinds[s]) + " (stage " +
             std::to_string(s + 1) + " of " + std::to_string(variant.num_stages) + ") before its last";
  if (variant.stage_kinds[variant.num_stages - 1] != StageKind::Update)
    return "has no Update stage (its last stage is of kind " +
           std::string(to_string(variant.stage_kinds[variant.num_stages - 1])) + ")";
  return "";
}

int update_stage(const VariantInfo& variant) {
  for (int s = 0; s < variant.num_stages; ++s)
    if (variant.stage_kinds[s] == StageKind::Update) return s;
  throw std::logic_error(std::string("update_stage: variant ") + variant.name + " has no Update stage");
}

std::string to_string(LaunchShape shape) {
  return std::to_string(shape.block_size) + "x" + std::to_string(shape.elements_per_thread);
}

void FusedOptimizer::set_launch_shape(LaunchShape shape) {
  const bool reset = shape == LaunchShape{0, 0};
  if (!reset && (!kernel_abi::valid_block_size(shape.block_size) ||
                 !kernel_abi::valid_elements_per_thread(shape.elements_per_thread)))
    throw Error(impl_->call("set_launch_shape"),
                "launch shape " + to_string(shape) +
                    ": the block size must be a power of two from 32 to 1024, the elements per thread a power of "
                    "two up to 64",
                "pass {0, 0} for each kernel set's own");
  if (shape == impl_->launch_shape) return;
  impl_->unprepare();
  impl_->launch_shape = shape;
}

LaunchShape FusedOptimizer::launch_shape(std::size_t group) const {
  return impl_->launch_shape_of(impl_->group_at(group, "launch_shape").kernel);
}

const OptimizerInfo& FusedOptimizer::info() const { return *impl_->info; }
const StorageOptions& FusedOptimizer::storage() const { return impl_->storage; }
DType FusedOptimizer::state_dtype(const std::string& name) const {
  return impl_->state_dtypes[static_cast<std::size_t>(impl_->state_index(name, "state_dtype"))];
}

ModuleOrigin FusedOptimizer::module_origin() const {
  if (!impl_->module_loaded)
    throw Error(impl_->call("module_origin"),
                "the kernels are loaded by prepare() (or the first step), which has not run");
  return impl_->module.origin();
}

ModuleOrigin FusedOptimizer::module_origin(std::size_t group) const {
  const Group& g = impl_->group_at(group, "module_origin");
  if (!impl_->prepared || g.plan < 0)
    throw Error(impl_->call("module_origin"),
                "the kernels are loaded by prepare() (or the first step), which has not run since the group was added");
  return impl_->plans[static_cast<std::size_t>(g.plan)].module->origin();
}

}  // namespace optgen
