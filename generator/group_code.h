#pragma once
/// What the CPU reference and the CUDA kernels share when they print a variant's group-level code:
/// the spec's `per_step` and every group value the tensor and element code read, computed once per
/// step and param group, in double, as the body of a function
///   (const double* h_, double* scalar_state_, <64-bit int> step) -> the group values
/// where `h_` holds the hyperparameters in declaration order (bools as 0/1) and `scalar_state_` the
/// values the previous step left, overwritten with this step's.

#include <set>
#include <string>
#include <vector>

#include "code_writer.h"
#include "expr_printer.h"
#include "ir.h"

namespace optgen {

/// Writes the loads of the inputs the code reads, its temporaries and the scalar-state writes;
/// returns the printed value of each of `p.values[Domain::Group]`, for the caller's return statement.
/// Names are the spec's where it has them, and never one of `taken`.
std::vector<std::string> write_group_code(CodeWriter& w, const Program& p, ExprPrinter& printer,
                                          std::set<std::string> taken);

/// The scalar state after a step: per_step's new values, then those `update` assigns from the
/// group's reductions (Program::scalar_state_commits), as the body of a function
///   (const double* h_, const double* old_state_, <64-bit int> step, <the reductions' results>,
///    double* scalar_state_)
/// that reads the scalar state before the step from `old_state_` and writes the new values into
/// `scalar_state_`; one function, so both share their temporaries. Reduced leaves print as
/// `printer` prints them.
void write_advance_code(CodeWriter& w, const Program& p, ExprPrinter& printer, std::set<std::string> taken);

/// `const double lr = h_[0];` (or `const bool`) for each hyperparameter `roots` read.
void write_hyperparameter_loads(CodeWriter& w, const Spec& spec, const std::vector<Expr>& roots);

}  // namespace optgen
