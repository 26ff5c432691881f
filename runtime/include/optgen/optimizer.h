#pragma once
/// The engine behind every generated launcher. It binds tensor lists and allocates state buffers
/// (add_param_group), builds the device-resident tables and the group table and loads the kernels
/// (prepare), and launches the stage kernels of each step (step). Everything a step computes per
/// param group (step counts, bias corrections, scalar state) is computed on the device from the
/// group table, so a step launches with fixed arguments: it can be captured in a CUDA graph and
/// replayed, and AMP's device-side grad_scale and found_inf feed it without a host sync.
///
/// A generated launcher (e.g. optgen::Adam in adam.h) describes its optimizer with an
/// OptimizerInfo and wraps a FusedOptimizer in a typed API; the C ABI (optgen/c_api.h) wraps the
/// same object for other languages.
///
/// Streams and threads. An optimizer works on one stream at a time: the stream of its last
/// prepare() or eager step() (the legacy default stream before either); a step captured into a
/// CUDA graph on another stream does not change it. Setters that change device state enqueue
/// their write on that stream, so they take effect at the next step in stream order, also between
/// replays of a captured graph, as long as the graph is replayed on that stream (prepare(stream)
/// names another without rebuilding anything). Getters of device state (step_count, scalar_state,
/// checkpoint, save) synchronize that stream first. One optimizer must not be used from two threads
/// at once; different optimizers are independent.

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "optgen/checkpoint.h"
#include "optgen/domain.h"
#include "optgen/spec_kinds.h"
#include "optgen/stage_kind.h"
#include "optgen/dtype.h"
#include "optgen/storage.h"
#include "optgen/kernel_abi.h"  // VariantInfo::stage_blocks' BlockKind bits
#include "optgen/kernel_images.h"
#include "optgen/matrix_program.h"
#include "optgen/reference.h"

