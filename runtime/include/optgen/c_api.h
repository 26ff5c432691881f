#ifndef OPTGEN_C_API_H
#define OPTGEN_C_API_H
/* The C ABI over optgen's generated optimizers, for any language that can call C (Python's ctypes
 * included). Every optimizer is created by its launcher's `optgen_<spec>_create` (declared in the
 * launcher's header, e.g. adam.h) and then driven by the generic functions below. The semantics
 * are those of optgen::FusedOptimizer (optgen/optimizer.h), which each function names.
 *
 * Every function that returns int returns 0 on success and -1 on failure; optgen_last_error()
 * then returns the message (which call failed, the error, what to do), valid until the thread's
 * next optgen call. Nothing throws across this boundary.
 *
 * A typical loop, with optional AMP inputs and a CUDA graph:
 *   optgen_adamw_create(names, values, n, NULL, &opt);     // NULL: f32 states, params as they are
 *   optgen_add_param_group(opt, tensors, count, NULL, NULL, 0, NULL);
 *   optgen_prepare(opt, stream);                 // before a capture: allocates, uploads, loads
 *   ... capture optgen_step_amp(opt, stream, grad_scale, found_inf) into a graph, replay it ...
 *   optgen_set(opt, "lr", lr, -1);               // between replays: enqueued on the stream
 *   optgen_save(opt, "optimizer.safetensors");   // and optgen_load() to resume bit-identically */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this ABI, and of the library that implements it: a program compiled against one
 * version checks optgen_abi_version() == OPTGEN_ABI_VERSION before anything else. */
#define OPTGEN_ABI_VERSION 17
int32_t optgen_abi_version(void);
/* The optgen release, e.g. "0.2.0". */
const char* optgen_version(void);
/* The built-in optimizers of a library that links them all (liboptgen.so for Python,
 * liboptgen_builtin.so): their spec names in name order, comma-separated, e.g. "adadelta,adafactor,...",
 * each with its optgen_<name>_create. A launcher library of one spec does not define it. */
const char* optgen_builtin_specs(void);

typedef struct optgen_optimizer optgen_optimizer;

/* Element types: the values of optgen::DType. OPTGEN_Q8 and OPTGEN_UQ8 are state dtypes only:
 * 8-bit blockwise (bitsandbytes' signed and unsigned dynamic maps, optgen/blockwise8.h), whose
 * buffer is the codes, padded to 16 bytes, then a float absmax per block of 256 (ABI 6). */
enum { OPTGEN_F32 = 0, OPTGEN_BF16 = 1, OPTGEN_F16 = 2, OPTGEN_Q8 = 3, OPTGEN_UQ8 = 4 };

/* The layout of 8-bit blockwise state dtype `dtype` (OPTGEN_Q8 or OPTGEN_UQ8; optgen/blockwise8.h),
 * for a caller that reads or writes such buffers itself: `map` (256 floats, or NULL) the value of
 * each code, ascending; `block_size` the elements each absmax covers (256); `min_numel` the least
 * elements a tensor keeps the state in 8 bits at (4096; below it, OPTGEN_F32 values). (ABI 13.) */
int optgen_blockwise8_layout(int32_t dtype, float* map, int32_t* block_size, int64_t* min_numel);

/* How a bf16 or f16 param is written after its update: the values of optgen::ParamWrite. */
enum { OPTGEN_PARAM_NEAREST = 0, OPTGEN_PARAM_MASTER = 1, OPTGEN_PARAM_STOCHASTIC = 2 };

/* What an optimizer stores (optgen::StorageOptions, optgen/storage.h); a NULL optgen_storage* is
 * every member 0: f32 states, params rounded to nearest. Read during the call only. (ABI 5.) */
typedef struct {
  int32_t state_dtype;     /* every state not named below: OPTGEN_F32, _BF16, _F16, _Q8 or _UQ8 */
  size_t num_state_dtypes; /* per-state dtypes: */
  const char* const* state_names;
  const int32_t* state_dtypes;
  int32_t param_write; /* OPTGEN_PARAM_NEAREST, _MASTER (an fp32 master copy) or _STOCHASTIC (bf16) */
  uint64_t seed;       /* of stochastic rounding's random stream */
} optgen_storage;

