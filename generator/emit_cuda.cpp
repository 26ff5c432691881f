#include "emit_cuda.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "clipping.h"
#include "code_writer.h"
#include "element_code.h"
#include "emit_common.h"
#include "expr_printer.h"
#include "group_code.h"

namespace optgen {

std::string KernelTuning::check() const {
  auto power_of_two = [](long long v) { return v > 0 && (v & (v - 1)) == 0; };
  if (!power_of_two(block_size) || block_size < 32 || block_size > 1024)
    return "block size " + std::to_string(block_size) + " must be a power of two from 32 to 1024";
  if (!power_of_two(elements_per_thread) || elements_per_thread > 64)
    return "elements per thread " + std::to_string(elements_per_thread) + " must be a power of two up to 64";
  if (min_blocks_per_sm < 0 || min_blocks_per_sm > 32)
    return "min blocks per SM " + std::to_string(min_blocks_per_sm) + " must be from 0 (ptxas chooses) to 32";
  if (reduce_min_blocks_per_sm < 0 || reduce_min_blocks_per_sm > 32)
    return "min blocks per SM of the Reduce stages " + std::to_string(reduce_min_blocks_per_sm) +
           " must be from 0 (ptxas chooses) to 32";
  if (chunk_size < 64 || chunk_size % 64 != 0 || chunk_size > (1LL << 30))
    return "chunk size " + std::to_string(chunk_size) + " must be a multiple of 64 up to 2^30";
  return "";
}

std::string kernel_name(const Program& variant, const Storage& storage, const Stage& stage) {
  return variant.variant + "_" + storage.name() + "_" + stage.name;
}

std::string group_kernel_name(const Program& variant) { return variant.variant + "_group"; }

std::vector<GroupValueField> group_value_fields(const Program& variant) {
  std::vector<GroupValueField> fields;
  for (bool bools : {false, true})
    for (size_t i = 0; i < variant.group_values.size(); ++i) {
      const auto& v = variant.group_values[i];
      if ((v.value->type == ValueType::Bool) == bools) fields.push_back({v.name, bools, static_cast<int>(i)});
    }
  return fields;
}

int group_values_size(const Program& variant) {
  int floats = 0, bools = 0;
  for (const auto& f : group_value_fields(variant)) (f.is_bool ? bools : floats) += 1;
  if (floats + bools == 0) return 4;  // the placeholder field
  int size = 4 * floats + bools;
  return floats > 0 ? (size + 3) / 4 * 4 : size;
}

namespace {

/// CUDA spelling of expressions: in float (tensor and element code) or double (group code).
class CudaPrinter : public ExprPrinter {
 public:
  /// `program`: where Reduced leaves find their index (tensor code only).
  explicit CudaPrinter(bool double_precision, const Program* program = nullptr)
      : double_(double_precision), program_(program) {}

 protected:
  std::string constant(const Node& c) const override {
    if (c.type == ValueType::Bool) return c.value != 0 ? "true" : "false";
    return double_ ? cuda_double_literal(c.value) : cuda_float_literal(c.value);
  }
  std::string leaf(const Node& var) const override {
    if (var.var == VarKind::Step) return "static_cast<double>(step)";
    if (var.var == VarKind::Numel) return double_ ? "static_cast<double>(numel_)" : "static_cast<float>(numel_)";
    if (var.var == VarKind::Reduced) return reduced(var.name);
    return var.name;
  }
  std::string call(Builtin fn, const std::vector<std::string>& args) const override {
    std::string out = cuda_function(builtin_info(fn), double_) + "(";
    for (size_t i = 0; i < args.size(); ++i) out += (i ? ", " : "") + args[i];
    return out + ")";
  }
  std::optional<std::string> binary_as_call(BinaryOp op, const std::string& a, const std::string& b) const override {
    if (op != BinaryOp::Pow) return std::nullopt;
    return (double_ ? "::pow(" : "::powf(") + a + ", " + b + ")";
  }

