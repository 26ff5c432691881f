#include "emit_reference.h"

#include <algorithm>
#include <set>

#include "code_writer.h"
#include "element_code.h"
#include "emit_common.h"
#include "emit_matrix_programs.h"
#include "expr_printer.h"
#include "group_code.h"
#include "shapes.h"
#include "optimizer_tables.h"

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
  /// `program`: where Reduced leaves find their index (tensor code only).
  explicit CppPrinter(bool element, const Program* program = nullptr) : element_(element), program_(program) {}

 protected:
  std::string constant(const Node& c) const override {
    if (c.type == ValueType::Bool) return c.value != 0 ? "true" : "false";
    const std::string s = cpp_double_literal(c.value);
    return element_ ? "T_(" + s + ")" : s;
  }
  std::string leaf(const Node& var) const override {
    if (var.var == VarKind::Step) return "static_cast<double>(step)";
    if (var.var == VarKind::Numel) return element_ ? "T_(numel_)" : "static_cast<double>(numel_)";
    if (var.var == VarKind::Factored) return "factored_";
    if (var.var == VarKind::Rows) return element_ ? "T_(R_)" : "static_cast<double>(R_)";
    if (var.var == VarKind::Cols) return element_ ? "T_(C_)" : "static_cast<double>(C_)";
    // A state of one value per tensor, read by tensor code; a row or column state, by the code of
    // its level (element code reads either hoisted): loaded where it is used, a row or column
    // state as 0 for a tensor that has none.
    if (var.var == VarKind::State && var.level == Domain::Tensor)
      return "static_cast<double>(" + var.name + "_data_[0])";
    if (var.var == VarKind::State && var.level != Domain::Element)
      return "static_cast<double>(" + var.name + "_data_ ? " + var.name + "_data_[" +
             (var.level == Domain::Row ? "row_i_" : "col_i_") + "] : T_(0))";
    if (var.var == VarKind::Reduced && program_)
      for (size_t r = 0; r < program_->reductions.size(); ++r)
        if (program_->reductions[r].name == var.name) {
          const std::string index = std::to_string(r);
          switch (program_->reductions[r].scope) {
            case Domain::Optimizer:  // the group's slot holds the total over every group (step_groups)
            case Domain::Group: return "group_[" + index + "]";
            case Domain::Tensor: return "tensor_[" + index + "]";
            case Domain::Row: return "shaped_[" + index + "][row_i_]";
            case Domain::Column: return "shaped_[" + index + "][col_i_]";
            case Domain::Matrix: return "shaped_[" + index + "][b_]";
            case Domain::Element: break;
          }
        }
    if (var.var == VarKind::Reduced) throw InternalError("emit_reference: reduction '" + var.name + "' read here");
    return var.name;
  }
  std::string call(Builtin fn, const std::vector<std::string>& args) const override {
    std::string out = reference_function(builtin_info(fn), element_ ? "T_" : "double") + "(";
    for (size_t i = 0; i < args.size(); ++i) out += (i ? ", " : "") + args[i];
    return out + ")";
  }
  std::optional<std::string> binary_as_call(BinaryOp op, const std::string& a, const std::string& b) const override {
    if (op == BinaryOp::Mod)
      return "::optgen::reference::mod<" + std::string(element_ ? "T_" : "double") + ">(" + a + ", " + b + ")";
    if (op != BinaryOp::Pow) return std::nullopt;
    return "::std::pow(" + a + ", " + b + ")";
  }

 private:
  bool element_;
  const Program* program_;
};

class ReferenceEmitter {
 public:
  explicit ReferenceEmitter(const Spec& spec) : spec_(spec) {
    for (const auto& h : spec.hyperparameters) hyperparameters_.push_back(h.name);
    for (const auto& s : spec.states) states_.push_back(s.name);
    for (const auto& s : spec.scalar_states) scalar_states_.push_back(s.name);
  }

  std::string emit(const std::vector<Program>& variants) {
    const SpecTables tables = spec_tables(spec_, variants);
    CodeWriter w;
    write_tables(w, tables);
    derive_flags(w, tables);
    emit_matrix_programs(w, spec_, variants);
    if (per_tensor_states(variants.front())) state_present_in(w, variants.front());
    state_present(w, variants.front());
    for (const auto& v : variants) variant(w, v);
    select_variant(w, variants, tables);
    dispatch(w, variants);
    if (!spec_.programs.empty()) dispatch_programs(w, variants);
    descriptor(w, per_tensor_states(variants.front()));
    return w.str();
  }

 private:
  static const char* value_type(ValueType t) {
    return t == ValueType::Bool ? "ValueType::Bool" : t == ValueType::Int ? "ValueType::Int" : "ValueType::Float";
  }
  static const char* shape_name(StateShape shape) {
    return shape == StateShape::Rows ? "Rows" : shape == StateShape::Cols ? "Cols" : "Tensor";
  }
  static std::string init(const InitRow& i) {
    return "{" + cpp_double_literal(i.value) + ", " + std::to_string(i.hyperparameter) + (i.param ? ", true" : "") +
           "}";
  }

