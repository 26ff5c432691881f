#pragma once
/// What the CPU reference and the CUDA kernels share when they print a variant's per-tensor and
/// per-element code: the temporaries, each cited by the spec line it came from, then the values.

#include <set>
#include <string>
#include <vector>

#include "code_writer.h"
#include "expr_printer.h"
#include "ir.h"

namespace optgen {

/// Writes `// <spec statement>` before the first value that came from each spec line.
class SourceComments {
 public:
  void before(CodeWriter& w, const Expr& e);

 private:
  int last_line_ = 0;
};

/// Writes `const <float_type> name = ...;` (or `const bool`) for each temporary of level `level`
/// that `roots` need, named after the spec's names where it has them and never one of `taken`;
/// returns the printed value of each root.
std::vector<std::string> write_level_code(CodeWriter& w, const std::vector<Expr>& roots, Domain level,
                                          ExprPrinter& printer, const std::string& float_type,
                                          std::set<std::string> taken);

/// The per-element inputs the outputs read: "param", "grad" and state names, in that order.
std::vector<std::string> element_inputs_read(const Program& p);

/// Whether the tensor values of `p` read the tensor's element count.
bool reads_numel(const Program& p);

}  // namespace optgen
