#include "group_code.h"

#include "element_code.h"

namespace optgen {
namespace {

template <typename List>
int index_of(const List& list, const std::string& name) {
  for (size_t i = 0; i < list.size(); ++i)
    if (list[i].name == name) return static_cast<int>(i);
  throw InternalError("group code: unknown name '" + name + "'");
}

std::set<std::string> inputs_read(const std::vector<Expr>& roots, VarKind kind) {
  std::set<std::string> names;
  for (const auto& r : roots)
    for_each_node(r, [&](const Expr& e) {
      if (e->kind == NodeKind::Var && e->var == kind) names.insert(e->name);
    });
  return names;
}

}  // namespace

void write_hyperparameter_loads(CodeWriter& w, const Spec& spec, const std::vector<Expr>& roots) {
  const auto used = inputs_read(roots, VarKind::Hyperparameter);
  for (const auto& h : spec.hyperparameters) {
    if (!used.count(h.name)) continue;
    const std::string index = std::to_string(index_of(spec.hyperparameters, h.name));
    if (h.type == ValueType::Bool)
      w.line("const bool " + h.name + " = h_[" + index + "] != 0;");
    else
      w.line("const double " + h.name + " = h_[" + index + "];");
  }
}

namespace {

/// The loads of what group code computing `roots` reads (hyperparameters from h_, scalar states
/// from `state_array`) and its temporaries.
void write_group_prologue(CodeWriter& w, const Spec& spec, const std::vector<Expr>& roots, ExprPrinter& printer,
                          std::set<std::string> taken, const std::string& state_array) {
  write_hyperparameter_loads(w, spec, roots);
  const auto scalar_states = inputs_read(roots, VarKind::ScalarState);
  for (const auto& s : spec.scalar_states)
    if (scalar_states.count(s.name))
      w.line("const double " + s.name + " = " + state_array + "[" +
             std::to_string(index_of(spec.scalar_states, s.name)) + "];");

  for (const auto& h : spec.hyperparameters) taken.insert(h.name);
  for (const auto& s : spec.scalar_states) taken.insert(s.name);
  auto temporaries = schedule_temporaries(roots, true, [](const Expr&) { return true; });
  name_temporaries(temporaries, "t", taken, printer);
  SourceComments comments;
  for (const auto& t : temporaries) {
    comments.before(w, t);
    w.line(std::string("const ") + (t->type == ValueType::Bool ? "bool " : "double ") + printer.names.at(t.get()) +
           " = " + printer.print_body(t) + ";");
  }
}

}  // namespace

std::vector<std::string> write_group_code(CodeWriter& w, const Program& p, ExprPrinter& printer,
                                          std::set<std::string> taken) {
  const Spec& spec = *p.spec;
  std::vector<Expr> roots;
  for (const auto& o : p.scalar_state_updates) roots.push_back(o.value);
  for (const auto& v : p.values[Domain::Group]) roots.push_back(v.value);
  write_group_prologue(w, spec, roots, printer, std::move(taken), "scalar_state_");
  for (const auto& o : p.scalar_state_updates)
    w.line("scalar_state_[" + std::to_string(index_of(spec.scalar_states, o.name)) + "] = " + printer.print(o.value) +
           ";  // " + o.name);
  std::vector<std::string> values;
  for (const auto& v : p.values[Domain::Group]) values.push_back(printer.print(v.value));
  return values;
}

void write_advance_code(CodeWriter& w, const Program& p, ExprPrinter& printer, std::set<std::string> taken) {
  const Spec& spec = *p.spec;
  std::set<std::string> committed;
  for (const auto& o : p.scalar_state_commits) committed.insert(o.name);
  std::vector<const Output*> outputs;  // per_step's, unless 'update' assigns the state again
  for (const auto& o : p.scalar_state_updates)
    if (!committed.count(o.name)) outputs.push_back(&o);
  for (const auto& o : p.scalar_state_commits) outputs.push_back(&o);
  std::vector<Expr> roots;
  for (const Output* o : outputs) roots.push_back(o->value);
  write_group_prologue(w, spec, roots, printer, std::move(taken), "old_state_");
  for (const Output* o : outputs)
    w.line("scalar_state_[" + std::to_string(index_of(spec.scalar_states, o->name)) + "] = " + printer.print(o->value) +
           ";  // " + o->name);
}

}  // namespace optgen
