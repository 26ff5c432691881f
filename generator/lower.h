#pragma once
/// Lowering: resolves the names of a loaded spec, checks types, and builds the Program that one
/// step computes. Statements run in order; each assignment makes a new value, so the result is a
/// data-flow DAG with no variables left. Every user error here points at the spec.

#include "ir.h"
#include "spec.h"

namespace optgen {

Program lower(const Spec& spec);
/// The Program of one of the spec's programs (`programs:`): its element outputs (param and the
/// states it assigns), every state of the spec as an operand, no reductions, no scalar state
/// changed. Its `step`, never read by its statements, is the group's next step (a state with
/// `init: param` reads as the parameter before the group's first step).
Program lower(const Spec& spec, const ProgramSpec& program);

}  // namespace optgen
