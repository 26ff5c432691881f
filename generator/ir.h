#pragma once
/// The IR: expressions are small immutable nodes shared in a DAG; a Program is the outputs an
/// optimizer step computes from its inputs.
///
/// Values have one of three types. Bool is a truth value; Int and Float are numbers, and every
/// number is computed in the precision of the code it ends up in (double on the host, float or
/// double in the CPU reference, float on the GPU) — Int only records that a value is integral
/// (`step`, int hyperparameters), for checking and printing.
///
/// Every value has a level: how often it is computed. Leaves name their inputs. Per group (once per
/// step and param group): hyperparameters, `step` (counting from 1) and the old value of each
/// scalar state. Per tensor: `numel`, the tensor's element count. Per element: `param`, `grad` and
/// the old value of each state buffer. An operation is at the highest level of its operands, except
/// a reduction (`Reduce`), which moves an element value up: its result is per tensor, and a
/// reduction over the group is read where per-tensor values are computed, after the reduce stage.
/// After `assign_levels`, code of one level reads values of a lower level only through Hoisted
/// leaves, which name the values computed once at that lower level, and reductions only through
/// Reduced leaves, which name the results of the program's `reductions`.

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "builtins.h"
#include "diagnostic.h"
#include "operators.h"
#include "optgen/stage_kind.h"
#include "reductions.h"
#include "spec.h"

namespace optgen {

/// Every node kind, listed once.
#define OPTGEN_FOR_EACH_NODE(X) \
  X(Const)                      \
  X(Var)                        \
  X(Unary)                      \
  X(Binary)                     \
  X(Select)                     \
  X(Call)                       \
  X(Reduce)                     \
  X(Matrix)

enum class NodeKind {
#define OPTGEN_ENUM(name) name,
  OPTGEN_FOR_EACH_NODE(OPTGEN_ENUM)
#undef OPTGEN_ENUM
};

/// A value's level is its domain (optgen/domain.h): how often it is computed, from the least to the
/// most often. A factored tensor (two or more dimensions) is a batch of matrices over its last two
/// dimensions: per matrix, per row and per column sit between Tensor and Element. Row and Column are
/// not ordered (`join` of the two is Element: a value reading both is one per element). Reductions
/// move a value to a coarser domain, and the stage plan (Program::stages) splits a step where they do.
/// The level of a value computed from values of levels `a` and `b`: the lowest both are at or below.
Domain join(Domain a, Domain b);
/// Whether every value of level `a` is known where a value of level `b` is computed (a <= b).
bool at_or_below(Domain a, Domain b);
/// The level a state of this shape is read at: Tensor, Row, Column or Element.
Domain level_of(StateShape shape);

/// What a Var leaf reads. Factored, Rows and Cols are per tensor: whether it has two or more
/// dimensions, and the rows and columns of each of its matrices (1 and numel when not factored).
enum class VarKind {
  Hyperparameter,
  Step,
  ScalarState,
  Numel,
  Factored,
  Rows,
  Cols,
  Param,
  Grad,
  State,
  Hoisted,
  Reduced,
  MatrixValue
};

const char* spelling(UnaryOp op);
const char* spelling(BinaryOp op);
const char* spelling(Builtin fn);  ///< as a spec writes it
bool is_comparison(BinaryOp op);
bool is_logical(BinaryOp op);

struct Node;
using Expr = std::shared_ptr<const Node>;

struct Node {
  NodeKind kind;
  ValueType type;
  Domain level;    ///< the highest level of its leaves
  int height = 1;  ///< 1 for a leaf, else one more than its highest operand

  double value = 0;        ///< Const
  VarKind var{};           ///< Var
  std::string name;        ///< Var: the input's name; Matrix: the matrix function's
  int op = 0;              ///< Unary/Binary: the operator; Call: the Builtin; Reduce: the ReduceOp
  Domain scope{};          ///< Reduce: over a tensor or the whole group
  std::vector<Expr> args;  ///< operands (Select: condition, if_true, if_false)

  // Not part of the node's identity: where it came from, for names and messages.
  std::string hint;  ///< the spec's name for this value, if the author gave it one
  SourceLoc loc;

  UnaryOp unary_op() const { return static_cast<UnaryOp>(op); }
  BinaryOp binary_op() const { return static_cast<BinaryOp>(op); }
  Builtin builtin() const { return static_cast<Builtin>(op); }
  ReduceOp reduce_op() const { return static_cast<ReduceOp>(op); }
  bool is_const() const { return kind == NodeKind::Const; }
  bool is_const(double v) const { return kind == NodeKind::Const && value == v; }