/* One parameter tensor; device pointers. `states`: NULL, or one caller-owned buffer per state the
 * spec declares (declaration order), used as it is: each of the state's own size (optgen_state);
 * entries for states the tensor does not have are ignored. `ndim` and `shape`: the tensor's
 * dimensions, outermost first, whose product must equal `numel`; ndim 0 (shape NULL): not given,
 * which only a spec that factors tensors by their shape (Adafactor's rows and columns) refuses for
 * a tensor of more than one element. `whole_numel`: for a rank's shard of a larger tensor, the
 * whole tensor's element count, which the spec's numel and mean read (optgen::Tensor::whole_numel;
 * see optgen_set_reduction_hook); 0: the tensor is whole. `shard_dim`: the dimension such a shard
 * of a tensor bound with two dimensions is cut along, 0 (rows) or 1 (columns;
 * optgen::Tensor::shard_dim). `column_splits`: for a spec with matrix values, each matrix is this
 * many matrices of consecutive columns (optgen::Tensor::column_splits); 0 or 1: whole matrices.
 * Read during the call only. (ABI 3 added ndim and shape, ABI 8 whole_numel, ABI 12 shard_dim,
 * ABI 16 column_splits.) */
typedef struct {
  void* param;
  const void* grad;
  int64_t numel;
  int64_t grad_numel; /* -1: same as numel */
  int32_t dtype;      /* of param */
  int32_t grad_dtype; /* must equal dtype */
  void* const* states;
  int32_t ndim;
  const int64_t* shape;
  int64_t whole_numel;
  int32_t shard_dim;
  int32_t column_splits;
} optgen_tensor;

/* The message of the calling thread's last failure ("" if none). */
const char* optgen_last_error(void);

/* Adds a param group: `count` tensors, and `num_overrides` hyperparameters by name that differ from
 * the optimizer's defaults. Writes the group's index to `group` (may be NULL). */
int optgen_add_param_group(optgen_optimizer* optimizer, const optgen_tensor* tensors, size_t count,
                           const char* const* override_names, const double* override_values, size_t num_overrides,
                           size_t* group);

/* Loads the kernels and builds the device tables (FusedOptimizer::prepare); needed before a step is
 * captured in a CUDA graph, done by the first step otherwise. */
int optgen_prepare(optgen_optimizer* optimizer, void* stream);

/* One step of every group, launched on `stream` (a CUstream or cudaStream_t; NULL: the default
 * stream). Capturable in a CUDA graph once prepared. */
int optgen_step(optgen_optimizer* optimizer, void* stream);
/* The same under AMP: `grad_scale` and `found_inf` are device pointers to one float each, or NULL
 * (see optgen::AmpInputs): the update sees grad / *grad_scale, and a nonzero *found_inf skips the
 * whole step, step count included. */
int optgen_step_amp(optgen_optimizer* optimizer, void* stream, const float* grad_scale, const float* found_inf);
/* The spec's programs beside the step (`programs:`, e.g. schedule-free's "eval" and "train"): how
 * many, and the name of number `index` (lives as long as the optimizer). (ABI 9.) */
int optgen_num_programs(const optgen_optimizer* optimizer, size_t* count);
int optgen_program_name(const optgen_optimizer* optimizer, size_t index, const char** name);
/* Runs the program called `name` over every tensor of every group on `stream`
 * (FusedOptimizer::run): one launch per kernel set, no step counted; capturable once prepared.
 * (ABI 9.) */
int optgen_run(optgen_optimizer* optimizer, const char* name, void* stream);

/* Sets a hyperparameter of one group, or of every group when `group` is negative. */
int optgen_set(optgen_optimizer* optimizer, const char* name, double value, int64_t group);
int optgen_get(const optgen_optimizer* optimizer, const char* name, size_t group, double* value);

/* The device address of one tensor's state buffer: numel values for a state of elements, one per
 * row (B * R) or column (B * C) of the tensor's matrices for a state of rows or columns (see
 * optgen_state_info); NULL for a state that does not exist for this tensor (optgen_state_presence). */
