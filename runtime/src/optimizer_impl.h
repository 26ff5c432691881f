#pragma once
/// FusedOptimizer's insides, shared by optimizer.cpp (binding, prepare, step, setters) and
/// optimizer_checkpoint.cpp (checkpoints).
///
/// Where a group's step count and scalar state live: in its Group (host) while the optimizer is not
/// prepared, and in the device group table while it is. prepare() uploads them; anything that
/// unprepares the optimizer (a new group, a new chunk size) first pulls them back.

#include <cuda.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "optgen/cublas.h"
#include "optgen/driver.h"
#include "optgen/error.h"
#include "optgen/kernel_abi.h"
#include "optgen/optimizer.h"
#include "optgen/tuning.h"
#include "shape_layout.h"

namespace optgen {

/// `n` rounded up to a multiple of `to`.
inline std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

/// The smallest chunk fitted_chunk_size halves a compiled-in size to (the f32 sets' default).
constexpr long long kSmallestFittedChunk = 2048;
/// How many chunks per multiprocessor a plan of rows and columns wants. Its Update stage takes a
/// chunk a block, and the generator's 8192 elements (kept for large models: gpt2's Adafactor step
/// 956 µs at 8192, 1091 at 2048) left small models one unbalanced wave (ghostnet_100's 632 chunks,
/// 4.8 a multiprocessor of an H200). At 32 (bench/RESULTS.md, 2026-12-02), ghostnet_100's and
/// dcgan-generator's sets take 2048 and resnet50's 4096: their Adafactor and Adam-mini steps 2-29%
/// shorter; models of more than 32 x 8192 elements a multiprocessor keep 8192.
constexpr long long kRowsAndColumnsChunksPerMultiprocessor = 32;

/// The elements per block of a plan of `elements` elements that nothing else chose them for (no
/// set_chunk_size, no tuning table): the generator's `compiled`, halved, down to
/// kSmallestFittedChunk and while the half is a multiple of `multiple` (64; 256 for a set with
/// 8-bit states), while the plan's elements would fill fewer chunks than two per multiprocessor
/// (the 8-bit sets' 32768 left most of an H200 idle on ghostnet_100, 158 chunks' worth), or, for
/// a plan of rows and columns (a variant with row, column or matrix code and no matrix values),
/// kRowsAndColumnsChunksPerMultiprocessor.
long long fitted_chunk_size(long long compiled, long long elements, long long multiprocessors, bool rows_and_columns,
                            long long multiple);

/// How many chunks a Reduce stage's block takes (kernel_abi::ReductionTable::chunks_per_block), of
/// `chunks` chunk-run blocks' worth and `resident` blocks the GPU holds at once (1 where either is
/// 0). `fill_last_wave`: the most, up to kReduceChunksPerBlock (a block's run of chunks saves
/// combines and arrivals), whose blocks fill their last wave to at least 90% of the others, else
/// the count that fills it best, never so many that the blocks are fewer than the GPU holds; gpt2's
/// Muon took 8 before, 1,308 blocks of 1,056 resident, 1.24 waves, its Reduce stage at 3.4 TB/s
/// (bench/RESULTS.md). Else as many as keep `resident` blocks busy, from 1 to
/// kReduceChunksPerBlock. A shaped stage's other blocks (lines, segments) are not counted.
int reduce_chunks_per_block(std::size_t chunks, std::size_t resident, bool fill_last_wave);

/// Device memory that frees itself.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) {
    if (bytes > 0) driver::check(driver::api().cuMemAlloc(&ptr_, bytes), "cuMemAlloc");
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_) { o.ptr_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr_) driver::api().cuMemFree(ptr_);
  }
  CUdeviceptr get() const { return ptr_; }

 private:
  CUdeviceptr ptr_ = 0;
};

