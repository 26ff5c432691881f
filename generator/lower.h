#pragma once
/// Lowering: resolves the names of a loaded spec, checks types, and builds the Program that one
/// step computes. Statements run in order; each assignment makes a new value, so the result is a
/// data-flow DAG with no variables left. Every user error here points at the spec.

#include "ir.h"
#include "spec.h"

namespace optgen {

Program lower(const Spec& spec);

}  // namespace optgen