int optgen_state(const optgen_optimizer* optimizer, const char* name, size_t group, size_t tensor, void** data);
/* The same, with what the buffer holds: `numel` values (as optgen_state), stored as `dtype` (an
 * 8-bit state of a tensor under 4096 elements is OPTGEN_F32, as bitsandbytes keeps it), in `bytes`
 * bytes (FusedOptimizer::state, optgen::storage_bytes). Any of numel, dtype, bytes may be NULL. (ABI 6.) */
int optgen_state_buffer(const optgen_optimizer* optimizer, const char* name, size_t group, size_t tensor, void** data,
                        int64_t* numel, int32_t* dtype, size_t* bytes);
int optgen_num_groups(const optgen_optimizer* optimizer, size_t* groups);
/* Step counts and scalar state of a group (reading synchronizes), and setters for both. */
int optgen_step_count(const optgen_optimizer* optimizer, size_t group, int64_t* count);
int optgen_set_step_count(optgen_optimizer* optimizer, size_t group, int64_t count);
int optgen_scalar_state(const optgen_optimizer* optimizer, const char* name, size_t group, double* value);
int optgen_set_scalar_state(optgen_optimizer* optimizer, const char* name, size_t group, double value);

/* Checkpoints as safetensors files (optgen/checkpoint.h): everything that defines the optimizer's
 * future. Loading checks the spec, the groups, names, shapes and dtypes, and changes nothing when
 * they do not fit. */
int optgen_save(const optgen_optimizer* optimizer, const char* path);
int optgen_load(optgen_optimizer* optimizer, const char* path);
/* Kernel launches the last step made. */
int optgen_launches_last_step(const optgen_optimizer* optimizer, int* launches);
/* The device address of a group's global gradient norm at its last step (FusedOptimizer::grad_norm):
 * one float, valid until the optimizer is prepared again; only for a group that clips. */
int optgen_grad_norm(const optgen_optimizer* optimizer, size_t group, const float** norm);
/* Elements per block of every kernel set instead of each one's own (FusedOptimizer::set_chunk_size):
 * a multiple of 64 up to 2^30, of 256 where a set has 8-bit states. The next step prepares again. */
int optgen_set_chunk_size(optgen_optimizer* optimizer, int64_t elements);
/* Elements per block of the kernel set that steps `group` (FusedOptimizer::chunk_size): the one
 * set above, else the tuning table's (OPTGEN_TUNING), else the generator's, halved once prepared
 * while the plan's elements would fill fewer chunks than two per multiprocessor (32 for a kernel
 * set of rows and columns). (ABI 7) */
int optgen_chunk_size(const optgen_optimizer* optimizer, size_t group, int64_t* elements);
/* Threads per block and elements per thread of every kernel set (FusedOptimizer::set_launch_shape):
 * powers of two, 32 to 1024 threads and up to 64 elements; 0, 0 gives each set back its own. A
 * shape other than the generator's is compiled with NVRTC when the optimizer is next prepared,
 * through the kernel cache. (ABI 7) */
int optgen_set_launch_shape(optgen_optimizer* optimizer, int block_size, int elements_per_thread);
/* The launch shape of the kernel set that steps `group` (FusedOptimizer::launch_shape): the one set
 * above, else the tuning table's, else the generator's. (ABI 7) */
int optgen_launch_shape(const optgen_optimizer* optimizer, size_t group, int* block_size, int* elements_per_thread);

/* ---- Sharded tensors: reductions across ranks (ABI 8) ----
 * A reduction of the optimizer's variant (optgen::ReductionSlot), as a reduction hook sees it. */
typedef struct {
  const char* name; /* the generator's name for it, e.g. sum_param_times_param */
  int32_t is_max;   /* 1: a maximum, 0: a sum */
  int32_t stage;    /* the Reduce stage that computes it, from 1 */
  /* 1: over all tensors of a group, or of every group (results in group_results, one per group:
   * the kernels add an optimizer-wide one's up), 0: per tensor */
  int32_t over_group;
} optgen_reduction;

