// FusedOptimizer's checkpoints: what optgen/checkpoint.h describes, gathered from and restored to
// the device.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "optgen/blockwise8.h"
#include "optimizer_impl.h"

namespace optgen {
namespace {

constexpr const char* kFormat = "optgen.optimizer";
constexpr const char* kFormatVersion = "2";

template <typename Info>
std::string names_of(const Info* list, int count) {
  std::string names;
  for (int i = 0; i < count; ++i) names += (i ? "," : "") + std::string(list[i].name);
  return names;
}

/// The dtype of a checkpoint tensor of values of `type` (of an 8-bit state, its codes; the block
/// absmax are a tensor of their own: absmax_name).
const char* safetensors_dtype(DType type) {
  switch (type) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::Q8:
    case DType::UQ8: return "U8";
  }
  return "?";
}

template <typename T>
CheckpointTensor tensor_of(const std::string& name, const char* dtype, std::vector<std::int64_t> shape,
                           const std::vector<T>& values) {
  CheckpointTensor t{name, dtype, std::move(shape), std::vector<unsigned char>(values.size() * sizeof(T))};
  if (!values.empty()) std::memcpy(t.data.data(), values.data(), t.data.size());
  return t;
}

std::string group_name(std::size_t g) { return "group." + std::to_string(g); }
std::string state_name(std::size_t g, std::size_t t, const char* state) {
  return group_name(g) + ".tensor." + std::to_string(t) + "." + state;
}
/// Apart from the states' names, so that no spec's state can take it.
std::string master_name(std::size_t g, std::size_t t) { return group_name(g) + ".master." + std::to_string(t); }
/// The block absmax of an 8-bit state saved as `state` (a state's name has no dot: no state's
/// name can take it).
std::string absmax_name(const std::string& state) { return state + ".absmax"; }

/// The storage a checkpoint records: each state's dtype (declaration order) and how params are written.
std::string state_dtypes_of(const FusedOptimizer::Impl& m) {
  std::string dtypes;
  for (std::size_t s = 0; s < m.state_dtypes.size(); ++s)
    dtypes += (s ? "," : "") + std::string(to_string(m.state_dtypes[s]));
  return dtypes;
}

/// Reads the checkpoint's tensors for one optimizer, refusing what does not fit it.
class Reader {
 public:
  Reader(const Checkpoint& checkpoint, std::string call) : checkpoint_(checkpoint), call_(std::move(call)) {}

  const CheckpointTensor& tensor(const std::string& name, const char* dtype, const std::vector<std::int64_t>& shape) {
    const CheckpointTensor* t = checkpoint_.find(name);
    if (!t) fail("it has no tensor '" + name + "'");
    if (t->dtype != dtype) fail("tensor '" + name + "' is " + t->dtype + ", not " + dtype);
    if (t->shape != shape)
      fail("tensor '" + name + "' has shape " + shape_text(t->shape) + ", not " + shape_text(shape));
    std::size_t elements = 1;
    for (auto d : shape) elements *= static_cast<std::size_t>(d);
    if (t->data.size() != elements * dtype_size(dtype))
      fail("tensor '" + name + "' holds " + std::to_string(t->data.size()) + " bytes, not the " +
           std::to_string(elements * dtype_size(dtype)) + " its shape and dtype need");
    used_.push_back(name);
    return *t;
  }

  template <typename T>
  std::vector<T> values(const std::string& name, const char* dtype, const std::vector<std::int64_t>& shape) {
    const CheckpointTensor& t = tensor(name, dtype, shape);
    std::vector<T> v(t.data.size() / sizeof(T));
    if (!v.empty()) std::memcpy(v.data(), t.data.data(), t.data.size());
    return v;
  }

  /// Every tensor of the checkpoint was asked for: nothing in it is left unexplained.
  void check_all_used() const {
    for (const auto& t : checkpoint_.tensors)
      if (std::find(used_.begin(), used_.end(), t.name) == used_.end())
        fail("it has a tensor '" + t.name + "' this optimizer has no place for");
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(call_, "the checkpoint does not fit this optimizer: " + what,
                "restore into an optimizer with the same spec, param groups (tensors, sizes, flags) and storage "
                "(state dtypes, master copy) as the one saved");
  }

 private:
  static std::string shape_text(const std::vector<std::int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
  }

  const Checkpoint& checkpoint_;
  std::string call_;
  std::vector<std::string> used_;
};

}  // namespace

