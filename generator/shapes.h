#pragma once
/// What a variant with matrix, row or column code (ir.h's uses_shapes) asks of the kernels and the
/// runtime, derived once from its IR: the kinds of block each Reduce stage launches
/// (kernel_abi::BlockKind), each reduction's index among those of its scope, its row and column
/// states, and for which tensors each state exists. The CUDA emitter and the launcher tables
/// (optimizer_tables.h) both read them from here.

#include <map>
#include <string>
#include <vector>

#include "ir.h"

namespace optgen {

/// The kinds of block Reduce stage `stage` of a variant with shapes launches, a mask of
/// kernel_abi::BlockKind bits; 0 for the Update stage and for a variant without shapes.
unsigned stage_blocks(const Program& variant, const Stage& stage);

/// Reduction r's index among the variant's reductions of its scope (Row, Column or Matrix); its index
/// r for the others.
int scope_index(const Program& variant, size_t r);
/// How many reductions of `scope` the variant has.
int scope_count(const Program& variant, Domain scope);

/// The variant's states of `shape`, in operand order (the snapshot's numbering).
std::vector<std::string> states_of_shape(const Program& variant, StateShape shape);

/// The matrix, row and column values `roots` read, directly or through each other, by level, each
/// list in the program's order (which computes a value after the values it reads).
std::map<Domain, std::vector<const HoistedValue*>> shaped_values_read(const Program& variant, std::vector<Expr> roots);

/// When a state of the variant exists: for every tensor, or for factored ones only, or for the
/// others only (its `when:` reads `factored`).
enum class Presence { Always, Factored, NotFactored };
Presence state_presence(const Program& variant, const std::string& state);

}  // namespace optgen
