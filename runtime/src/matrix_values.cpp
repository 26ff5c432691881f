#include "matrix_values.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <tuple>

#include "optgen/kernel_abi.h"

namespace optgen {
namespace {

/// What moves the values of a tensor of `dims` with column splits between its operand `whole` and
/// its matrices in their bucket, `pieces`: in the widest unit that divides a split's row in bytes
/// and both addresses.
kernel_abi::ColumnSplit column_split(CUdeviceptr whole, CUdeviceptr pieces, const TensorDims& dims, DType dtype) {
  const auto row_bytes = static_cast<unsigned long long>(dims.cols / dims.column_splits) * size_of(dtype);
  int unit = 16;
  while (unit > static_cast<int>(size_of(dtype)) && (row_bytes % unit != 0 || whole % unit != 0 || pieces % unit != 0))
    unit /= 2;
  return {reinterpret_cast<void*>(whole),
          reinterpret_cast<void*>(pieces),
          dims.batch,
          dims.rows,
          dims.column_splits,
          static_cast<long long>(row_bytes / static_cast<unsigned long long>(unit)),
          unit};
}

/// The value of argument `a` for a group of hyperparameters `h`.
double argument(const MatrixArgument& a, const std::vector<double>& h) {
  return a.hyperparameter >= 0 ? h.at(static_cast<std::size_t>(a.hyperparameter)) : a.value;
}

/// A bucket whose Gram (count x ceil(min(rows, cols) / 128)^2 output tiles of 128 x 128, the
/// smallest product of Newton–Schulz) makes fewer tiles than this per multiprocessor leaves much of
/// the GPU idle in its products' last waves: such buckets run side by side, on lanes. Measured on
/// an H200 (bench/RESULTS.md, 2026-12-01): gpt2's five buckets of 1 to 12 matrices of 768 rows, one
/// stream each, 2316 µs of products against 2800 one after the other.
constexpr long long kLaneTilesPerMultiprocessor = 16;
/// Streams at once, the caller's among them: `$OPTGEN_MATRIX_STREAMS` (1 to 16; 1 runs every bucket
/// on the caller's stream), else 8 (gpt2's five buckets, a stream each: 3.21 and 3.12 ms a step
/// against 3.24 with four streams, 3.55 with one).
int max_streams() {
  const char* given = std::getenv("OPTGEN_MATRIX_STREAMS");
  if (given == nullptr || *given == '\0') return 8;
  char* end = nullptr;
  const long n = std::strtol(given, &end, 10);
  if (*end != '\0' || n < 1 || n > 16)
    throw Error("OPTGEN_MATRIX_STREAMS", std::string("is '") + given + "': give a whole number from 1 to 16");
  return static_cast<int>(n);
}

long long gram_tiles(const MatrixBucket& b) {
  const long long side = (std::min(b.rows, b.cols) + 127) / 128;
  return b.count * side * side;
}

/// Where each bucket's batches through cuBLAS run (PlanMatrices::lane_of): the large ones on the
/// caller's stream (share 0), the small ones spread over it and up to max_streams() - 1 lanes, the
/// largest first onto the least loaded, by multiply-adds; those whose view may run in a block each
/// on the caller's (in the in-block launches, or, where their program or shared memory does not
/// fit a block, through cuBLAS there). Returns the lanes used.
int assign_lanes(const std::vector<MatrixBucket>& buckets, const VariantInfo& variant, std::vector<int>& lane_of) {
  lane_of.assign(buckets.size(), 0);
  const long long limit = kLaneTilesPerMultiprocessor * driver::multiprocessor_count(driver::current_device());
  auto work = [](const MatrixBucket& b) {
    return static_cast<double>(b.count) * b.rows * b.cols * std::min(b.rows, b.cols);
  };
  std::vector<std::size_t> small;
  double large = 0;
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    const MatrixBucket& bucket = buckets[b];
    if (matrix_view_fits_block(*variant.matrix_values[bucket.value].program, bucket.rows, bucket.cols)) continue;
    if (gram_tiles(bucket) < limit)
      small.push_back(b);
    else
      large += work(buckets[b]);
  }
  if (buckets.size() < 2 || small.empty()) return 0;
  const int lanes = static_cast<int>(
      std::min<std::size_t>(small.size() - (large > 0 ? 0 : 1), static_cast<std::size_t>(max_streams() - 1)));
  if (lanes == 0) return 0;
  std::stable_sort(small.begin(), small.end(),
                   [&](std::size_t a, std::size_t b) { return work(buckets[a]) > work(buckets[b]); });
  std::vector<double> load(static_cast<std::size_t>(lanes) + 1, 0.0);
  load[0] = large;
  for (std::size_t b : small) {
    const auto share = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    lane_of[b] = static_cast<int>(share);
    load[share] += work(buckets[b]);
  }
  return lanes;
}

/// Where the programs of a lane's buckets run (lane 0: the caller's stream).
struct LaneResources {
  CUstream stream;
  CUdeviceptr scratch;
  std::size_t scratch_bytes;
  CUdeviceptr workspace;  ///< 0: the cuBLAS handle's own
};

LaneResources resources_of(const PlanMatrices& matrices, int lane, CUstream caller) {
  if (lane == 0) return {caller, matrices.scratch, matrices.scratch_bytes, 0};
  const MatrixLane& l = matrices.lanes[static_cast<std::size_t>(lane - 1)];
  return {l.stream.get(), l.scratch, l.scratch_bytes, l.workspace};
}

/// Appends the arguments of matrix value `value` for a group of hyperparameters `h` to `out`.
void append_arguments(const MatrixValueInfo& value, const std::vector<double>& h, std::vector<double>& out) {
  for (int a = 0; a < value.num_arguments; ++a) out.push_back(argument(value.arguments[a], h));
}

/// The key of a stage's work: per matrix value of `stage`, per group, its arguments.
void stage_arguments(const VariantInfo& variant, int stage, const std::vector<Group>& groups,
                     std::vector<double>& out) {
  out.clear();
  for (int v = 0; v < variant.num_matrix_values; ++v)
    if (variant.matrix_values[v].stage == stage)
      for (const Group& g : groups) append_arguments(variant.matrix_values[v], g.h, out);
}

/// What stage `stage` enqueues for the arguments `groups` give it: per bucket of the stage, one
/// batch per run of consecutive groups whose arguments agree, in a block each where it fits, else
/// through cuBLAS.
MatrixStageWork make_stage_work(const PlanMatrices& matrices, const VariantInfo& variant, int stage,
                                const std::vector<Group>& groups) {
  MatrixStageWork work;
  work.made = true;
  stage_arguments(variant, stage, groups, work.arguments);
  // Each program unrolled once per value, dtype and arguments (a NaN argument, equal to nothing, once
  // per run).
  std::vector<std::tuple<int, DType, std::vector<double>>> made;
  auto program_of = [&](const MatrixBucket& bucket, const std::vector<double>& args) {
    const auto key = std::make_tuple(bucket.value, bucket.dtype, args);
    const auto it = std::find(made.begin(), made.end(), key);
    if (it != made.end()) return work.programs[static_cast<std::size_t>(it - made.begin())].get();
    made.push_back(key);
    work.programs.push_back(
        std::make_unique<UnrolledProgram>(*variant.matrix_values[bucket.value].program, args.data(), bucket.dtype));
    return work.programs.back().get();
  };
  for (std::size_t b = 0; b < matrices.buckets.size(); ++b) {
    const MatrixBucket& bucket = matrices.buckets[b];
    const MatrixValueInfo& value = variant.matrix_values[bucket.value];
    if (value.stage != stage) continue;
    auto arguments_of = [&](std::size_t run) {
      return matrix_arguments(value, groups[static_cast<std::size_t>(bucket.groups[run].group)].h);
    };
    for (std::size_t g = 0; g < bucket.groups.size();) {
      const std::vector<double> args = arguments_of(g);
      std::size_t end = g + 1;
      std::int64_t count = bucket.groups[g].count;
      for (; end < bucket.groups.size() && arguments_of(end) == args; ++end) count += bucket.groups[end].count;
      const UnrolledProgram* program = program_of(bucket, args);
      const CUdeviceptr x = bucket.x + size_of(bucket.dtype) *
                                           static_cast<std::size_t>(bucket.groups[g].first * bucket.rows * bucket.cols);
      if (!work.in_block.add(*program, matrices.kernels, x, count, bucket.rows, bucket.cols))
        work.batches.push_back({b, program, x, count});
      g = end;
    }
  }
  return work;
}

}  // namespace