 private:
  /// A reduction's result: results_.of_tensor(r) or of_group(r) (kernel_support's Results).
  std::string reduced(const std::string& name) const {
    if (program_)
      for (size_t r = 0; r < program_->reductions.size(); ++r)
        if (program_->reductions[r].name == name)
          return std::string(program_->reductions[r].scope == ReduceScope::Group ? "results_.of_group("
                                                                                 : "results_.of_tensor(") +
                 std::to_string(r) + ")";
    throw InternalError("emit_cuda: reduction '" + name + "' read outside tensor code");
  }

  bool double_;
  const Program* program_;
};

/// Writes `text` line by line at the writer's indentation.
void write_lines(CodeWriter& w, const std::string& text) {
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    w.line(text.substr(start, end - start));
    start = end + 1;
  }
}

class CudaEmitter {
 public:
  CudaEmitter(const Spec& spec, const KernelTuning& tuning) : spec_(spec), tuning_(tuning) {}

  std::string emit(const std::vector<Program>& variants, const std::vector<Storage>& storage) {
    CodeWriter w;
    w.line("// Tuning: parameters of the emitted code (optgen emit --block-size, --elements-per-thread,");
    w.line("// --min-blocks-per-sm, --reduce-min-blocks-per-sm); the launcher launches with the same values.");
    w.line("#define OPTGEN_BLOCK_SIZE " + std::to_string(tuning_.block_size) + "  // threads per block");
    w.line("#define OPTGEN_ELEMENTS_PER_THREAD " + std::to_string(tuning_.elements_per_thread) +
           "  // elements in flight per thread and iteration");
    launch_bounds(w, "OPTGEN_LAUNCH_BOUNDS", tuning_.min_blocks_per_sm);
    launch_bounds(w, "OPTGEN_REDUCE_LAUNCH_BOUNDS", tuning_.reduce_min_blocks_per_sm);
    w.line();
    w.line("// ---- the kernel ABI (runtime/include/optgen/kernel_abi.h, verbatim) ----");
    write_lines(w, template_text("kernel_abi.h"));
    w.line();
    write_lines(w, render_template("kernel_support.cuh.in", {}));
    for (const auto& v : variants) variant(w, v);
    for (const auto& v : variants) {
      for (const auto& s : storage)
        for (const auto& stage : v.stages) stage_kernel(w, v, s, stage);
      group_kernel(w, v);
    }
    return w.str();
  }

 private:
  /// `#define NAME __launch_bounds__(OPTGEN_BLOCK_SIZE, min_blocks)`, which caps the registers.
  static void launch_bounds(CodeWriter& w, const std::string& name, int min_blocks) {
    w.line("#define " + name + " __launch_bounds__(OPTGEN_BLOCK_SIZE" +
           (min_blocks > 0 ? ", " + std::to_string(min_blocks) : std::string()) + ")" +
           (min_blocks > 0 ? "  // at most 65536 / (block size * " + std::to_string(min_blocks) + ") registers"
                           : std::string()));
  }

  void variant(CodeWriter& w, const Program& p) {
    w.line(variant_banner(p));
    auto ns = w.block("namespace variants::" + p.variant, "}  // namespace variants::" + p.variant);
    w.line();
    group_values_struct(w, p);
    w.line();
    group_struct(w, p);
    for (const auto& stage : p.stages) {
      if (stage.kind != StageKind::Reduce) continue;
      w.line();
      reduce_struct(w, p, stage);
    }
    w.line();
    update_struct(w, p);
  }

  void group_values_struct(CodeWriter& w, const Program& p) {
    w.line("/// Computed once per step and param group by Group::step, kept in the group table, read by the");
    w.line("/// tensor and element code.");
    {
      auto s = w.block("struct GroupValues", "};");
      auto fields = group_value_fields(p);
      ExprPrinter ir;  // the IR's notation, for the comments
      for (const auto& f : fields)
        w.line(std::string(f.is_bool ? "bool " : "float ") + f.name + ";  // " +
               ir.print(p.group_values[f.index].value));
      if (fields.empty()) w.line("float unused;  // this variant reads no per-group value");
    }
    w.line("static_assert(sizeof(GroupValues) == " + std::to_string(group_values_size(p)) +
           ", \"the launcher's values_stride holds this\");");
  }