  static void write_tables(CodeWriter& w, const SpecTables& tables) {
    w.line("inline constexpr HyperparameterInfo kHyperparameters[] = {");
    for (const auto& h : tables.hyperparameters)
      w.line("    {\"" + h.name + "\", " + value_type(h.type) + ", " + cpp_double_literal(h.default_value) + ", " +
             (h.specialized ? "true" : "false") + ", " + (h.derived ? "true" : "false") +
             (h.per_optimizer ? ", true" : "") + "},");
    if (tables.hyperparameters.empty()) w.line("    {\"\", ValueType::Float, 0, false, false},");
    w.line("};");
    auto state_table = [&](const char* name, const std::vector<StateRow>& list) {
      w.line(std::string("inline constexpr StateInfo ") + name + "[] = {");
      for (const auto& s : list)
        w.line("    {\"" + s.name + "\", " + init(s.init) +
               (s.shape == StateShape::Elements ? std::string(s.per_optimizer ? ", StateShape::Elements" : "")
                                                : std::string(", StateShape::") + shape_name(s.shape)) +
               (s.per_optimizer ? ", true" : "") + "},");
      if (list.empty()) w.line("    {\"\", {0, -1}},");
      w.line("};");
    };
    state_table("kStates", tables.states);
    state_table("kScalarStates", tables.scalar_states);
    w.line("/// The specialized flags (hyperparameter indices), in the order of the variant bits.");
    w.line("inline constexpr int kFlags[] = {" + index_list(tables.flags) + "};");
    w.line("inline constexpr int kNumHyperparameters = " + std::to_string(tables.hyperparameters.size()) + ";");
    w.line("inline constexpr int kNumStates = " + std::to_string(tables.states.size()) + ";");
    w.line("inline constexpr int kNumScalarStates = " + std::to_string(tables.scalar_states.size()) + ";");
    w.line("inline constexpr int kNumFlags = " + std::to_string(tables.flags.size()) + ";");
    std::string programs;
    for (const auto& name : tables.programs) programs += (programs.empty() ? "" : ", ") + ("\"" + name + "\"");
    w.line("/// The spec's programs beside the step (`programs:`), in declaration order.");
    w.line("inline constexpr const char* kPrograms[] = {" + (programs.empty() ? std::string("nullptr") : programs) +
           "};");
    w.line("inline constexpr int kNumPrograms = " + std::to_string(tables.programs.size()) + ";");
    w.line();
  }

  /// "0, 2": the indices, or "-1" for an empty table (C++ has no empty arrays).
  static std::string index_list(const std::vector<int>& indices) {
    std::string list;
    for (int i : indices) list += (list.empty() ? "" : ", ") + std::to_string(i);
    return list.empty() ? "-1" : list;
  }

  void derive_flags(CodeWriter& w, const SpecTables& tables) {
    w.line("/// Computes the derived flags from the other hyperparameters.");
    auto fn = w.block("inline void derive_flags([[maybe_unused]] double* h_)");
    std::vector<Expr> roots;
    for (const auto& flag : tables.derived_flags) roots.push_back(flag.value);
    write_hyperparameter_loads(w, spec_, roots);
    CppPrinter printer(false);
    for (const auto& flag : tables.derived_flags)
      w.line("h_[" + std::to_string(flag.hyperparameter) + "] = (" + printer.print(flag.value) + ") ? 1.0 : 0.0;");
  }

  /// For a spec with states that exist for some tensors only: whether state `index` exists for a
  /// tensor that is `factored` (or not).
  void state_present_in(CodeWriter& w, const Program& p) {
    w.line();
    w.line("/// Whether state `index` exists for a tensor that is factored (two or more dimensions) or not.");
    auto fn = w.block(
        "inline bool state_present_in([[maybe_unused]] const double* h_, int index_, [[maybe_unused]] bool "
        "factored_)");
    state_condition_switch(w, p);
  }

  /// The body of state_present(_in): the hyperparameters the conditions read, then per state its
  /// `when:` condition (true without one).
  void state_condition_switch(CodeWriter& w, const Program& p) {
    std::vector<Expr> roots;
    for (const auto& [name, value] : p.state_conditions) roots.push_back(value);
    write_hyperparameter_loads(w, spec_, roots);
    CppPrinter printer(false);
    auto sw = w.block("switch (index_)");
    for (const auto& s : spec_.states) {
      auto it = p.state_conditions.find(s.name);
      w.line("case " + index_of(states_, s.name) + ": return " +
             (it == p.state_conditions.end() ? "true" : printer.print(it->second)) + ";  // " + s.name);
    }
    w.line("default: return false;");
  }

  void state_present(CodeWriter& w, const Program& p) {
    w.line();
    w.line("/// Whether state `index` exists under these hyperparameters (flags already derived).");
    auto fn = w.block("inline bool state_present([[maybe_unused]] const double* h_, int index_)");
    if (per_tensor_states(p)) {
      w.line("return state_present_in(h_, index_, true) || state_present_in(h_, index_, false);");
      return;
    }
    state_condition_switch(w, p);
  }

  void variant(CodeWriter& w, const Program& p) {
    w.line();
    w.line(variant_banner(p));
    auto ns = w.block("namespace variants::" + p.variant, "}  // namespace variants::" + p.variant);
    code(w, p);
    for (const Program& program : p.programs) {
      w.line();
      w.line("/// Program '" + program.entry + "' (the spec's `programs:`): beside the step, over its operands.");
      auto inner = w.block("namespace " + program.entry, "}  // namespace " + program.entry);
      code(w, program);
    }
  }

