#pragma once
/// uq8 (optgen/blockwise8.h: unsigned 8-bit, bitsandbytes' state2) stores values from 0 up: a
/// negative value is stored as 0. A storage that keeps a state in uq8 is accepted only where a
/// sign analysis of the compiled variants proves the state never negative.
///
/// The analysis bounds every value by an interval, by induction over steps: a uq8 state's old value
/// is taken as non-negative, and its initial value and every value a variant assigns it (in its
/// step or in one of its programs, `programs:`) must then be non-negative too. Leaves: constants
/// are themselves; `step` is at least 1; `numel`, `rows` and `cols` at least 0; bools (flags,
/// comparisons, `factored`) 0 or 1; a float or int hyperparameter lies in [0, 1] when its default
/// does (betas, rates), is non-negative when its default is (eps, weight decay), else of any sign;
/// `param`, `grad`, other states and scalar states are of any sign. A product's repeated factors
/// make even powers (`g * g`, `(1 - b) * g * g`), and `lerp` with a weight in [0, 1] lies between
/// its ends; a remainder (`a % b`) has b's sign.

#include <string>
#include <vector>

#include "ir.h"
#include "spec.h"

namespace optgen {

/// Throws a SpecError located where a state `storage` keeps in uq8 can become negative (its init,
/// or the statement that assigns it), naming the storage as the user wrote it (`written`).
void check_unsigned_states(const Spec& spec, const std::vector<Program>& variants, const Storage& storage,
                           const std::string& written);

}  // namespace optgen
