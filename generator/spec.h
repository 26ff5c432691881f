#pragma once
/// A loaded optimizer spec: the YAML file's content, checked for shape (fields, names, defaults)
/// but with expressions still as syntax trees. `load_spec` builds it; `lower` (lower.h) turns it
/// into IR. The language is documented in specs/README.md.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "diagnostic.h"
#include "optgen/spec_kinds.h"
#include "optgen/storage.h"
#include "syntax.h"

namespace optgen {

struct Hyperparameter {
  std::string name;
  SourceLoc loc;
  ValueType type = ValueType::Float;
  double default_value = 0;         ///< bools as 0/1
  bool specialize = false;          ///< a bool that selects a kernel variant
  std::shared_ptr<Syntax> derived;  ///< for a derived flag: its value from other hyperparameters
  std::string derived_text;
  std::string doc;
};

/// How a buffer or a scalar starts: a constant, the value of a hyperparameter, or (a buffer only)
/// the parameter: `init: param` makes the buffer read as the parameter at the group's first step
/// (step 1), whatever its memory holds, as torch's optimizers clone the parameter into a state
/// when they first step it.
struct Init {
  SourceLoc loc;
  double value = 0;
  std::string hyperparameter;  ///< empty: the constant `value`, unless `param`
  bool param = false;          ///< starts as the parameter
};

struct ElementState {
  std::string name;
  SourceLoc loc;
  Init init;
  /// `shape: blocks` is StateShape::Rows: a spec's blocks are the rows of its tensors viewed as
  /// (numel / block_elements, block_elements) (Spec::block_elements).
  StateShape shape = StateShape::Elements;
  SourceLoc shape_loc;  ///< the `shape:` value, when given
  /// Present only when this expression of flags and `factored` holds; null: always.
  std::shared_ptr<Syntax> when;
  std::string when_text;
};

/// One value per param group, or (`scope: optimizer`) one for the whole optimizer: every group then
/// holds the same copy, computed from values that are the same for every group (lower.cpp's
/// check_optimizer_value), as Prodigy and D-Adaptation share their D.
struct ScalarState {
  std::string name;
  SourceLoc loc;
  Init init;
  bool per_optimizer = false;  ///< `scope: optimizer`
};

struct Block;

/// One entry of `per_step:` or `update:`: a statement, or a block guarded by `when:`.
struct BlockItem {
  std::optional<Statement> statement;
  std::shared_ptr<Syntax> when;  ///< for a guarded block
  std::string when_text;
  std::shared_ptr<Syntax> repeat;  ///< for a repeated block (matrix functions only): its count
  SourceLoc loc;
  std::shared_ptr<Block> body;
};

struct Block {
  std::vector<BlockItem> items;
};

/// One entry of `programs:`: code beside the step that runs over the same operands when the user
/// asks for it (schedule-free's `train` and `eval`), element by element. It reads hyperparameters,
/// scalar state (without changing it), param and the state buffers, and assigns param and states.
struct ProgramSpec {
  std::string name;
  SourceLoc loc;  ///< the name's key
  Block body;
};

/// One entry of `matrix_functions:` (or a built-in one, matrix_functions.h): a function of whole
/// matrices that `update` may call, written as statements over matrix variables
/// (matrix_programs.h compiles them). Its first parameter is the matrix; each other a number the
/// call gives (a hyperparameter or a number).
struct MatrixFunctionSpec {
  std::string name;
  SourceLoc loc;  ///< the name's key
  std::vector<std::string> parameters;
  std::vector<SourceLoc> parameter_locs;
  bool transpose_tall = false;  ///< a matrix of more rows than columns is seen transposed
  Block body;
  std::string result;
  SourceLoc result_loc;
  std::string doc;  ///< what it computes, for the documentation and messages
};

/// Specialized flags a spec may have: each doubles the kernel variants.
constexpr std::size_t kMaxFlags = 6;

struct Spec {
  std::shared_ptr<const SourceFile> file;
  std::string optimizer;  ///< the class name, e.g. AdamW
  std::string name;       ///< the file's stem, e.g. adamw: names generated files and namespaces
  std::string summary;
  std::string reference;  ///< what the spec matches, e.g. torch.optim.AdamW (informative)
  std::vector<Hyperparameter> hyperparameters;
  std::vector<ElementState> states;
  std::vector<ScalarState> scalar_states;
  Block per_step;
  Block update;
  SourceLoc update_loc;                              ///< the `update:` key
  std::vector<ProgramSpec> programs;                 ///< `programs:`, in declaration order
  std::vector<MatrixFunctionSpec> matrix_functions;  ///< `matrix_functions:`, in declaration order
  /// Storage combinations to generate kernels for (`storage:`, each canonical_storage); empty: the
  /// build's choice, else default_storage().
  std::vector<Storage> storage;
  std::vector<std::string> storage_written;  ///< each of `storage` as the spec writes it, for messages
  /// Global-norm clipping (clipping.h): on unless `grad_clipping: false`; `max_grad_norm`'s
  /// default (`grad_clipping: {max_grad_norm: X}`, else 0: off); the key, or `optimizer:`.
  bool grad_clipping = true;
  double max_grad_norm_default = 0;
  SourceLoc grad_clipping_loc;
  /// `block_elements: B`: the spec's block domain, B consecutive elements of a tensor. A tensor of
  /// a whole number of blocks (numel a positive multiple of B) is `factored`, viewed as numel / B
  /// rows of B columns whatever its shape: its rows are its blocks (`shape: blocks` states,
  /// block_sum ... block_max); every other tensor is not. 0: no blocks, rows are the shape's.
  long long block_elements = 0;
  SourceLoc block_elements_loc;
  /// What the spec does that is allowed but likely not meant, each formatted as `file:line:col:
  /// warning: ...` with its line and caret (optgen prints them; the load goes on).
  std::vector<std::string> warnings;