  /// The step's code (or a program's): its group code, then its stages.
  void code(CodeWriter& w, const Program& p) {
    w.line("inline constexpr ::std::size_t kNumGroupValues = " + std::to_string(p.values[Domain::Group].size()) + ";");
    w.line("inline constexpr ::std::size_t kNumReductions = " + std::to_string(p.reductions.size()) + ";");
    w.line(p.is_step() ? "/// The values the tensor and element code read, computed once per step and param group:"
                       : "/// The values the element code reads, computed once per run and param group:");
    for (const auto& v : p.values[Domain::Group]) w.line("///   " + v.name);
    w.line("using GroupValues = ::std::array<double, kNumGroupValues>;");
    w.line();
    per_step(w, p);
    const int stages = static_cast<int>(p.stages.size()) - 1;  // the Reduce stages
    for (int stage = 1; stage <= stages; ++stage) stage_function(w, p, stage);
    stage_function(w, p, 0);
  }

  /// Whether some variant's state exists for some tensors only (its condition reads `factored`).
  bool per_tensor_states(const Program& p) const {
    bool found = false;
    for (const auto& [name, value] : p.state_conditions)
      for_each_node(value, [&](const Expr& e) { found = found || e->var == VarKind::Factored; });
    return found;
  }

  /// Reduce stage `stage`, or the Update stage (0), of one tensor: a loop over its elements, in T_,
  /// after its tensor values, in double. With rows and columns it loops over each matrix of the
  /// tensor (a tensor that is not factored is one matrix of one row), computing per matrix its
  /// matrix values, then every column's column values (kept for the matrix), then per row its row
  /// values and the row's elements, all in double but the element code (T_), as the tensor values
  /// are. A row or column state is written by the code of its level once per row or column, after
  /// every value that reads it was computed, and is read as 0 (written nowhere) for a tensor that
  /// has none, as an element state that exists for some tensors only. A Reduce stage's results go
  /// to tensor_[r] (a group reduction's part from this tensor; `step` combines the parts) or
  /// shaped_[r] (one per row, column or matrix).
  void stage_function(CodeWriter& w, const Program& p, int stage) {
    const bool update = stage == 0;
    const bool shaped = uses_shapes(p);
    // What the stage computes, by the level of its code.
    std::map<Domain, std::vector<Expr>> roots;
    std::map<Domain, std::vector<std::string>> sinks;  // what each root becomes (a statement's text)
    std::vector<size_t> indices;
    if (update) {
      for (const auto& o : p.element_outputs)
        if (o.stage == 0) roots[o.level].push_back(o.value);
    } else {
      for (size_t r = 0; r < p.reductions.size(); ++r) {
        const auto& reduction = p.reductions[r];
        if (reduction.stage != stage) continue;
        indices.push_back(r);
        roots[reduction.scope == Domain::Matrix ? reduction.operand->level : Domain::Element].push_back(
            reduction.operand);
      }
      for (const auto& m : p.matrix_values)
        if (m.stage == stage) roots[Domain::Element].push_back(m.operand);
      for (const auto& o : p.element_outputs)  // states this stage stores (Output::stage)
        if (o.stage == stage) roots[Domain::Element].push_back(o.value);
    }
    std::vector<Expr> all;
    for (const auto& [level, list] : roots) all.insert(all.end(), list.begin(), list.end());
    auto values = shaped_values_read(p, all);
    std::vector<Expr> prologue_roots = all;
    for (const auto& [level, list] : values)
      for (const HoistedValue* v : list) prologue_roots.push_back(v->value);

    w.line();
    if (update) {
      w.line(std::string("/// The Update stage: per ") + (shaped ? "matrix, row, column and " : "") +
             "element, writes the tensor's buffers in place;");
      w.line("/// the gradient divided by `grad_scale_` as it is read.");
    } else {
      w.line("/// Reduce stage " + std::to_string(stage) + ": its reductions, in double, into tensor_[r] (a group");
      w.line(std::string("/// reduction's part from this tensor)") +
             (shaped ? " or shaped_[r] (one per row, column or matrix)" : "") +
             (p.matrix_values.empty() ? "." : "; its matrix values' operands into their buffers."));
    }
    w.line("template <typename T_>");
    auto fn = w.block(std::string("void ") + (update ? "update" : "reduce" + std::to_string(stage)) +
                      stage_parameters(!update, shaped, !p.matrix_values.empty()));
    for (size_t m = 0; m < p.matrix_values.size(); ++m)
      w.line("[[maybe_unused]] T_* const " + p.matrix_values[m].name + "_data_ = matrix_data_[" + std::to_string(m) +
             "];");
    if (shaped) {
      w.line("// A factored tensor is B_ matrices of R_ rows and C_ columns; any other one matrix of one row.");
      w.line("const bool factored_ = rows_ != 0;");
      w.line("const ::std::size_t R_ = factored_ ? rows_ : 1, C_ = factored_ ? cols_ : numel_;");
      w.line("const ::std::size_t B_ = R_ * C_ == 0 ? 0 : numel_ / (R_ * C_);");
    }
    std::set<std::string> taken;
    stage_prologue(w, p, prologue_roots, stage, taken);
    for (Domain d : {Domain::Matrix, Domain::Row, Domain::Column})
      for (const auto& v : p.values[d]) taken.insert(v.name);
    for (const char* name : {"factored_", "R_", "C_", "B_", "b_", "r_", "c_", "row_i_", "col_i_"}) taken.insert(name);

    // Accumulators: per tensor in a local, per row, column or matrix in shaped_[r].
    for (size_t r : indices) {
      const auto& reduction = p.reductions[r];
      if (result_level(reduction.scope) == Domain::Tensor) {
        w.line("double " + reduction.name + "_ = " + identity(reduction) + ";");
        continue;
      }
      const std::string count = reduction.scope == Domain::Row      ? "B_ * R_"
                                : reduction.scope == Domain::Column ? "B_ * C_"
                                                                    : "B_";
      w.line("shaped_[" + std::to_string(r) + "].assign(" + count + ", " + identity(reduction) + ");");
    }
    // What becomes of the values of each level's roots.
    auto finish = [&](Domain level, const std::vector<std::string>& texts) {
      size_t j = 0;
      if (update) {
        for (const auto& o : p.element_outputs) {
          if (o.level != level || o.stage != 0) continue;
          const std::string index = level == Domain::Row ? "row_i_" : level == Domain::Column ? "col_i_" : "i_";
          const bool maybe_absent = shaped && o.name != "param";  // a state some tensors lack
          const std::string value = shaped ? "T_(" + texts[j++] + ")" : texts[j++];
          w.line((maybe_absent ? "if (" + o.name + "_data_) " : std::string()) + o.name + "_data_[" + index +
                 "] = " + value + ";");
        }
        return;
      }
      for (size_t r : indices) {
        const auto& reduction = p.reductions[r];
        const Domain at = reduction.scope == Domain::Matrix ? reduction.operand->level : Domain::Element;
        if (at != level) continue;
        const std::string value = "static_cast<double>(" + (shaped ? "T_(" + texts[j++] + ")" : texts[j++]) + ")";
        std::string target;
        switch (reduction.scope) {
          case Domain::Tensor:
          case Domain::Group:
          case Domain::Optimizer: target = reduction.name + "_"; break;
          case Domain::Row: target = "shaped_[" + std::to_string(r) + "][row_i_]"; break;
          case Domain::Column: target = "shaped_[" + std::to_string(r) + "][col_i_]"; break;
          case Domain::Matrix: target = "shaped_[" + std::to_string(r) + "][b_]"; break;
          case Domain::Element:
            throw InternalError("emit_reference: reduction '" + reduction.name + "' into the element domain");
        }
        w.line(target + " = " + combine(reduction, target, value) + ";");
      }
      for (const auto& m : p.matrix_values) {
        if (m.stage != stage || level != Domain::Element) continue;
        w.line(m.name + "_data_[i_] = " + (shaped ? "T_(" + texts[j++] + ")" : texts[j++]) + ";  // for " + m.function);
      }
      for (const auto& o : p.element_outputs) {
        if (o.stage != stage || level != Domain::Element) continue;
        const std::string value = shaped ? "T_(" + texts[j++] + ")" : texts[j++];
        w.line((shaped ? "if (" + o.name + "_data_) " : std::string()) + o.name + "_data_[i_] = " + value +
               ";  // stored by this stage; the stages after it read it");
      }
    };
    // The values of one level: hoisted ones declared (as T_, or kept for the matrix), roots finished.
    auto level_code = [&](Domain level, const std::string& store_suffix) {
      std::vector<Expr> code = roots[level];
      const size_t own = code.size();
      for (const HoistedValue* v : values[level]) code.push_back(v->value);
      if (code.empty()) return;
      CppPrinter printer(false, &p);
      auto texts = write_level_code(w, code, level, printer, "double", taken);
      for (const auto& [node, name] : printer.names) taken.insert(name);
      for (size_t j = 0; j < values[level].size(); ++j) {
        const HoistedValue* v = values[level][j];
        const bool is_bool = v->value->type == ValueType::Bool;
        const std::string value = is_bool ? texts[own + j] : "T_(" + texts[own + j] + ")";
        if (store_suffix.empty())
          w.line(std::string("const ") + (is_bool ? "bool " : "T_ ") + v->name + " = " + value + ";");
        else
          w.line(v->name + store_suffix + " = " + value + ";");
      }
      finish(level, std::vector<std::string>(texts.begin(), texts.begin() + own));
    };

    CppPrinter element_printer(true, &p);
    if (!shaped) {
      auto loop = w.block("for (::std::size_t i_ = 0; i_ < numel_; ++i_)");
      element_loads(w, roots[Domain::Element], p);
      finish(Domain::Element,
             write_level_code(w, roots[Domain::Element], Domain::Element, element_printer, "T_", taken));
    } else {
      auto matrices = w.block("for (::std::size_t b_ = 0; b_ < B_; ++b_)");
      level_code(Domain::Matrix, "");
      // Every column's values first, kept for the rows of the matrix.
      if (!values[Domain::Column].empty() || !roots[Domain::Column].empty()) {
        for (const HoistedValue* v : values[Domain::Column])
          w.line(std::string("::std::vector<") + (v->value->type == ValueType::Bool ? "char" : "T_") + "> " + v->name +
                 "_col_(C_);");
        auto columns = w.block("for (::std::size_t c_ = 0; c_ < C_; ++c_)");
        w.line("[[maybe_unused]] const ::std::size_t col_i_ = b_ * C_ + c_;");
        level_code(Domain::Column, "_col_[c_]");
      }
      auto rows = w.block("for (::std::size_t r_ = 0; r_ < R_; ++r_)");
      w.line("[[maybe_unused]] const ::std::size_t row_i_ = b_ * R_ + r_;");
      level_code(Domain::Row, "");
      if (!roots[Domain::Element].empty()) {
        auto columns = w.block("for (::std::size_t c_ = 0; c_ < C_; ++c_)");
        w.line("[[maybe_unused]] const ::std::size_t col_i_ = b_ * C_ + c_;");
        w.line("const ::std::size_t i_ = row_i_ * C_ + c_;");
        std::set<std::string> read;
        for (const auto& r : roots[Domain::Element])
          for_each_node(r, [&](const Expr& e) {
            if (e->kind == NodeKind::Var) read.insert(e->name);
          });
        for (const HoistedValue* v : values[Domain::Column])
          if (read.count(v->name))
            w.line(std::string("const ") + (v->value->type == ValueType::Bool ? "bool " : "T_ ") + v->name + " = " +
                   v->name + "_col_[c_];");
        element_loads(w, roots[Domain::Element], p);
        auto texts = write_level_code(w, roots[Domain::Element], Domain::Element, element_printer, "T_", taken);
        finish(Domain::Element, texts);
      }
    }
    if (!roots[Domain::Tensor].empty()) {
      // The states of one value per tensor, after the element code has read their old values (as
      // tensor values): each computed before any is stored.
      CppPrinter tensor_printer(false, &p);
      auto texts = write_level_code(w, roots[Domain::Tensor], Domain::Tensor, tensor_printer, "double", taken);
      std::vector<const Output*> outputs;
      for (const auto& o : p.element_outputs)
        if (o.level == Domain::Tensor && o.stage == 0) outputs.push_back(&o);
      for (size_t j = 0; j < outputs.size(); ++j)
        w.line("const T_ " + outputs[j]->name + "_next_ = T_(" + texts[j] + ");");
      for (const Output* o : outputs) w.line(o->name + "_data_[0] = " + o->name + "_next_;");
    }
    for (size_t r : indices)
      if (result_level(p.reductions[r].scope) == Domain::Tensor)
        w.line("tensor_[" + std::to_string(r) + "] = " + p.reductions[r].name + "_;");
  }

