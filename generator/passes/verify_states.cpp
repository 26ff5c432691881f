#include <set>

#include "passes.h"

namespace optgen {
namespace {

std::string flags_text(const Program& program) {
  std::string text;
  for (const auto& [flag, value] : program.flags)
    text += (text.empty() ? "" : ", ") + flag + "=" + (value ? "true" : "false");
  return text.empty() ? "always" : text;
}

const ElementState& declaration(const Program& program, const std::string& name) {
  int index = program.spec->state_index(name);
  if (index < 0) throw InternalError("verify_states: unknown state '" + name + "'");
  return program.spec->states[index];
}

}  // namespace

Program verify_states(const Program& program) {
  std::set<std::string> present(program.states.begin(), program.states.end());
  std::set<std::string> written;
  bool param_written = false;
  for (const auto& o : program.element_outputs) {
    if (o.name == "param") {
      param_written = true;
      continue;
    }
    if (!present.count(o.name))
      throw SpecError(o.loc,
                      "state '" + o.name + "' is written here, but it is absent in variant " + program.variant + " (" +
                          flags_text(program) + ")",
                      "guard the statement with `when: " + declaration(program, o.name).when_text + "`");
    written.insert(o.name);
  }
  const bool step = program.is_step();  // a program writes what it writes, and reads no gradient
  if (!param_written && step)
    throw SpecError(program.spec->update_loc, "variant " + program.variant + " never changes 'param'");
  for (const auto& o : program.element_outputs)
    for_each_node(o.value, [&](const Expr& e) {
      if (e->kind == NodeKind::Var && e->var == VarKind::State && !present.count(e->name))
        throw SpecError(o.loc, "this reads state '" + e->name + "', which is absent in variant " + program.variant +
                                   " (" + flags_text(program) + ")");
    });
  for (Domain d : {Domain::Tensor, Domain::Row, Domain::Column})
    for (const auto& v : program.values[d])
      for_each_node(v.value, [&](const Expr& e) {
        if (e->kind == NodeKind::Var && e->var == VarKind::State && !present.count(e->name))
          throw SpecError(program.spec->states.at(program.spec->state_index(e->name)).loc,
                          "state '" + e->name + "' is read, but it is absent in variant " + program.variant + " (" +
                              flags_text(program) + ")");
      });
  for (const auto& r : program.reductions)
    for_each_node(r.operand, [&](const Expr& e) {
      if (e->kind == NodeKind::Var && e->var == VarKind::State && !present.count(e->name))
        throw SpecError(r.loc, "this reduction reads state '" + e->name + "', which is absent in variant " +
                                   program.variant + " (" + flags_text(program) + ")");
    });
  // A state the variant only reads is read-only there (lower.cpp); one it neither reads nor writes
  // is a mistake.
  std::set<std::string> read;
  for_each_node(program, [&](const Expr& e) {
    if (e->kind == NodeKind::Var && e->var == VarKind::State) read.insert(e->name);
  });
  for (const auto& state : program.states)
    if (step && !written.count(state) && !read.count(state))
      throw SpecError(declaration(program, state).loc, "state '" + state + "' is present in variant " +
                                                           program.variant + " (" + flags_text(program) +
                                                           ") but never read or written there");
  // A step that does not depend on the gradient is a mistake (a value computed from it and never
  // used), and leaves a clipping variant nothing to take the norm of.
  bool reads_grad = false;
  auto note_grad = [&](const Expr& e) {
    reads_grad = reads_grad || (e->kind == NodeKind::Var && e->var == VarKind::Grad);
  };
  for (const auto& o : program.element_outputs) for_each_node(o.value, note_grad);
  for (const auto& r : program.reductions) for_each_node(r.operand, note_grad);
  for (const auto& m : program.matrix_values) for_each_node(m.operand, note_grad);
  if (!reads_grad && step)
    throw SpecError(program.spec->update_loc,
                    "variant " + program.variant + " (" + flags_text(program) +
                        ") never uses 'grad': no parameter or state it writes depends on the gradient",
                    "a value computed from grad and never used is the usual cause");
  for (Domain d : {Domain::Group, Domain::Tensor, Domain::Matrix, Domain::Row, Domain::Column})
    for (const auto& v : program.values[d])
      if (v.value->level != d)
        throw InternalError(std::string(to_string(d)) + " value '" + v.name + "' is not computed per " + to_string(d));
  return program;
}

}  // namespace optgen