void check_checkpoint_spec(const Checkpoint& checkpoint, const OptimizerInfo& info) {
  const std::string call = std::string(info.name) + "::restore";
  auto meta = [&](const char* key) -> std::string {
    auto it = checkpoint.metadata.find(key);
    if (it == checkpoint.metadata.end())
      throw Error(call, std::string("the checkpoint's metadata has no '") + key + "'",
                  "it was not written by optgen's save(); pass an optgen checkpoint");
    return it->second;
  };
  if (meta("format") != kFormat)
    throw Error(call, "the checkpoint's format is '" + meta("format") + "', not '" + kFormat + "'",
                "pass a checkpoint written by optgen's save()");
  if (meta("format_version") != kFormatVersion)
    throw Error(
        call,
        "the checkpoint has format version " + meta("format_version") + "; this optgen reads version " + kFormatVersion,
        "load it with the optgen that wrote it (" + meta("format_version") + ")");
  auto same = [&](const char* key, const std::string& ours) {
    const std::string theirs = meta(key);
    if (theirs != ours)
      throw Error(
          call,
          std::string("the checkpoint is of another spec: its ") + key + " are '" + theirs + "', this optimizer's '" +
              ours + "'",
          std::string("restore it into an optimizer generated from the spec it was saved from (") + meta("spec") + ")");
  };
  if (meta("spec") != info.spec || meta("optimizer") != info.name)
    throw Error(call,
                "the checkpoint is of " + meta("optimizer") + " (spec " + meta("spec") + "), not of " + info.name +
                    " (spec " + info.spec + ")",
                "restore it into the optimizer it was saved from");
  same("hyperparameters", names_of(info.hyperparameters, info.num_hyperparameters));
  same("states", names_of(info.states, info.num_states));
  same("scalar_states", names_of(info.scalar_states, info.num_scalar_states));
  meta("state_dtypes");
  meta("param_write");
  meta("groups");
}

namespace {
/// `numel` values of `dtype` at `device`, downloaded: one tensor, or for an 8-bit state (as
/// stored_dtype gives it) two, its codes and its block absmax (absmax_name).
std::vector<CheckpointTensor> device_tensors(const std::string& name, DType dtype, std::int64_t numel,
                                             const void* device) {
  std::vector<unsigned char> bytes(storage_bytes(dtype, numel));
  if (!bytes.empty())
    driver::check(driver::api().cuMemcpyDtoH(bytes.data(), reinterpret_cast<CUdeviceptr>(device), bytes.size()),
                  "cuMemcpyDtoH");
  if (!is_blockwise(dtype)) return {CheckpointTensor{name, safetensors_dtype(dtype), {numel}, std::move(bytes)}};
  const auto codes_end = bytes.begin() + numel;
  const auto absmax_begin = bytes.begin() + blockwise8::absmax_offset(numel);
  return {CheckpointTensor{name, safetensors_dtype(dtype), {numel}, {bytes.begin(), codes_end}},
          CheckpointTensor{absmax_name(name), "F32", {blockwise8::num_blocks(numel)}, {absmax_begin, bytes.end()}}};
}
}  // namespace

Checkpoint FusedOptimizer::checkpoint() const {
  const Impl& m = *impl_;
  const OptimizerInfo& info = *m.info;
  const std::vector<GroupProgress> progress = m.progress();  // synchronizes the stream when prepared
  Checkpoint c;
  c.metadata = {{"format", kFormat},
                {"format_version", kFormatVersion},
                {"optgen", info.generator},
                {"optimizer", info.name},
                {"spec", info.spec},
                {"hyperparameters", names_of(info.hyperparameters, info.num_hyperparameters)},
                {"states", names_of(info.states, info.num_states)},
                {"scalar_states", names_of(info.scalar_states, info.num_scalar_states)},
                {"state_dtypes", state_dtypes_of(m)},
                {"param_write", to_string(m.storage.param_write)},
                {"groups", std::to_string(m.groups.size())}};
  for (std::size_t g = 0; g < m.groups.size(); ++g) {
    const Group& group = m.groups[g];
    c.tensors.push_back(tensor_of(group_name(g) + ".hyperparameters", "F64", {info.num_hyperparameters}, group.h));
    c.tensors.push_back(tensor_of(group_name(g) + ".step", "I64", {}, std::vector<std::int64_t>{progress[g].step}));
    if (info.num_scalar_states > 0)
      c.tensors.push_back(
          tensor_of(group_name(g) + ".scalar_state", "F64", {info.num_scalar_states}, progress[g].scalar_state));
    const VariantInfo& variant = info.variants[group.variant];
    for (std::size_t t = 0; t < group.tensors.size(); ++t) {
      const BoundTensor& tensor = group.tensors[t];
      for (int j = 0; j < variant.num_states; ++j) {
        if (!state_present(variant, j, tensor.dims.factored)) continue;  // absent for this tensor: not saved
        const int s = variant.states[j];
        const std::int64_t numel = state_numel(info.states[s].shape, tensor.dims, tensor.numel);
        for (CheckpointTensor& saved : device_tensors(state_name(g, t, info.states[s].name),
                                                      stored_dtype(m.state_dtypes[s], numel), numel, tensor.states[s]))
          c.tensors.push_back(std::move(saved));
      }
      if (tensor.master)
        for (CheckpointTensor& saved : device_tensors(master_name(g, t), DType::F32, tensor.numel, tensor.master))
          c.tensors.push_back(std::move(saved));
    }
  }
  return c;
}

