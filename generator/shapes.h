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
#include "optgen/kernel_abi.h"
#include "optgen/spec_kinds.h"

namespace optgen {

/// A matrix, row or column value computed once per matrix, row or column where the reductions it
/// reads are finished, and loaded by the code of later stages instead of computed per element: by
/// the lines (`kind`: kRowLines, kColumnSegments, kMatrixRowLines or kMatrixColumnLines) of Reduce
/// stage `stage` that finish the latest results of its own domain it reads, each line's first
/// thread right after it stored them, when every other result it reads is of an earlier stage.
/// Stored as a float in slot `slot` of its domain's values (kernel_abi::ShapeTable::row_values,
/// ...). A row or column state's new value is one too (`new_state`): the Update stage stores the
/// state from there, so that it reads no state of rows or columns. Where a state's new value equals
/// a value the same lines store, for every tensor that has the state, it takes that value's slot
/// (`shared`): stored once, loaded once.
struct StoredValue {
  std::string name;  ///< the hoisted value's, or for a state's new value the state's
  Expr value;        ///< code of `level`
  Domain level;      ///< Matrix, Row or Column
  int stage;
  int kind;  ///< a kernel_abi::BlockKind
  int slot;
  bool new_state;
  bool shared = false;  ///< a new state in the slot of a value stored before it
};

/// Slots of one level's stored values: a kernel names those it loads by a 32-bit mask (LoadedSlots).
constexpr int kMaxStoredValues = 32;

/// The variant's stored values: matrix, then row, then column ones, each level's hoisted values in
/// program order, then its states' new values in operand order (their slots count up so). A value
/// whose inputs no one line finishes (a row value of a column result, or of a tensor result of its
/// own stage), or past a level's kMaxStoredValues, is not stored: code computes it where it reads
/// it. The step for shards (Program::for_shards) stores none: a line finishes its rank's part of a
/// column or matrix only.
std::vector<StoredValue> stored_values(const Program& variant);

/// Whether a reduction of the variant sums over the rows or the columns of a matrix (across_rows,
/// across_cols): where ranks hold rows (columns) of each matrix, it then needs a step of its own on
/// shards (Program::shard_step).
bool sums_across_shards(const Program& variant);

/// Whether reduction r sums over the rows of a matrix (a column's, or a matrix's of row or element
/// values; not one of column values): on ranks that each hold some rows of a matrix, its results
/// are the rank's part (ReductionSlot::across_rows).
bool across_rows(const ReductionValue& r);
/// The same over the columns (a row's, or a matrix's of column or element values), for ranks that
/// each hold some columns of every row (ReductionSlot::across_cols).
bool across_cols(const ReductionValue& r);

/// The stored value `name` of `level` that code of stage `order` loads (stored by an earlier
/// stage), or null; `new_state` picks a state's new value. `order`: a Reduce stage's number, the
/// Update stage's one more than the last Reduce stage's (Program::stages.size()), 0 for code outside
/// the stages (the CPU reference), which loads nothing.
const StoredValue* loaded_value(const std::vector<StoredValue>& stored, const std::string& name, Domain level,
                                int order, bool new_state = false);

/// The kind of block that computes and finishes reduction r's results in a variant with shapes:
/// chunk runs for a tensor or group, row lines, column segments, or matrix lines of row or column
/// code.
kernel_abi::BlockKind block_kind(const ReductionValue& r);

/// The outputs whose new values the Update stage computes: every element output, and each row or
/// column state's that no Reduce stage stored (`stored`: the variant's stored_values); it loads the
/// others.
std::vector<const Output*> update_computes(const Program& variant, const std::vector<StoredValue>& stored);

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

/// The matrix, row and column values code of stage `order` (as for loaded_value) computes for
/// `roots`: those they read, directly or through each other, but the stored values of earlier
/// stages (loaded, not computed); by level, each list in the program's order (which computes a
/// value after the values it reads).
std::map<Domain, std::vector<const HoistedValue*>> shaped_values_read(const Program& variant, std::vector<Expr> roots,
                                                                      int order = 0);

/// The stored values code of stage `order` loads for `roots` (directly or through the values it
/// computes), as masks of their slots per level: what Position (device/shape.cuh) loads once per
/// vector of elements (Code::kRowValues, kColValues, kMatrixValues).
struct LoadedSlots {
  unsigned row = 0, col = 0, matrix = 0;
};
LoadedSlots loaded_slots(const Program& variant, const std::vector<Expr>& roots, int order);

/// Whether element code of `roots` in stage `order` reads anything of its element's row, column or
/// matrix (a value, a result or a state), directly or through the values it computes: Position then
/// finds each element's index (ix_).
bool reads_position(const Program& variant, const std::vector<Expr>& roots, int order);

/// The variant as its Update stage's code sees it: the outputs a Reduce stage stores are only read
/// there (dropped), and a read-only state that starts as the parameter is written the parameter at
/// the group's first step (its value `param`).
Program update_stage_view(const Program& variant);

/// Whether the Update stage's element code needs each element's index (Position's kIndexed): it
/// stores a row or column state (at the row's column 0, the column's row 0), or reads_position.
bool update_reads_position(const Program& variant);

/// Whether the Update stage's code reads a row or column state itself (not through a stored value),
/// which it then reads from the snapshot the first Reduce stage takes (kernel_abi::kSnapshot).
bool update_reads_shaped_states(const Program& variant);

/// When a state of the variant exists (its `when:` may read `factored`).
StatePresence state_presence(const Program& variant, const std::string& state);

}  // namespace optgen
