#include "emit_cuda.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "code_writer.h"
#include "element_code.h"
#include "emit_common.h"
#include "expr_printer.h"

namespace optgen {

std::string KernelTuning::check() const {
  auto power_of_two = [](long long v) { return v > 0 && (v & (v - 1)) == 0; };
  if (!power_of_two(block_size) || block_size < 32 || block_size > 1024)
    return "block size " + std::to_string(block_size) + " must be a power of two from 32 to 1024";
  if (!power_of_two(elements_per_thread) || elements_per_thread > 64)
    return "elements per thread " + std::to_string(elements_per_thread) + " must be a power of two up to 64";
  if (inline_groups < 1 || inline_groups > 64)
    return "inline groups " + std::to_string(inline_groups) + " must be from 1 to 64";
  if (chunk_size < 64 || chunk_size % 64 != 0 || chunk_size > (1LL << 30))
    return "chunk size " + std::to_string(chunk_size) + " must be a multiple of 64 up to 2^30";
  return "";
}

std::string kernel_name(const Program& variant, const Storage& storage) { return variant.variant + "_" + storage.name(); }

std::vector<StepScalarField> step_scalar_fields(const Program& variant) {
  std::vector<StepScalarField> fields;
  for (bool bools : {false, true})
    for (size_t i = 0; i < variant.step_scalars.size(); ++i) {
      const auto& s = variant.step_scalars[i];
      if ((s.value->type == ValueType::Bool) == bools) fields.push_back({s.name, bools, static_cast<int>(i)});
    }
  return fields;
}

int step_scalars_size(const Program& variant) {
  int floats = 0, bools = 0;
  for (const auto& f : step_scalar_fields(variant)) (f.is_bool ? bools : floats) += 1;
  if (floats + bools == 0) return 4;  // the placeholder field
  int size = 4 * floats + bools;
  return floats > 0 ? (size + 3) / 4 * 4 : size;
}

namespace {

/// CUDA spelling of element expressions: float math, step scalars and operands as locals.
class CudaPrinter : public ExprPrinter {
 protected:
  std::string constant(const Node& c) const override {
    if (c.type == ValueType::Bool) return c.value != 0 ? "true" : "false";
    if (std::isinf(c.value)) return c.value > 0 ? "__int_as_float(0x7f800000)" : "__int_as_float(0xff800000)";
    std::string s = format_number(c.value);
    if (s.find_first_of(".en") == std::string::npos) s += ".0";
    return s + "f";
  }
  std::string leaf(const Node& var) const override {
    if (var.var != VarKind::StepScalar && !var.per_element)
      throw InternalError("emit_cuda: element code reads '" + var.name + "', which was not hoisted");
    return var.name;
  }
  std::string call(Builtin fn, const std::vector<std::string>& args) const override {
    std::string name;
    switch (fn) {
      case Builtin::Sqrt: name = "sqrtf"; break;
      case Builtin::Rsqrt: name = "rsqrtf"; break;
      case Builtin::Exp: name = "expf"; break;
      case Builtin::Log: name = "logf"; break;
      case Builtin::Abs: name = "fabsf"; break;
      default: name = std::string("optgen::") + spelling(fn);
    }
    std::string out = name + "(";
    for (size_t i = 0; i < args.size(); ++i) out += (i ? ", " : "") + args[i];
    return out + ")";
  }
  std::optional<std::string> binary_as_call(BinaryOp op, const std::string& a, const std::string& b) const override {
    if (op != BinaryOp::Pow) return std::nullopt;
    return "powf(" + a + ", " + b + ")";
  }
};

class CudaEmitter {
 public:
  CudaEmitter(const Spec& spec, const KernelTuning& tuning) : spec_(spec), tuning_(tuning) {}

  std::string emit(const std::vector<Program>& variants, const std::vector<Storage>& storage) {
    CodeWriter w;
    w.line("// Tuning: parameters of the emitted code (optgen emit --block-size, --elements-per-thread,");
    w.line("// --inline-groups); the launcher launches with the same values.");
    w.line("#define OPTGEN_BLOCK_SIZE " + std::to_string(tuning_.block_size) + "  // threads per block");
    w.line("#define OPTGEN_ELEMENTS_PER_THREAD " + std::to_string(tuning_.elements_per_thread) +
           "  // elements in flight per thread and iteration");
    w.line("#define OPTGEN_INLINE_GROUPS " + std::to_string(tuning_.inline_groups) +
           "  // groups whose step scalars travel in the kernel arguments");
    w.line();
    std::string support = render_template("kernel_support.cuh.in", {});
    for (size_t start = 0; start < support.size();) {
      size_t end = support.find('\n', start);
      if (end == std::string::npos) end = support.size();
      w.line(support.substr(start, end - start));
      start = end + 1;
    }
    for (const auto& v : variants) variant(w, v);
    for (const auto& v : variants)
      for (const auto& s : storage) kernel(w, v, s);
    return w.str();
  }