  void group_struct(CodeWriter& w, const Program& p) {
    w.line("/// The group code: the spec's per_step, in double, once per step and param group.");
    auto s = w.block("struct Group", "};");
    w.line("typedef GroupValues Values;");
    w.line("static constexpr int kScalarStates = " + std::to_string(spec_.scalar_states.size()) + ";");
    w.line();
    w.line("/// Advances `scalar_state_` (the values the previous step left) and computes the values of step");
    w.line("/// `step` (counting from 1) from the hyperparameters `h_`.");
    auto fn = w.block(
        "static __device__ __forceinline__ GroupValues step([[maybe_unused]] const double* h_, [[maybe_unused]] "
        "double* scalar_state_, "
        "[[maybe_unused]] long long step)");
    CudaPrinter printer(true);
    auto values = write_group_code(w, p, printer, {"step"});
    w.line("GroupValues result_;");
    for (const auto& f : group_value_fields(p)) {
      const std::string& value = values[f.index];
      w.line("result_." + f.name + " = " + (f.is_bool ? value : "static_cast<float>(" + value + ")") + ";");
    }
    if (group_value_fields(p).empty()) w.line("result_.unused = 0.0f;");
    w.line("return result_;");
  }

  /// The operands every stage kernel of the variant indexes: param, grad, then its states.
  static std::vector<std::string> operand_names(const Program& p) {
    std::vector<std::string> names = {"param", "grad"};
    names.insert(names.end(), p.states.begin(), p.states.end());
    return names;
  }

  /// The names every stage's code must not declare.
  static std::set<std::string> taken_names(const Program& p) {
    std::set<std::string> taken = {"numel", "param", "grad"};
    for (const auto& s : p.states) taken.insert(s);
    for (const auto& f : group_value_fields(p)) taken.insert(f.name);
    for (const auto& t : p.tensor_values) taken.insert(t.name);
    for (const auto& r : p.reductions) taken.insert(r.name);
    return taken;
  }

  /// The tensor values `roots` read, in the program's order.
  static std::vector<const HoistedValue*> tensor_values_read(const Program& p, const std::vector<Expr>& roots) {
    std::set<std::string> read;
    for (const auto& r : roots)
      for_each_node(r, [&](const Expr& e) {
        if (e->kind == NodeKind::Var && e->var == VarKind::Hoisted && e->level == Level::Tensor) read.insert(e->name);
      });
    std::vector<const HoistedValue*> values;
    for (const auto& t : p.tensor_values)
      if (read.count(t.name)) values.push_back(&t);
    return values;
  }

  /// `const float param = v_[0];` for each operand `roots` read.
  static void read_operands(CodeWriter& w, const Program& p, const std::vector<Expr>& roots) {
    std::set<std::string> read;
    for (const auto& r : roots)
      for_each_node(r, [&](const Expr& e) {
        if (e->kind == NodeKind::Var && e->level == Level::Element) read.insert(e->name);
      });
    const auto names = operand_names(p);
    for (size_t i = 0; i < names.size(); ++i)
      if (read.count(names[i])) w.line("const float " + names[i] + " = v_[" + std::to_string(i) + "];");
  }

  /// `kGradNormSlot`: the result that holds the squared global gradient norm of a variant that clips
  /// (clipping.h), which the stages publish; -1 for none.
  static void grad_norm_slot(CodeWriter& w, const Program& p) {
    const int slot = clipping::grad_norm_slot(p);
    w.line("static constexpr int kGradNormSlot = " + std::to_string(slot) + ";" +
           (slot >= 0 ? "  // grad_norm_squared: this variant clips" : ""));
  }