namespace {
void upload_tensor(const CheckpointTensor& t, void* device) {
  if (!t.data.empty())
    driver::check(driver::api().cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(device), t.data.data(), t.data.size()),
                  "cuMemcpyHtoD");
}
/// Uploads a state saved by device_tensors: for an 8-bit one, its absmax after its codes.
void upload_state(const Checkpoint& c, const std::string& name, DType dtype, std::int64_t numel, void* device) {
  upload_tensor(*c.find(name), device);
  if (is_blockwise(dtype))
    upload_tensor(*c.find(absmax_name(name)), static_cast<unsigned char*>(device) + blockwise8::absmax_offset(numel));
}
}  // namespace

void FusedOptimizer::restore(const Checkpoint& c) {
  Impl& m = *impl_;
  const OptimizerInfo& info = *m.info;
  check_checkpoint_spec(c, info);
  Reader read(c, m.call("restore"));
  if (c.metadata.at("state_dtypes") != state_dtypes_of(m))
    read.fail("its states (" + names_of(info.states, info.num_states) + ") are stored in " +
              c.metadata.at("state_dtypes") + ", this optimizer's in " + state_dtypes_of(m));
  if (c.metadata.at("param_write") != to_string(m.storage.param_write))
    read.fail("its params are written " + c.metadata.at("param_write") + ", this optimizer's " +
              to_string(m.storage.param_write) + " (a master copy is saved and restored only with one)");
  if (c.metadata.count("groups") == 0 || c.metadata.at("groups") != std::to_string(m.groups.size()))
    read.fail("it holds " + (c.metadata.count("groups") ? c.metadata.at("groups") : std::string("?")) +
              " param groups, this optimizer " + std::to_string(m.groups.size()));

  // Read and check everything before changing anything.
  struct Loaded {
    std::vector<double> h;
    GroupProgress progress;
  };
  std::vector<Loaded> loaded;
  for (std::size_t g = 0; g < m.groups.size(); ++g) {
    const Group& group = m.groups[g];
    Loaded l;
    l.h = read.values<double>(group_name(g) + ".hyperparameters", "F64", {info.num_hyperparameters});
    const int variant = m.variant_of(l.h, "restore");
    if (variant != group.variant)
      read.fail("param group " + std::to_string(g) + " was saved as variant " + info.variants[variant].name +
                " but was added here as " + info.variants[group.variant].name + " (its specialized flags differ)");
    l.progress.step = read.values<std::int64_t>(group_name(g) + ".step", "I64", {})[0];
    if (l.progress.step < 0 || l.progress.step > (std::int64_t{1} << 52))
      read.fail("param group " + std::to_string(g) + " has the step count " + std::to_string(l.progress.step) +
                ", outside 0 to 2^52");
    if (info.num_scalar_states > 0)
      l.progress.scalar_state = read.values<double>(group_name(g) + ".scalar_state", "F64", {info.num_scalar_states});
    for (int s = 0; s < info.num_scalar_states; ++s)
      if (std::isnan(l.progress.scalar_state[s]))
        read.fail("param group " + std::to_string(g) + "'s scalar state " + info.scalar_states[s].name + " is NaN");
    for (std::size_t t = 0; t < group.tensors.size(); ++t) {
      const VariantInfo& v = info.variants[group.variant];
      const BoundTensor& tensor = group.tensors[t];
      for (int j = 0; j < v.num_states; ++j) {
        const reference::StateInfo& state = info.states[v.states[j]];
        const std::string name = state_name(g, t, state.name);
        const std::string which = "tensor " + std::to_string(t) + " of param group " + std::to_string(g) + " (" +
                                  (tensor.dims.factored ? "factored" : "not factored") + ")";
        if (!state_present(v, j, tensor.dims.factored)) {
          if (c.find(name))
            read.fail("it has a '" + std::string(state.name) + "' state for " + which + ", which has none here (" +
                      state.name + " exists for " +
                      (tensor.dims.factored ? "tensors that are not factored" : "factored tensors") +
                      " only: was the tensor saved with another shape?)");
          continue;
        }
        if (v.state_presence && !c.find(name))  // a state that depends on the shape: say so
          read.fail("it has no '" + std::string(state.name) + "' state (tensor '" + name + "') for " + which +
                    ", which has one here (was the tensor saved with another shape?)");
        const std::int64_t numel = state_numel(state.shape, tensor.dims, tensor.numel);
        const DType dtype = stored_dtype(m.state_dtypes[v.states[j]], numel);
        read.tensor(name, safetensors_dtype(dtype), {numel});
        if (is_blockwise(dtype)) read.tensor(absmax_name(name), "F32", {blockwise8::num_blocks(numel)});
      }
      if (tensor.master) read.tensor(master_name(g, t), safetensors_dtype(DType::F32), {tensor.numel});
    }
    // A scalar state of `scope: optimizer` is one value: every group's copy the same (one saved
    // when the spec kept one per group would step on apart).
    if (g > 0)
      for (int s = 0; s < info.num_scalar_states; ++s)
        if (info.scalar_states[s].per_optimizer && l.progress.scalar_state[s] != loaded[0].progress.scalar_state[s])
          read.fail("param group " + std::to_string(g) + "'s scalar state " + info.scalar_states[s].name +
                    " differs from group 0's, but it is one value for the optimizer (scope: optimizer); was it "
                    "saved by an optgen that kept one per group?");
    loaded.push_back(std::move(l));
  }
  read.check_all_used();

  if (m.prepared) driver::check(driver::api().cuStreamSynchronize(m.stream), "cuStreamSynchronize");
  for (std::size_t g = 0; g < m.groups.size(); ++g) {
    Group& group = m.groups[g];
    const VariantInfo& v = info.variants[group.variant];
    for (std::size_t t = 0; t < group.tensors.size(); ++t)
      for (int j = 0; j < v.num_states; ++j) {
        if (!state_present(v, j, group.tensors[t].dims.factored)) continue;
        const int s = v.states[j];
        const std::int64_t numel = state_numel(info.states[s].shape, group.tensors[t].dims, group.tensors[t].numel);
        upload_state(c, state_name(g, t, info.states[s].name), stored_dtype(m.state_dtypes[s], numel), numel,
                     group.tensors[t].states[s]);
      }
    for (std::size_t t = 0; t < group.tensors.size(); ++t)
      if (group.tensors[t].master) upload_tensor(*c.find(master_name(g, t)), group.tensors[t].master);
    group.h = loaded[g].h;
    group.step = loaded[g].progress.step;
    group.scalar_state = loaded[g].progress.scalar_state;
  }
  if (!m.prepared) return;
  // In place, so that graphs captured on these tables stay valid: every group back to slot 0.
  // The group kernels below run on the optimizer's stream: the uploads must have landed first.
  const kernel_abi::GroupTable& table = m.device_groups.view;
  const std::size_t G = m.groups.size(), H = info.num_hyperparameters, S = info.num_scalar_states;
  std::vector<double> h(G * H), scalar_state(G * S);
  std::vector<long long> steps(G);
  for (std::size_t g = 0; g < G; ++g) {
    std::copy(m.groups[g].h.begin(), m.groups[g].h.end(), h.begin() + static_cast<std::ptrdiff_t>(g * H));
    std::copy(m.groups[g].scalar_state.begin(), m.groups[g].scalar_state.end(),
              scalar_state.begin() + static_cast<std::ptrdiff_t>(g * S));
    steps[g] = m.groups[g].step;
  }
  auto upload = [&](const void* device, const void* host, std::size_t bytes) {
    if (bytes)
      driver::check(driver::api().cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(device), host, bytes), "cuMemcpyHtoD");
  };
  upload(table.hyperparameters, h.data(), h.size() * sizeof(double));
  upload(table.steps, steps.data(), steps.size() * sizeof(long long));
  upload(table.scalar_state, scalar_state.data(), scalar_state.size() * sizeof(double));
  upload(table.arrivals, std::vector<unsigned>(G, 0).data(), G * sizeof(unsigned));
  driver::check(driver::api().cuCtxSynchronize(), "cuCtxSynchronize");
  m.write_groups(0, G, kernel_abi::kNoField, 0, 0);
}

void FusedOptimizer::save(const std::string& path) const { write_safetensors(path, checkpoint()); }

void FusedOptimizer::load(const std::string& path) { restore(read_safetensors(path)); }

}  // namespace optgen
