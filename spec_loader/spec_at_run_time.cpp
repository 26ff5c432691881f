// A spec loaded at run time (optgen/spec_at_run_time.h): the generator's pipeline as `optgen emit`
// runs it, its tables and kernel source kept in memory, and an OptimizerInfo pointing at them.
#include "optgen/spec_at_run_time.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>

#include "emit_common.h"
#include "emit_cuda.h"
#include "emit_images.h"
#include "evaluate.h"
#include "matrix_programs.h"
#include "optgen/error.h"
#include "optgen/kernel_abi.h"
#include "optimizer_tables.h"
#include "pipeline.h"

namespace optgen {

/// Owns the generator's tables and the runtime's view of them; built once, never changed or moved
/// (OptimizerInfo points into it).
struct RuntimeSpec::Impl {
  Impl(const Spec& spec, const std::vector<Program>& compiled, const std::vector<Storage>& storage);
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  // What the generator built: every name, and the derived flags' IR.
  std::string generator, optimizer, spec_name;
  SpecTables spec_tables;
  KernelTables kernel_tables;
  std::string source_name, source;
  std::vector<std::string> warnings;  ///< Spec::warnings, as optgen check prints them
  long long block_elements;           ///< Spec::block_elements

  // The runtime's tables, pointing into the above.
  std::vector<reference::HyperparameterInfo> hyperparameters;
  std::vector<reference::StateInfo> states, scalar_states;
  std::vector<std::vector<ReductionSlot>> reduction_slots;  ///< per variant
  std::vector<std::vector<StatePresence>> state_presence;   ///< per variant (empty: every state always)
  std::vector<std::vector<MatrixValueInfo>> matrix_values;  ///< per variant
  std::map<std::string, std::unique_ptr<OwnedMatrixProgram>> matrix_programs;  ///< by function
  std::vector<VariantInfo> variants;
  std::vector<std::vector<const char*>> stage_names;    ///< per kernel
  std::vector<std::vector<const char*>> program_names;  ///< per kernel: its programs' kernels
  std::vector<std::vector<const char*>> shard_names;    ///< per kernel: its step on shards' kernels
  std::vector<const char*> programs;                    ///< the spec's programs
  std::vector<std::vector<DType>> state_dtypes;         ///< per kernel, per state of the spec
  std::vector<std::vector<DType>> matrix_dtypes;        ///< per kernel, per matrix value of its variant
  std::vector<KernelInfo> kernels;
  std::vector<const char*> compile_options;
  KernelImages images{};
  OptimizerInfo info{};
  std::vector<double> defaults;

