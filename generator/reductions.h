#pragma once
/// The spec language's reductions, listed once (`kReductions` in reductions.cpp): `sum(x)`,
/// `mean(x)`, `norm(x)` and `max(x)` over the elements of the tensor being updated, and
/// `group_sum(x)`, `group_norm(x)`, `group_max(x)` over every element of the param group. Each
/// is a Reduce node of the IR (a sum or a maximum, over a tensor or a group) with ordinary IR
/// around it: `mean(x)` is `sum(x) / numel`, `norm(x)` is `sqrt(sum(x * x))`.
///
/// A spec of blocks (`block_elements: B`) reduces over each block of a tensor of whole blocks with
/// `block_sum(x)`, `block_mean(x)`, `block_norm(x)` and `block_max(x)`: the tensor viewed as numel / B
/// rows of B, they are the row reductions of that view (scope Row, `over_blocks`).
///
/// A factored tensor (two or more dimensions) is a batch of matrices over its last two: `row_sum(x)`,
/// `row_mean(x)`, `row_norm(x)`, `row_max(x)` reduce an element value over each row's columns (one
/// value per row), `col_sum(x)` ... `col_max(x)` over each column's rows; `sum`, `mean`, `norm` and
/// `max` of a row (column) value reduce it over each matrix's rows (columns): one value per matrix.
///
/// Unlike the built-in functions, reduction names are not reserved: a spec may name a value
/// `sum` (torch's Adagrad calls its state that), and then cannot call sum() itself.

#include <string>
#include <vector>

#include "optgen/domain.h"

namespace optgen {

/// How a reduction combines its elements (and, later, the partial results of blocks and ranks).
enum class ReduceOp { Sum, Max };
const char* to_string(ReduceOp op);

struct ReductionInfo {
  const char* name;  ///< as a spec writes it
  ReduceOp op;
  Domain scope;
  /// The value: the reduction; / the count it ran over (numel, a row's columns, ...); sqrt of the sum of squares.
  enum class Form { Plain, Mean, Norm } form;
  const char* meaning;  ///< for the documentation and messages
  /// block_sum ... block_max: over each row of a spec of blocks (Spec::block_elements), whose rows
  /// are its blocks; the row_ and col_ reductions are for the other specs.
  bool over_blocks = false;
};

/// Every reduction, in the order the documentation lists them.
const std::vector<ReductionInfo>& reductions();
/// The reduction called `name` that takes `arity` arguments, or null (`max` of two arguments is the
/// built-in function, of one the reduction).
const ReductionInfo* find_reduction(const std::string& name, int arity);
/// Whether some reduction is called `name`.
bool is_reduction_name(const std::string& name);
/// The names of the reductions into `scope`, in the table's order: "row_sum, row_mean, row_norm,
/// row_max"; with `blocks`, those over blocks (scope Row: "block_sum, ...").
std::string reduction_names(Domain scope, bool blocks = false);

}  // namespace optgen
