#include "emit_launcher.h"

#include <algorithm>

#include "code_writer.h"
#include "emit_common.h"
#include "emit_matrix_programs.h"
#include "expr_printer.h"
#include "optgen/kernel_abi.h"
#include "optimizer_tables.h"

namespace optgen {
namespace {

std::string cpp_type(ValueType type) {
  switch (type) {
    case ValueType::Bool: return "bool";
    case ValueType::Int: return "std::int64_t";
    case ValueType::Float: return "double";
  }
  return "double";
}

std::string default_literal(const Hyperparameter& h) {
  if (h.type == ValueType::Bool) return h.default_value != 0 ? "true" : "false";
  if (h.type == ValueType::Float) return cpp_double_literal(h.default_value);
  return format_number(h.default_value);  // an int within 2^53 (the loader checks it)
}

/// The hyperparameters a user sets (derived flags are computed).
std::vector<const Hyperparameter*> settable(const Spec& spec) {
  std::vector<const Hyperparameter*> list;
  for (const auto& h : spec.hyperparameters)
    if (!h.derived) list.push_back(&h);
  return list;
}

std::map<std::string, std::string> common(const Spec& spec) {
  return {{"spec_file", spec_file_name(spec)},
          {"optimizer", spec.optimizer},
          {"spec", spec.name},
          {"generator", generator_banner()}};
}

std::string dtype_enum(DType t) {
  switch (t) {
    case DType::F32: return "DType::F32";
    case DType::BF16: return "DType::BF16";
    case DType::F16: return "DType::F16";
    case DType::Q8: return "DType::Q8";
    case DType::UQ8: return "DType::UQ8";
  }
  throw InternalError("dtype_enum: unknown dtype");
}

std::string param_write_enum(ParamWrite w) {
  switch (w) {
    case ParamWrite::Nearest: return "ParamWrite::Nearest";
    case ParamWrite::Master: return "ParamWrite::Master";
    case ParamWrite::Stochastic: return "ParamWrite::Stochastic";
  }
  throw InternalError("param_write_enum: unknown param write");
}

/// `namespace storage`: per storage the kernels are generated for, each declared state's dtype.
void storage_namespace(CodeWriter& w, const Spec& spec, const std::vector<Storage>& storage) {
  if (spec.states.empty()) return;
  w.line("/// Per storage the kernels are generated for, the dtype of each state, in declaration order.");
  auto ns = w.block("namespace storage", "}  // namespace storage");
  for (const Storage& s : storage) {
    std::string dtypes;
    for (const auto& state : spec.states)
      dtypes += (dtypes.empty() ? "" : ", ") + dtype_enum(s.state_dtype(state.name));
    w.line("[[maybe_unused]] const DType k" + s.name() + "[] = {" + dtypes + "};");
  }
}

std::string reduction_scope(Domain scope) {
  switch (scope) {
    case Domain::Tensor: return "Domain::Tensor";
    case Domain::Optimizer: return "Domain::Optimizer";
    case Domain::Group: return "Domain::Group";
    case Domain::Row: return "Domain::Row";
    case Domain::Column: return "Domain::Column";
    case Domain::Matrix: return "Domain::Matrix";
    case Domain::Element: break;
  }
  throw InternalError("reduction_scope: a reduction into the element domain");
}

std::string state_presence(StatePresence presence) {
  switch (presence) {
    case StatePresence::Always: return "StatePresence::Always";
    case StatePresence::Factored: return "StatePresence::Factored";
    case StatePresence::NotFactored: return "StatePresence::NotFactored";
  }
  throw InternalError("state_presence: unknown presence");
}

std::string stage_kind(StageKind kind) {
  switch (kind) {
    case StageKind::Reduce: return "StageKind::Reduce";
    case StageKind::Update: return "StageKind::Update";
  }
  throw InternalError("stage_kind: unknown stage kind");
}

/// A stage's mask of kernel_abi::BlockKind bits as the sum of its kinds, e.g.
/// `1u << kernel_abi::kChunkRuns | 1u << kernel_abi::kRowLines`; 0 for none (the Update stage).
std::string block_mask(unsigned mask) {
  static const char* const kinds[kernel_abi::kNumBlockKinds] = {
      "kChunkRuns", "kRowLines", "kColumnSegments", "kMatrixRowLines", "kMatrixColumnLines", "kSnapshot"};
  std::string text;
  for (int kind = 0; kind < kernel_abi::kNumBlockKinds; ++kind)
    if (mask & (1u << kind)) text += (text.empty() ? "" : " | ") + std::string("1u << kernel_abi::") + kinds[kind];
  if (mask >> kernel_abi::kNumBlockKinds) throw InternalError("block_mask: a bit beyond the block kinds");
  return text.empty() ? "0u" : text;
}

/// `items`, each as `text` prints it, comma-separated.
template <typename T, typename Text>
std::string comma_list(const std::vector<T>& items, Text text) {
  std::string list;
  for (const T& item : items) list += (list.empty() ? "" : ", ") + text(item);
  return list;
}

/// `[[maybe_unused]] const char* const <name>[] = {"a", "b"};`: kernel names.
void names_array(CodeWriter& w, const std::string& name, const std::vector<std::string>& names) {
  w.line("[[maybe_unused]] const char* const " + name + "[] = {" +
         comma_list(names, [](const std::string& n) { return "\"" + n + "\""; }) + "};");
}

/// `[[maybe_unused]] const unsigned <name>[] = {...};`: per stage, a mask of kernel_abi::BlockKind bits.
void block_masks(CodeWriter& w, const std::string& name, const std::vector<unsigned>& masks) {
  w.line("[[maybe_unused]] const unsigned " + name + "[] = {" + comma_list(masks, block_mask) + "};");
}

/// The tail of an initializer, `, a, b`: each optional field's text, or its default (`second`)
/// where it has none (empty `first`), but no default at the end (the struct's member initializers
/// give those).
std::string optional_fields(const std::vector<std::pair<std::string, std::string>>& fields) {
  std::size_t given = fields.size();
  while (given > 0 && fields[given - 1].first.empty()) --given;
  std::string tail;
  for (std::size_t i = 0; i < given; ++i) tail += ", " + (fields[i].first.empty() ? fields[i].second : fields[i].first);
  return tail;
}

/// Whether kernel set `k` keeps a matrix value in f32: it then lists their dtypes (else null, all bf16).
bool keeps_matrix_values_in_f32(const KernelRow& k) {
  return std::any_of(k.matrix_dtypes.begin(), k.matrix_dtypes.end(), [](DType d) { return d != DType::BF16; });
}

/// `namespace variants::<variant>`: the variant's states (indices into the spec's) and its
/// kernels' names, one array per storage type, in launch order.
void variant_namespace(CodeWriter& w, const Program& p, const KernelTables& tables, int index) {
  w.line(variant_banner(p));
  auto ns = w.block("namespace variants::" + p.variant, "}  // namespace variants::" + p.variant);
  const std::string states = comma_list(tables.variants[index].states, [](int s) { return std::to_string(s); });
  w.line("[[maybe_unused]] const int kStates[] = {" + (states.empty() ? std::string("-1") : states) + "};");
  const VariantRow& row = tables.variants[index];
  w.line("/// Its reductions: name, a maximum (else a sum), stage, the domain of its result, index among");
  w.line("/// the reductions of that domain, whether it sums over the rows, the columns of a matrix.");
  w.line("[[maybe_unused]] const ReductionSlot kReductions[] = {");
  for (const auto& r : row.reductions)
    w.line(std::string("    {\"") + r.name + "\", " + (r.is_max ? "true" : "false") + ", " + std::to_string(r.stage) +
           ", " + reduction_scope(r.scope) + ", " + std::to_string(r.scope_index) + ", " +
           (r.across_rows ? "true" : "false") + ", " + (r.across_cols ? "true" : "false") + "},");
  if (row.reductions.empty()) w.line("    {\"\", false, 0, Domain::Tensor, 0, false, false},");
  w.line("};");
  w.line("/// Its stages in launch order.");
  w.line("[[maybe_unused]] const StageKind kStageKinds[] = {" + comma_list(row.stage_kinds, stage_kind) + "};");
  if (!row.stage_blocks.empty()) {
    w.line("/// Per stage, the kinds of block it launches: a mask of kernel_abi::BlockKind bits.");
    block_masks(w, "kStageBlocks", row.stage_blocks);
  }
  if (!row.shard_stage_blocks.empty()) {
    w.line("/// Its step on shards: per stage, the kinds of block it launches.");
    block_masks(w, "kShardStageBlocks", row.shard_stage_blocks);
  }
  if (!row.matrix_values.empty()) {
    w.line("/// Its matrix values: name, program, the Reduce stage that stores its operand, its arguments after");
    w.line("/// the matrix (a hyperparameter's index, or -1 and the number).");
    std::string values;
    for (size_t m = 0; m < row.matrix_values.size(); ++m) {
      const MatrixValueRow& v = row.matrix_values[m];
      std::string args;
      for (const MatrixArgument& a : v.arguments)
        args +=
            (args.empty() ? "{" : ", {") + std::to_string(a.hyperparameter) + ", " + cpp_double_literal(a.value) + "}";
      w.line("[[maybe_unused]] const MatrixArgument kMatrixArguments" + std::to_string(m) + "[] = {" + args + "};");
      values += (values.empty() ? "" : ", ") + std::string("{\"") + v.name + "\", " + matrix_program_name(v.function) +
                ", " + std::to_string(v.stage) + ", kMatrixArguments" + std::to_string(m) + ", " +
                std::to_string(v.arguments.size()) + "}";
    }
    w.line("[[maybe_unused]] const MatrixValueInfo kMatrixValues[] = {" + values + "};");
  }
  if (!row.state_presence.empty()) {
    w.line("/// Per state (kStates), the tensors it exists for.");
    w.line("[[maybe_unused]] const StatePresence kStatePresence[] = {" +
           comma_list(row.state_presence, state_presence) + "};");
  }
  for (const KernelRow* kernel : tables.kernels_of(index)) {
    const std::string name = "k" + kernel->storage.name();
    names_array(w, name, kernel->stages);
    if (!kernel->shard_stages.empty()) names_array(w, name + "_shards", kernel->shard_stages);
    if (!kernel->programs.empty()) names_array(w, name + "_programs", kernel->programs);
    if (keeps_matrix_values_in_f32(*kernel))
      w.line("[[maybe_unused]] const DType " + name + "_matrices[] = {" +
             comma_list(kernel->matrix_dtypes, dtype_enum) + "};");
  }
}

/// The variant's row of the launcher's variant table.
std::string variant_row(const VariantRow& v) {
  return "    {\"" + v.name + "\", variants::" + v.name + "::kStates, " + std::to_string(v.states.size()) + ", " +
         std::to_string(v.group_values_size) + ", \"" + v.group_kernel + "\", variants::" + v.name + "::kStageKinds, " +
         std::to_string(v.stage_kinds.size()) + ", variants::" + v.name + "::kReductions, " +
         std::to_string(v.reductions.size()) + ", " + std::to_string(v.grad_norm_slot) + ", " +
         (v.stage_blocks.empty() ? std::string("nullptr") : "variants::" + v.name + "::kStageBlocks") + ", " +
         (v.state_presence.empty() ? std::string("nullptr") : "variants::" + v.name + "::kStatePresence") + ", {" +
         std::to_string(v.stored_matrix_values) + ", " + std::to_string(v.stored_row_values) + ", " +
         std::to_string(v.stored_col_values) + "}" +
         optional_fields(
             {{v.matrix_values.empty() ? "" : "variants::" + v.name + "::kMatrixValues", "nullptr"},
              {v.matrix_values.empty() ? "" : std::to_string(v.matrix_values.size()), "0"},
              {v.shard_stage_blocks.empty() ? "" : "variants::" + v.name + "::kShardStageBlocks", "nullptr"},
              {v.unit_matrices ? "true" : "", "false"}}) +
         "},";
}

/// The kernel's row of the launcher's kernel table.
std::string kernel_row(const KernelRow& k, const KernelTables& tables, bool has_states) {
  const std::string names = "variants::" + tables.variants[k.variant].name + "::k" + k.storage.name();
  return "    {" + names + ", " + std::to_string(k.variant) + ", " + dtype_enum(k.storage.param) + ", " +
         param_write_enum(k.storage.param_write) + ", " +
         (has_states ? "storage::k" + k.storage.name() : std::string("nullptr")) + ", " + std::to_string(k.chunk_size) +
         optional_fields({{k.programs.empty() ? "" : names + "_programs", "nullptr"},
                          {k.shard_stages.empty() ? "" : names + "_shards", "nullptr"},
                          {keeps_matrix_values_in_f32(k) ? names + "_matrices" : "", "nullptr"},
                          {k.long_row_update.empty() ? "" : "\"" + k.long_row_update + "\"", "nullptr"},
                          {k.unit_update.empty() ? "" : "\"" + k.unit_update + "\"", "nullptr"}}) +
         "},";
}

/// The hyperparameters' values, in declaration order, from an `Options` named `o` (derived flags
/// are placeholders: the engine computes them).
std::string values_of_options(const Spec& spec) {
  std::string values;
  for (size_t i = 0; i < spec.hyperparameters.size(); ++i) {
    const auto& h = spec.hyperparameters[i];
    std::string value = h.derived                    ? "0.0"
                        : h.type == ValueType::Float ? "o." + h.name
                                                     : "static_cast<double>(o." + h.name + ")";
    values += (i ? ", " : "") + value;
  }
  return values;
}

/// `Options` fields from the hyperparameters' values `h`, one line each (derived flags have none).
std::string options_of_values(const Spec& spec) {
  CodeWriter w;
  for (size_t i = 0; i < spec.hyperparameters.size(); ++i) {
    const auto& h = spec.hyperparameters[i];
    if (h.derived) continue;
    std::string read = "h[" + std::to_string(i) + "]";
    if (h.type == ValueType::Bool)
      read += " != 0";
    else if (h.type == ValueType::Int)
      read = "static_cast<std::int64_t>(" + read + ")";
    w.line("  o." + h.name + " = " + read + ";");
  }
  return w.str();
}

}  // namespace

std::string emit_launcher_header(const Spec& spec, [[maybe_unused]] const std::vector<Program>& variants) {
  CodeWriter options, setters, states;
  for (const auto* h : settable(spec)) {
    std::string doc = comment_text(h->doc);
    if (h->specialize)
      doc = (doc.empty() ? "" : doc + "; ") + "selects a kernel variant, so it is fixed per param group";
    options.line("    " + cpp_type(h->type) + " " + h->name + " = " + default_literal(*h) + ";" +
                 (doc.empty() ? "" : "  ///< " + doc));
  }
  for (const auto* h : settable(spec)) {
    if (h->specialize) {
      setters.line("  // " + h->name + ": no setter; it selects the kernel variant and is fixed per param group.");
      continue;
    }
    std::string type = cpp_type(h->type);
    std::string value = h->type == ValueType::Float ? "value" : "static_cast<double>(value)";
    setters.line("  void set_" + h->name + "(" + type + " value) { engine_.set(\"" + h->name + "\", " + value + "); }");
    setters.line("  void set_" + h->name + "(" + type + " value, std::size_t group) { engine_.set(\"" + h->name +
                 "\", " + value + ", group); }");
  }
  for (const auto& s : spec.states) {
    std::string when;
    if (s.when) when = "  ///< only when " + comment_text(s.when_text);
    states.line("  StateBuffer " + s.name + "(std::size_t group, std::size_t tensor) const { return engine_.state(\"" +
                s.name + "\", group, tensor); }" + when);
  }
  if (spec.states.empty()) states.line("  // (" + spec.optimizer + " keeps no per-element state.)");
  CodeWriter scalar_states;
  for (const auto& s : spec.scalar_states) {
    scalar_states.line("  double " + s.name + "(std::size_t group) const { return engine_.scalar_state(\"" + s.name +
                       "\", group); }");
    scalar_states.line("  void set_" + s.name + "(double value, std::size_t group) { engine_.set_scalar_state(\"" +
                       s.name + "\", value, group); }");
  }
  CodeWriter programs;
  if (!spec.programs.empty()) {
    programs.line("  /// The spec's programs: each runs over every tensor of every group (one launch per kernel set),");
    programs.line("  /// in stream order with the steps, and can be captured in a CUDA graph. It counts no step.");
  }
  for (const ProgramSpec& program : spec.programs)
    programs.line("  void " + program.name + "(CUstream stream = nullptr) { engine_.run(\"" + program.name +
                  "\", stream); }");
  auto values = common(spec);
  values["programs"] = programs.str();
  values["scalar_state_accessors"] = scalar_states.str();
  values["summary"] = comment_text(spec.summary);
  values["options"] = options.str();
  values["setters"] = setters.str();
  values["state_accessors"] = states.str();
  return render_template("launcher.h.in", values);
}

std::string emit_launcher_source(const Spec& spec, const std::vector<Program>& variants,
                                 const std::vector<Storage>& storage, const KernelTuning& tuning,
                                 const std::set<std::string>& with_kernels) {
  const KernelTables tables = kernel_tables(variants, storage, tuning, with_kernels);
  CodeWriter w, variant_table, kernel_table;
  storage_namespace(w, spec, storage);
  for (size_t i = 0; i < variants.size(); ++i) {
    variant_namespace(w, variants[i], tables, static_cast<int>(i));
    variant_table.line(variant_row(tables.variants[i]));
  }
  for (const KernelRow& k : tables.kernels) kernel_table.line(kernel_row(k, tables, !spec.states.empty()));

  auto values = common(spec);
  values["variants"] = w.str();
  values["variant_table"] = variant_table.str();
  values["kernel_table"] = kernel_table.str();
  values["values_of"] = values_of_options(spec);
  values["options_of"] = options_of_values(spec);
  values["num_variants"] = std::to_string(tables.variants.size());
  values["num_kernels"] = std::to_string(tables.kernels.size());
  values["abi_version"] = std::to_string(kernel_abi::kVersion);
  values["block_size"] = std::to_string(tables.block_size);
  values["elements_per_thread"] = std::to_string(tuning.elements_per_thread);
  values["chunk_size"] = std::to_string(tables.chunk_size);
  values["block_elements"] = std::to_string(spec.block_elements);
  return render_template("launcher.cpp.in", values);
}

}  // namespace optgen
