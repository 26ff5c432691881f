#include "emit_reference.h"

#include <algorithm>
#include <set>

#include "code_writer.h"
#include "element_code.h"
#include "emit_common.h"
#include "expr_printer.h"

namespace optgen {
namespace {

std::string index_of(const std::vector<std::string>& names, const std::string& name) {
  auto it = std::find(names.begin(), names.end(), name);
  if (it == names.end()) throw InternalError("emit_reference: unknown name '" + name + "'");
  return std::to_string(it - names.begin());
}

/// C++ spelling shared by host (double) and element (T) code.
class CppPrinter : public ExprPrinter {
 public:
  explicit CppPrinter(bool element) : element_(element) {}

 protected:
  std::string constant(const Node& c) const override {
    if (c.type == ValueType::Bool) return c.value != 0 ? "true" : "false";
    std::string s = format_number(c.value);
    if (s.find_first_of(".en") == std::string::npos) s += ".0";
    return element_ ? "T(" + s + ")" : s;
  }
  std::string leaf(const Node& var) const override {
    if (var.var == VarKind::Step) return "static_cast<double>(step)";
    return var.name;
  }
  std::string call(Builtin fn, const std::vector<std::string>& args) const override {
    std::string name;
    switch (fn) {
      case Builtin::Sqrt: name = "std::sqrt"; break;
      case Builtin::Exp: name = "std::exp"; break;
      case Builtin::Log: name = "std::log"; break;
      case Builtin::Abs: name = "std::fabs"; break;
      default: name = std::string("optgen::reference::") + spelling(fn) + (element_ ? "<T>" : "<double>");
    }
    std::string out = name + "(";
    for (size_t i = 0; i < args.size(); ++i) out += (i ? ", " : "") + args[i];
    return out + ")";
  }
  std::optional<std::string> binary_as_call(BinaryOp op, const std::string& a, const std::string& b) const override {
    if (op != BinaryOp::Pow) return std::nullopt;
    return "std::pow(" + a + ", " + b + ")";
  }

 private:
  bool element_;
};

class ReferenceEmitter {
 public:
  explicit ReferenceEmitter(const Spec& spec) : spec_(spec) {
    for (const auto& h : spec.hyperparameters) hyperparameters_.push_back(h.name);
    for (const auto& s : spec.states) states_.push_back(s.name);
    for (const auto& s : spec.scalar_states) scalar_states_.push_back(s.name);
  }

  std::string emit(const std::vector<Program>& variants) {
    CodeWriter w;
    tables(w);
    derive_flags(w, variants.front());
    state_present(w, variants.front());
    for (const auto& v : variants) variant(w, v);
    dispatch(w, variants);
    descriptor(w);
    return w.str();
  }

 private:
  static const char* value_type(ValueType t) {
    return t == ValueType::Bool ? "ValueType::Bool" : t == ValueType::Int ? "ValueType::Int" : "ValueType::Float";
  }
  std::string init(const Init& i) const {
    if (i.hyperparameter.empty()) return "{" + format_number(i.value) + ", -1}";
    return "{0, " + index_of(hyperparameters_, i.hyperparameter) + "}";
  }

  void tables(CodeWriter& w) {
    w.line("inline constexpr HyperparameterInfo kHyperparameters[] = {");
    for (const auto& h : spec_.hyperparameters)
      w.line("    {\"" + h.name + "\", " + value_type(h.type) + ", " + format_number(h.default_value) + ", " +
             (h.specialize ? "true" : "false") + ", " + (h.derived ? "true" : "false") + "},");
    if (spec_.hyperparameters.empty()) w.line("    {\"\", ValueType::Float, 0, false, false},");
    w.line("};");
    auto state_table = [&](const char* name, const auto& list) {
      w.line(std::string("inline constexpr StateInfo ") + name + "[] = {");
      for (const auto& s : list) w.line("    {\"" + s.name + "\", " + init(s.init) + "},");
      if (list.empty()) w.line("    {\"\", {0, -1}},");
      w.line("};");
    };
    state_table("kStates", spec_.states);
    state_table("kScalarStates", spec_.scalar_states);
    w.line("inline constexpr int kNumHyperparameters = " + std::to_string(spec_.hyperparameters.size()) + ";");
    w.line("inline constexpr int kNumStates = " + std::to_string(spec_.states.size()) + ";");
    w.line("inline constexpr int kNumScalarStates = " + std::to_string(spec_.scalar_states.size()) + ";");
    w.line();
  }

