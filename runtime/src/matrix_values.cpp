#include "matrix_values.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "optgen/kernel_abi.h"

namespace optgen {
namespace {

/// The value of argument `a` for a group of hyperparameters `h`.
double argument(const MatrixArgument& a, const std::vector<double>& h) {
  return a.hyperparameter >= 0 ? h.at(static_cast<std::size_t>(a.hyperparameter)) : a.value;
}

}  // namespace

std::vector<double> matrix_arguments(const MatrixValueInfo& value, const std::vector<double>& h) {
  std::vector<double> args;
  for (int a = 0; a < value.num_arguments; ++a) args.push_back(argument(value.arguments[a], h));
  return args;
}

PlanMatrices build_matrices(const VariantInfo& variant, const KernelInfo& kernel,
                            const std::vector<const BoundTensor*>& tensors, const std::vector<int>& groups,
                            const Module& module, std::vector<void*>& pointers, const std::string& call) {
  PlanMatrices result{{}, {}, {}, 0, 0, MatrixKernels(module)};
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
    scratch = std::max(scratch, matrix_program_scratch_bytes(*variant.matrix_values[bucket.value].program, bucket.count,
                                                             bucket.rows, bucket.cols, bucket.dtype));
  }
  result.memory = DeviceBuffer(bytes + scratch);
  const CUdeviceptr base = result.memory.get();
  result.scratch = base + bytes;
  result.scratch_bytes = scratch;
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
          run_matrix_program(*value.program, args.data(), bucket.dtype, matrices.kernels, handle,
                             bucket.x + size_of(bucket.dtype) * static_cast<std::size_t>(bucket.groups[g].first * size),
                             matrices.scratch, matrices.scratch_bytes, count, bucket.rows, bucket.cols, stream);
      g = end;
    }
  }
  return launches;
}

}  // namespace optgen
