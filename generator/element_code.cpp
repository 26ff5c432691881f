#include "element_code.h"

#include "emit_common.h"

namespace optgen {

void SourceComments::before(CodeWriter& w, const Expr& e) {
  if (!e->loc.known() || e->loc.line == last_line_) return;
  last_line_ = e->loc.line;
  std::string text = e->loc.file->line(e->loc.line);
  size_t start = text.find_first_not_of(" -");
  if (start != std::string::npos) w.line("// " + comment_text(text.substr(start)));
}

std::vector<std::string> write_level_code(CodeWriter& w, const std::vector<Expr>& roots, Domain level,
                                          ExprPrinter& printer, const std::string& float_type,
                                          std::set<std::string> taken) {
  auto temporaries = schedule_temporaries(roots, true, [&](const Expr& e) { return e->level == level; });
  name_temporaries(temporaries, "t", taken, printer);
  SourceComments comments;
  for (const auto& t : temporaries) {
    comments.before(w, t);
    w.line("const " + (t->type == ValueType::Bool ? std::string("bool") : float_type) + " " +
           printer.names.at(t.get()) + " = " + printer.print_body(t) + ";");
  }
  std::vector<std::string> values;
  for (const auto& r : roots) values.push_back(printer.print(r));
  return values;
}

std::vector<std::string> element_inputs_read(const Program& p) {
  std::set<std::string> read;
  for (const auto& o : p.element_outputs)
    for_each_node(o.value, [&](const Expr& e) {
      if (e->kind == NodeKind::Var && e->level == Domain::Element) read.insert(e->name);
    });
  std::vector<std::string> inputs;
  for (const char* name : {"param", "grad"})
    if (read.count(name)) inputs.push_back(name);
  for (const auto& s : p.states)
    if (read.count(s)) inputs.push_back(s);
  return inputs;
}

bool reads_numel(const Program& p) {
  bool found = false;
  for (const auto& v : p.values[Domain::Tensor])
    for_each_node(v.value,
                  [&](const Expr& e) { found = found || (e->kind == NodeKind::Var && e->var == VarKind::Numel); });
  return found;
}

}  // namespace optgen