  /// `const double lr = h[0];` for each hyperparameter the expressions read (and, with
  /// `with_scalar_state`, the old value of each scalar state they read).
  void load_hyperparameters(CodeWriter& w, const std::vector<Expr>& roots, bool with_scalar_state) {
    std::set<std::string> used_h, used_s;
    for (const auto& r : roots)
      for_each_node(r, [&](const Expr& e) {
        if (e->kind != NodeKind::Var) return;
        if (e->var == VarKind::Hyperparameter) used_h.insert(e->name);
        if (e->var == VarKind::ScalarState) used_s.insert(e->name);
      });
    for (const auto& h : spec_.hyperparameters) {
      if (!used_h.count(h.name)) continue;
      std::string index = index_of(hyperparameters_, h.name);
      if (h.type == ValueType::Bool) w.line("const bool " + h.name + " = h[" + index + "] != 0;");
      else w.line("const double " + h.name + " = h[" + index + "];");
    }
    if (with_scalar_state)
      for (const auto& s : spec_.scalar_states)
        if (used_s.count(s.name)) w.line("const double " + s.name + " = scalar_state[" + index_of(scalar_states_, s.name) + "];");
  }

  void derive_flags(CodeWriter& w, const Program& p) {
    w.line("/// Computes the derived flags from the other hyperparameters.");
    auto fn = w.block("inline void derive_flags([[maybe_unused]] double* h)");
    std::vector<Expr> roots;
    for (const auto& [name, value] : p.derived_flags) roots.push_back(value);
    load_hyperparameters(w, roots, false);
    CppPrinter printer(false);
    for (const auto& [name, value] : p.derived_flags)
      w.line("h[" + index_of(hyperparameters_, name) + "] = (" + printer.print(value) + ") ? 1.0 : 0.0;");
  }

  void state_present(CodeWriter& w, const Program& p) {
    w.line();
    w.line("/// Whether state `index` exists under these hyperparameters (flags already derived).");
    auto fn = w.block("inline bool state_present([[maybe_unused]] const double* h, int index)");
    std::vector<Expr> roots;
    for (const auto& [name, value] : p.state_conditions) roots.push_back(value);
    load_hyperparameters(w, roots, false);
    CppPrinter printer(false);
    {
      auto sw = w.block("switch (index)");
      for (const auto& s : spec_.states) {
        auto it = p.state_conditions.find(s.name);
        w.line("case " + index_of(states_, s.name) + ": return " + (it == p.state_conditions.end() ? "true" : printer.print(it->second)) +
               ";  // " + s.name);
      }
      w.line("default: return false;");
    }
  }

  void variant(CodeWriter& w, const Program& p) {
    w.line();
    w.line(variant_banner(p));
    auto ns = w.block("namespace variants::" + p.variant, "}  // namespace variants::" + p.variant);
    w.line("inline constexpr std::size_t kNumStepScalars = " + std::to_string(p.step_scalars.size()) + ";");
    w.line("using StepScalars = std::array<double, kNumStepScalars>;");
    w.line();
    per_step(w, p);
    w.line();
    update(w, p);
  }

  void per_step(CodeWriter& w, const Program& p) {
    w.line("/// Once per step and param group: advances the scalar state and computes the step scalars.");
    auto fn = w.block(
        "inline StepScalars per_step([[maybe_unused]] const double* h, [[maybe_unused]] double* scalar_state, "
        "[[maybe_unused]] std::int64_t step)");
    std::vector<Expr> roots;
    for (const auto& o : p.scalar_state_updates) roots.push_back(o.value);
    for (const auto& s : p.step_scalars) roots.push_back(s.value);
    load_hyperparameters(w, roots, true);
    CppPrinter printer(false);
    std::set<std::string> taken = reserved();
    auto temporaries = schedule_temporaries(roots, true, [](const Expr&) { return true; });
    name_temporaries(temporaries, "t", taken, printer);
    SourceComments comments;
    for (const auto& t : temporaries) {
      comments.before(w, t);
      w.line(std::string("const ") + (t->type == ValueType::Bool ? "bool " : "double ") + printer.names.at(t.get()) + " = " +
             printer.print_body(t) + ";");
    }
    for (const auto& o : p.scalar_state_updates)
      w.line("scalar_state[" + index_of(scalar_states_, o.name) + "] = " + printer.print(o.value) + ";  // " + o.name);
    std::string list;
    for (const auto& s : p.step_scalars) {
      std::string value = printer.print(s.value);
      if (s.value->type == ValueType::Bool) value = "(" + value + ") ? 1.0 : 0.0";
      list += (list.empty() ? "" : ", ") + value;
    }
    w.line("return StepScalars{" + list + "};");
  }

