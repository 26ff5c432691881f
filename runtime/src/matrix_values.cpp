#include "matrix_values.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "optgen/kernel_abi.h"
#include "optgen/newton_schulz.h"

namespace optgen {
namespace {

constexpr std::int64_t kPartElements = 1 << 14;  // elements a block of the norm kernels sums or divides

/// A part of a matrix for the norm kernels: all of a small one, else kPartElements (a multiple of 8).
std::int64_t part_size(std::int64_t size) { return std::min<std::int64_t>(size, kPartElements); }
/// How many parts a matrix of `size` elements has (none when it has no elements).
std::int64_t part_count(std::int64_t size) { return size == 0 ? 0 : (size + part_size(size) - 1) / part_size(size); }

/// The value of argument `a` for a group of hyperparameters `h`.
double argument(const MatrixArgument& a, const std::vector<double>& h) {
  return a.hyperparameter >= 0 ? h.at(static_cast<std::size_t>(a.hyperparameter)) : a.value;
}

/// Where the norms' partial sums start in a matrix function's scratch: after newton_schulz's.
std::size_t partials_offset(long long count, long long rows, long long cols, DType dtype) {
  return round_up(newton_schulz_scratch_bytes(count, static_cast<int>(rows), static_cast<int>(cols), dtype), 256);
}

}  // namespace

MatrixKernels::MatrixKernels(const Module& module)
    : sum_squares(module.function(kernel_abi::kMatrixSumSquares)),
      normalize(module.function(kernel_abi::kMatrixNormalize)),
      sum_squares_f32(module.function(kernel_abi::kMatrixSumSquaresF32)),
      normalize_f32(module.function(kernel_abi::kMatrixNormalizeF32)) {}

std::size_t matrix_scratch_bytes(long long count, long long rows, long long cols, DType dtype) {
  return partials_offset(count, rows, cols, dtype) +
         static_cast<std::size_t>(count * part_count(rows * cols)) * sizeof(double);
}

std::vector<double> matrix_arguments(const MatrixValueInfo& value, const std::vector<double>& h) {
  std::vector<double> args;
  for (int a = 0; a < value.num_arguments; ++a) args.push_back(argument(value.arguments[a], h));
  return args;
}

PlanMatrices build_matrices(const VariantInfo& variant, const KernelInfo& kernel,
                            const std::vector<const BoundTensor*>& tensors, const std::vector<int>& groups,
                            const Module& module, std::vector<void*>& pointers, const std::string& call) {
  PlanMatrices result{{}, {}, {}, 0, MatrixKernels(module)};
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
                    std::string("variant ") + variant.name + " applies " +
                        to_string(variant.matrix_values[v].function) + " to '" + variant.matrix_values[v].name +
                        "', which needs matrices, but tensor " + std::to_string(t) + " of its plan (group " +
                        std::to_string(groups[t]) + ", " + std::to_string(bound->numel) + " elements) is bound with " +
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
      const auto key = std::make_tuple(v, bound->dims.rows, bound->dims.cols);
      auto [it, added] = index.emplace(key, result.buckets.size());
      if (added) {
        MatrixBucket bucket;
        bucket.value = v;
        bucket.dtype = matrix_dtype(kernel, v);
        bucket.rows = bound->dims.rows;
        bucket.cols = bound->dims.cols;
        result.buckets.push_back(bucket);
        members.emplace_back();
      }
      members[it->second].push_back(t);
    }
  // One allocation: the buckets' matrices (each 256-byte aligned), then the scratch.
  std::size_t bytes = 0, scratch = 0;
  std::vector<std::size_t> offsets;
  for (std::size_t b = 0; b < result.buckets.size(); ++b) {
    MatrixBucket& bucket = result.buckets[b];
    for (std::size_t t : members[b]) bucket.count += tensors[t]->dims.batch;
    offsets.push_back(bytes);
    bytes = round_up(bytes + size_of(bucket.dtype) * static_cast<std::size_t>(bucket.count * bucket.rows * bucket.cols),
                     256);
    scratch = std::max(scratch, matrix_scratch_bytes(bucket.count, bucket.rows, bucket.cols, bucket.dtype));
  }
  result.memory = DeviceBuffer(bytes + scratch);
  const CUdeviceptr base = result.memory.get();
  result.scratch = base + bytes;
  for (std::size_t b = 0; b < result.buckets.size(); ++b) {
    MatrixBucket& bucket = result.buckets[b];
    bucket.x = base + offsets[b];
    const std::int64_t size = bucket.rows * bucket.cols;
    const std::size_t row = 2 + static_cast<std::size_t>(variant.num_states) + static_cast<std::size_t>(bucket.value);
    std::int64_t first = 0;
    for (std::size_t t : members[b]) {
      const CUdeviceptr x = bucket.x + size_of(bucket.dtype) * static_cast<std::size_t>(first * size);
      pointers[row * n + t] = reinterpret_cast<void*>(x);
      result.tensors.push_back({bucket.value, bucket.dtype, t, static_cast<std::size_t>(groups[t]), 0, x,
                                tensors[t]->dims.batch, bucket.rows, bucket.cols});
      if (bucket.groups.empty() || bucket.groups.back().group != groups[t])
        bucket.groups.push_back({groups[t], first, 0});
      bucket.groups.back().count += tensors[t]->dims.batch;
      first += tensors[t]->dims.batch;
    }
  }
  std::stable_sort(result.tensors.begin(), result.tensors.end(), [](const MatrixTensor& a, const MatrixTensor& b) {
    return std::tie(a.value, a.tensor) < std::tie(b.value, b.tensor);
  });
  return result;
}

