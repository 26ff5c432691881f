#include "emit_cuda.h"

#include <algorithm>
#include <cmath>
#include <set>

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
  explicit CudaPrinter(bool double_precision) : double_(double_precision) {}

 protected:
  std::string constant(const Node& c) const override {
    if (c.type == ValueType::Bool) return c.value != 0 ? "true" : "false";
    return double_ ? cuda_double_literal(c.value) : cuda_float_literal(c.value);
  }
  std::string leaf(const Node& var) const override {
    if (var.var == VarKind::Step) return "static_cast<double>(step)";
    if (var.var == VarKind::Numel) return double_ ? "static_cast<double>(numel_)" : "static_cast<float>(numel_)";
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
  bool double_;
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
    w.line("// --min-blocks-per-sm); the launcher launches with the same values.");
    w.line("#define OPTGEN_BLOCK_SIZE " + std::to_string(tuning_.block_size) + "  // threads per block");
    w.line("#define OPTGEN_ELEMENTS_PER_THREAD " + std::to_string(tuning_.elements_per_thread) +
           "  // elements in flight per thread and iteration");
    w.line("#define OPTGEN_LAUNCH_BOUNDS __launch_bounds__(OPTGEN_BLOCK_SIZE" +
           (tuning_.min_blocks_per_sm > 0 ? ", " + std::to_string(tuning_.min_blocks_per_sm) : std::string()) + ")" +
           (tuning_.min_blocks_per_sm > 0
                ? "  // at most 65536 / (block size * " + std::to_string(tuning_.min_blocks_per_sm) + ") registers"
                : ""));
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
  void variant(CodeWriter& w, const Program& p) {
    w.line(variant_banner(p));
    auto ns = w.block("namespace variants::" + p.variant, "}  // namespace variants::" + p.variant);
    w.line();
    group_values_struct(w, p);
    w.line();
    group_struct(w, p);
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

  void update_struct(CodeWriter& w, const Program& p) {
    std::string operands = "param, grad";
    for (const auto& s : p.states) operands += ", " + s;
    auto st = w.block("struct Update", "};");
    w.line("static constexpr int kOperands = " + std::to_string(2 + p.states.size()) + ";  // " + operands);
    w.line();
    std::set<std::string> taken = {"numel", "param", "grad"};
    for (const auto& s : p.states) taken.insert(s);
    for (const auto& f : group_value_fields(p)) taken.insert(f.name);
    for (const auto& t : p.tensor_values) taken.insert(t.name);
    tensor_values(w, p, taken);
    w.line();
    auto fn = w.block(
        "static __device__ __forceinline__ void apply([[maybe_unused]] const GroupValues& k_, [[maybe_unused]] const "
        "TensorValues& tv_, "
        "float (&v_)[kOperands])");
    read_group_values(w, p);
    for (const auto& t : p.tensor_values)
      w.line(std::string(t.value->type == ValueType::Bool ? "const bool " : "const float ") + t.name + " = tv_." +
             t.name + ";");
    std::vector<std::string> operand_names = {"param", "grad"};
    operand_names.insert(operand_names.end(), p.states.begin(), p.states.end());
    auto read = element_inputs_read(p);
    for (size_t i = 0; i < operand_names.size(); ++i)
      if (std::find(read.begin(), read.end(), operand_names[i]) != read.end())
        w.line("const float " + operand_names[i] + " = v_[" + std::to_string(i) + "];");
    CudaPrinter printer(false);
    auto values = write_element_temporaries(w, p, printer, "float", taken);
    for (size_t j = 0; j < values.size(); ++j) {
      const std::string& out = p.element_outputs[j].name;
      size_t index = std::find(operand_names.begin(), operand_names.end(), out) - operand_names.begin();
      if (index == operand_names.size()) throw InternalError("emit_cuda: output '" + out + "' is not an operand");
      w.line("v_[" + std::to_string(index) + "] = " + values[j] + ";  // " + out);
    }
  }

  /// `const float name = k_.name;` for each group value the element outputs read.
  void read_group_values(CodeWriter& w, const Program& p) {
    std::set<std::string> read;
    for (const auto& o : p.element_outputs)
      for_each_node(o.value, [&](const Expr& e) {
        if (e->kind == NodeKind::Var && e->var == VarKind::Hoisted && e->level == Level::Group) read.insert(e->name);
      });
    for (const auto& f : group_value_fields(p))
      if (read.count(f.name))
        w.line(std::string(f.is_bool ? "const bool " : "const float ") + f.name + " = k_." + f.name + ";");
  }

  /// The per-tensor values, computed once per block from the group values and the tensor's numel,
  /// in double, and handed to the element code as floats.
  void tensor_values(CodeWriter& w, const Program& p, const std::set<std::string>& taken) {
    {
      auto s = w.block("struct TensorValues", "};");
      for (const auto& t : p.tensor_values)
        w.line(std::string(t.value->type == ValueType::Bool ? "bool " : "float ") + t.name + ";");
      if (p.tensor_values.empty()) w.line("// (this variant computes nothing per tensor)");
    }
    auto fn = w.block(
        "static __device__ __forceinline__ TensorValues tensor([[maybe_unused]] const GroupValues& k_, "
        "[[maybe_unused]] long long "
        "numel_)");
    std::vector<Expr> roots;
    for (const auto& t : p.tensor_values) roots.push_back(t.value);
    std::set<std::string> group_read;
    for (const auto& r : roots)
      for_each_node(r, [&](const Expr& e) {
        if (e->kind == NodeKind::Var && e->var == VarKind::Hoisted && e->level == Level::Group)
          group_read.insert(e->name);
      });
    for (const auto& f : group_value_fields(p))
      if (group_read.count(f.name))
        w.line(std::string(f.is_bool ? "const bool " : "const double ") + f.name + " = k_." + f.name + ";");
    CudaPrinter printer(true);  // once per block: in double, so that numel is exact
    auto values = write_level_code(w, roots, Level::Tensor, printer, "double", taken);
    w.line("TensorValues tv_;");
    for (size_t i = 0; i < values.size(); ++i) {
      const bool is_bool = p.tensor_values[i].value->type == ValueType::Bool;
      w.line("tv_." + p.tensor_values[i].name + " = " +
             (is_bool ? values[i] : "static_cast<float>(" + values[i] + ")") + ";");
    }
    w.line("return tv_;");
  }

  void stage_kernel(CodeWriter& w, const Program& p, const Storage& s, const Stage& stage) {
    w.line();
    w.line("/// " + p.variant + ", " + to_string(stage.kind) + " stage: params and grads in " + to_string(s.param) +
           ", states in " + to_string(s.state) + ".");
    w.line("extern \"C\" __global__ void OPTGEN_LAUNCH_BOUNDS");
    auto fn =
        w.block(kernel_name(p, s, stage) +
                "(const optgen::TableView table, const optgen::GroupTable groups, const optgen::StepInputs inputs)");
    switch (stage.kind) {
      case StageKind::Update:
        w.line("optgen::update_stage<variants::" + p.variant + "::Update, variants::" + p.variant + "::Group, " +
               cuda_type(s.param) + ", " + cuda_type(s.state) + ">(table, groups, inputs);");
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