  void update_struct(CodeWriter& w, const Program& p) {
    const auto names = operand_names(p);
    std::string operands;
    for (const auto& n : names) operands += (operands.empty() ? "" : ", ") + n;
    std::vector<Expr> roots;
    for (const auto& o : p.element_outputs) roots.push_back(o.value);
    w.line("/// The Update stage's code: every element output from the operands, in place.");
    auto st = w.block("struct Update", "};");
    w.line("static constexpr int kOperands = " + std::to_string(names.size()) + ";  // " + operands);
    grad_norm_slot(w, p);
    const auto read = tensor_values_read(p, roots);
    w.line(std::string("static constexpr bool kTensorValues = ") + (read.empty() ? "false" : "true") +
           ";  // reads values computed per tensor");
    w.line();
    const std::set<std::string> taken = taken_names(p);
    tensor_values(w, p, read, taken);
    w.line();
    auto fn = w.block(
        "static __device__ __forceinline__ void apply([[maybe_unused]] const GroupValues& k_, [[maybe_unused]] const "
        "TensorValues& tv_, "
        "float (&v_)[kOperands])");
    element_prologue(w, p, roots);
    CudaPrinter printer(false);
    auto values = write_element_temporaries(w, p, printer, "float", taken);
    for (size_t j = 0; j < values.size(); ++j) {
      const std::string& out = p.element_outputs[j].name;
      size_t index = std::find(names.begin(), names.end(), out) - names.begin();
      if (index == names.size()) throw InternalError("emit_cuda: output '" + out + "' is not an operand");
      w.line("v_[" + std::to_string(index) + "] = " + values[j] + ";  // " + out);
    }
  }

  /// The reductions of Reduce stage `stage`, in the program's order, with their index r.
  static std::vector<std::pair<int, const ReductionValue*>> stage_reductions(const Program& p, const Stage& stage) {
    std::vector<std::pair<int, const ReductionValue*>> list;
    for (size_t r = 0; r < p.reductions.size(); ++r)
      if (p.reductions[r].stage == stage.number) list.push_back({static_cast<int>(r), &p.reductions[r]});
    return list;
  }

  /// The name of a Reduce stage's struct: Reduce, or Reduce1, Reduce2, ... when there are several.
  static std::string reduce_struct_name(const Stage& stage) {
    return stage.name == "reduce" ? "Reduce" : "Reduce" + std::to_string(stage.number);
  }

