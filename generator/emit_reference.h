#pragma once
/// Emits the CPU reference of a spec: one C++ header, `<name>_reference.h`, with a function
/// pair (per_step, update) per variant and an optgen::reference::Optimizer descriptor.

#include <string>
#include <vector>

#include "ir.h"
#include "spec.h"

namespace optgen {

std::string emit_reference(const Spec& spec, const std::vector<Program>& variants);

}  // namespace optgen