  /// `const T_ param = param_data_[i_];` for each element input `roots` read; with rows and columns
  /// a state absent for this tensor reads as 0.
  static void element_loads(CodeWriter& w, const std::vector<Expr>& roots, const Program& p) {
    std::set<std::string> read;
    for (const auto& r : roots)
      for_each_node(r, [&](const Expr& e) {
        if (e->kind == NodeKind::Var && e->level == Domain::Element) read.insert(e->name);
      });
    if (read.count("param")) w.line("const T_ param = param_data_[i_];");
    if (read.count("grad")) w.line("const T_ grad = grad_data_[i_] / grad_scale_;");
    for (const auto& s : p.states)
      if (read.count(s))
        w.line("const T_ " + s + " = " + s + "_data_" + (uses_shapes(p) ? " ? " + s + "_data_[i_] : T_(0)" : "[i_]") +
               ";");
    for (const auto& m : p.matrix_values)
      if (read.count(m.name)) w.line("const T_ " + m.name + " = " + m.name + "_data_[i_];");
  }

  /// The parameters of the update and reduce functions; a Reduce stage writes its results; with rows
  /// and columns, the tensor's shape and its results per row, column or matrix; with matrix values,
  /// the tensor's buffer of each.
  static std::string stage_parameters(bool writes_results, bool shaped, bool matrices) {
    return std::string("(::std::size_t numel_, ") +
           (shaped ? "::std::size_t rows_, [[maybe_unused]] ::std::size_t cols_, " : "") +
           "[[maybe_unused]] T_* param_data_, [[maybe_unused]] const T_* grad_data_, [[maybe_unused]] T_* const* "
           "state_data_, [[maybe_unused]] T_ grad_scale_, [[maybe_unused]] const GroupValues& k_, [[maybe_unused]] " +
           (writes_results ? "" : "const ") + "double* tensor_, [[maybe_unused]] const double* group_" +
           (shaped ? ", [[maybe_unused]] ::std::vector<double>* shaped_" : "") +
           (matrices ? ", T_* const* matrix_data_)" : ")");
  }

