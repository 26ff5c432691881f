#include "ir_printer.h"

#include <sstream>

#include "expr_printer.h"
#include "shapes.h"

namespace optgen {
namespace {

/// The sigil of a hoisted value of `level`.
std::string sigil(Domain level) {
  switch (level) {
    case Domain::Optimizer:
    case Domain::Group: return "$";
    case Domain::Tensor: return "@";
    case Domain::Matrix: return "@matrix.";
    case Domain::Row: return "@row.";
    case Domain::Column: return "@col.";
    case Domain::Element: break;
  }
  return "?";
}

/// Leaves print as their names; hoisted values get a sigil for their level so a reader can tell
/// the levels apart: `$bias_correction1` is a group value, `@rms` a tensor value, `@row.v` a row
/// value (`@matrix.`, `@col.` likewise), `%sum_g` the result of a reduction, `&o` a matrix value's. A row or column
/// state prints as `row_var[row]`, `col_var[col]`.
class DumpPrinter : public ExprPrinter {
 protected:
  std::string leaf(const Node& var) const override {
    if (var.var == VarKind::Reduced) return "%" + var.name;
    if (var.var == VarKind::MatrixValue) return "&" + var.name;
    if (var.var == VarKind::State && var.level == Domain::Row) return var.name + "[row]";
    if (var.var == VarKind::State && var.level == Domain::Column) return var.name + "[col]";
    if (var.var != VarKind::Hoisted) return var.name;
    return sigil(var.level) + var.name;
  }
};

}  // namespace

std::string dump(const Program& program) {
  std::ostringstream out;
  out << "program " << program.variant;
  if (!program.flags.empty()) {
    out << " (";
    bool first = true;
    for (const auto& [flag, value] : program.flags) {
      out << (first ? "" : ", ") << flag << "=" << (value ? "true" : "false");
      first = false;
    }
    out << ")";
  }
  out << "\n";

  DumpPrinter printer;
  std::set<std::string> taken = {"param", "grad", "step"};
  for (const auto& s : program.states) taken.insert(s);
  std::vector<Expr> roots;
  for (const auto& [name, value] : program.derived_flags) roots.push_back(value);
  for (const auto& o : program.scalar_state_updates) roots.push_back(o.value);
  for (const auto& o : program.scalar_state_commits) roots.push_back(o.value);
  for (const auto& list : program.values)
    for (const auto& v : list) roots.push_back(v.value);
  for (const auto& r : program.reductions) roots.push_back(r.operand);
  for (const auto& m : program.matrix_values) roots.push_back(m.operand);
  for (const auto& o : program.element_outputs) roots.push_back(o.value);
  auto temporaries = schedule_temporaries(roots, true, [](const Expr&) { return true; });
  name_temporaries(temporaries, "t", taken, printer);

  // Each temporary is printed just before the first section that needs it.
  std::set<const Node*> printed;
  auto lets_for = [&](const Expr& root, const std::string& indent) {
    std::vector<Expr> needed;
    for_each_node(root, [&](const Expr& e) {
      if (printer.names.count(e.get()) && !printed.count(e.get())) needed.push_back(e);
    });
    for (const auto& e : needed) {
      printed.insert(e.get());
      out << indent << "let " << printer.names.at(e.get()) << " = " << printer.print_body(e) << "\n";
    }
  };
  auto assignment = [&](const std::string& name, const Expr& value, const char* arrow) {
    lets_for(value, "  ");
    out << "  " << name << " " << arrow << " "
        << (printed.count(value.get()) ? printer.names.at(value.get()) : printer.print_body(value)) << "\n";
  };

  if (!program.derived_flags.empty()) {
    out << "derived:\n";
    for (const auto& [name, value] : program.derived_flags) assignment(name, value, "=");
  }
  if (!program.scalar_state_updates.empty()) {
    out << "scalar_state:\n";
    for (const auto& o : program.scalar_state_updates) assignment(o.name, o.value, "<-");
  }
  if (!program.values[Domain::Group].empty()) {
    out << "group:\n";
    for (const auto& v : program.values[Domain::Group]) assignment("$" + v.name, v.value, "=");
  }
  if (!program.reductions.empty()) {
    out << "reduce:\n";
    for (const auto& r : program.reductions) {
      std::string arrow = std::string("= ") + to_string(r.op) + " over each " + to_string(r.scope) + " of";
      if (!program.stages.empty()) arrow = "= (stage " + std::to_string(r.stage) + ") " + arrow.substr(2);
      assignment("%" + r.name, r.operand, arrow.c_str());
    }
  }
  if (!program.matrix_values.empty()) {
    out << "matrices:\n";
    for (const auto& m : program.matrix_values) {
      std::string arrow = "= " + m.function + "(";
      for (size_t i = 0; i < m.args.size(); ++i) arrow += (i ? ", " : "") + printer.print_body(m.args[i]);
      arrow += ") of each matrix of";
      if (!program.stages.empty()) arrow = "= (stage " + std::to_string(m.stage) + ") " + arrow.substr(2);
      assignment("&" + m.name, m.operand, arrow.c_str());
    }
  }
  auto values = [&](const char* section, const std::vector<HoistedValue>& list, Domain level) {
    if (list.empty()) return;
    out << section << ":\n";
    for (const auto& v : list) assignment(sigil(level) + v.name, v.value, "=");
  };
  values("tensor", program.values[Domain::Tensor], Domain::Tensor);
  values("matrix", program.values[Domain::Matrix], Domain::Matrix);
  values("row", program.values[Domain::Row], Domain::Row);
  values("col", program.values[Domain::Column], Domain::Column);
  if (!program.scalar_state_commits.empty()) {
    out << "commit:\n";
    for (const auto& o : program.scalar_state_commits) assignment(o.name, o.value, "<-");
  }
  out << "update:\n";
  for (const auto& o : program.element_outputs)
    assignment(o.level == Domain::Row      ? o.name + "[row]"
               : o.level == Domain::Column ? o.name + "[col]"
                                           : o.name,
               o.value,
               o.first_step_only ? "<- (at the first step only)"
               : o.stage != 0    ? ("<- (by stage " + std::to_string(o.stage) + ")").c_str()
                                 : "<-");
  if (!program.stages.empty()) {
    out << "stages:";
    for (const auto& stage : program.stages) out << " " << stage.name << " (" << to_string(stage.kind) << ")";
    out << "\n";
    // Values computed once by the lines that finish them, loaded by later stages (shapes.h).
    for (const StoredValue& v : stored_values(program))
      out << "stored: " << to_string(v.level) << " " << v.name
          << (v.shared      ? " (new state, in slot " + std::to_string(v.slot) + ")"
              : v.new_state ? " (new state)"
                            : "")
          << " by stage " << v.stage << "\n";
  }
  return out.str();
}

}  // namespace optgen