namespace optgen {

/// One parameter tensor as the caller hands it over; every pointer is device memory.
struct Tensor {
  void* param = nullptr;
  const void* grad = nullptr;
  std::int64_t numel = 0;
  DType dtype = DType::F32;  ///< of param and grad
  /// The caller's own state buffers, one per state the spec declares (declaration order; entries
  /// for states the variant does not use, or that do not exist for this tensor, are ignored),
  /// taken as they are: not initialised. Each holds the state's values for this tensor: numel, for
  /// a state of rows (columns) one per row (column) of each of its matrices, for a state of the
  /// tensor one (StateInfo::shape; FusedOptimizer::state says how many). Null: optgen allocates
  /// and initialises them.
  void* const* states = nullptr;
  std::int64_t grad_numel = -1;  ///< when the caller knows it: must equal numel (-1: not given)
  /// The tensor's dimensions, outermost first, when the caller knows them (empty: not given). Their
  /// product must equal numel. Only a spec that factors tensors by their shape (rows and columns,
  /// as Adafactor's second moment) needs it; it refuses a tensor bound without one.
  std::vector<std::int64_t> shape = {};
  /// For a rank's shard of a larger tensor (ZeRO, FSDP; combined across ranks by a reduction hook,
  /// FusedOptimizer::set_reduction_hook): the whole tensor's element count, which a spec's `numel`
  /// and `mean` then read. 0: the tensor is whole (its own numel). A shard is of the tensor's first
  /// dimension (FSDP2's Shard(0)), unless shard_dim says otherwise: bound with a shape of two
  /// dimensions, it is rows of a matrix of whole_numel / shape[1] rows, which a spec's `rows`
  /// reads (a multiple of shape[1]), and every rank binding a shard of it holds its part of the
  /// sums over its rows (columns', the matrix's: ReductionResults::col_runs), an empty part (0
  /// rows) too.
  std::int64_t whole_numel = 0;
  /// For a shard bound with a shape of two dimensions: the dimension it is cut along, 0 (rows of
  /// the matrix) or 1 (columns: every row's part, a matrix of shape[0] rows and whole_numel /
  /// shape[0] columns, which a spec's `cols` reads; each rank then holds its part of the sums over
  /// the columns, rows' and the matrix's: ReductionResults::row_runs, an empty part, 0 columns,
  /// too). Adam-mini's block of a whole tensor, one row, is cut so.
  int shard_dim = 0;
  /// For a spec with matrix values (Muon's newton_schulz): each matrix (the last two dimensions of
  /// shape) is this many matrices of consecutive columns, each of shape[-1] / column_splits
  /// columns, which its matrix function takes on its own and a spec's `cols` reads (a Conv1D's
  /// fused QKV projection, in x out, in thirds: 3). Matrices of consecutive rows need no option:
  /// bind the tensor with a shape that batches them ((3, rows / 3, cols)). 1: the matrices are
  /// whole. A tensor with more than one is whole (not a shard), its shape has two or more
  /// dimensions and column_splits divides its last; the spec reduces over no rows or columns.
  int column_splits = 1;
};

/// A state buffer of one tensor.
struct StateBuffer {
  void* data;          ///< null when the state does not exist for the tensor
  std::int64_t numel;  ///< its values: the tensor's numel, B * R for a state of rows, B * C of columns, 1 of the tensor
  /// As stored for this tensor (stored_dtype): an 8-bit state of a tensor under
  /// blockwise8::kMin8bitSize elements is F32. For Q8 and UQ8, `data` holds storage_bytes(dtype,
  /// numel) bytes: the codes, then the block absmax at blockwise8::absmax_offset(numel).
  DType dtype;
};

/// AMP's inputs to one step, as torch.amp.GradScaler hands them to torch's fused optimizers: device
/// pointers to one float each, null when not given. `grad_scale`: the gradients carry this factor,
/// and the update sees grad / *grad_scale (computed in registers; the gradients in memory are not
/// changed). `found_inf`: when nonzero, the whole step is skipped on the device: no parameter,
/// state, scalar state or step count changes.
struct AmpInputs {
  const float* grad_scale = nullptr;
  const float* found_inf = nullptr;
};

/// One reduction a variant computes before its Update stage, at its index r of
/// kernel_abi::ReductionTable: a sum or a maximum, its result one per tensor, group, row, column or
/// matrix (optgen/domain.h).
struct ReductionSlot {
  const char* name;  ///< the generator's name for it, e.g. sum_param_times_param
  bool is_max;       ///< else a sum
  int stage;         ///< the Reduce stage that computes it: 1 for the first launch of a step, ...
  Domain scope = Domain::Tensor;
  /// Row, Column, Matrix: its index among the variant's reductions of that scope, which numbers its
  /// results in kernel_abi::ShapeTable (Tensor and Group reductions use their index r).
  int scope_index = 0;
  /// Column, Matrix: it sums over the rows of a matrix (a column's sum, a matrix's of row or element
  /// values, not one of column values), so that a rank holding some rows of each matrix holds its
  /// part of each result (ReductionResults::col_runs, matrix_runs).
  bool across_rows = false;
  /// Row, Matrix: the same over the columns (a row's sum, a matrix's of column or element values),
  /// for a rank holding some columns of every row (Tensor::shard_dim 1; ReductionResults::row_runs).
  bool across_cols = false;
};

/// One kernel variant of a spec (a combination of specialized flags).
/// How many values a variant stores per matrix, per row and per column (generator/shapes.h).
struct StoredValueCounts {
  int matrix = 0, row = 0, col = 0;
};

/// An argument of a matrix function after its matrix: hyperparameter number `hyperparameter` of the
/// group being stepped, or (-1) the number `value`.
struct MatrixArgument {
  int hyperparameter;
  double value;
};

/// A matrix value of a variant (a spec's call of a matrix function such as newton_schulz, whose
/// program optgen/matrix_program.h describes): its Reduce stage
/// `stage` (1, 2, ... as ReductionSlot::stage) stores its operand, bf16, in buffers the runtime
/// allocates in prepare(), where each tensor is the matrices of its last two dimensions (one for a
/// tensor of two), those of one shape consecutive; the runtime applies `function` to every matrix of
/// one shape at once before the next stage, whose element code reads the result as operand
/// 2 + num_states + its index.
struct MatrixValueInfo {
  const char* name;
  const MatrixProgram* program;
  int stage;
  const MatrixArgument* arguments;  ///< after the matrix, as generator/matrices.h lists them
  int num_arguments;
};

struct VariantInfo {
  const char* name;   ///< e.g. adam_amsgrad
  const int* states;  ///< the spec's state indices it uses, in operand order
  int num_states;
  int group_values_size;     ///< sizeof its GroupValues on the device
  const char* group_kernel;  ///< e.g. adam_amsgrad_group
  /// Its stage plan: per kernel launch of a step, in launch order, the stage's kind (its Reduce
  /// stages, then the one Update stage, last: the FusedOptimizer constructor checks it).
  const StageKind* stage_kinds;
  int num_stages;
  const ReductionSlot* reductions;
  int num_reductions;
  int grad_norm_slot;  ///< the reduction whose root is the published gradient norm, or -1: no clipping
  /// Null, unless the variant has matrix, row or column code (it then needs every tensor's shape):
  /// per stage in launch order, the kinds of block it launches, a mask of kernel_abi::BlockKind bits.
  const unsigned* stage_blocks = nullptr;
  /// Null when every state exists for every tensor; else per entry of `states`, when it does.
  const StatePresence* state_presence = nullptr;
  /// The values it stores once per matrix, row and column for later stages
  /// (kernel_abi::ShapeTable::matrix_values, row_values, col_values: their slots).
  StoredValueCounts stored_values = {};
  /// Its matrix values; null when it has none.
  const MatrixValueInfo* matrix_values = nullptr;
  int num_matrix_values = 0;
  /// Its step on shards, where it sums over the rows or columns of a matrix (across_rows,
  /// across_cols): the stages that
  /// KernelInfo::shard_stages name, which a FusedOptimizer with a reduction hook runs in place of
  /// its own. Per stage, the kinds of block it launches (as stage_blocks); it stores no values
  /// (stored_values), so that every matrix, row and column value is computed from results the hook
  /// has made whole. Null: the step on shards is the variant's own.
  const unsigned* shard_stage_blocks = nullptr;
  /// Whether its stage kernels run a tensor whose matrices are one element (a 1x1 convolution's
  /// weight) as element code, each row, column and matrix value its element's: the plan gives such a
  /// tensor no lines and marks it kernel_abi::kUnitMatrices. Never on shards.
  bool unit_matrices = false;
};

/// Empty when the variant's stage plan is one the runtime runs (its Reduce stages, then its one
/// Update stage, last: only that stage takes the group's tickets and commits the step), else what
/// is wrong, e.g. "has no Update stage".
std::string stage_plan_problem(const VariantInfo& variant);
/// The index of the variant's Update stage (in a plan stage_plan_problem accepts, the last);
/// throws std::logic_error where it has none.
int update_stage(const VariantInfo& variant);

/// Threads per block and elements in flight per thread of a kernel set's stage kernels, compiled
/// into them (kernel_abi.h, "Launch shape"). Printed as 256x8.
struct LaunchShape {
  int block_size;
  int elements_per_thread;
  bool operator==(const LaunchShape& o) const {
    return block_size == o.block_size && elements_per_thread == o.elements_per_thread;
  }
  bool operator!=(const LaunchShape& o) const { return !(*this == o); }
};
std::string to_string(LaunchShape shape);

struct OptimizerInfo;
/// Compiles the kernels of `info` for launch shape `shape` and the architecture
/// `compute_capability` (major * 10 + minor) into the kernel cache, where a FusedOptimizer of that
/// shape loads them from: no GPU is needed, and threads may compile several shapes at once. False
/// when there was nothing to compile (the generator's own shape, or cached already). Throws
/// optgen::Error without NVRTC, or when the compilation fails.
bool compile_launch_shape(const OptimizerInfo& info, LaunchShape shape, int compute_capability);

/// A variant's kernels for one storage (optgen/storage.h).
struct KernelInfo {
  const char* const* stages;  ///< kernel names, one per stage in launch order, e.g. adam_bf16_f32_update
  int variant;
  DType param;  ///< params and grads
  ParamWrite param_write;
  /// Per state the spec declares (OptimizerInfo::states), its dtype; null when it declares none.
  const DType* state_dtypes;
  /// Elements per block, the generator's choice for this storage (narrower operands, longer chunks);
  /// a tuning table (optgen/tuning.h) or FusedOptimizer::set_chunk_size overrides it.
  long long chunk_size;
  /// The kernels of the spec's programs (OptimizerInfo::programs), one each; null without any.
  const char* const* programs = nullptr;
  /// The variant's step on shards (VariantInfo::shard_stage_blocks), one per stage; null without.
  const char* const* shard_stages = nullptr;
  /// Per matrix value of the variant (VariantInfo::matrix_values), the dtype its buffer holds and
  /// its function computes in: BF16 (products that accumulate in fp32) or F32. Null: every one BF16.
  const DType* matrix_dtypes = nullptr;
  /// The Update stage in vectors of kernel_abi::kLongRowVector elements a thread, which a plan
  /// launches in place of the last of `stages` where its rows are long (long_rows in the runtime's
  /// shape_layout.h); null where the set has none (code that reads no element's row, column or
  /// matrix; operands not all f32).
  const char* long_row_update = nullptr;
  /// The Update stage of the tensors whose matrices are one element (VariantInfo::unit_matrices), in
  /// a plan that has some: launched after the Update stage, over their chunks (the last of the
  /// plan's chunk table); null where the variant has no such code.
  const char* unit_update = nullptr;
};

/// The names of the matrix values of every variant of `info` (VariantInfo::matrix_values), in order
/// of first appearance: what StorageOptions may name beside the states.
std::vector<std::string> matrix_value_names(const OptimizerInfo& info);

/// The dtype of matrix value `j` of a kernel set's variant (KernelInfo::matrix_dtypes).
inline DType matrix_dtype(const KernelInfo& kernel, int j) {
  return kernel.matrix_dtypes ? kernel.matrix_dtypes[j] : DType::BF16;
}

/// What the engine knows about an optimizer: data, built by the generator from the spec
/// (generator/optimizer_tables.h). A generated launcher holds it in static tables; a spec loaded at
/// run time (optgen/spec_at_run_time.h) in an object of its own, which must outlive the engine.
struct OptimizerInfo {
  int abi_version;        ///< kernel_abi::kVersion of the optgen that generated it
  const char* generator;  ///< e.g. "optgen 0.2.0"
  const char* name;       ///< the class, e.g. AdamW
  const char* spec;       ///< the spec's file stem, e.g. adamw
  const reference::HyperparameterInfo* hyperparameters;
  int num_hyperparameters;
  const reference::StateInfo* states;
  int num_states;
  const reference::StateInfo* scalar_states;
  int num_scalar_states;
  /// The specialized flags as indices into `hyperparameters`, in the order of the variant bits:
  /// the variant a group runs is the sum of 2^i over the flags[i] that are true (select_variant).
  const int* flags;
  int num_flags;
  /// Fills in the derived flags of `h` (every hyperparameter, declaration order) from the other
  /// hyperparameters, called with `derive_context`; null when the spec has no derived flags. A
  /// launcher's runs the CPU reference's compiled code (no context); a spec loaded at run time
  /// evaluates the flags' IR (the context is the loaded spec).
  void (*derive_flags)(const void* context, double* h);
  const void* derive_context;
  const VariantInfo* variants;
  int num_variants;
  const KernelInfo* kernels;
  int num_kernels;
  /// The kernels: source and the images compiled at build time (<spec>_images.cpp), or source
  /// only, for NVRTC at load time (a spec loaded at run time).
  const KernelImages* images;
  /// The launch shape the kernels were generated for (kernel_abi.h, "Launch shape"): threads per
  /// block and elements in flight per thread. The images were compiled for it; another (a tuning
  /// table's, FusedOptimizer::set_launch_shape's) compiles the source again with NVRTC.
  int block_size;
  int elements_per_thread;
  /// Elements per block of the default variant's f32 kernel set (KernelInfo::chunk_size: each set's).
  long long chunk_size;
  /// The spec's programs beside the step (`programs:`, e.g. schedule-free's eval and train), by
  /// name, in declaration order: FusedOptimizer::run runs one.
  const char* const* programs = nullptr;
  int num_programs = 0;
  /// The spec's `block_elements` (its blocks' elements), 0 for none: the engine views each tensor
  /// of a whole number of blocks as numel / block_elements rows of block_elements, whatever the
  /// shape it is bound with, and every other tensor as a vector (not factored): the rows of that
  /// view are the spec's blocks (docs/DESIGN.md, "The block domain").
  long long block_elements = 0;
};

/// The oldest GPU (major * 10 + minor) kernel set `kernel` of `info` runs on: the newest
/// minimum_compute_capability (optgen/dtype.h) of its params' dtype and its variant's states' (80
/// where any is bf16, or where the variant has a matrix value: bf16 matrices). The generator compiles its stage kernels
/// empty for older GPUs (generator/emit_cuda.h, minimum_arch), and prepare() refuses a group of it there.
int minimum_compute_capability(const OptimizerInfo& info, const KernelInfo& kernel);

/// Every hyperparameter's default from the spec, in declaration order (derived flags as 0).
std::vector<double> default_hyperparameters(const OptimizerInfo& info);

/// Fills in the derived flags of `h` (every hyperparameter, declaration order).
void derive_flags(const OptimizerInfo& info, double* h);

/// The variant the flags of `h` (derived ones filled in) select: an index into info.variants.
int select_variant(const OptimizerInfo& info, const double* h);

/// Checks that `checkpoint` is an optgen optimizer checkpoint of the spec `info` describes (format,
/// optimizer, spec, the names of its hyperparameters, states and scalar states); throws
/// optgen::Error naming the first difference. Needs no GPU; FusedOptimizer::restore checks this
/// and then everything about the groups.
void check_checkpoint_spec(const Checkpoint& checkpoint, const OptimizerInfo& info);

/// What a reduction hook (FusedOptimizer::set_reduction_hook) is handed after the launch of a
/// Reduce stage: where that stage left its results, raw sums and maxima in double, reduction-major
/// (kernel_abi::ReductionTable): reduction r's result for tensor t of the plan at
/// tensor_results[r * num_tensors + t], for group g at group_results[r * num_groups + g]; a norm's
/// result is its sum of squares. The stage's reductions are those of `slots` whose stage is
/// `stage`. The launches are enqueued, not finished: work on the results goes on `stream`.
///
/// A variant that reduces over rows, columns or matrices (Adafactor, Adam-mini) keeps those results
/// in the plan's kernel_abi::ShapeTable, as floats. A rank whose tensor of two dimensions is a shard
/// of a matrix (bound with Tensor::whole_numel) holds whole rows of it, and so whole row results,
/// but only its part of each sum over rows (ReductionSlot::across_rows: a column's, a matrix's);
/// one cut along its columns (Tensor::shard_dim 1), the reverse (ReductionSlot::across_cols: a
/// row's, a matrix's). `row_runs`, `col_runs` and `matrix_runs` list those of the stage, the same
/// on every rank, as runs of floats of `row_results`, `col_results` and `matrix_results`, for the
/// hook to sum across the ranks as it sums the tensor results. A tensor of more dimensions sharded
/// along its first holds whole matrices and has none there.
struct ResultRun {
  std::int64_t first;  ///< the run's first float
  std::int64_t count;  ///< floats in it
};
struct ReductionResults {
  int stage;                   ///< the Reduce stage just launched, from 1
  const ReductionSlot* slots;  ///< every reduction of the variant, by index r
  int num_slots;
  double* tensor_results;  ///< device memory
  int num_tensors;         ///< the plan's tensors, in the order of its groups, then their lists
  double* group_results;   ///< device memory, by the optimizer's group index
  int num_groups;          ///< every group of the optimizer (those of other plans are unused)
  CUstream stream;
  float* row_results;  ///< device memory; null without row reductions
  const ResultRun* row_runs;
  int num_row_runs;
  float* col_results;  ///< device memory; null without column reductions
  const ResultRun* col_runs;
  int num_col_runs;
  float* matrix_results;  ///< device memory; null without matrix reductions
  const ResultRun* matrix_runs;
  int num_matrix_runs;
};

/// What a matrix hook (FusedOptimizer::set_matrix_hook) is handed after the launch of a Reduce
/// stage that stores matrix values, in place of the work the optimizer would do on them: every
/// tensor's matrices of each value that stage stored, which the hook replaces by the value's
/// function of them (MatrixValueInfo::program with `arguments`, e.g. with
/// FusedOptimizer::apply_matrix_function) by work on `stream`, before the next stage reads them.
struct MatrixWork {
  struct Matrices {
    int value;           ///< index into VariantInfo::matrix_values
    std::size_t group;   ///< the optimizer's group
    std::size_t tensor;  ///< the tensor's index in its group
    CUdeviceptr x;       ///< `batch` row-major matrices of rows x cols of `dtype`, consecutive
    std::int64_t batch, rows, cols;
    const double* arguments;  ///< the function's arguments for the group
    int num_arguments;        ///< MatrixValueInfo::num_arguments
    DType dtype;              ///< x's elements: BF16, or F32 (KernelInfo::matrix_dtypes)
  };
  int stage;  ///< the Reduce stage just launched, from 1
  const Matrices* matrices;
  /// Every tensor of the plan, in plan order, each value's in turn; one without elements (a rank's
  /// empty shard) too, with x 0 and batch 0, so that the ranks' hooks see the same list.
  int num_matrices;
  CUstream stream;
};

class FusedOptimizer {
 public:
  /// Hyperparameters by name, e.g. {{"lr", 1e-3}, {"weight_decay", 0.1}}.
  using Overrides = std::vector<std::pair<std::string, double>>;