  void per_step(CodeWriter& w, const Program& p) {
    w.line(p.is_step() ? "/// The group code, once per step and param group: advances the scalar state and "
                         "computes the group values."
                       : "/// The program's group code: the values its element code reads.");
    {
      auto fn = w.block(
          "inline GroupValues per_step([[maybe_unused]] const double* h_, [[maybe_unused]] double* scalar_state_, "
          "[[maybe_unused]] ::std::int64_t step)");
      CppPrinter printer(false);
      auto values = write_group_code(w, p, printer, reserved());
      std::string list;
      for (size_t i = 0; i < values.size(); ++i) {
        std::string value = values[i];
        if (p.values[Domain::Group][i].value->type == ValueType::Bool) value = "(" + value + ") ? 1.0 : 0.0";
        list += (list.empty() ? "" : ", ") + value;
      }
      w.line("return GroupValues{" + list + "};");
    }
    w.line();
    w.line("/// per_step for the generic descriptor: the group values into `out_`.");
    {
      auto fn = w.block(
          "inline void per_step_into(const double* h_, double* scalar_state_, ::std::int64_t step, double* out_)");
      w.line("const GroupValues values_ = per_step(h_, scalar_state_, step);");
      w.line("for (::std::size_t i_ = 0; i_ < kNumGroupValues; ++i_) out_[i_] = values_[i_];");
    }
    if (p.scalar_state_commits.empty()) return;
    w.line();
    w.line("/// The scalar state after step `step`, once the reductions are done: per_step's, then what");
    w.line("/// 'update' assigns from the group's results `group_`; from the scalar state `old_state_` the");
    w.line("/// step started from, into `scalar_state_`.");
    auto advance = w.block(
        "inline void advance([[maybe_unused]] const double* h_, [[maybe_unused]] const double* old_state_, "
        "[[maybe_unused]] ::std::int64_t step, [[maybe_unused]] const double* group_, double* scalar_state_)");
    CppPrinter printer(false, &p);
    write_advance_code(w, p, printer, reserved());
  }