std::string matrix_argument_problem(const OptimizerInfo& info, const VariantInfo& variant,
                                    const std::vector<double>& h) {
  for (int m = 0; m < variant.num_matrix_values; ++m) {
    const MatrixValueInfo& value = variant.matrix_values[m];
    switch (value.function) {
      case MatrixFunction::NewtonSchulz: {
        const MatrixArgument& steps = value.arguments[0];
        const double given = argument(steps, h);
        if (given >= 0 && given <= 1000 && given == std::floor(given)) break;
        return std::string(to_string(value.function)) + "'s steps" +
               (steps.hyperparameter >= 0 ? std::string(" (") + info.hyperparameters[steps.hyperparameter].name + ")"
                                          : std::string()) +
               " is " + std::to_string(given) + ": give a whole number from 0 to 1000";
      }
    }
  }
  return "";
}

int apply_function(const MatrixValueInfo& value, DType dtype, const double* arguments, const MatrixKernels& kernels,
                   const cublas::Handle& handle, CUdeviceptr x, CUdeviceptr scratch, long long count, long long rows,
                   long long cols, CUstream stream) {
  if (count == 0 || rows * cols == 0) return 0;
  switch (value.function) {
    case MatrixFunction::NewtonSchulz: {
      const std::int64_t size = rows * cols;
      const NewtonSchulz ns{static_cast<int>(arguments[0]), static_cast<float>(arguments[1]),
                            static_cast<float>(arguments[2]), static_cast<float>(arguments[3]), dtype};
      const CUdeviceptr partials = scratch + partials_offset(count, rows, cols, dtype);
      // After an odd number of steps the iteration's result is where its input was not: the norm
      // kernels leave the input in the scratch then, so that the result lands in x uncopied.
      const bool odd = ns.steps % 2 == 1;
      kernel_abi::MatrixBatch batch{reinterpret_cast<const void*>(x),
                                    reinterpret_cast<void*>(odd ? scratch : x),
                                    reinterpret_cast<double*>(partials),
                                    size,
                                    part_size(size),
                                    static_cast<int>(count),
                                    static_cast<int>(part_count(size)),
                                    static_cast<float>(arguments[4])};
      void* batch_args[] = {&batch};
      const auto blocks = static_cast<unsigned>(static_cast<std::int64_t>(batch.count) * batch.parts);
      const bool f32 = dtype == DType::F32;
      for (CUfunction kernel :
           {f32 ? kernels.sum_squares_f32 : kernels.sum_squares, f32 ? kernels.normalize_f32 : kernels.normalize})
        driver::launch(kernel, blocks, kernel_abi::kMatrixKernelBlock, stream, batch_args, false,
                       "check that the stream belongs to the current context");
      return 2 +
             newton_schulz(handle, x, scratch, count, static_cast<int>(rows), static_cast<int>(cols), ns, stream, odd);
    }
  }
  return 0;
}

int apply_matrices(const PlanMatrices& matrices, const VariantInfo& variant, int stage,
                   const std::vector<Group>& groups, const cublas::Handle& handle, CUstream stream) {
  int launches = 0;
  for (const MatrixBucket& bucket : matrices.buckets) {
    const MatrixValueInfo& value = variant.matrix_values[bucket.value];
    if (value.stage != stage) continue;
    const std::int64_t size = bucket.rows * bucket.cols;
    // The runs of consecutive groups whose arguments agree: one batch each.
    for (std::size_t g = 0; g < bucket.groups.size();) {
      const auto arguments_of = [&](std::size_t run) {
        return matrix_arguments(value, groups[static_cast<std::size_t>(bucket.groups[run].group)].h);
      };
      const std::vector<double> args = arguments_of(g);
      std::size_t end = g + 1;
      std::int64_t count = bucket.groups[g].count;
      for (; end < bucket.groups.size() && arguments_of(end) == args; ++end) count += bucket.groups[end].count;
      launches +=
          apply_function(value, bucket.dtype, args.data(), matrices.kernels, handle,
                         bucket.x + size_of(bucket.dtype) * static_cast<std::size_t>(bucket.groups[g].first * size),
                         matrices.scratch, count, bucket.rows, bucket.cols, stream);
      g = end;
    }
  }
  return launches;
}

}  // namespace optgen