  /// `defaults`: every hyperparameter in declaration order (bools 0/1; derived flags ignored).
  /// `storage`: how states are stored, and for bf16 and f16 params a master copy or stochastic
  /// rounding (optgen/storage.h); each group runs the kernel set generated for its params' dtype
  /// and this storage, and add_param_group refuses a group for which none was generated.
  FusedOptimizer(const OptimizerInfo& info, std::vector<double> defaults, StorageOptions storage = {});
  FusedOptimizer(FusedOptimizer&&) noexcept;
  FusedOptimizer& operator=(FusedOptimizer&&) noexcept;
  ~FusedOptimizer();

  /// Adds a param group with these hyperparameters (every one, declaration order); returns its
  /// index. A value its hyperparameter cannot take is an optgen::Error naming it: NaN, a bool other
  /// than 0 or 1, an int that is not a whole number (set() refuses them too). Checks every tensor
  /// and throws optgen::Error naming the tensor and the problem;
  /// allocates and initialises the group's state buffers. The optimizer must be prepared again
  /// (prepare(), or the next step() does it) before it steps.
  std::size_t add_param_group(const std::vector<Tensor>& tensors, std::vector<double> hyperparameters);
  /// Same, with the optimizer's defaults except the named overrides.
  std::size_t add_param_group(const std::vector<Tensor>& tensors, const Overrides& overrides);