  /// The head of Reduce stage `stage`'s function (0: the Update stage's): the group values as T_,
  /// then the tensor values `roots` read, computed in double as the kernels compute them, then the
  /// pointers of the states it reads or writes.
  void stage_prologue(CodeWriter& w, const Program& p, const std::vector<Expr>& roots, int stage,
                      std::set<std::string>& taken) {
    const auto list = tensor_values_read(p, roots);
    std::vector<Expr> all_roots = roots;
    for (const HoistedValue* v : list) all_roots.push_back(v->value);
    std::set<std::string> read;  // the group values, element inputs and states the stage reads
    for (const auto& r : all_roots)
      for_each_node(r, [&](const Expr& e) {
        if (e->kind == NodeKind::Var) read.insert(e->name);
      });
    for (size_t j = 0; j < p.values[Domain::Group].size(); ++j) {
      const auto& v = p.values[Domain::Group][j];
      if (!read.count(v.name)) continue;
      if (v.value->type == ValueType::Bool)
        w.line("const bool " + v.name + " = k_[" + std::to_string(j) + "] != 0;");
      else
        w.line("const T_ " + v.name + " = T_(k_[" + std::to_string(j) + "]);");
    }
    taken = reserved();
    for (const auto& v : p.values[Domain::Group]) taken.insert(v.name);
    for (const auto& v : p.values[Domain::Tensor]) taken.insert(v.name);
    for (const auto& r : p.reductions) taken.insert(r.name);
    for (const auto& m : p.matrix_values) taken.insert(m.name);  // read from their buffers
    for (const auto& o : p.element_outputs)
      if (o.stage == stage) read.insert(o.name);  // the outputs it writes
    for (const auto& s : p.states)
      if (read.count(s)) w.line("T_* const " + s + "_data_ = state_data_[" + index_of(states_, s) + "];");
    if (!list.empty()) {
      w.line("// Per tensor, in double from the group values as the element code has them, as the kernels do:");
      std::vector<Expr> tensor_roots;
      for (const HoistedValue* v : list) tensor_roots.push_back(v->value);
      CppPrinter tensor_printer(false, &p);
      auto values = write_level_code(w, tensor_roots, Domain::Tensor, tensor_printer, "double", taken);
      for (const auto& [node, name] : tensor_printer.names) taken.insert(name);
      for (size_t j = 0; j < values.size(); ++j) {
        const bool is_bool = list[j]->value->type == ValueType::Bool;
        w.line(std::string("const ") + (is_bool ? "bool " : "T_ ") + list[j]->name + " = " +
               (is_bool ? values[j] : "T_(" + values[j] + ")") + ";");
      }
    }
  }

  static std::string identity(const ReductionValue& r) {
    return r.op == ReduceOp::Max ? "-::std::numeric_limits<double>::infinity()" : "0.0";
  }
  static std::string combine(const ReductionValue& r, const std::string& a, const std::string& b) {
    return r.op == ReduceOp::Max ? "::optgen::reference::max<double>(" + a + ", " + b + ")" : a + " + " + b;
  }

  std::set<std::string> reserved() const {
    std::set<std::string> names = {"param", "grad", "step", "numel"};
    for (const auto& n : hyperparameters_) names.insert(n);
    for (const auto& n : states_) names.insert(n);
    for (const auto& n : scalar_states_) names.insert(n);
    return names;
  }