  /// A Reduce stage's code: the operand of each of its reductions, element by element, and how
  /// the driver (reduce_stage) combines and stores them.
  void reduce_struct(CodeWriter& w, const Program& p, const Stage& stage) {
    const auto names = operand_names(p);
    const auto list = stage_reductions(p, stage);
    std::vector<Expr> roots;
    for (const auto& [r, reduction] : list) roots.push_back(reduction->operand);
    std::set<std::string> loaded;
    for (const auto& root : roots)
      for_each_node(root, [&](const Expr& e) {
        if (e->kind == NodeKind::Var && e->level == Level::Element) loaded.insert(e->name);
      });
    unsigned loads = 0, is_max = 0, is_group = 0;
    std::string slots;
    for (size_t i = 0; i < names.size(); ++i)
      if (loaded.count(names[i])) loads |= 1u << i;
    for (size_t i = 0; i < list.size(); ++i) {
      if (list[i].second->op == ReduceOp::Max) is_max |= 1u << i;
      if (list[i].second->scope == ReduceScope::Group) is_group |= 1u << i;
      slots += "i_ == " + std::to_string(i) + " ? " + std::to_string(list[i].first) + " : ";
    }
    auto hex = [](unsigned mask) {
      char text[16];
      std::snprintf(text, sizeof text, "0x%xu", mask);
      return std::string(text);
    };
    w.line("/// Reduce stage " + std::to_string(stage.number) +
           ": the operands of its reductions, element by element.");
    auto st = w.block("struct " + reduce_struct_name(stage), "};");
    w.line("static constexpr int kOperands = " + std::to_string(names.size()) + ";");
    w.line("static constexpr int kReductions = " + std::to_string(list.size()) + ";");
    w.line(std::string("static constexpr bool kGroupScope = ") + (is_group ? "true" : "false") +
           ";  // a reduction over the whole group");
    grad_norm_slot(w, p);
    for (size_t i = 0; i < list.size(); ++i)
      w.line("// " + std::to_string(i) + ": " + list[i].second->name + ", " + to_string(list[i].second->op) +
             " over each " + to_string(list[i].second->scope) + " (result " + std::to_string(list[i].first) + ")");
    w.line("/// Whether operand `op` is read; whether reduction `i_` is a maximum (else a sum), over the group;");
    w.line("/// where its result goes (kernel_abi::ReductionTable's r).");
    w.line("static __device__ __forceinline__ constexpr bool loads(int op_) { return (" + hex(loads) +
           " >> op_) & 1u; }");
    w.line("static __device__ __forceinline__ constexpr bool is_max(int i_) { return (" + hex(is_max) +
           " >> i_) & 1u; }");
    w.line("static __device__ __forceinline__ constexpr bool is_group(int i_) { return (" + hex(is_group) +
           " >> i_) & 1u; }");
    w.line("static __device__ __forceinline__ constexpr int slot(int i_) { return " + slots + "-1; }");
    w.line();
    const std::set<std::string> taken = taken_names(p);
    tensor_values(w, p, tensor_values_read(p, roots), taken);
    w.line();
    auto fn = w.block(
        "static __device__ __forceinline__ void apply([[maybe_unused]] const GroupValues& k_, [[maybe_unused]] const "
        "TensorValues& tv_, "
        "const float (&v_)[kOperands], float (&r_)[kReductions])");
    element_prologue(w, p, roots);
    CudaPrinter printer(false);
    auto values = write_level_code(w, roots, Level::Element, printer, "float", taken);
    for (size_t i = 0; i < values.size(); ++i)
      w.line("r_[" + std::to_string(i) + "] = " + values[i] + ";  // " + list[i].second->name);
  }

  /// The reads of a stage's element code: the group values, tensor values and operands `roots` use.
  void element_prologue(CodeWriter& w, const Program& p, const std::vector<Expr>& roots) {
    read_group_values(w, p, roots);
    for (const HoistedValue* t : tensor_values_read(p, roots))
      w.line(std::string(t->value->type == ValueType::Bool ? "const bool " : "const float ") + t->name + " = tv_." +
             t->name + ";");
    read_operands(w, p, roots);
  }

  /// `const float name = k_.name;` for each group value `roots` read.
  void read_group_values(CodeWriter& w, const Program& p, const std::vector<Expr>& roots) {
    std::set<std::string> read;
    for (const auto& r : roots)
      for_each_node(r, [&](const Expr& e) {
        if (e->kind == NodeKind::Var && e->var == VarKind::Hoisted && e->level == Level::Group) read.insert(e->name);
      });
    for (const auto& f : group_value_fields(p))
      if (read.count(f.name))
        w.line(std::string(f.is_bool ? "const bool " : "const float ") + f.name + " = k_." + f.name + ";");
  }

