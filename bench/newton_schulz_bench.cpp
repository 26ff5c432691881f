// optgen_newton_schulz_bench: the batched Newton–Schulz of Muon's step (muon's matrix function
// newton_schulz, its program run through cuBLAS as a step runs it: FusedOptimizer::
// apply_matrix_function) on a model's hidden matrices, against the GPU's bf16 rate: ms per
// orthogonalisation of all of them (the norms and the products) and the TFLOP/s of its products.
//
//   optgen_newton_schulz_bench [--workload-dir DIR] [--workloads gpt2,llama-1b] [--steps 10]
//
// A workload's hidden matrices are its 2-D tensors but those with a dimension of 32768 or more
// (token embeddings and output heads, which Muon's users step with AdamW), batched by shape. Each
// matrix costs ns_steps x (4 m^2 n + 2 m^3) FLOPs (m <= n: a tall one is orthogonalised
// transposed, as torch.optim.Muon does).
// Time: CUDA events around `steps` orthogonalisations of every batch, the median of 5, on random
// matrices of unit norm.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "bench_common.h"
#include "command_line.h"
#include "muon.h"
#include "optgen/dtype.h"

namespace {

using optgen_bench::api;
using optgen_bench::check;

/// Matrices of one shape, their bf16 values and the scratch for them.
struct Batch {
  int rows, cols;
  long long count;
  CUdeviceptr x = 0, scratch = 0;
};

/// Fills `b`'s matrices with uniform random values, each matrix scaled to a Frobenius norm of about 1
/// as Muon's normalisation leaves it: GEMMs of real data draw more power than of a constant (H200.md:
/// 894 against 788 TFLOP/s on zeros), and a constant matrix is of rank 1.
void upload_random_matrices(const Batch& b, optgen::DType dtype, std::mt19937& rng) {
  const long long size = static_cast<long long>(b.rows) * b.cols;
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  const float scale = std::sqrt(3.0f / static_cast<float>(size));  // E[u^2] = 1/3
  std::vector<float> values(static_cast<size_t>(b.count * size));
  for (auto& v : values) v = uniform(rng) * scale;
  if (dtype == optgen::DType::F32) {
    check(api().cuMemcpyHtoD(b.x, values.data(), values.size() * 4), "cuMemcpyHtoD");
    return;
  }
  std::vector<std::uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) bits[i] = optgen::float_to_bf16(values[i]);
  check(api().cuMemcpyHtoD(b.x, bits.data(), bits.size() * 2), "cuMemcpyHtoD");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Times batched Newton-Schulz (Muon) on a model's hidden matrices.", "optgen_newton_schulz_bench");
  std::string dir = "bench/workloads";
  std::vector<std::string> workloads = {"gpt2", "llama-1b"};
  int steps = 10;
  app.add_option("--workload-dir", dir, "where the workloads' JSON files are")->capture_default_str();
  optgen::command_line::add_list(app, "--workloads", workloads, "workloads: DIR/<name>.json, comma-separated");
  app.add_option("--steps", steps, "orthogonalisations per timed repetition")
      ->check(optgen::command_line::whole_number(1, 1000))
      ->capture_default_str();
  std::string dtype_name = "bf16";
  app.add_option("--dtype", dtype_name,
                 "the matrices and products: bf16 (fp32 accumulation, as torch's) or f32 (muon's storage f32:o=f32)")
      ->check(CLI::IsMember({"bf16", "f32"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    optgen::driver::current_device();
    CUstream stream;
    check(api().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    optgen_bench::Timer timer;
    const optgen::DType dtype = dtype_name == "f32" ? optgen::DType::F32 : optgen::DType::BF16;
    // A muon optimizer of one small matrix, prepared: its matrix function runs on the batches here.
    const optgen::OptimizerInfo& info = optgen::Muon::info();
    const std::vector<double> h = optgen::default_hyperparameters(info);
    optgen::StorageOptions storage;
    if (dtype == optgen::DType::F32) storage.state_dtypes = {{"o", optgen::DType::F32}};
    CUdeviceptr param = 0, grad = 0;
    check(api().cuMemAlloc(&param, 64 * 4), "cuMemAlloc");
    check(api().cuMemAlloc(&grad, 64 * 4), "cuMemAlloc");
    check(api().cuMemsetD8(param, 0, 64 * 4), "cuMemsetD8");
    check(api().cuMemsetD8(grad, 0, 64 * 4), "cuMemsetD8");
    optgen::FusedOptimizer muon(info, h, storage);
    optgen::Tensor matrix;
    matrix.param = reinterpret_cast<void*>(param);
    matrix.grad = reinterpret_cast<const void*>(grad);
    matrix.numel = 64;
    matrix.shape = {8, 8};
    muon.add_param_group({matrix}, h);
    muon.prepare(stream);
    const int steps_per_call = 5;  // torch.optim.Muon's ns_steps
    const std::vector<double> arguments = {steps_per_call, 3.4445, -4.775, 2.0315, 1e-7};
    std::mt19937 rng(1);
    std::printf("%s, %s\n\n", optgen::driver::device_name(optgen::driver::current_device()).c_str(),
                dtype_name.c_str());
    std::printf("| workload | matrices | batches (m x n: count) | TFLOP | ms | TFLOP/s |\n|---|---|---|---|---|---|\n");
    for (const std::string& name : workloads) {
      const optgen_bench::Workload w = optgen_bench::load_workload(dir + "/" + name + ".json");
      std::map<std::pair<int, int>, long long> shapes;
      for (const auto& s : w.shapes)
        if (s.size() == 2 && s[0] < 32768 && s[1] < 32768) ++shapes[{static_cast<int>(s[0]), static_cast<int>(s[1])}];
      std::vector<Batch> batches;
      double flops = 0;
      long long matrices = 0;
      std::string listed;
      for (const auto& [shape, count] : shapes) {
        Batch b{shape.first, shape.second, count};
        const size_t bytes = optgen::size_of(dtype) * static_cast<size_t>(count) * b.rows * b.cols;
        check(api().cuMemAlloc(&b.x, bytes), "cuMemAlloc");
        upload_random_matrices(b, dtype, rng);
        check(api().cuMemAlloc(&b.scratch, muon.matrix_function_scratch_bytes(0, 0, count, b.rows, b.cols, dtype)),
              "cuMemAlloc");
        batches.push_back(b);
        const double m = std::min(b.rows, b.cols), n = std::max(b.rows, b.cols);
        flops += static_cast<double>(count) * steps_per_call * (4 * m * m * n + 2 * m * m * m);
        matrices += count;
        listed += (listed.empty() ? "" : ", ") + std::to_string(b.rows) + " x " + std::to_string(b.cols) + ": " +
                  std::to_string(count);
      }
      auto run = [&] {
        for (const Batch& b : batches)
          muon.apply_matrix_function(0, 0, arguments.data(), b.x, b.scratch, b.count, b.rows, b.cols, stream);
      };
      for (int i = 0; i < 3; ++i) run();
      const double us = timer.median_us(stream, steps, 5, run);
      std::printf("| %s | %lld | %s | %.3f | %.3f | %.1f |\n", w.name.c_str(), matrices, listed.c_str(), flops / 1e12,
                  us / 1e3, flops / (us * 1e-6) / 1e12);
      for (const Batch& b : batches) {
        api().cuMemFree(b.x);
        api().cuMemFree(b.scratch);
      }
    }
    api().cuMemFree(param);
    api().cuMemFree(grad);
    api().cuStreamDestroy(stream);
  } catch (const std::exception& e) {
    std::cerr << "optgen_newton_schulz_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