  void select_variant(CodeWriter& w, const std::vector<Program>& variants, const SpecTables& tables) {
    w.line();
    w.line("/// The variants, in the order of their flag bits: variant i has flag j set when bit j of i is.");
    w.line("inline constexpr VariantInfo kVariants[] = {");
    for (const auto& v : variants)
      w.line("    {\"" + v.variant + "\", " + std::to_string(v.values[Domain::Group].size()) +
             ", &variants::" + v.variant + "::per_step_into" + (reduces_over_optimizer(v) ? ", true" : "") + "},");
    w.line("};");
    w.line("inline constexpr int kNumVariants = " + std::to_string(variants.size()) + ";");
    w.line();
    w.line("/// The variant the flags of `h` (derived ones filled in) select.");
    auto fn = w.block("inline int select_variant([[maybe_unused]] const double* h_)");
    std::string select;
    for (size_t i = 0; i < tables.flags.size(); ++i)
      select += (select.empty() ? "" : " | ") + std::string("(h_[") + std::to_string(tables.flags[i]) + "] != 0 ? " +
                std::to_string(1u << i) + " : 0)";
    w.line("return " + (select.empty() ? std::string("0") : select) + ";");
  }

  void dispatch(CodeWriter& w, const std::vector<Program>& variants) {
    w.line();
    w.line("/// One step of one param group: picks the variant from the flags in `h`, then updates every tensor.");
    w.line("/// `totals_`: null, or the totals of the reductions over every group (step_groups' two passes).");
    w.line("template <typename T_>");
    auto fn = w.block(
        "void step(const double* h_, double* scalar_state_, ::std::int64_t step, const Tensor<T_>* tensors_, "
        "::std::size_t count_, T_ grad_scale_, [[maybe_unused]] OptimizerTotals* totals_)");
    auto sw = w.block("switch (select_variant(h_))");
    for (size_t i = 0; i < variants.size(); ++i) {
      const auto& v = variants[i];
      auto branch = w.block("case " + std::to_string(i) + ":");
      const std::string ns = "variants::" + v.variant + "::";
      const std::string stride = std::to_string(std::max<size_t>(v.reductions.size(), 1));
      const bool shaped = uses_shapes(v);
      const std::string matrices = std::to_string(v.matrix_values.size());
      const std::string matrix_argument = v.matrix_values.empty() ? "" : ", matrix_data_.data() + t_ * " + matrices;
      // A spec of blocks views each tensor as its blocks, whatever shape the caller gives.
      const std::string B = std::to_string(spec_.block_elements);
      const std::string rows_cols = spec_.block_elements
                                        ? "::optgen::reference::block_rows(tensors_[t_].numel, " + B + "), " + B
                                        : "tensors_[t_].rows, tensors_[t_].cols";
      const std::string arguments =
          shaped ? "<T_>(tensors_[t_].numel, " + rows_cols +
                       ", tensors_[t_].param, "
                       "tensors_[t_].grad, tensors_[t_].states, grad_scale_, k_, tensor_.data() + t_ * " +
                       stride + ", group_.data(), shaped_.data() + t_ * " + stride + matrix_argument + ");"
                 : "<T_>(tensors_[t_].numel, tensors_[t_].param, tensors_[t_].grad, tensors_[t_].states, grad_scale_, "
                   "k_, tensor_.data() + t_ * " +
                       stride + ", group_.data()" + matrix_argument + ");";
      const bool commits = !v.scalar_state_commits.empty();
      const bool over_optimizer = reduces_over_optimizer(v);
      if (over_optimizer) {
        w.line("// Adding this group's parts to the totals changes nothing: per_step runs on a copy.");
        w.line("::std::vector<double> copy_;");
        w.line("if (totals_ && totals_->adding) {");
        w.line("  copy_.assign(scalar_state_, scalar_state_ + kNumScalarStates);");
        w.line("  scalar_state_ = copy_.data();");
        w.line("}");
      }
      if (commits) w.line("const ::std::vector<double> old_state_(scalar_state_, scalar_state_ + kNumScalarStates);");
      w.line("const auto k_ = " + ns + "per_step(h_, scalar_state_, step);");
      w.line("// The results of the reductions: [tensor * " + stride + " + r] and [r].");
      w.line("::std::vector<double> tensor_(count_ * " + stride + "), group_(" + stride + ");");
      if (shaped) {
        w.line("// Per tensor and reduction, one result per row, column or matrix: [tensor * " + stride + " + r].");
        w.line("::std::vector<::std::vector<double>> shaped_(count_ * " + stride + ");");
      }
      if (!v.matrix_values.empty()) {
        w.line("// Per tensor, a buffer for each matrix value: [tensor * " + matrices + " + m].");
        w.line("::std::vector<::std::vector<T_>> matrices_(count_ * " + matrices + ");");
        w.line("::std::vector<T_*> matrix_data_(count_ * " + matrices + ");");
        w.line("for (::std::size_t m_ = 0; m_ < matrices_.size(); ++m_) {");
        w.line("  matrices_[m_].resize(tensors_[m_ / " + matrices + "].numel);");
        w.line("  matrix_data_[m_] = matrices_[m_].data();");
        w.line("}");
      }
      const int stages = static_cast<int>(v.stages.size()) - 1;
      for (int stage = 1; stage <= stages; ++stage) {
        w.line("for (::std::size_t t_ = 0; t_ < count_; ++t_) " + ns + "reduce" + std::to_string(stage) + arguments);
        for (size_t m = 0; m < v.matrix_values.size(); ++m) {
          const MatrixValue& value = v.matrix_values[m];
          if (value.stage != stage) continue;
          std::string args;
          for (const Expr& a : value.args)
            args += (args.empty() ? "" : ", ") +
                    (a->is_const() ? cpp_double_literal(a->value) : "h_[" + index_of(hyperparameters_, a->name) + "]");
          w.line("// " + value.name + ": " + value.function +
                 " of each matrix of each tensor (a tensor of fewer than two dimensions: one row).");
          w.line("for (::std::size_t t_ = 0; t_ < count_; ++t_) {");
          w.line("  const ::std::size_t R_ = tensors_[t_].rows ? tensors_[t_].rows : 1;");
          w.line("  const ::std::size_t C_ = tensors_[t_].rows ? tensors_[t_].cols : tensors_[t_].numel;");
          w.line("  if (R_ * C_ == 0) continue;");
          w.line("  const double arguments_[] = {" + (args.empty() ? std::string("0") : args) + "};");
          w.line("  ::optgen::reference::run_matrix_program<T_>(matrix_programs::" + value.function +
                 "::kProgram, arguments_, matrix_data_[t_ * " + matrices + " + " + std::to_string(m) +
                 "], tensors_[t_].numel / (R_ * C_), R_, C_);");
          w.line("}");
        }
        for (size_t r = 0; r < v.reductions.size(); ++r) {
          const auto& reduction = v.reductions[r];
          if (reduction.stage != stage || !has_group_results(reduction.scope)) continue;
          const std::string at = "group_[" + std::to_string(r) + "]";
          w.line(at + " = " + identity(reduction) + ";  // " + reduction.name + ", over the group's tensors in order");
          w.line("for (::std::size_t t_ = 0; t_ < count_; ++t_) " + at + " = " +
                 combine(reduction, at, "tensor_[t_ * " + stride + " + " + std::to_string(r) + "]") + ";");
          if (reduction.scope == Domain::Optimizer)
            w.line("if (totals_) " + at + " = totals_->take(" + std::to_string(i) + ", " + std::to_string(r) + ", " +
                   (reduction.op == ReduceOp::Max ? "true" : "false") + ", " + at + ");  // over every group");
        }
      }
      if (over_optimizer) w.line("if (totals_ && totals_->adding) return;");
      if (commits) w.line(ns + "advance(h_, old_state_.data(), step, group_.data(), scalar_state_);");
      w.line("for (::std::size_t t_ = 0; t_ < count_; ++t_) " + ns + "update" + arguments);
      w.line("return;");
    }
  }