/* A run of `count` floats from float `first` of a buffer (optgen::ResultRun). (ABI 11) */
typedef struct {
  int64_t first;
  int64_t count;
} optgen_result_run;

/* What a reduction hook is handed after the launch of a Reduce stage (optgen::ReductionResults):
 * reduction r's result for tensor t of the plan at tensor_results[r * num_tensors + t], for group g
 * at group_results[r * num_groups + g]; raw sums and maxima in double, device memory, written by
 * work enqueued on `stream`. The stage's reductions are those of `reductions` whose stage is `stage`.
 * A spec that sums over the rows or columns of matrices (Adafactor's column and matrix sums,
 * Adam-mini's row sums) adds the float row, column and matrix results that are each rank's part
 * (sums over the rows, or columns, of tensors of two dimensions bound as shards cut along them):
 * the runs row_runs of row_results, col_runs of col_results and matrix_runs of matrix_results, the
 * same on every rank, which the hook sums across the ranks too. (ABI 11 added the column and matrix
 * runs, ABI 12 the row runs.) */
typedef struct {
  int32_t stage;
  int32_t num_reductions;
  const optgen_reduction* reductions; /* every reduction of the variant, by index r */
  double* tensor_results;
  int64_t num_tensors;
  double* group_results;
  int64_t num_groups;
  void* stream;
  float* row_results;
  const optgen_result_run* row_runs;
  int64_t num_row_runs;
  float* col_results;
  const optgen_result_run* col_runs;
  int64_t num_col_runs;
  float* matrix_results;
  const optgen_result_run* matrix_runs;
  int64_t num_matrix_runs;
} optgen_reduction_results;

/* Returns 0, or nonzero when it failed: the step then fails with optgen_last_error() saying so. */
typedef int (*optgen_reduction_hook)(const optgen_reduction_results* results, void* user_data);

/* Calls `hook` with `user_data` after each Reduce stage's launch, eagerly and while a step is
 * captured (FusedOptimizer::set_reduction_hook): where ranks whose tensors are shards of one model
 * combine their results (e.g. one ncclAllReduce per reduction of the stage on `stream`, over its
 * tensor results and, for a group reduction, its group results) before the stages that read them.
 * Bind each shard with its whole tensor's element count (optgen_tensor::whole_numel). NULL removes
 * the hook. A spec that sums over the rows or columns of matrices (Adafactor, Adam-mini) then runs
 * its step on shards (optgen::FusedOptimizer::set_reduction_hook). */
int optgen_set_reduction_hook(optgen_optimizer* optimizer, optgen_reduction_hook hook, void* user_data);
/* The same with optgen's own hook over an NCCL communicator (`nccl_comm`, an ncclComm_t of the
 * ranks holding the shards; optgen::nccl::all_reduce_hook): one ncclAllReduce per reduction of each
 * Reduce stage, on the step's stream. NCCL is loaded at run time (libnccl.so.2, or $OPTGEN_NCCL);
 * fails, saying so, without it. */
int optgen_set_nccl_reduction_hook(optgen_optimizer* optimizer, void* nccl_comm);

/* ---- Sharded matrices: matrix functions on whole matrices (ABI 10) ----
 * One tensor's matrices of one matrix value, as a matrix hook sees them
 * (optgen::MatrixWork::Matrices): `batch` row-major matrices of rows x cols at `x`, device memory,
 * of `dtype` (ABI 13: OPTGEN_BF16, or OPTGEN_F32 where the storage keeps the value in f32), and
 * the function's arguments for the tensor's group. */
typedef struct {
  int32_t value; /* the variant's matrix value (optgen::VariantInfo::matrix_values) */
  int32_t num_arguments;
  size_t group;  /* the optimizer's group */
  size_t tensor; /* the tensor's index in it */
  void* x;
  int64_t batch;
  int64_t rows;
  int64_t cols;
  const double* arguments;
  int32_t dtype;
} optgen_matrices;

/* What a matrix hook is handed after the launch of a Reduce stage that stores matrix values. */
typedef struct {
  int32_t stage;
  int32_t num_matrices;
  const optgen_matrices* matrices;
  void* stream;
} optgen_matrix_work;