  /// The per-tensor values a stage reads, computed once per block from the group values, the
  /// tensor's numel and the results of earlier reductions, in double, and handed to the element
  /// code as floats.
  void tensor_values(CodeWriter& w, const Program& p, const std::vector<const HoistedValue*>& list,
                     const std::set<std::string>& taken) {
    {
      auto s = w.block("struct TensorValues", "};");
      for (const HoistedValue* t : list)
        w.line(std::string(t->value->type == ValueType::Bool ? "bool " : "float ") + t->name + ";");
      if (list.empty()) w.line("// (this stage reads nothing computed per tensor)");
    }
    auto fn = w.block(
        "static __device__ __forceinline__ TensorValues tensor([[maybe_unused]] const GroupValues& k_, "
        "[[maybe_unused]] long long numel_, [[maybe_unused]] const optgen::Results& results_)");
    std::vector<Expr> roots;
    for (const HoistedValue* t : list) roots.push_back(t->value);
    std::set<std::string> group_read;
    for (const auto& r : roots)
      for_each_node(r, [&](const Expr& e) {
        if (e->kind == NodeKind::Var && e->var == VarKind::Hoisted && e->level == Level::Group)
          group_read.insert(e->name);
      });
    for (const auto& f : group_value_fields(p))
      if (group_read.count(f.name))
        w.line(std::string(f.is_bool ? "const bool " : "const double ") + f.name + " = k_." + f.name + ";");
    CudaPrinter printer(true, &p);  // once per block: in double, so that numel is exact
    auto values = write_level_code(w, roots, Level::Tensor, printer, "double", taken);
    w.line("TensorValues tv_;");
    for (size_t i = 0; i < values.size(); ++i) {
      const bool is_bool = list[i]->value->type == ValueType::Bool;
      w.line("tv_." + list[i]->name + " = " + (is_bool ? values[i] : "static_cast<float>(" + values[i] + ")") + ";");
    }
    w.line("return tv_;");
  }

  void stage_kernel(CodeWriter& w, const Program& p, const Storage& s, const Stage& stage) {
    w.line();
    w.line("/// " + p.variant + ", " + to_string(stage.kind) + " stage: params and grads in " + to_string(s.param) +
           ", states in " + to_string(s.state) + ".");
    w.line(std::string("extern \"C\" __global__ void ") +
           (stage.kind == StageKind::Reduce ? "OPTGEN_REDUCE_LAUNCH_BOUNDS" : "OPTGEN_LAUNCH_BOUNDS"));
    auto fn =
        w.block(kernel_name(p, s, stage) +
                "(const optgen::TableView table, const optgen::GroupTable groups, const optgen::StepInputs inputs, "
                "const optgen::ReductionTable reductions)");
    const std::string types = "variants::" + p.variant + "::Group, " + cuda_type(s.param) + ", " + cuda_type(s.state);
    switch (stage.kind) {
      case StageKind::Reduce:
        w.line("optgen::reduce_stage<variants::" + p.variant + "::" + reduce_struct_name(stage) + ", " + types +
               ">(table, groups, inputs, reductions);");
        break;
      case StageKind::Update:
        w.line("optgen::update_stage<variants::" + p.variant + "::Update, " + types +
               ">(table, groups, inputs, reductions);");
        break;
    }
  }

  void group_kernel(CodeWriter& w, const Program& p) {
    w.line();
    w.line("/// " + p.variant + ": writes a value into the group table and recomputes the values the next step reads.");
    w.line("extern \"C\" __global__ void __launch_bounds__(optgen::kernel_abi::kGroupKernelBlock)");
    auto fn = w.block(group_kernel_name(p) + "(const optgen::GroupTable groups, const optgen::GroupWrite write)");
    w.line("optgen::group_kernel<variants::" + p.variant + "::Group>(groups, write);");
  }

  const Spec& spec_;
  KernelTuning tuning_;
};

}  // namespace

std::string emit_cuda(const Spec& spec, const std::vector<Program>& variants, const std::vector<Storage>& storage,
                      const KernelTuning& tuning) {
  if (variants.empty() || storage.empty()) throw InternalError("emit_cuda: no variants or no storage types");
  std::string kernels;
  for (const auto& v : variants) {
    for (const auto& s : storage)
      for (const auto& stage : v.stages) kernels += "//   " + kernel_name(v, s, stage) + "\n";
    kernels += "//   " + group_kernel_name(v) + "\n";
  }
  std::string body = CudaEmitter(spec, tuning).emit(variants, storage);
  return render_template("kernels.cu.in", {{"spec_file", spec_file_name(spec)},
                                           {"optimizer", spec.optimizer},
                                           {"generator", generator_banner()},
                                           {"summary", comment_text(spec.summary)},
                                           {"kernels", kernels},
                                           {"body", body}});
}

}  // namespace optgen