  /// Factories check their invariants and throw InternalError when broken.
  static Expr make_const(double value, ValueType type);
  static Expr make_var(VarKind var, const std::string& name, ValueType type);
  /// A state buffer's old value, at the level of the state's shape (Tensor, Row, Column or Element).
  static Expr make_state(const std::string& name, Domain level);
  /// A value computed at `level` (below Element) by the code of that level, read by name.
  static Expr make_hoisted(const std::string& name, ValueType type, Domain level);
  static Expr make_unary(UnaryOp op, Expr a);
  static Expr make_binary(BinaryOp op, Expr a, Expr b);
  static Expr make_select(Expr condition, Expr if_true, Expr if_false);
  static Expr make_call(Builtin fn, std::vector<Expr> args);
  /// `op` of the number `operand` over `scope`: a float, one per tensor (scope Tensor or Group),
  /// row, column or matrix (see result_level).
  static Expr make_reduce(ReduceOp op, Domain scope, Expr operand);
  /// The result of the reduction of the program called `name` (Program::reductions), read by the
  /// code of the stages after it: the raw sum or maximum, as a double, one per `level`.
  static Expr make_reduced(const std::string& name, Domain level = Domain::Tensor);
  /// Matrix function `op` (matrices.h) of the element value `args[0]`, its other arguments
  /// hyperparameters or numbers: one value per element.
  static Expr make_matrix(const std::string& function, std::vector<Expr> args);
  /// The result of the program's matrix value called `name` (Program::matrix_values), read by the
  /// element code of the stages after the one that computes its argument.
  static Expr make_matrix_value(const std::string& name);
};

/// How high a program's DAG may grow (each statement builds on the ones before it): the passes
/// and emitters walk it recursively, so a higher one is a located error, not a stack overflow.
constexpr int kMaxProgramHeight = 2000;

/// A copy of `e` with new operands (same kind, operator and provenance).
Expr with_args(const Expr& e, std::vector<Expr> args);
/// A copy of `e` with the hint and location given, unless it already has a hint.
Expr with_provenance(const Expr& e, const std::string& hint, const SourceLoc& loc);

/// Structural equality and hashing, ignoring provenance.
bool same_node(const Node& a, const Node& b);  ///< compares operands by pointer
size_t shallow_hash(const Node& n);            ///< hashes operands by pointer

/// The level of a reduction's result over `scope`: Tensor for a tensor or a group, else Row, Column
/// or Matrix.
Domain result_level(Domain scope);

/// A value the step writes: the parameter, a state buffer, or a scalar state.
struct Output {
  std::string name;
  Expr value;
  SourceLoc loc;                   ///< the statement that last assigned it
  Domain level = Domain::Element;  ///< a state's shape: one value per row, per column or per element
  /// A state `update` never assigns, with `init: param`: its buffer is written at the group's
  /// first step only (the parameter), and only read after.
  bool first_step_only = false;
  /// The Reduce stage that stores it (`plan_stages`: a stage that stores a matrix value's operand
  /// and computes the state's new value for it, Muon's momentum), the stages after it reading the
  /// stored value; 0: the Update stage.
  int stage = 0;
};

/// A value computed once at a lower level and read, through a Hoisted leaf of the same name, by the
/// code of a higher level: a group value by tensor and element code, a tensor value by element code.
struct HoistedValue {
  std::string name;
  Expr value;  ///< at the level the value is computed at
};

/// The hoisted values of each domain coarser than Element, in the order they are computed:
/// `values[Domain::Tensor]` are computed once per tensor, and so on. Element has none (element code
/// is the outputs); asking for it is an InternalError.
class DomainValues {
 public:
  std::vector<HoistedValue>& operator[](Domain domain) { return lists_.at(index(domain)); }
  const std::vector<HoistedValue>& operator[](Domain domain) const { return lists_.at(index(domain)); }
  /// The lists from the coarsest domain (Group) to the finest (Column).
  auto begin() { return lists_.begin(); }
  auto end() { return lists_.end(); }
  auto begin() const { return lists_.begin(); }
  auto end() const { return lists_.end(); }