  void update(CodeWriter& w, const Program& p) {
    w.line("/// Per element, in T; reads the step scalars and the tensor's buffers, writes them in place.");
    w.line("template <typename T>");
    auto fn = w.block(
        "void update([[maybe_unused]] const StepScalars& k, std::size_t numel, T* param_data, [[maybe_unused]] const T* grad_data, "
        "[[maybe_unused]] T* const* state_data)");
    for (size_t j = 0; j < p.step_scalars.size(); ++j) {
      const auto& s = p.step_scalars[j];
      if (s.value->type == ValueType::Bool) w.line("const bool " + s.name + " = k[" + std::to_string(j) + "] != 0;");
      else w.line("const T " + s.name + " = T(k[" + std::to_string(j) + "]);");
    }
    for (const auto& s : p.states)
      w.line("T* const " + s + "_data = state_data[" + index_of(states_, s) + "];");
    auto loop = w.block("for (std::size_t i = 0; i < numel; ++i)");
    for (const auto& input : element_inputs_read(p))
      w.line("const T " + input + " = " + input + "_data[i];");
    CppPrinter printer(true);
    std::set<std::string> taken = reserved();
    for (const auto& s : p.step_scalars) taken.insert(s.name);
    auto values = write_element_temporaries(w, p, printer, "T", taken);
    for (size_t j = 0; j < values.size(); ++j) w.line(p.element_outputs[j].name + "_data[i] = " + values[j] + ";");
  }

  std::set<std::string> reserved() const {
    std::set<std::string> names = {"param", "grad", "step", "h", "k", "i", "numel", "scalar_state", "state_data", "T"};
    for (const auto& n : hyperparameters_) names.insert(n);
    for (const auto& n : states_) names.insert(n);
    for (const auto& n : scalar_states_) names.insert(n);
    return names;
  }

  void dispatch(CodeWriter& w, const std::vector<Program>& variants) {
    w.line();
    w.line("/// One step of one param group: picks the variant from the flags in `h`, then updates every tensor.");
    w.line("template <typename T>");
    auto fn = w.block("void step(const double* h, double* scalar_state, std::int64_t step, const Tensor<T>* tensors, std::size_t count)");
    for (const auto* flag : spec_.flags())
      w.line("const bool " + flag->name + " = h[" + index_of(hyperparameters_, flag->name) + "] != 0;");
    for (const auto& v : variants) {
      std::string condition;
      for (const auto& [flag, value] : v.flags) condition += (condition.empty() ? "" : " && ") + std::string(value ? "" : "!") + flag;
      auto branch = w.block(condition.empty() ? "" : "if (" + condition + ")");
      w.line("const auto k = variants::" + v.variant + "::per_step(h, scalar_state, step);");
      w.line("for (std::size_t t = 0; t < count; ++t)");
      w.line("  variants::" + v.variant + "::update<T>(k, tensors[t].numel, tensors[t].param, tensors[t].grad, tensors[t].states);");
      w.line("return;");
    }
  }

  void descriptor(CodeWriter& w) {
    w.line();
    w.line("/// The descriptor generic code drives this reference through.");
    auto fn = w.block("inline const Optimizer& optimizer()");
    w.line("static const Optimizer instance = {\"" + spec_.optimizer +
           "\", kHyperparameters, kNumHyperparameters, kStates, kNumStates, kScalarStates, kNumScalarStates,");
    w.line("                                   &derive_flags, &state_present, &step<float>, &step<double>};");
    w.line("return instance;");
  }

  const Spec& spec_;
  std::vector<std::string> hyperparameters_, states_, scalar_states_;
};

}  // namespace

std::string emit_reference(const Spec& spec, const std::vector<Program>& variants) {
  if (variants.empty()) throw InternalError("emit_reference: no variants");
  std::string body = ReferenceEmitter(spec).emit(variants);
  return render_template("reference.h.in", {{"spec_file", spec_file_name(spec)},
                                            {"optimizer", spec.optimizer},
                                            {"summary", spec.summary},
                                            {"name", spec.name},
                                            {"body", body}});
}

}  // namespace optgen