  const Hyperparameter* find_hyperparameter(const std::string& name) const;
  int state_index(const std::string& name) const;  ///< -1 when absent
  std::vector<std::string> state_names() const;    ///< in declaration order
  /// The variables `update` assigns a matrix function to (Muon's `o`), which a storage may keep in
  /// f32 (optgen/storage.h), in order of first assignment.
  std::vector<std::string> matrix_value_names() const;
  /// The matrix function `update` may call as `name`: the spec's own, else a built-in; or null.
  const MatrixFunctionSpec* find_matrix_function(const std::string& name) const;
  /// Empty when the spec's states can be kept in `storage` (canonical), else why not: 8-bit
  /// blockwise dtypes are for states of a value per element. `written` is the storage as the user
  /// wrote it, which the message quotes.
  std::string storage_problem(const Storage& storage, const std::string& written) const;
  std::vector<const Hyperparameter*> flags() const;  ///< specialized bools, in declaration order
  /// `shape` as the spec writes it: a spec with blocks keeps its block states as rows (one row a
  /// block), and they are "blocks" in its messages.
  std::string written_shape(StateShape shape) const;
  /// The name of the variant whose flags are `flags` (each of flags() given): the spec's name,
  /// then each flag that is set, in declaration order (adam_amsgrad).
  std::string variant_name(const std::map<std::string, bool>& flags) const;
};

/// The most bytes a spec file may hold (the built-in specs hold 1 to 4 KB): a larger file, or
/// anything but a regular file, is refused before it is read.
constexpr std::uint64_t kMaxSpecBytes = 1 << 20;

/// Reads and checks a spec file; throws SpecError naming the first problem.
Spec load_spec(const std::string& path);
/// Same, from text already in memory (`path` is used in messages only).
Spec load_spec_text(const std::string& path, const std::string& text);

/// Names with a fixed meaning in expressions: param, grad, step, numel, factored, true, false and
/// the built-in functions (builtins.h).
bool is_reserved_name(const std::string& name);

}  // namespace optgen
