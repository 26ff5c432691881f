#pragma once
/// The IR's arithmetic in double, as the host code computes it (the CPU reference's group code):
/// constant folding evaluates operations on constants with it, and a spec loaded at run time
/// evaluates its derived flags with it (spec_loader/). Bools are 0 and 1.

#include <functional>

#include "ir.h"

namespace optgen {

/// The value of operation `n` (Unary, Binary, Select or Call) from the values of its operands.
double apply(const Node& n, const double* operands);

/// The value of `root`, each Var leaf read through `leaf` (a Bool leaf must give 0 or 1).
double evaluate(const Expr& root, const std::function<double(const Node& var)>& leaf);

}  // namespace optgen