/// A non-blocking stream of the optimizer's own, created on first use.
class OwnedStream {
 public:
  OwnedStream() = default;
  OwnedStream(OwnedStream&& o) noexcept : stream_(o.stream_) { o.stream_ = nullptr; }
  OwnedStream& operator=(OwnedStream&& o) noexcept {
    std::swap(stream_, o.stream_);
    return *this;
  }
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
  ~OwnedStream() {
    if (stream_) driver::api().cuStreamDestroy(stream_);
  }
  CUstream get() {
    if (!stream_) driver::check(driver::api().cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    return stream_;
  }

 private:
  CUstream stream_ = nullptr;
};

/// An event of the optimizer's own, without timing (for ordering streams), created on first use.
class OwnedEvent {
 public:
  OwnedEvent() = default;
  OwnedEvent(OwnedEvent&& o) noexcept : event_(o.event_) { o.event_ = nullptr; }
  OwnedEvent& operator=(OwnedEvent&& o) noexcept {
    std::swap(event_, o.event_);
    return *this;
  }
  OwnedEvent(const OwnedEvent&) = delete;
  OwnedEvent& operator=(const OwnedEvent&) = delete;
  ~OwnedEvent() {
    if (event_) driver::api().cuEventDestroy(event_);
  }
  CUevent get() {
    if (!event_) driver::check(driver::api().cuEventCreate(&event_, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    return event_;
  }

 private:
  CUevent event_ = nullptr;
};

struct BoundTensor {
  void* param;
  const void* grad;
  std::int64_t numel;
  /// Per spec state; null when the variant has none, or when it does not exist for this tensor
  /// (VariantInfo::state_presence). Each holds state_numel(its shape, dims, numel) values.
  std::vector<void*> states;
  std::vector<std::int64_t> shape;  ///< as the caller gave it (empty: not given)
  TensorDims dims;                  ///< its matrices, rows and columns (from shape)
  void* master = nullptr;           ///< the fp32 master copy of the param (ParamWrite::Master), else null
  std::int64_t whole_numel = 0;     ///< what the spec's numel reads (Tensor::whole_numel, else numel)
};

struct Group {
  std::vector<double> h;             ///< hyperparameters, derived flags filled in; the device copy mirrors it
  std::int64_t step = 0;             ///< while unprepared (see above)
  std::vector<double> scalar_state;  ///< while unprepared
  int variant = 0;
  int kernel = 0;
  std::vector<BoundTensor> tensors;
  DeviceBuffer state_memory;
  int plan = -1;          ///< while prepared: the plan that steps it
  int plan_position = 0;  ///< while prepared: where its first tensor is in the plan's tables
};

struct PlanMatrices;  // matrix_values.h

/// The groups one kernel set (a variant and a dtype) updates, the tables its stages read, and the
/// stage kernels, launched in order each step.
///
/// The operand pointers (TableView::pointers) live apart from the sizes and chunks, so that a
/// rebind() only uploads them again, in stream order before the next step. A pointer table that a
/// step captured in a CUDA graph has read is never written again: the graph keeps reading the
/// pointers it was captured with, and the next upload goes to a new table.
struct Plan {
  int kernel;
  /// The step it runs: its kernel's variant's, or with a reduction hook the variant's step on
  /// shards (VariantInfo::shard_stage_blocks, KernelInfo::shard_stages) where it has one.
  VariantInfo variant{};
  /// Its stage kernels' names, in launch order: the kernel set's (KernelInfo::stages), or those of
  /// its step on shards; the last the Update stage of long rows where the plan's are
  /// (KernelInfo::long_row_update).
  std::vector<const char*> stage_names;
  /// The stage kernels' launch shape (Impl::launch_shape_of), and the module they come from.
  LaunchShape shape{};
  const Module* module = nullptr;
  std::vector<std::size_t> groups;
  DeviceBuffer table_memory;      ///< numel and chunks
  std::vector<void*> pointers;    ///< the host copy of the current pointer table
  DeviceBuffer pointer_memory;    ///< the current pointer table
  bool pointers_changed = false;  ///< by rebind(): upload before the next step
  /// A captured step may have read pointer_memory. Steps watch for captures only once tensors are
  /// rebound (Impl::watch_captures), so the table prepare() uploaded counts as read by one.
  bool pointers_in_graph = true;
  std::vector<DeviceBuffer> retired;  ///< pointer tables that captured graphs still read
  kernel_abi::TableView table{};
  /// The results and scratch of the variant's reductions (all null without any).
  DeviceBuffer reduction_memory;
  kernel_abi::ReductionTable reductions{};
  /// For a variant with matrix, row or column code: the kernel_abi::ShapeTable (TableView::shapes
  /// points into it), its arrays and its results and scratch, one allocation; empty for others.
  DeviceBuffer shape_memory;
  std::vector<CUfunction> stages;
  /// Blocks each stage launches, in launch order (a Reduce stage of 0 blocks is not launched).
  std::vector<unsigned> grids;
  /// The Update stage of its tensors whose matrices are one element (KernelInfo::unit_update; null
  /// where it has none), launched after the Update stage over the last unit_grid chunks of the chunk
  /// table, which the Update stage (grids.back()) does not take.
  CUfunction unit_update = nullptr;
  unsigned unit_grid = 0;
  /// The kernels of the spec's programs (OptimizerInfo::programs), one each; a program launches as
  /// many blocks as the Update stage, one per chunk.
  std::vector<CUfunction> programs;
  /// The buffers of the variant's matrix values and the work on them between stages
  /// (matrix_values.h); null without any.
  std::shared_ptr<const PlanMatrices> matrices;
  /// Per stage, its row, column and matrix results that are each rank's part (partial_runs), and
  /// where the results are: what the reduction hook is handed besides the ReductionTable.
  std::vector<PartialRuns> partial_runs;
  float* row_results = nullptr;
  float* col_results = nullptr;
  float* matrix_results = nullptr;
};

/// The group table's device memory, laid out as kernel_abi::GroupTable describes.
struct DeviceGroups {
  DeviceBuffer memory;
  kernel_abi::GroupTable view{};
};

/// A group's step count and scalar state, as a step would read them.
struct GroupProgress {
  std::int64_t step;
  std::vector<double> scalar_state;
};

struct FusedOptimizer::Impl {
  const OptimizerInfo* info;
  std::vector<double> defaults;
  StorageOptions storage;
  std::vector<DType> state_dtypes;  ///< per state the spec declares (storage resolved)
  long long chunk_size;             ///< set_chunk_size's, for every kernel set; 0: each set's own
  LaunchShape launch_shape{0, 0};   ///< set_launch_shape's, for every kernel set; {0, 0}: each set's own
  /// The launch-parameter table for the current device (Tuning::from_environment), read the first
  /// time a chunk size or launch shape is asked for.
  mutable std::optional<Tuning> tuning;
  std::vector<Group> groups;
  std::vector<Plan> plans;
  DeviceGroups device_groups;
  bool prepared = false;
  CUstream stream = nullptr;        ///< the stream of the last prepare() or step()
  kernel_abi::StepInputs inputs{};  ///< what the next launch passes (AMP)
  int launches_last_step = 0;
  /// Whether a plan's stages after the first may start as the one before ends (prepare() asks the
  /// device: driver::early_start_supported).
  bool early_start = false;
  /// One float per group: the gradient norm a clipping variant publishes (kernel_abi::ReductionTable).
  DeviceBuffer grad_norm_memory;
  std::function<void(const ReductionResults&)> reduction_hook;
  std::function<void(const MatrixWork&)> matrix_hook;
  /// cuBLAS, for the matrix functions of plans with matrix values; made by prepare() when one has.
  std::shared_ptr<const cublas::Handle> cublas;
  Module module;  ///< the kernels as generated (OptimizerInfo's launch shape), group kernels included
  bool module_loaded = false;
  /// The kernels compiled for other launch shapes, as plans need them; kept while the optimizer
  /// lives (a plan's stage functions point into them).
  std::vector<std::pair<LaunchShape, std::unique_ptr<Module>>> shaped_modules;
  OwnedStream upload_stream;  ///< uploads a pointer table while a step is being captured
  /// Set by the first rebind(): from then on every step asks whether it is being captured, which
  /// only pointer uploads need to know (it costs a driver call on the hot path).
  bool watch_captures = false;

  std::string call(const char* method) const { return std::string(info->name) + "::" + method; }
  /// Elements per block of kernel set `kernel`, which steps the groups that run it (a plan):
  /// set_chunk_size's, else the tuning table's for a plan of their size, else the generator's.
  long long chunk_size_of(int kernel) const;
  /// The elements per block prepare() gives the plan of kernel set `kernel`, of tensors of `numel`
  /// elements: chunk_size_of's, but that the generator's is fitted to the plan (fitted_chunk_size,
  /// on the device's multiprocessors).
  long long plan_chunk_size(int kernel, const std::vector<long long>& numel) const;
  /// Launch shape of kernel set `kernel`: set_launch_shape's, else the tuning table's, else the
  /// generator's.
  LaunchShape launch_shape_of(int kernel) const;
  /// The tuning table's entry for kernel set `kernel`, for a plan of the elements its groups hold;
  /// null without one (reads OPTGEN_TUNING the first time).
  const Tuning::Entry* tuned(int kernel) const;
  /// The module of the stage kernels of launch shape `shape` (loading it the first time).
  const Module& module_for(LaunchShape shape);
  int hyperparameter_index(const std::string& name, const char* method) const;
  int state_index(const std::string& name, const char* method) const;
  int scalar_state_index(const std::string& name, const char* method) const;
  int program_index(const std::string& name, const char* method) const;
  const Group& group_at(std::size_t group, const char* method) const;
  /// Matrix value `value` of the variant group `group` runs, or optgen::Error naming `method`.
  const MatrixValueInfo& matrix_value(std::size_t group, int value, const char* method) const;
  /// Throws optgen::Error unless `h` holds every hyperparameter, each as check_value accepts it.
  void check_hyperparameters(const std::vector<double>& h, const char* method) const;
  /// Throws optgen::Error, naming `method`, for a value hyperparameter `hp` cannot take: NaN, a bool
  /// other than 0 or 1, an int that is not a whole number (infinities are whole).
  void check_value(const reference::HyperparameterInfo& hp, double value, const char* method) const;
  /// The variant a group of hyperparameters `h` runs, after checking them and filling in the
  /// derived flags.
  int variant_of(std::vector<double>& h, const char* method) const;

  /// Pulls the device's step counts and scalar state back into the groups, and drops the device
  /// tables: the next step prepares again.
  void unprepare();
  /// Every group's step count and scalar state, wherever they live now (synchronizes when prepared).
  std::vector<GroupProgress> progress() const;
  /// Enqueues, on `stream`, a write into the group table of groups [first, first + count) and the
  /// recomputation of the values their next step reads.
  void write_groups(std::size_t first, std::size_t count, int field, int index, double value);
  /// What a step or a program does before it launches, once prepared: follows `on` unless it is
  /// being captured, and uploads the pointers of rebound tensors (upload_pointers).
  void begin_launches(CUstream on);
  /// Makes `plan.table` read the pointers of `plan.pointers`, uploaded in order on `stream`, or,
  /// while `stream` captures, into a table of the graph's own.
  void upload_pointers(Plan& plan, CUstream stream, bool capturing);
};

}  // namespace optgen