std::vector<double> matrix_arguments(const MatrixValueInfo& value, const std::vector<double>& h) {
  std::vector<double> args;
  append_arguments(value, h, args);
  return args;
}

PlanMatrices build_matrices(const VariantInfo& variant, const KernelInfo& kernel,
                            const std::vector<const BoundTensor*>& tensors, const std::vector<int>& groups,
                            const Module& module, std::vector<void*>& pointers, const std::string& call, bool lanes) {
  PlanMatrices result{{}, {}, {}, {}, 0, 0, MatrixKernels(module), {}, {}, {}, {}};
  if (variant.num_matrix_values == 0) return result;
  const std::size_t n = tensors.size();
  // Buckets by value and shape, in the order their shapes first appear; within a bucket, the
  // tensors in plan order (so each group's matrices are consecutive).
  std::map<std::tuple<int, std::int64_t, std::int64_t>, std::size_t> index;
  std::vector<std::vector<std::size_t>> members;  // per bucket, its tensors
  for (int v = 0; v < variant.num_matrix_values; ++v)
    for (std::size_t t = 0; t < n; ++t) {
      const BoundTensor* bound = tensors[t];
      if (!bound) continue;  // a placeholder: no elements
      if (!bound->dims.factored)
        throw Error(call,
                    std::string("variant ") + variant.name + " applies " + variant.matrix_values[v].program->name +
                        " to '" + variant.matrix_values[v].name + "', which needs matrices, but tensor " +
                        std::to_string(t) + " of its plan (group " + std::to_string(groups[t]) + ", " +
                        std::to_string(bound->numel) + " elements) is bound with " +
                        (bound->shape.empty() ? "no shape" : std::to_string(bound->shape.size()) + " dimension") +
                        (bound->shape.size() == 1 ? ""
                         : bound->shape.empty()   ? ""
                                                  : "s"),
                    "bind it with its shape (Tensor::shape) of two or more dimensions, or step it with "
                    "another optimizer (AdamW for embeddings, norms and biases)");
      if (bound->numel == 0) {  // a rank's empty shard: no bucket, but a matrix hook lists it
        result.tensors.push_back({v, matrix_dtype(kernel, v), t, static_cast<std::size_t>(groups[t]), 0, 0, 0,
                                  bound->dims.rows, bound->dims.cols});
        continue;
      }
      // A tensor with column splits is batch * splits matrices of its splits' columns.
      const std::int64_t cols = bound->dims.cols / bound->dims.column_splits;
      const auto key = std::make_tuple(v, bound->dims.rows, cols);
      auto [it, added] = index.emplace(key, result.buckets.size());
      if (added) {
        MatrixBucket bucket;
        bucket.value = v;
        bucket.dtype = matrix_dtype(kernel, v);
        bucket.rows = bound->dims.rows;
        bucket.cols = cols;
        result.buckets.push_back(bucket);
        members.emplace_back();
      }
      members[it->second].push_back(t);
    }
  // One allocation: the buckets' matrices (each 256-byte aligned), the operands of tensors with
  // column splits and their tables, then the scratch of the caller's stream, then each lane's
  // scratch and cuBLAS workspace.
  auto matrices_of = [&](std::size_t t) { return tensors[t]->dims.batch * tensors[t]->dims.column_splits; };
  std::size_t bytes = 0;
  std::vector<std::size_t> offsets;
  std::size_t split_tensors = 0;
  for (std::size_t b = 0; b < result.buckets.size(); ++b) {
    MatrixBucket& bucket = result.buckets[b];
    for (std::size_t t : members[b]) bucket.count += matrices_of(t);
    offsets.push_back(bytes);
    bytes = round_up(bytes + size_of(bucket.dtype) * static_cast<std::size_t>(bucket.count * bucket.rows * bucket.cols),
                     256);
  }
  std::map<std::pair<std::size_t, std::size_t>, std::size_t> whole_at;  // (bucket, tensor) -> its operand's offset
  for (std::size_t b = 0; b < result.buckets.size(); ++b)
    for (std::size_t t : members[b])
      if (tensors[t]->dims.column_splits > 1) {
        whole_at[{b, t}] = bytes;
        bytes = round_up(bytes + size_of(result.buckets[b].dtype) * static_cast<std::size_t>(tensors[t]->numel), 256);
        ++split_tensors;
      }
  const std::size_t split_table_at = bytes;
  bytes = round_up(bytes + split_tensors * sizeof(kernel_abi::ColumnSplit), 256);
  result.lane_of.assign(result.buckets.size(), 0);
  if (lanes)
    result.lanes =
        std::vector<MatrixLane>(static_cast<std::size_t>(assign_lanes(result.buckets, variant, result.lane_of)));
  std::vector<std::size_t> scratch(result.lanes.size() + 1, 0);  // per stream: its largest bucket's
  for (std::size_t b = 0; b < result.buckets.size(); ++b) {
    const MatrixBucket& bucket = result.buckets[b];
    std::size_t& need = scratch[static_cast<std::size_t>(result.lane_of[b])];
    need = std::max(need, matrix_program_scratch_bytes(*variant.matrix_values[bucket.value].program, bucket.count,
                                                       bucket.rows, bucket.cols, bucket.dtype));
  }
  std::vector<std::size_t> at(scratch.size());
  for (std::size_t s = 0; s < scratch.size(); ++s) {
    at[s] = bytes;
    bytes = round_up(bytes + scratch[s], 256);
  }
  const std::size_t workspaces = bytes;
  result.memory = DeviceBuffer(bytes + result.lanes.size() * cublas::Handle::kWorkspaceBytes);
  const CUdeviceptr base = result.memory.get();
  result.scratch = base + at[0];
  result.scratch_bytes = scratch[0];
  for (std::size_t l = 0; l < result.lanes.size(); ++l) {
    MatrixLane& lane = result.lanes[l];
    lane.scratch = base + at[l + 1];
    lane.scratch_bytes = scratch[l + 1];
    lane.workspace = base + workspaces + l * cublas::Handle::kWorkspaceBytes;
    lane.stream.get();  // made now: a step may be captured
    lane.done.get();
  }
  if (!result.lanes.empty()) result.fork.get();
  std::vector<std::pair<int, kernel_abi::ColumnSplit>> splits;  // by stage
  for (std::size_t b = 0; b < result.buckets.size(); ++b) {
    MatrixBucket& bucket = result.buckets[b];
    bucket.x = base + offsets[b];
    const std::int64_t size = bucket.rows * bucket.cols;
    const std::size_t row = 2 + static_cast<std::size_t>(variant.num_states) + static_cast<std::size_t>(bucket.value);
    std::int64_t first = 0;
    for (std::size_t t : members[b]) {
      const CUdeviceptr x = bucket.x + size_of(bucket.dtype) * static_cast<std::size_t>(first * size);
      CUdeviceptr operand = x;  // where the stages read and write the tensor's values
      if (tensors[t]->dims.column_splits > 1) {
        operand = base + whole_at.at({b, t});
        splits.emplace_back(variant.matrix_values[bucket.value].stage,
                            column_split(operand, x, tensors[t]->dims, bucket.dtype));
      }
      pointers[row * n + t] = reinterpret_cast<void*>(operand);
      result.tensors.push_back({bucket.value, bucket.dtype, t, static_cast<std::size_t>(groups[t]), 0, x,
                                matrices_of(t), bucket.rows, bucket.cols});
      if (bucket.groups.empty() || bucket.groups.back().group != groups[t])
        bucket.groups.push_back({groups[t], first, 0});
      bucket.groups.back().count += matrices_of(t);
      first += matrices_of(t);
    }
  }
  std::stable_sort(splits.begin(), splits.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<kernel_abi::ColumnSplit> table;
  for (const auto& [stage, split] : splits) {
    if (result.column_splits.empty() || result.column_splits.back().stage != stage)
      result.column_splits.push_back({stage, base + split_table_at + table.size() * sizeof(kernel_abi::ColumnSplit)});
    StageColumnSplits& entry = result.column_splits.back();
    ++entry.count;
    entry.most_units = std::max(entry.most_units, split.batch * split.splits * split.rows * split.width);
    table.push_back(split);
  }
  if (!table.empty())
    driver::check(
        driver::api().cuMemcpyHtoD(base + split_table_at, table.data(), table.size() * sizeof(kernel_abi::ColumnSplit)),
        "cuMemcpyHtoD");
  std::stable_sort(result.tensors.begin(), result.tensors.end(), [](const MatrixTensor& a, const MatrixTensor& b) {
    return std::tie(a.value, a.tensor) < std::tie(b.value, b.tensor);
  });
  return result;
}

std::string matrix_argument_problem(const OptimizerInfo& info, const VariantInfo& variant,
                                    const std::vector<double>& h) {
  for (int m = 0; m < variant.num_matrix_values; ++m) {
    const MatrixValueInfo& value = variant.matrix_values[m];
    const std::vector<double> args = matrix_arguments(value, h);
    std::vector<std::string> names;
    for (int a = 0; a < value.num_arguments; ++a)
      names.push_back(value.arguments[a].hyperparameter >= 0
                          ? info.hyperparameters[value.arguments[a].hyperparameter].name
                          : std::string());
    if (std::string why = matrix_program_problem(*value.program, args.data(), names); !why.empty()) return why;
  }
  return "";
}

int move_column_splits(const PlanMatrices& matrices, int stage, bool to_pieces, CUstream stream) {
  int launches = 0;
  for (const StageColumnSplits& s : matrices.column_splits) {
    if (s.stage != stage) continue;
    CUdeviceptr table = s.table;
    int count = s.count, to = to_pieces ? 1 : 0;
    void* args[] = {&table, &count, &to};
    const long long blocks =
        std::min<long long>((s.most_units + kernel_abi::kMatrixKernelBlock - 1) / kernel_abi::kMatrixKernelBlock, 4096);
    driver::launch(matrices.kernels.column_splits, static_cast<unsigned>(blocks), kernel_abi::kMatrixKernelBlock,
                   stream, args, false, "check that the stream belongs to the current context");
    ++launches;
  }
  return launches;
}

int apply_matrices(const PlanMatrices& matrices, const VariantInfo& variant, int stage,
                   const std::vector<Group>& groups, const cublas::Handle& handle, CUstream stream) {
  const driver::Api& cuda = driver::api();
  if (matrices.work.size() <= static_cast<std::size_t>(stage))
    matrices.work.resize(static_cast<std::size_t>(stage) + 1);
  MatrixStageWork& work = matrices.work[static_cast<std::size_t>(stage)];
  std::vector<double> arguments;
  stage_arguments(variant, stage, groups, arguments);
  if (!work.made || work.arguments != arguments) work = make_stage_work(matrices, variant, stage, groups);
  // The lanes this stage uses wait for what the caller's stream holds before any of its batches.
  std::vector<bool> used(matrices.lanes.size(), false);
  for (const MatrixStageWork::Batch& batch : work.batches)
    if (matrices.lane_of[batch.bucket] > 0) used[static_cast<std::size_t>(matrices.lane_of[batch.bucket] - 1)] = true;
  const bool forks = std::find(used.begin(), used.end(), true) != used.end();
  int launches = 0;
  launches += move_column_splits(matrices, stage, true, stream);
  if (forks) driver::check(cuda.cuEventRecord(matrices.fork.get(), stream), "cuEventRecord");
  for (std::size_t l = 0; l < matrices.lanes.size(); ++l)
    if (used[l])
      driver::check(cuda.cuStreamWaitEvent(matrices.lanes[l].stream.get(), matrices.fork.get(), 0),
                    "cuStreamWaitEvent");
  // The caller's stream waits for every lane, also when a batch throws midway (a capture then ends
  // with that error, not with a stream left forked).
  auto join = [&] {
    for (std::size_t l = 0; l < matrices.lanes.size(); ++l) {
      if (!used[l]) continue;
      driver::check(cuda.cuEventRecord(matrices.lanes[l].done.get(), matrices.lanes[l].stream.get()), "cuEventRecord");
      driver::check(cuda.cuStreamWaitEvent(stream, matrices.lanes[l].done.get(), 0), "cuStreamWaitEvent");
    }
  };
  try {
    launches += work.in_block.enqueue(stream);
    for (const MatrixStageWork::Batch& batch : work.batches) {
      const MatrixBucket& bucket = matrices.buckets[batch.bucket];
      const LaneResources on = resources_of(matrices, matrices.lane_of[batch.bucket], stream);
      launches += batch.program->run_batched(matrices.kernels, handle, batch.x, on.scratch, on.scratch_bytes,
                                             batch.count, bucket.rows, bucket.cols, on.stream, on.workspace);
    }
  } catch (...) {
    join();
    throw;
  }
  join();
  launches += move_column_splits(matrices, stage, false, stream);
  return launches;
}

}  // namespace optgen