  /// Loads the kernels, builds the tensor tables and the device-resident group table, and computes
  /// the first step's group values on `stream`. Synchronizes the device (it allocates and uploads).
  /// Call it before capturing step() in a CUDA graph; step() calls it when needed, outside a
  /// capture. On a prepared optimizer it only makes `stream` the optimizer's stream.
  void prepare(CUstream stream = nullptr);
  bool prepared() const;

  /// One optimizer step of every group, on `stream`: one kernel launch per stage of each distinct
  /// (variant, dtype) among the groups, normally one. Launches only: no host computation, no
  /// upload, no synchronization, so it can be captured in a CUDA graph (after prepare()). Steps
  /// must be ordered on the device (one stream, or synchronized). A launch that fails leaves the
  /// groups it would have updated as they were; with several (variant, dtype) kernels, those
  /// launched before it have stepped.
  void step(CUstream stream = nullptr);
  void step(CUstream stream, const AmpInputs& amp);
  /// Runs the spec's program `program` (OptimizerInfo::programs) over every tensor of every group,
  /// in stream order, preparing first where needed: one launch per kernel set. It reads what the
  /// group's next step would read (hyperparameters, scalar state, states; a state with `init: param`
  /// reads as the parameter before the group's first step), writes what it assigns, and counts no
  /// step. Throws optgen::Error naming the spec's programs for an unknown name.
  void run(const std::string& program, CUstream stream = nullptr);