  /// The spec's programs: `run` picks the variant, then runs program `program_` over every tensor.
  void dispatch_programs(CodeWriter& w, const std::vector<Program>& variants) {
    w.line();
    w.line("/// Program number `program_` (kPrograms) of one param group that has taken `steps` steps: picks");
    w.line("/// the variant from the flags in `h`, then updates every tensor; the scalar state is only read.");
    w.line("template <typename T_>");
    auto fn = w.block(
        "void run(int program_, const double* h_, const double* scalar_state_, ::std::int64_t steps, const "
        "Tensor<T_>* tensors_, ::std::size_t count_)");
    w.line("// The group code of a program is a step's: it reads a copy of the scalar state, and the next");
    w.line("// step's count (a state with `init: param` reads as the parameter before the first step).");
    w.line("::std::vector<double> state_(scalar_state_, scalar_state_ + kNumScalarStates);");
    w.line("::std::vector<double> tensor_(1), group_(1);  // no reductions");
    auto sw = w.block("switch (select_variant(h_) * " + std::to_string(spec_.programs.size()) + " + program_)");
    for (size_t i = 0; i < variants.size(); ++i)
      for (size_t j = 0; j < variants[i].programs.size(); ++j) {
        const std::string ns = "variants::" + variants[i].variant + "::" + variants[i].programs[j].entry + "::";
        auto branch = w.block("case " + std::to_string(i * spec_.programs.size() + j) + ":");
        w.line("const auto k_ = " + ns + "per_step(h_, state_.data(), steps + 1);");
        w.line("for (::std::size_t t_ = 0; t_ < count_; ++t_) " + ns +
               "update<T_>(tensors_[t_].numel, tensors_[t_].param, tensors_[t_].grad, tensors_[t_].states, T_(1), k_, "
               "tensor_.data(), group_.data());");
        w.line("return;");
      }
  }

  void descriptor(CodeWriter& w, bool per_tensor) {
    w.line();
    w.line("/// The descriptor generic code drives this reference through.");
    auto fn = w.block("inline const Optimizer& optimizer()");
    w.line("static const Optimizer instance = {\"" + spec_.optimizer +
           "\", kHyperparameters, kNumHyperparameters, kStates, kNumStates, kScalarStates, kNumScalarStates,");
    w.line(
        "                                   &derive_flags, &state_present, &select_variant, kVariants, kNumVariants,");
    const bool programs = !spec_.programs.empty();
    w.line(std::string("                                   &step<float>, &step<double>") +
           (per_tensor ? ", &state_present_in"
            : programs ? ", nullptr"
                       : "") +
           (programs ? ", kPrograms, kNumPrograms, &run<float>, &run<double>};" : "};"));
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
                                            {"generator", generator_banner()},
                                            {"optimizer", spec.optimizer},
                                            {"summary", comment_text(spec.summary)},
                                            {"name", spec.name},
                                            {"body", body}});
}

}  // namespace optgen