/* Returns 0, or nonzero when it failed: the step then fails with optgen_last_error() saying so. */
typedef int (*optgen_matrix_hook)(const optgen_matrix_work* work, void* user_data);

/* Calls `hook` with `user_data` after each Reduce stage that stores matrix values, in place of the
 * optimizer's own work on them, eagerly and while a step is captured
 * (FusedOptimizer::set_matrix_hook): where ranks holding rows of each matrix (optgen_tensor's
 * whole_numel) bring the whole matrices together, apply the function
 * (optgen_apply_matrix_function) and hand each rank its rows back, on `stream`. NULL removes it. */
int optgen_set_matrix_hook(optgen_optimizer* optimizer, optgen_matrix_hook hook, void* user_data);
/* The same with optgen's own hook over an NCCL communicator (`nccl_comm`, an ncclComm_t of the
 * ranks; optgen::nccl::matrix_hook): each whole matrix orthogonalised on an owner rank, the rows
 * moved by NCCL sends and receives on the step's stream; take one step before capturing. (ABI 12.) */
int optgen_set_nccl_matrix_hook(optgen_optimizer* optimizer, void* nccl_comm);
/* Bytes of device scratch optgen_apply_matrix_function needs for matrix value `value` of `group`'s
 * variant on `count` matrices of rows x cols of `dtype` (optgen_matrices::dtype; ABI 14: its
 * function's program decides); 0 for a dtype other than OPTGEN_BF16 or OPTGEN_F32, a group or value
 * that does not exist (the error is then the last error). */
size_t optgen_matrix_function_scratch_bytes(optgen_optimizer* optimizer, size_t group, int value, int64_t count,
                                            int64_t rows, int64_t cols, int32_t dtype);
/* Applies matrix value `value`'s function with `arguments` (optgen_matrices::arguments) to `count`
 * row-major matrices of rows x cols at `x` (of the group's optgen_matrices::dtype), in place, with `scratch`, on
 * `stream`, as a step of `group` does (FusedOptimizer::apply_matrix_function); needs the optimizer prepared. */
int optgen_apply_matrix_function(optgen_optimizer* optimizer, size_t group, int value, const double* arguments, void* x,
                                 void* scratch, int64_t count, int64_t rows, int64_t cols, void* stream);

/* Points tensors of a group at other param and grad memory of the same sizes and dtype
 * (FusedOptimizer::rebind): tensor tensors[i] of `group` gets params[i] and grads[i]. No
 * synchronization; the next step uploads the new pointers in stream order, and a step captured in
 * a CUDA graph keeps the pointers it was captured with. */
int optgen_rebind(optgen_optimizer* optimizer, size_t group, const size_t* tensors, void* const* params,
                  const void* const* grads, size_t count);

/* ---- What an optimizer is: its spec's names and defaults, for code that binds any spec ---- */

/* Types of hyperparameters: the values of optgen::ValueType. */
enum { OPTGEN_BOOL = 0, OPTGEN_INT = 1, OPTGEN_FLOAT = 2 };

typedef struct {
  const char* name;
  int32_t type;         /* OPTGEN_BOOL, OPTGEN_INT or OPTGEN_FLOAT */
  double default_value; /* the spec's default (bools as 0/1; 0 for derived flags) */
  int32_t specialized;  /* selects kernels and states: cannot change once a group is added */
  int32_t derived;      /* computed from the others: never set */
} optgen_hyperparameter_info;

/* What a state buffer holds values for (optgen::StateShape). A tensor of two or more
 * dimensions is B matrices of R rows and C columns, its last two dimensions (B = numel / (R * C), 0
 * for an empty tensor); any other is one matrix of one row of numel columns. A state of elements
 * holds numel values, of rows B * R, of columns B * C, of the tensor one (OPTGEN_STATE_TENSOR: ABI 15). */
enum { OPTGEN_STATE_ELEMENTS = 0, OPTGEN_STATE_ROWS = 1, OPTGEN_STATE_COLS = 2, OPTGEN_STATE_TENSOR = 3 };

/* A state buffer or scalar state: how it starts, a constant or a hyperparameter's value, or (a
 * buffer) the parameter; and (a buffer) what it holds values for. (ABI 4 added `shape`.) */