 private:
  static size_t index(Domain domain);
  std::array<std::vector<HoistedValue>, static_cast<size_t>(Domain::Element)> lists_;
};

/// A reduction the step computes before its Update stage: `op` of `operand` (element code, reading
/// lower levels through Hoisted and Reduced leaves) over each tensor, each group, each row or each
/// column; or of row (column) code over each matrix's rows (columns), scope Matrix. Its stage is
/// one more than the latest stage of the reductions its operand reads (1 when none).
struct ReductionValue {
  std::string name;
  ReduceOp op;
  Domain scope;
  Expr operand;
  SourceLoc loc;  ///< the call in the spec
  int stage = 1;  ///< filled by `plan_stages`
};

/// A matrix function the step applies (matrices.h): `operand` (element code, reading lower levels
/// through Hoisted and Reduced leaves) is computed and stored by Reduce stage `stage`, one more than
/// the latest stage of the reductions it reads; the runtime applies the function to every matrix
/// before the next stage, whose element code reads the result through a MatrixValue leaf. `args`:
/// the function's other arguments, each a hyperparameter (a Var) or a number.
struct MatrixValue {
  std::string name;
  std::string function;  ///< the matrix function's name (Spec::find_matrix_function)
  Expr operand;
  std::vector<Expr> args;
  SourceLoc loc;  ///< the call in the spec
  int stage = 1;  ///< filled by `plan_stages`
};

/// The kinds of stage a step is split into. A stage is one kernel launch per step: the Reduce
/// stages, chunk-parallel, each computing the reductions of its number, then the Update stage.

/// One kernel of a variant's stage plan. The last stage of every plan is the Update stage: it
/// writes the element outputs and advances the step counter and the scalar state.
struct Stage {
  StageKind kind;
  std::string name;  ///< names its kernels: <variant>_<storage>_<name>
  int number = 0;    ///< Reduce: which reductions it computes (ReductionValue::stage)
};

/// One optimizer step, or one of the spec's programs beside it, as data flow. Before
/// `assign_levels`, element outputs read hyperparameters and scalar state directly; after it,
/// coarser values only through `values`.
struct Program {
  const Spec* spec = nullptr;
  /// Values of specialized flags, once `specialize` has run; empty before.
  std::map<std::string, bool> flags;
  std::string variant;  ///< e.g. adam_amsgrad; the spec's name before specialization
  /// "step", or the name of the spec's program (`programs:`) this is: one Update stage, named after
  /// it, that writes the outputs and neither counts a step nor changes scalar state.
  std::string entry = "step";
  /// Whether this is the step (not one of the spec's programs): it reads the gradient, counts a
  /// step and commits scalar state.
  bool is_step() const { return entry == "step"; }
  /// The step's only: the spec's programs, compiled for this variant's flags, in declaration order.
  std::vector<Program> programs;
  /// The step as ranks holding shards of the tensors run it (a reduction hook combines their
  /// results between the stages): it stores no matrix, row or column value (shapes.h's
  /// stored_values), so that every such value is computed from results the hook has made whole.
  bool for_shards = false;
  /// The step's only, where it sums over the rows or columns of a matrix (shapes.h's sums_across_shards): itself
  /// for shards (for_shards), whose kernels a FusedOptimizer with a reduction hook runs; null
  /// elsewhere (the step is the same on shards).
  std::shared_ptr<const Program> shard_step;
  /// The step's only, where it has row, column or matrix code: itself for the tensors whose
  /// matrices are one element (unit_matrices.h), which its stage kernels run for those tensors;
  /// null elsewhere.
  std::shared_ptr<const Program> unit_matrices;
  /// Whether this is a step's code for tensors whose matrices are one element (its unit_matrices).
  bool for_unit_matrices = false;

  std::vector<Output>
      scalar_state_updates;  ///< new value of each scalar state `per_step` assigns, in declaration order
  /// New value of each scalar state `update` assigns, in declaration order: one per group, computed
  /// after the Reduce stages from the group's inputs as the step found them (hyperparameters, step,
  /// the scalar state before `per_step`) and the results of reductions over the group (Reduced
  /// leaves once `assign_levels` has run), and committed with the step.
  std::vector<Output> scalar_state_commits;
  /// The hyperparameters that values of one per optimizer read (a scalar state of `scope:
  /// optimizer`, its `init`): every group must hold the same value of each (the runtime checks).
  std::set<std::string> optimizer_hyperparameters;
  /// Filled by `assign_levels`: the values computed once per group, tensor, matrix, row or column,
  /// each read through Hoisted leaves by the code of finer domains.
  DomainValues values;
  std::vector<ReductionValue> reductions;     ///< filled by `assign_levels`: read by tensor code
  std::vector<MatrixValue> matrix_values;     ///< filled by `assign_levels`: read by element code
  std::vector<Output> element_outputs;        ///< param first, then states in declaration order (any level)
  std::vector<Stage> stages;                  ///< filled by `plan_stages`
  std::vector<std::string> states;            ///< state buffers the variant uses, declaration order
  std::map<std::string, Expr> derived_flags;  ///< derived flag -> its value from hyperparameters
  /// state -> when it is present: flags, and `factored` (a Factored leaf: present per tensor).
  std::map<std::string, Expr> state_conditions;
};

/// Rebuilds every root of the program through `f` (see Mutator).
Program map_roots(const Program& program, const std::function<Expr(const Expr&)>& f);

/// Whether the program has matrix, row or column code, or reads `factored`, `rows` or `cols`: its
/// stages then work per matrix, row and column of each tensor, which needs the tensors' shapes.
bool uses_shapes(const Program& program);

/// Every program that has kernels of its own for a step's variant: the step, its step on shards
/// (Program::shard_step) and its programs beside it (Program::programs).
std::vector<const Program*> kernel_programs(const Program& step);

/// Whether the program reduces over every group (optimizer_sum, ...): the CPU reference then steps
/// its groups in two passes (reference::step_groups).
bool reduces_over_optimizer(const Program& program);

/// Applies `f` to every node reachable from the program's roots, operands before users, each once.
void for_each_node(const Program& program, const std::function<void(const Expr&)>& f);
void for_each_node(const Expr& root, const std::function<void(const Expr&)>& f);

}  // namespace optgen
