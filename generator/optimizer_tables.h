#pragma once
/// The tables that describe an optimizer to the runtime's engine (optgen::OptimizerInfo in
/// runtime/include/optgen/optimizer.h), built from a spec and its compiled variants. They are the
/// one source for both ways an optimizer reaches the engine: the emitters print them as C++ (the
/// CPU reference's hyperparameter, state and flag tables and its derive_flags; the launcher's
/// variant and kernel tables), and a spec loaded at run time (spec_loader/) points its
/// OptimizerInfo at them and evaluates the derived flags' IR.

#include <set>
#include <string>
#include <vector>

#include "emit_cuda.h"  // KernelTuning, chunk_size_for
#include "ir.h"
#include "shapes.h"
#include "spec.h"
#include "optgen/optimizer.h"  // MatrixArgument
#include "optgen/storage.h"

namespace optgen {

struct HyperparameterRow {
  std::string name;
  ValueType type;
  double default_value;  ///< bools as 0/1; 0 for derived flags
  bool specialized;      ///< selects a variant
  bool derived;          ///< computed from other hyperparameters
  bool per_optimizer;    ///< read by values of one per optimizer (Program::optimizer_hyperparameters)
};

/// How a state buffer or scalar state starts: the constant `value`, or the value of hyperparameter
/// number `hyperparameter` (-1: the constant).
struct InitRow {
  double value;
  int hyperparameter;
  bool param;  ///< starts as the parameter (spec.h, Init)
};

struct StateRow {
  std::string name;
  InitRow init;
  StateShape shape = StateShape::Elements;  ///< scalar states: always elements (unused)
  bool per_optimizer = false;               ///< a scalar state of `scope: optimizer`
};

/// A derived flag: hyperparameter number `hyperparameter` is `value`, a Bool expression over the
/// other (plain) hyperparameters.
struct DerivedFlagRow {
  int hyperparameter;
  Expr value;
};

/// What the spec declares, in declaration order.
struct SpecTables {
  std::vector<HyperparameterRow> hyperparameters;
  std::vector<StateRow> states;
  std::vector<StateRow> scalar_states;
  /// The specialized flags as hyperparameter indices, in the order of the variant bits: variant i
  /// is the one whose flags[j] is true exactly when bit j of i is set.
  std::vector<int> flags;
  std::vector<DerivedFlagRow> derived_flags;  ///< in declaration order
  std::vector<std::string> programs;          ///< the names of `programs:`, in declaration order
};

/// `variants`: the spec's compiled variants (each holds the derived flags' IR).
SpecTables spec_tables(const Spec& spec, const std::vector<Program>& variants);

/// One reduction of a variant, at its index r of kernel_abi::ReductionTable.
struct ReductionRow {
  std::string name;
  bool is_max;       ///< else a sum
  int stage;         ///< the Reduce stage (1, 2, ...) that computes it
  Domain scope;      ///< its result's domain: one per tensor, group, row, column or matrix
  int scope_index;   ///< its index among the variant's reductions of its scope (shapes.h's scope_index)
  bool across_rows;  ///< it sums over the rows of a matrix (shapes.h's across_rows)
  bool across_cols;  ///< it sums over the columns of a matrix (shapes.h's across_cols)
};

/// A matrix value of a variant (ir.h's MatrixValue), as the runtime applies it (MatrixValueInfo).
struct MatrixValueRow {
  std::string name;
  std::string function;  ///< the matrix function's name
  int stage;             ///< the Reduce stage (1, 2, ...) that stores its operand
  std::vector<MatrixArgument> arguments;
};

struct VariantRow {
  std::string name;         ///< e.g. adam_amsgrad
  std::vector<int> states;  ///< the spec's state indices it uses, in operand order
  int group_values_size;    ///< sizeof its GroupValues on the device
  std::string group_kernel;
  std::vector<StageKind> stage_kinds;    ///< per stage in launch order (Stage::kind)
  std::vector<ReductionRow> reductions;  ///< in the order of their index r
  int grad_norm_slot;                    ///< the clipping's squared gradient norm, or -1 (clipping.h)
  /// Per stage in launch order, the kinds of block it launches (a mask of kernel_abi::BlockKind
  /// bits, shapes.h's stage_blocks); empty when the variant has no matrix, row or column code.
  std::vector<unsigned> stage_blocks;
  /// Per entry of `states`, when the state exists (shapes.h's state_presence); empty when every
  /// state exists for every tensor.
  std::vector<StatePresence> state_presence;
  /// How many values it stores per matrix, row and column: the slots of shapes.h's stored_values.
  int stored_matrix_values = 0, stored_row_values = 0, stored_col_values = 0;
  std::vector<MatrixValueRow> matrix_values = {};
  /// Its step on shards (Program::shard_step), where it has one: per stage in launch order, the
  /// kinds of block it launches, as stage_blocks; it stores no values. Empty: the step is the same.
  std::vector<unsigned> shard_stage_blocks = {};
  /// Whether its stage kernels run the tensors whose matrices are one element as element code
  /// (Program::unit_matrices): the plan gives those no lines.
  bool unit_matrices = false;
};

/// A variant's kernels in one storage type.
struct KernelRow {
  std::vector<std::string> stages;        ///< kernel names, in launch order
  std::vector<std::string> programs;      ///< kernel names of the spec's programs, in declaration order
  std::vector<std::string> shard_stages;  ///< the step on shards' (Program::shard_step); empty: none
  std::string long_row_update;            ///< long_row_update_name: the Update stage for long rows; empty: none
  int variant;                            ///< index into KernelTables::variants
  Storage storage;
  long long chunk_size;  ///< elements per block (chunk_size_for)
  /// Per matrix value of the variant (VariantRow::matrix_values), its dtype: bf16 or f32.
  std::vector<DType> matrix_dtypes = {};
  std::string unit_update = {};  ///< unit_update_name: the Update stage of matrices of one element; empty: none
};

struct KernelTables {
  std::vector<VariantRow> variants;  ///< every variant, in the order of their flag bits
  std::vector<KernelRow> kernels;    ///< by variant, then in the order of `storage`
  /// Threads per block of every kernel (KernelTuning::block_size_for the variants with kernels).
  int block_size = 0;
  /// Elements per block of the default (first) variant's f32 kernel set (OptimizerInfo::chunk_size:
  /// what the launcher reports; each set's own is its KernelRow's).
  long long chunk_size = 0;