  /// Sets a hyperparameter of every group, or of one. Specialized flags (and values that would
  /// change a derived flag) select kernels and state buffers, so they cannot change after the
  /// group is added: optgen::Error then. Once prepared, the write is enqueued on the optimizer's
  /// stream (see the top of this file); it is not part of a graph captured earlier, so a
  /// learning-rate schedule works between replays.
  void set(const std::string& name, double value);
  void set(const std::string& name, double value, std::size_t group);
  double get(const std::string& name, std::size_t group) const;
  std::vector<double> hyperparameters(std::size_t group) const;

  /// Steps a group has taken, and its scalar state (synchronize when prepared). Setters for both,
  /// to resume from a checkpoint kept in a format of the caller's own.
  std::int64_t step_count(std::size_t group) const;
  void set_step_count(std::int64_t steps, std::size_t group);
  double scalar_state(const std::string& name, std::size_t group) const;
  void set_scalar_state(const std::string& name, double value, std::size_t group);

  /// State `name` of a tensor. A tensor of two or more dimensions is B matrices of R rows and C
  /// columns (its last two dimensions; any other tensor one matrix of one row of numel columns): a
  /// state of rows holds B * R values, of columns B * C, of elements numel, of the tensor 1. A state that exists
  /// for factored tensors only (a spec's `when: factored`), or for the others only, is {null, 0}
  /// for the rest; one the group's variant does not have is an optgen::Error.
  StateBuffer state(const std::string& name, std::size_t group, std::size_t tensor) const;
  /// The fp32 master copy of a tensor's param (StorageOptions::param_write Master): numel F32 values,
  /// set from the param when its group is added, then updated by every step (the param is written
  /// from it, rounded to nearest); {null, 0} without one.
  StateBuffer master_weights(std::size_t group, std::size_t tensor) const;