 private:
  void describe_spec();
  void describe_kernels();
  void describe_images();
  void describe_optimizer();
};

namespace {

std::vector<reference::StateInfo> runtime_states(const std::vector<StateRow>& rows) {
  std::vector<reference::StateInfo> states;
  for (const StateRow& s : rows)
    states.push_back({s.name.c_str(), {s.init.value, s.init.hyperparameter, s.init.param}, s.shape, s.per_optimizer});
  return states;
}

/// `h` with each derived flag set to its IR's value, as the reference's derive_flags computes it
/// (bools read as h != 0). `context` is the RuntimeSpec::Impl.
void derive_flags_from_ir(const void* context, double* h) {
  const auto& spec = *static_cast<const RuntimeSpec::Impl*>(context);
  const auto& hyperparameters = spec.spec_tables.hyperparameters;
  auto read = [&](const Node& var) {
    for (size_t i = 0; i < hyperparameters.size(); ++i) {
      if (var.var != VarKind::Hyperparameter || hyperparameters[i].name != var.name) continue;
      return hyperparameters[i].type == ValueType::Bool ? (h[i] != 0 ? 1.0 : 0.0) : h[i];
    }
    throw InternalError("derive_flags: a derived flag reads '" + var.name + "', which is no plain hyperparameter");
  };
  for (const DerivedFlagRow& flag : spec.spec_tables.derived_flags)
    h[flag.hyperparameter] = evaluate(flag.value, read) != 0 ? 1.0 : 0.0;
}

/// SpecOptions::storage parsed; optgen::Error names the bad entry.
std::vector<Storage> requested_storage(const SpecOptions& options, const std::string& path) {
  const std::string call = "optgen::load_spec_at_run_time(" + path + ")";
  std::vector<Storage> storage;
  for (const std::string& item : options.storage) {
    std::string error;
    std::optional<Storage> parsed = parse_storage(item, &error);
    if (!parsed)
      throw Error(call, "SpecOptions::storage: " + error, "e.g. \"f32\", \"bf16\", \"bf16:bf16\" or \"bf16+master\"");
    if (auto same = std::find(storage.begin(), storage.end(), *parsed); same != storage.end())
      throw Error(call, "SpecOptions::storage: " + repeated_storage(item, options.storage[same - storage.begin()]));
    storage.push_back(*parsed);
  }
  return storage;
}

}  // namespace

RuntimeSpec::Impl::Impl(const Spec& spec, const std::vector<Program>& compiled, const std::vector<Storage>& storage)
    : generator(generator_banner()),
      optimizer(spec.optimizer),
      spec_name(spec.name),
      spec_tables(optgen::spec_tables(spec, compiled)),
      kernel_tables(optgen::kernel_tables(compiled, storage, KernelTuning{})),
      source_name(spec.name + "_kernels.cu"),
      source(emit_cuda(spec, compiled, storage, KernelTuning{})),
      warnings(spec.warnings),
      block_elements(spec.block_elements) {
  describe_spec();
  for (const Program& p : compiled)
    for (const MatrixValue& m : p.matrix_values)
      if (!matrix_programs.count(m.function))
        matrix_programs[m.function] =
            std::make_unique<OwnedMatrixProgram>(compile_matrix_function(*spec.find_matrix_function(m.function)));
  describe_kernels();
  describe_images();
  describe_optimizer();
}

void RuntimeSpec::Impl::describe_spec() {
  for (const HyperparameterRow& h : spec_tables.hyperparameters)
    hyperparameters.push_back({h.name.c_str(), h.type, h.default_value, h.specialized, h.derived, h.per_optimizer});
  states = runtime_states(spec_tables.states);
  scalar_states = runtime_states(spec_tables.scalar_states);
}

void RuntimeSpec::Impl::describe_kernels() {
  for (const VariantRow& v : kernel_tables.variants) {
    std::vector<ReductionSlot> slots;
    for (const ReductionRow& r : v.reductions)
      slots.push_back({r.name.c_str(), r.is_max, r.stage, r.scope, r.scope_index, r.across_rows});
    reduction_slots.push_back(std::move(slots));
    state_presence.push_back(v.state_presence);
    std::vector<MatrixValueInfo> matrices;
    for (const MatrixValueRow& m : v.matrix_values)
      matrices.push_back({m.name.c_str(), &matrix_programs.at(m.function)->program, m.stage, m.arguments.data(),
                          static_cast<int>(m.arguments.size())});
    matrix_values.push_back(std::move(matrices));
  }
  for (size_t i = 0; i < kernel_tables.variants.size(); ++i) {
    const VariantRow& v = kernel_tables.variants[i];
    variants.push_back({v.name.c_str(),
                        v.states.data(),
                        static_cast<int>(v.states.size()),
                        v.group_values_size,
                        v.group_kernel.c_str(),
                        v.stage_kinds.data(),
                        static_cast<int>(v.stage_kinds.size()),
                        reduction_slots[i].data(),
                        static_cast<int>(reduction_slots[i].size()),
                        v.grad_norm_slot,
                        v.stage_blocks.empty() ? nullptr : v.stage_blocks.data(),
                        state_presence[i].empty() ? nullptr : state_presence[i].data(),
                        {v.stored_matrix_values, v.stored_row_values, v.stored_col_values},
                        matrix_values[i].empty() ? nullptr : matrix_values[i].data(),
                        static_cast<int>(matrix_values[i].size()),
                        v.shard_stage_blocks.empty() ? nullptr : v.shard_stage_blocks.data()});
  }
  for (const KernelRow& k : kernel_tables.kernels) {
    std::vector<const char*> names;
    for (const std::string& stage : k.stages) names.push_back(stage.c_str());
    stage_names.push_back(std::move(names));
    std::vector<const char*> program_kernels;
    for (const std::string& program : k.programs) program_kernels.push_back(program.c_str());
    program_names.push_back(std::move(program_kernels));
    std::vector<const char*> shard_kernels;
    for (const std::string& stage : k.shard_stages) shard_kernels.push_back(stage.c_str());
    shard_names.push_back(std::move(shard_kernels));
  }
  for (size_t i = 0; i < kernel_tables.kernels.size(); ++i) {
    const KernelRow& k = kernel_tables.kernels[i];
    std::vector<DType> dtypes;
    for (const StateRow& state : spec_tables.states) dtypes.push_back(k.storage.state_dtype(state.name));
    state_dtypes.push_back(std::move(dtypes));
    matrix_dtypes.push_back(k.matrix_dtypes);
  }
  for (size_t i = 0; i < kernel_tables.kernels.size(); ++i) {
    const KernelRow& k = kernel_tables.kernels[i];
    kernels.push_back({stage_names[i].data(), k.variant, k.storage.param, k.storage.param_write,
                       state_dtypes[i].empty() ? nullptr : state_dtypes[i].data(), k.chunk_size,
                       program_names[i].empty() ? nullptr : program_names[i].data(),
                       shard_names[i].empty() ? nullptr : shard_names[i].data(),
                       matrix_dtypes[i].empty() ? nullptr : matrix_dtypes[i].data(),
                       k.long_row_update.empty() ? nullptr : k.long_row_update.c_str()});
  }
  for (const std::string& program : spec_tables.programs) programs.push_back(program.c_str());
}

/// Source only: load_module compiles it with NVRTC for the device, through the kernel cache.
void RuntimeSpec::Impl::describe_images() {
  for (const std::string& option : kernel_compile_options()) compile_options.push_back(option.c_str());
  images = {source_name.c_str(),
            source.c_str(),
            compile_options.data(),
            static_cast<int>(compile_options.size()),
            nullptr,
            0};
}

void RuntimeSpec::Impl::describe_optimizer() {
  const KernelTuning tuning;
  info = {kernel_abi::kVersion,
          generator.c_str(),
          optimizer.c_str(),
          spec_name.c_str(),
          hyperparameters.data(),
          static_cast<int>(hyperparameters.size()),
          states.data(),
          static_cast<int>(states.size()),
          scalar_states.data(),
          static_cast<int>(scalar_states.size()),
          spec_tables.flags.data(),
          static_cast<int>(spec_tables.flags.size()),
          &derive_flags_from_ir,
          this,
          variants.data(),
          static_cast<int>(variants.size()),
          kernels.data(),
          static_cast<int>(kernels.size()),
          &images,
          kernel_tables.block_size,
          tuning.elements_per_thread,
          kernel_tables.chunk_size,
          programs.empty() ? nullptr : programs.data(),
          static_cast<int>(programs.size()),
          block_elements};
  defaults = default_hyperparameters(info);
}

RuntimeSpec::RuntimeSpec(std::unique_ptr<const Impl> impl) : impl_(std::move(impl)) {}
RuntimeSpec::RuntimeSpec(RuntimeSpec&&) noexcept = default;
RuntimeSpec& RuntimeSpec::operator=(RuntimeSpec&&) noexcept = default;
RuntimeSpec::~RuntimeSpec() = default;

const OptimizerInfo& RuntimeSpec::info() const { return impl_->info; }
const std::vector<double>& RuntimeSpec::defaults() const { return impl_->defaults; }
const std::string& RuntimeSpec::kernel_source() const { return impl_->source; }
const std::vector<std::string>& RuntimeSpec::warnings() const { return impl_->warnings; }

RuntimeSpec load_spec_at_run_time(const std::string& path, const SpecOptions& options) {
  const std::vector<Storage> requested = requested_storage(options, path);
  try {
    const Spec spec = load_spec(path);
    const std::vector<Program> compiled = compile_spec(spec);
    const std::string call = "optgen::load_spec_at_run_time(" + path + ")";
    std::vector<Storage> storage;
    try {
      storage = kernel_storage(spec, compiled, requested, options.storage);
    } catch (const std::invalid_argument& e) {
      throw Error(call, std::string("SpecOptions::storage: ") + e.what());
    }
    return RuntimeSpec(std::make_unique<const RuntimeSpec::Impl>(spec, compiled, storage));
  } catch (const SpecError& e) {
    throw SpecLoadError(e.what());
  }
}

}  // namespace optgen