  /// The kernel sets of variant `variant` (an index into `variants`), in the order of `storage`;
  /// none for a variant without kernels.
  std::vector<const KernelRow*> kernels_of(int variant) const;
};

/// The kernel plan of a spec: every kernel's name, variant, storage and chunk size, and the block
/// size they are compiled for. The CUDA emitter emits its kernels, the launcher emitter and a spec
/// loaded at run time describe them to the runtime: one source for all three.
/// `variants`: every variant of the spec, in the order compile_spec returns them; `with_kernels`:
/// the names of the variants kernels are generated for (all when empty).
KernelTables kernel_tables(const std::vector<Program>& variants, const std::vector<Storage>& storage,
                           const KernelTuning& tuning, const std::set<std::string>& with_kernels = {});

/// Where kernel_name_clash found two kernels of one name: the index of one of the two variants,
/// and the program (`programs:`) whose kernel it is, if one of the two is a program's ("" if not),
/// for a message that points at that program or else at a flag of the variant.
struct KernelNameClash {
  size_t variant = 0;
  std::string program;
};

/// "" when every kernel the `variants` have in the `storage` types (each as written: `written`) is
/// named once, else which two name the same kernel: a variant's name (the spec's and its flags'),
/// a program's, and a storage's (its dtypes and state names) can run together, as variant a_f32 in
/// storage f32:m=bf16 and variant a in f32:f32_m=bf16 do. `at` then says where (the variant with
/// more flags set).
std::string kernel_name_clash(const std::vector<Program>& variants, const std::vector<Storage>& storage,
                              const std::vector<std::string>& written, KernelNameClash* at = nullptr);

}  // namespace optgen