typedef struct {
  const char* name;
  double init_value;           /* when init_hyperparameter is -1 and init_param is 0 */
  int32_t init_hyperparameter; /* the index of the hyperparameter it starts as, or -1 */
  int32_t init_param;          /* 1: starts as the parameter (read in its place at the group's step 1) */
  int32_t shape;               /* OPTGEN_STATE_ELEMENTS, _ROWS or _COLS; scalar states: OPTGEN_STATE_ELEMENTS */
} optgen_state_info;

/* The optimizer's class name (e.g. "AdamW") and spec (its file stem, e.g. "adamw"); NULL for a
 * NULL optimizer. The strings live as long as the optimizer. */
const char* optgen_name(const optgen_optimizer* optimizer);
const char* optgen_spec(const optgen_optimizer* optimizer);
/* The names of its matrix values (Muon's "o"), comma-separated, "" for none: what optgen_storage's
 * state_names may name beside the states, to keep one in OPTGEN_F32 (else bf16). NULL for a NULL
 * optimizer. The string lives as long as the optimizer. (ABI 13.) */
const char* optgen_matrix_values(const optgen_optimizer* optimizer);
/* The elements of the spec's blocks (`block_elements`, OptimizerInfo::block_elements), 0 for a spec
 * without: it views each tensor of a positive multiple of them as numel / count rows of count, its
 * blocks (a state of OPTGEN_STATE_ROWS holds one value per block), whatever its ndim and shape, and
 * every other tensor as one row, not factored. (ABI 17.) */
int optgen_block_elements(const optgen_optimizer* optimizer, size_t* count);
int optgen_num_hyperparameters(const optgen_optimizer* optimizer, size_t* count);
int optgen_describe_hyperparameter(const optgen_optimizer* optimizer, size_t index, optgen_hyperparameter_info* info);
int optgen_num_states(const optgen_optimizer* optimizer, size_t* count);
int optgen_describe_state(const optgen_optimizer* optimizer, size_t index, optgen_state_info* info);
int optgen_num_scalar_states(const optgen_optimizer* optimizer, size_t* count);
int optgen_describe_scalar_state(const optgen_optimizer* optimizer, size_t index, optgen_state_info* info);
/* Which states a group of these hyperparameters (all of them, declaration order; derived flags
 * ignored) has: used[i] is 1 or 0 for each state the spec declares. */
int optgen_states_used(const optgen_optimizer* optimizer, const double* hyperparameters, size_t count, int32_t* used);
/* For which tensors of a group of these hyperparameters (as optgen_states_used takes them) each state
 * the spec declares exists: presence[i] is OPTGEN_STATE_ABSENT (the group's variant has no such
 * state), OPTGEN_STATE_ALWAYS (every tensor), OPTGEN_STATE_FACTORED (tensors of two or more
 * dimensions only) or OPTGEN_STATE_NOT_FACTORED (the others only). A state that does not exist for
 * a tensor has no buffer: optgen_state gives NULL, a caller-owned entry for it is ignored, and a
 * checkpoint holds none. (ABI 4.) */
enum { OPTGEN_STATE_ABSENT = 0, OPTGEN_STATE_ALWAYS = 1, OPTGEN_STATE_FACTORED = 2, OPTGEN_STATE_NOT_FACTORED = 3 };
int optgen_state_presence(const optgen_optimizer* optimizer, const double* hyperparameters, size_t count,
                          int32_t* presence);
/* Whether a group of these hyperparameters (as optgen_states_used takes them) reduces over all of
 * its tensors (FusedOptimizer::reduces_over_group): *reduces is 1 or 0. */
int optgen_reduces_over_group(const optgen_optimizer* optimizer, const double* hyperparameters, size_t count,
                              int32_t* reduces);
/* The dtype state `name` is stored in (OPTGEN_F32, _BF16, _F16, _Q8 or _UQ8; optgen_state_buffer
 * gives a tensor's own). (ABI 5: by name.) */