 private:
  void variant(CodeWriter& w, const Program& p) {
    w.line(variant_banner(p));
    auto ns = w.block("namespace " + p.variant, "}  // namespace " + p.variant);
    w.line();
    w.line("/// Computed once per step and param group, on the host, by the launcher.");
    {
      auto s = w.block("struct StepScalars", "};");
      auto fields = step_scalar_fields(p);
      ExprPrinter ir;  // the IR's notation, for the comments
      for (const auto& f : fields)
        w.line(std::string(f.is_bool ? "bool " : "float ") + f.name + ";  // " + ir.print(p.step_scalars[f.index].value));
      if (fields.empty()) w.line("float unused;  // this variant reads no per-group value");
    }
    w.line("static_assert(sizeof(StepScalars) == " + std::to_string(step_scalars_size(p)) +
           ", \"the launcher's StepScalars has this layout\");");
    w.line();
    std::string operands = "param, grad";
    for (const auto& s : p.states) operands += ", " + s;
    auto st = w.block("struct Update", "};");
    w.line("typedef StepScalars Scalars;");
    w.line("static constexpr int kOperands = " + std::to_string(2 + p.states.size()) + ";  // " + operands);
    w.line();
    auto fn = w.block("static __device__ __forceinline__ void apply(const StepScalars& k, float (&v)[kOperands])");
    std::set<std::string> taken = {"k", "v", "param", "grad", "optgen"};
    for (const auto& s : p.states) taken.insert(s);
    for (const auto& f : step_scalar_fields(p)) {
      w.line(std::string(f.is_bool ? "const bool " : "const float ") + f.name + " = k." + f.name + ";");
      taken.insert(f.name);
    }
    std::vector<std::string> operand_names = {"param", "grad"};
    operand_names.insert(operand_names.end(), p.states.begin(), p.states.end());
    auto read = element_inputs_read(p);
    for (size_t i = 0; i < operand_names.size(); ++i)
      if (std::find(read.begin(), read.end(), operand_names[i]) != read.end())
        w.line("const float " + operand_names[i] + " = v[" + std::to_string(i) + "];");
    CudaPrinter printer;
    auto values = write_element_temporaries(w, p, printer, "float", taken);
    for (size_t j = 0; j < values.size(); ++j) {
      const std::string& out = p.element_outputs[j].name;
      size_t index = std::find(operand_names.begin(), operand_names.end(), out) - operand_names.begin();
      if (index == operand_names.size()) throw InternalError("emit_cuda: output '" + out + "' is not an operand");
      w.line("v[" + std::to_string(index) + "] = " + values[j] + ";  // " + out);
    }
  }

  void kernel(CodeWriter& w, const Program& p, const Storage& s) {
    w.line();
    w.line("/// " + p.variant + ": params and grads in " + to_string(s.param) + ", states in " + to_string(s.state) + ".");
    w.line("extern \"C\" __global__ void __launch_bounds__(OPTGEN_BLOCK_SIZE)");
    auto fn = w.block(kernel_name(p, s) + "(const optgen::TableView table, const __grid_constant__ optgen::StepArgs<" +
                      p.variant + "::StepScalars> args)");
    w.line("optgen::update_chunk<" + p.variant + "::Update, " + cuda_type(s.param) + ", " + cuda_type(s.state) +
           ">(table, args);");
  }

  const Spec& spec_;
  KernelTuning tuning_;
};

}  // namespace

std::string emit_cuda(const Spec& spec, const std::vector<Program>& variants, const std::vector<Storage>& storage,
                      const KernelTuning& tuning) {
  if (variants.empty() || storage.empty()) throw InternalError("emit_cuda: no variants or no storage types");
  std::string kernels;
  for (const auto& v : variants)
    for (const auto& s : storage) kernels += "//   " + kernel_name(v, s) + "\n";
  std::string body = CudaEmitter(spec, tuning).emit(variants, storage);
  return render_template("kernels.cu.in", {{"spec_file", spec_file_name(spec)},
                                           {"optimizer", spec.optimizer},
                                           {"summary", spec.summary},
                                           {"kernels", kernels},
                                           {"body", body}});
}

}  // namespace optgen
