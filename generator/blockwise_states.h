#pragma once
/// 8-bit blockwise states (optgen/blockwise8.h) are read and written a quantisation block of 256
/// elements at a time: their codes share the block's absmax. The Update stage's block walk
/// (optgen/device/blockwise_update.cuh) and a Reduce stage's chunk runs (device/reduce.cuh) take
/// blocks, with rows and columns or without; a variant with a matrix value, whose first stage stores
/// its states element by element, and a reduction over rows, columns or matrices, whose lines and
/// column segments read single elements, do not. A storage that keeps a state in 8 bits there is
/// refused.

#include <string>
#include <vector>

#include "ir.h"
#include "spec.h"

namespace optgen {

/// Throws a SpecError located at a state `storage` keeps in 8 bits that a variant (its step on
/// shards or its programs) reads or writes other than a block at a time, naming the storage as the
/// user wrote it (`written`) and the reason.
void check_blockwise_states(const Spec& spec, const std::vector<Program>& variants, const Storage& storage,
                            const std::string& written);

}  // namespace optgen