  /// Points tensor `tensor` of group `group` at other param and grad memory of the same size and
  /// dtype (torch, for one, allocates new gradients after zero_grad(set_to_none=True)); checked as
  /// add_param_group checks them. Keeps everything else: states, step counts, the kernels. Once
  /// prepared, the next step uploads the plan's pointer table in stream order before it launches
  /// (no synchronization); a step captured in a CUDA graph keeps reading the pointers it was
  /// captured with, whatever is rebound later, and a rebind during a capture is part of that
  /// graph. Between steps only: steps already enqueued read the pointers they were launched with.
  void rebind(std::size_t group, std::size_t tensor, void* param, const void* grad);

  /// Everything that defines the optimizer's future (hyperparameters, step counts and scalar state
  /// of every group, every state buffer in its storage dtype) as a checkpoint, and back. The
  /// optimizer being restored must have the same spec and the same param groups (tensor counts,
  /// sizes, variants, state dtype); anything else is refused with optgen::Error before anything
  /// changes. Both synchronize. restore() writes in place: a graph captured before it stays valid
  /// and continues from the restored state.
  Checkpoint checkpoint() const;
  void restore(const Checkpoint& checkpoint);
  /// The same through a safetensors file (optgen/checkpoint.h describes its content).
  void save(const std::string& path) const;
  void load(const std::string& path);

