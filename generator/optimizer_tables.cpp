#include "optimizer_tables.h"

#include <algorithm>
#include <map>

#include "clipping.h"
#include "emit_cuda.h"

namespace optgen {
namespace {

int hyperparameter_index(const Spec& spec, const std::string& name) {
  for (size_t i = 0; i < spec.hyperparameters.size(); ++i)
    if (spec.hyperparameters[i].name == name) return static_cast<int>(i);
  throw InternalError("optimizer tables: no hyperparameter '" + name + "'");
}

InitRow init_row(const Spec& spec, const Init& init) {
  if (init.param) return {0, -1, true};
  if (init.hyperparameter.empty()) return {init.value, -1, false};
  return {0, hyperparameter_index(spec, init.hyperparameter), false};
}

StateShape shape_of(const ElementState& s) { return s.shape; }
StateShape shape_of(const ScalarState&) { return StateShape::Elements; }

template <typename States>
std::vector<StateRow> state_rows(const Spec& spec, const States& states) {
  std::vector<StateRow> rows;
  for (const auto& s : states) rows.push_back({s.name, init_row(spec, s.init), shape_of(s)});
  return rows;
}

}  // namespace

SpecTables spec_tables(const Spec& spec, const std::vector<Program>& variants) {
  if (variants.empty()) throw InternalError("optimizer tables: no variants");
  const Program& variant = variants.front();
  SpecTables tables;
  for (const auto& h : spec.hyperparameters) {
    bool per_optimizer = false;
    for (const Program& v : variants) per_optimizer = per_optimizer || v.optimizer_hyperparameters.count(h.name) > 0;
    tables.hyperparameters.push_back(
        {h.name, h.type, h.default_value, h.specialize, h.derived != nullptr, per_optimizer});
  }
  tables.states = state_rows(spec, spec.states);
  tables.scalar_states = state_rows(spec, spec.scalar_states);
  for (size_t i = 0; i < spec.scalar_states.size(); ++i)
    tables.scalar_states[i].per_optimizer = spec.scalar_states[i].per_optimizer;
  for (const Hyperparameter* flag : spec.flags()) tables.flags.push_back(hyperparameter_index(spec, flag->name));
  for (const auto& h : spec.hyperparameters) {
    if (!h.derived) continue;
    auto value = variant.derived_flags.find(h.name);
    if (value == variant.derived_flags.end())
      throw InternalError("optimizer tables: the derived flag '" + h.name + "' was not lowered");
    tables.derived_flags.push_back({hyperparameter_index(spec, h.name), value->second});
  }
  for (const ProgramSpec& program : spec.programs) tables.programs.push_back(program.name);
  return tables;
}

std::vector<const KernelRow*> KernelTables::kernels_of(int variant) const {
  std::vector<const KernelRow*> rows;
  for (const KernelRow& k : kernels)
    if (k.variant == variant) rows.push_back(&k);
  return rows;
}

KernelTables kernel_tables(const std::vector<Program>& variants, const std::vector<Storage>& storage,
                           const KernelTuning& tuning, const std::set<std::string>& with_kernels) {
  KernelTables tables;
  std::vector<Program> compiled;  // the variants with kernels
  for (size_t i = 0; i < variants.size(); ++i) {
    const Program& p = variants[i];
    VariantRow row{p.variant, {}, group_values_size(p), group_kernel_name(p), {}, {}, clipping::grad_norm_slot(p),
                   {},        {}};
    for (const auto& s : p.states) row.states.push_back(p.spec->state_index(s));
    for (const Stage& stage : p.stages) row.stage_kinds.push_back(stage.kind);
    for (size_t r = 0; r < p.reductions.size(); ++r) {
      const ReductionValue& reduction = p.reductions[r];
      row.reductions.push_back({reduction.name, reduction.op == ReduceOp::Max, reduction.stage, reduction.scope,
                                scope_index(p, r), across_rows(reduction), across_cols(reduction)});
    }
    if (uses_shapes(p))
      for (const Stage& stage : p.stages) row.stage_blocks.push_back(stage_blocks(p, stage));
    for (const auto& s : p.states) row.state_presence.push_back(state_presence(p, s));
    const bool always = std::all_of(row.state_presence.begin(), row.state_presence.end(),
                                    [](StatePresence presence) { return presence == StatePresence::Always; });
    if (always) row.state_presence.clear();
    for (const StoredValue& v : stored_values(p)) {
      int& slots = v.level == Domain::Matrix ? row.stored_matrix_values
                   : v.level == Domain::Row  ? row.stored_row_values
                                             : row.stored_col_values;
      slots = std::max(slots, v.slot + 1);
    }
    for (const MatrixValue& m : p.matrix_values) {
      MatrixValueRow matrix{m.name, m.function, m.stage, {}};
      for (const Expr& a : m.args)
        matrix.arguments.push_back(a->is_const() ? MatrixArgument{-1, a->value}
                                                 : MatrixArgument{hyperparameter_index(*p.spec, a->name), 0.0});
      row.matrix_values.push_back(matrix);
    }
    if (p.shard_step)
      for (const Stage& stage : p.shard_step->stages)
        row.shard_stage_blocks.push_back(stage_blocks(*p.shard_step, stage));
    row.unit_matrices = p.unit_matrices != nullptr;
    tables.variants.push_back(row);
    if (!with_kernels.empty() && !with_kernels.count(p.variant)) continue;
    compiled.push_back(p);
    for (const Storage& s : storage) {
      KernelRow kernel{{}, {}, {}, long_row_update_name(p, s), static_cast<int>(i), s, chunk_size_for(tuning, p, s)};
      for (const Stage& stage : p.stages) kernel.stages.push_back(kernel_name(p, s, stage));
      if (p.shard_step)
        for (const Stage& stage : p.shard_step->stages)
          kernel.shard_stages.push_back(kernel_name(*p.shard_step, s, stage));
      for (const Program& program : p.programs)
        kernel.programs.push_back(kernel_name(program, s, program.stages.back()));
      for (const MatrixValue& m : p.matrix_values) kernel.matrix_dtypes.push_back(s.matrix_dtype(m.name));
      kernel.unit_update = unit_update_name(p, s);
      tables.kernels.push_back(kernel);
    }
  }
  tables.block_size = tuning.block_size_for(compiled);
  tables.chunk_size = variants.empty() ? tuning.chunk_size : chunk_size_for(tuning, variants.front(), Storage{});
  return tables;
}

std::string kernel_name_clash(const std::vector<Program>& variants, const std::vector<Storage>& storage,
                              const std::vector<std::string>& written, KernelNameClash* at) {
  struct Owner {
    size_t variant;
    std::string storage_written, program;  // program: "" for the step's kernels
  };
  std::map<std::string, Owner> named;  // kernel -> what names it
  const auto name = [&](const std::string& kernel, const Owner& owner) -> std::string {
    if (kernel.empty()) return "";
    const auto [it, fresh] = named.emplace(kernel, owner);
    if (fresh) return "";
    const Owner& other = it->second;
    const auto set_flags = [&](size_t of) {
      return std::count_if(variants[of].flags.begin(), variants[of].flags.end(),
                           [](const auto& f) { return f.second; });
    };
    if (at) {
      at->variant = set_flags(owner.variant) >= set_flags(other.variant) ? owner.variant : other.variant;
      at->program = !owner.program.empty() ? owner.program : other.program;
    }
    const auto what = [&](const Owner& o) {
      return (o.program.empty() ? "" : "program '" + o.program + "' of ") + "variant " + variants[o.variant].variant +
             (o.storage_written.empty() ? "" : " in storage '" + o.storage_written + "'");
    };
    return what(owner) + " and " + what(other) + " would both name the kernel " + kernel;
  };
  for (size_t v = 0; v < variants.size(); ++v) {
    const Program& p = variants[v];
    if (std::string clash = name(group_kernel_name(p), {v, "", ""}); !clash.empty()) return clash;
    for (size_t k = 0; k < storage.size(); ++k) {
      const Storage& s = storage[k];
      std::vector<std::string> kernels = {long_row_update_name(p, s), unit_update_name(p, s)};
      for (const Stage& stage : p.stages) kernels.push_back(kernel_name(p, s, stage));
      if (p.shard_step)
        for (const Stage& stage : p.shard_step->stages) kernels.push_back(kernel_name(*p.shard_step, s, stage));
      for (const std::string& kernel : kernels)
        if (std::string clash = name(kernel, {v, written[k], ""}); !clash.empty()) return clash;
      for (const Program& program : p.programs)
        if (std::string clash = name(kernel_name(program, s, program.stages.back()), {v, written[k], program.entry});
            !clash.empty())
          return clash;
    }
  }
  return "";
}

}  // namespace optgen
