#include "emit_matrix_programs.h"

#include <algorithm>

#include "emit_common.h"
#include "matrix_programs.h"

namespace optgen {
namespace {

std::string dimension(MatrixDimension d) {
  return d == MatrixDimension::R ? "MatrixDimension::R" : "MatrixDimension::C";
}

std::string scalar(const MatrixScalar& s) {
  return "{" + cpp_double_literal(s.factor) + ", " + std::to_string(s.argument) + "}";
}

/// `s` as matrix code writes it: "0.5 * b", "b", "-1".
std::string scalar_text(const MatrixScalar& s, const CompiledMatrixProgram& p) {
  if (s.argument < 0) return cpp_double_literal(s.factor);
  const std::string& name = p.parameters[static_cast<size_t>(s.argument)];
  if (s.factor == 1) return name;
  if (s.factor == -1) return "-" + name;
  return cpp_double_literal(s.factor) + " * " + name;
}

/// What instruction `i` computes, as a statement of matrix code (for its comment).
std::string describe(const MatrixInstruction& i, const CompiledMatrixProgram& p) {
  auto var = [&](int v, bool transposed) {
    const std::string& name = p.variables[static_cast<size_t>(v)].name;
    return transposed ? "transpose(" + name + ")" : name;
  };
  auto scaled = [&](const MatrixScalar& s, const std::string& what) {
    return s.argument < 0 && s.factor == 1 ? what : scalar_text(s, p) + " * " + what;
  };
  const std::string target = i.op == MatrixOp::Repeat ? "" : p.variables[static_cast<size_t>(i.target)].name + " = ";
  switch (i.op) {
    case MatrixOp::Assign: return target + var(i.a, false);
    case MatrixOp::Normalize:
      return target + var(i.a, false) + " / max(frobenius_norm(" + var(i.a, false) + "), " + scalar_text(i.beta, p) +
             ")";
    case MatrixOp::Product:
      return target + scaled(i.alpha, var(i.a, i.transpose_a) + " @ " + var(i.b, i.transpose_b)) +
             (i.c < 0 ? "" : " + " + scaled(i.beta, var(i.c, false)));
    case MatrixOp::Combine:
      return target + scaled(i.alpha, var(i.a, i.transpose_a)) +
             (i.b < 0 ? "" : " + " + scaled(i.beta, var(i.b, i.transpose_b)));
    case MatrixOp::Repeat:
      return "repeat " + scalar_text(i.alpha, p) + " times the next " + std::to_string(i.target) + " instruction" +
             (i.target == 1 ? "" : "s");
  }
  return "?";
}

std::string op_name(MatrixOp op) {
  switch (op) {
    case MatrixOp::Assign: return "MatrixOp::Assign";
    case MatrixOp::Normalize: return "MatrixOp::Normalize";
    case MatrixOp::Product: return "MatrixOp::Product";
    case MatrixOp::Combine: return "MatrixOp::Combine";
    case MatrixOp::Repeat: return "MatrixOp::Repeat";
  }
  return "?";
}

void emit_program(CodeWriter& w, const CompiledMatrixProgram& p) {
  std::string signature = p.name + "(" + p.variables[0].name;
  for (const auto& a : p.parameters) signature += ", " + a;
  signature += ")";
  w.line();
  w.line("/// " + signature + (p.doc.empty() ? "" : ": " + comment_text(p.doc)));
  auto ns = w.block("namespace matrix_programs::" + p.name, "}  // namespace matrix_programs::" + p.name);
  w.line("/// Its variables, R x C being its view of each matrix" +
         std::string(p.transpose_tall ? " (a tall matrix transposed)" : "") + ".");
  w.line("const MatrixVariable kVariables[] = {");
  for (const auto& v : p.variables)
    w.line("    {\"" + v.name + "\", " + dimension(v.rows) + ", " + dimension(v.cols) + "},");
  w.line("};");
  w.line("const MatrixInstruction kCode[] = {");
  int depth = 0;
  std::vector<int> left;  // per open repeat, its instructions still to come
  for (const MatrixInstruction& i : p.code) {
    w.line("    // " + std::string(static_cast<size_t>(2 * depth), ' ') + describe(i, p));
    w.line("    {" + op_name(i.op) + ", " + std::to_string(i.target) + ", " + std::to_string(i.a) + ", " +
           std::to_string(i.b) + ", " + std::to_string(i.c) + ", " + (i.transpose_a ? "true" : "false") + ", " +
           (i.transpose_b ? "true" : "false") + ", " + scalar(i.alpha) + ", " + scalar(i.beta) + "},");
    for (int& l : left) --l;
    while (!left.empty() && left.back() == 0) left.pop_back(), --depth;
    if (i.op == MatrixOp::Repeat && i.target > 0) left.push_back(i.target), ++depth;
  }
  w.line("};");
  std::string parameters;
  for (const auto& a : p.parameters) parameters += (parameters.empty() ? "\"" : ", \"") + a + "\"";
  w.line("const char* const kParameters[] = {" + (parameters.empty() ? std::string("nullptr") : parameters) + "};");
  w.line("const MatrixProgram kProgram = {\"" + p.name + "\", " + (p.transpose_tall ? "true" : "false") +
         ", kVariables, " + std::to_string(p.variables.size()) + ", kCode, " + std::to_string(p.code.size()) + ", " +
         std::to_string(p.result) + ", kParameters, " + std::to_string(p.parameters.size()) + "};");
}

}  // namespace

void emit_matrix_programs(CodeWriter& w, const Spec& spec, const std::vector<Program>& variants) {
  std::vector<std::string> used;
  for (const Program& p : variants)
    for (const MatrixValue& m : p.matrix_values)
      if (std::find(used.begin(), used.end(), m.function) == used.end()) used.push_back(m.function);
  for (const std::string& name : used) {
    const MatrixFunctionSpec* f = spec.find_matrix_function(name);
    if (!f) throw InternalError("emit_matrix_programs: no matrix function " + name);
    emit_program(w, compile_matrix_function(*f));
  }
}

std::string matrix_program_name(const std::string& function) {
  return "&spec_reference::matrix_programs::" + function + "::kProgram";
}

}  // namespace optgen
