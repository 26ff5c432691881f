#pragma once
/// The textual form of a Program, as `optgen dump` shows it and the pass tests compare it.

#include <string>

#include "ir.h"

namespace optgen {

std::string dump(const Program& program);

}  // namespace optgen