  /// Which states a group of these hyperparameters (every one, declaration order; derived flags
  /// ignored) has: one flag per state the spec declares. Checks them as add_param_group does.
  std::vector<bool> states_used(std::vector<double> hyperparameters) const;
  /// For each state the spec declares, for which tensors of a group of these hyperparameters (as
  /// states_used takes them) it exists; nullopt where the group's variant does not have it.
  std::vector<std::optional<StatePresence>> state_presence(std::vector<double> hyperparameters) const;
  /// Whether a group of these hyperparameters (as states_used takes them) computes a reduction over
  /// all of its tensors (a global norm: max_grad_norm > 0, or a spec's group_norm): such a group
  /// must hold every tensor the reduction is meant to cover. A reduction over every group
  /// (optimizer_sum, ...) does not count: it covers the tensors however they are grouped.
  bool reduces_over_group(std::vector<double> hyperparameters) const;

  std::size_t num_groups() const;
  std::size_t num_tensors(std::size_t group) const;
  /// The global gradient norm of `group` at its last step (the norm torch's clip_grad_norm_ returns,
  /// of the unscaled gradients; inf or NaN for a step AMP skipped), in device memory: one float,
  /// written by each step on its stream, valid until the optimizer is prepared again. Only a group
  /// whose variant clips (max_grad_norm > 0) has one: optgen::Error otherwise, and before prepare().
  const float* grad_norm(std::size_t group) const;

  /// Called after each launch of a Reduce stage, before the next stage is launched, eagerly and
  /// while a step is captured: the place to combine the results of ranks whose tensors are shards
  /// of the same model (ZeRO, FSDP) before the stages that read them, e.g. with one
  /// ncclAllReduce per reduction of the stage (ncclSum or ncclMax, on `stream`) over its tensor
  /// results and, for a group reduction, its group results. Every rank must then hold the same
  /// groups with the same number of tensors, each its own part of every tensor (an empty part
  /// too), bound with the whole tensor's element count (Tensor::whole_numel), which a spec's mean
  /// and numel count. The hook may change the results only: the next
  /// stage may start loading its operands (params, gradients, states) before the hook's work on
  /// the stream has ended, and waits only before it reads the results (on GPUs of compute
  /// capability 9.0 and later, stages overlap: programmatic dependent launch). An empty function
  /// removes the hook. A variant that sums over the rows or columns of a matrix (Adafactor, Adam-mini;
  /// across_rows, across_cols) runs its step on shards (VariantInfo::shard_stage_blocks) while a
  /// hook is set, which computes every matrix, row and column value after the hook has summed the
  /// row, column and matrix results it is handed (ReductionResults::row_runs, ...); setting or
  /// removing the hook of a prepared optimizer prepares it again at the next step. Shards of
  /// tensors of two dimensions hold whole rows, or whole columns (Tensor::shard_dim).
  void set_reduction_hook(std::function<void(const ReductionResults&)> hook);