int optgen_state_dtype(const optgen_optimizer* optimizer, const char* name, int32_t* dtype);
/* The device address of a tensor's fp32 master copy (numel F32 values; OPTGEN_PARAM_MASTER), or
 * NULL without one (FusedOptimizer::master_weights). (ABI 5.) */
int optgen_master_weights(const optgen_optimizer* optimizer, size_t group, size_t tensor, void** data);

void optgen_destroy(optgen_optimizer* optimizer);

/* ---- Several optimizers as one (ABI 12) ----
 * optgen::Optimizers (optgen/optimizers.h): `count` optimizers of any specs stepped as one, in
 * order, on one stream (Muon for the hidden matrices and AdamW for the rest, say), and one
 * checkpoint of them all. The set refers to `members`: destroy it before them. */
typedef struct optgen_optimizers optgen_optimizers;
int optgen_optimizers_create(optgen_optimizer* const* members, size_t count, optgen_optimizers** out);
int optgen_optimizers_prepare(optgen_optimizers* set, void* stream);
int optgen_optimizers_step(optgen_optimizers* set, void* stream);
int optgen_optimizers_step_amp(optgen_optimizers* set, void* stream, const float* grad_scale, const float* found_inf);
/* The launches of the members' last steps, together. */
int optgen_optimizers_launches_last_step(const optgen_optimizers* set, int* launches);
/* Every member's checkpoint in one safetensors file, and back: loading checks the member count and
 * each member's spec and changes nothing when any member's part does not fit. */
int optgen_optimizers_save(const optgen_optimizers* set, const char* path);
int optgen_optimizers_load(optgen_optimizers* set, const char* path);
void optgen_optimizers_destroy(optgen_optimizers* set);

/* ---- Specs at run time ----
 * An optimizer from a YAML spec file loaded now, with no C++ compiler (optgen/spec_at_run_time.h):
 * what optgen_<spec>_create does for a generated launcher, for any spec, with the kernels the
 * spec's `storage:` lists (else f32 and bf16), compiled by NVRTC through the kernel cache at the
 * first optgen_prepare or optgen_step. A mistake in the spec fails with the message `optgen check`
 * prints: `file:line:col: error: ...`, the source line and a caret. Defined by the spec loader
 * (liboptgen.so has it; the runtime alone does not). */
int optgen_create_from_spec(const char* path, const char* const* names, const double* values, size_t count,
                            const optgen_storage* storage, optgen_optimizer** out);
/* What loading the optimizer's spec warned of (a literal beyond float range, ...): each warning as
 * `optgen check` prints it, `file:line:col: warning: ...` with the line and a caret, one after the
 * other; "" for none, and for a generated launcher's optimizer (its build printed them). NULL for a
 * NULL optimizer. Lives as long as the optimizer. (ABI 8.) */
const char* optgen_warnings(const optgen_optimizer* optimizer);

#ifdef __cplusplus
} /* extern "C" */

#include <functional>
#include <memory>
#include <string>

#include "optgen/optimizer.h"

namespace optgen {
/// For generated `optgen_<spec>_create` functions: a new optimizer with the spec's defaults except
/// the named overrides, as a C handle.
int create_for_c(const OptimizerInfo& info, std::vector<double> defaults, const char* const* names,
                 const double* values, size_t count, const optgen_storage* storage, optgen_optimizer** out);

/// For C functions defined outside the runtime (optgen_create_from_spec): runs `body` as every
/// function of the C ABI does, returning 0, or -1 with the exception's message in
/// optgen_last_error().
int guarded_for_c(const std::function<void()>& body);
/// What create_for_c makes, for such functions: a new optimizer as a C handle, which keeps `owner`
/// alive until optgen_destroy (what `info` points into, when that is not a launcher's static
/// tables), and answers optgen_warnings with `warnings`. Throws; `call` names the C function in
/// messages.
optgen_optimizer* new_optimizer_for_c(const char* call, const OptimizerInfo& info, std::vector<double> defaults,
                                      const char* const* names, const double* values, size_t count,
                                      const optgen_storage* storage, std::shared_ptr<const void> owner,
                                      std::string warnings = "");
}  // namespace optgen
#endif

#endif /* OPTGEN_C_API_H */