  /// Called after each launch of a Reduce stage that stores matrix values, in place of the
  /// optimizer's own work on them, eagerly and while a step is captured: the place where ranks
  /// that hold shards of matrices (rows of each, Tensor::whole_numel) bring each whole matrix
  /// together, apply the function to it (apply_matrix_function) and hand each rank its rows back,
  /// on `stream`, before the next stage reads them. Every rank must hold the same groups with the
  /// same tensors. An empty function removes the hook.
  void set_matrix_hook(std::function<void(const MatrixWork&)> hook);
  /// Bytes of scratch apply_matrix_function needs for matrix value `value` of the variant group
  /// `group` runs, on `count` matrices of `rows` x `cols` of `dtype` (Matrices::dtype): what its
  /// function's program needs, whatever the arguments.
  std::size_t matrix_function_scratch_bytes(std::size_t group, int value, long long count, long long rows,
                                            long long cols, DType dtype = DType::BF16) const;
  /// Applies matrix value `value`'s function (of a variant of the group `group` runs), with the
  /// group's arguments `arguments` (MatrixWork::Matrices::arguments), to `count` row-major matrices
  /// of `rows` x `cols` of the group's kernel set's dtype for it (Matrices::dtype), consecutive at
  /// `x`, in place, as a step does to its own; enqueued
  /// on `stream` and capturable. `scratch`: matrix_function_scratch_bytes of device memory. Needs
  /// the optimizer prepared.
  void apply_matrix_function(std::size_t group, int value, const double* arguments, CUdeviceptr x, CUdeviceptr scratch,
                             long long count, long long rows, long long cols, CUstream stream);

  /// Launches the last step enqueued (for tests): its stages' kernels and, for matrix values,
  /// the work on them between stages (norm kernels, cuBLAS products, each counted once, and
  /// copies); not a matrix hook's, which does that work in their place.
  int launches_last_step() const;
  /// Elements per block of every kernel set, instead of each one's own; the optimizer must be
  /// prepared again (the tables are rebuilt).
  void set_chunk_size(long long elements);
  /// Elements per block of the kernel set that steps `group`: set_chunk_size's; else, where the
  /// environment variable OPTGEN_TUNING names a table for this device (optgen/tuning.h), the
  /// table's for a plan of as many elements as the groups of that kernel set hold; else the
  /// generator's (KernelInfo::chunk_size), which prepare() halves, down to 2048, while the plan's
  /// elements would fill fewer chunks than two per multiprocessor (a small model's 8-bit states),
  /// or than 32 for a kernel set of rows and columns (Adafactor's, Adam-mini's on a small model).
  long long chunk_size(std::size_t group) const;
  /// Compiles every kernel set for `shape` instead of each one's own; the optimizer must be
  /// prepared again. A shape other than the generator's (OptimizerInfo::block_size,
  /// elements_per_thread) is compiled with NVRTC when prepare() loads it (through the kernel
  /// cache), so it needs NVRTC. optgen::Error for a shape kernel_abi.h does not allow. {0, 0}
  /// goes back to each set's own.
  void set_launch_shape(LaunchShape shape);
  /// The launch shape of the kernel set that steps `group`: set_launch_shape's; else the tuning
  /// table's entry for that set's plan (as chunk_size), where it gives one; else the generator's.
  LaunchShape launch_shape(std::size_t group) const;
  /// The kernel set that steps `group` (its variant and storage).
  const KernelInfo& kernel_set(std::size_t group) const;
  /// The stage kernels that step `group`, in launch order, as prepare() chose them: the kernel
  /// set's stages, those of its step on shards (with a reduction hook), or with the Update stage
  /// of long rows last (KernelInfo::long_row_update); then, where its plan has tensors whose
  /// matrices are one element, their Update stage (KernelInfo::unit_update). optgen::Error before
  /// prepare().
  std::vector<std::string> stage_kernels(std::size_t group) const;
  const OptimizerInfo& info() const;
  const StorageOptions& storage() const;
  /// The dtype state `name` is stored in (StorageOptions resolved); optgen::Error for an unknown name.
  DType state_dtype(const std::string& name) const;
  /// Where the kernels of the generator's launch shape came from (an embedded cubin, NVRTC, the
  /// cache); loaded by prepare().
  ModuleOrigin module_origin() const;
  /// Where the kernels that step `group` came from: module_origin(), or for a group of another
  /// launch shape, NVRTC or the cache. Loaded by prepare().
  ModuleOrigin module_origin(std::size_t group) const;

  /// The engine's insides, defined by the runtime's sources (runtime/src/optimizer_impl.h).
  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace optgen
