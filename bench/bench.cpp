// optgen_bench: µs per step and effective bandwidth of the generated launchers on real models'
// parameter shapes (bench/workloads/*.json), against the device's copy bandwidth measured
// here; and the host time spent inside step() for a model of many tensors, and of many matrices (Muon).
//
//   optgen_bench [--workload-dir DIR] [--workloads ghostnet_100,gpt2] [--optimizers
//   adam,adamw,adamw_amsgrad,sgd,adamw_clip,lamb,lamb_clip,adafactor,prodigy,dadapt_adam,adam_mini,adamw_schedule_free]
//                [--modes eager,graph,amp] [--steps 50] [--chunk-sizes 16384,65536] [--host-tensors 10000]
//                [--host-matrices 10000] [--storage f32,bf16,bf16:bf16,bf16+master] [--launch-shapes default,128x8]
//                [--tune FILE]
//
// (CLI11 parses it: `--help` lists the options and their defaults; a bad option or value is an
// error naming it, exit status 2, before anything runs.)
//
// Modes: `eager` launches steps from C++ one after another on one stream; `graph` captures one
// step in a CUDA graph once and replays it; `amp` is the eager step with AMP's grad_scale and
// found_inf given (device floats: a scale of 1024, no overflow). Time is measured with CUDA events
// over `steps` steps, the median of 5 repetitions. `--storage` (optgen/storage.h's text form) picks
// the params' dtype and what the optimizer stores; each floor counts the bytes of that storage.
// `--launch-shapes` steps each case with its kernels compiled for other launch shapes
// (FusedOptimizer::set_launch_shape; NVRTC compiles them first, on a thread each). `--tune FILE`
// steps eagerly over chunk sizes (--chunk-sizes, or 1024 to 65536) and launch shapes and writes,
// per kernel set, the fastest for each workload's size: the table optgen's runtime reads through
// OPTGEN_TUNING (optgen/tuning.h; bench/README.md, "Tuning for a GPU").
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iostream>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "adafactor.h"
#include "bench_common.h"
#include "command_line.h"
#include "adam_mini.h"
#include "adam.h"
#include "adamw.h"
#include "adamw_schedule_free.h"
#include "dadapt_adam.h"
#include "lamb.h"
#include "muon.h"
#include "prodigy.h"
#include "optgen/blockwise8.h"
#include "optgen/driver.h"
#include "optgen/error.h"
#include "optgen/kernel_abi.h"
#include "optgen/storage.h"
#include "optgen/tuning.h"
#include "sgd.h"

namespace {

using optgen::driver::api;
using optgen::driver::check;
using optgen_bench::load_workload;
using optgen_bench::Timer;
using optgen_bench::Workload;

/// Device buffers of a model: params and grads, each tensor 256-byte aligned, random values.
struct Model {
  std::vector<std::int64_t> numels;
  CUdeviceptr params = 0, grads = 0;
  std::vector<optgen::Tensor> tensors;

  /// `shapes`: each tensor's, when known (a spec with rows and columns needs them). Params and
  /// grads of `dtype`, random in [-1, 1) (f32 bits read as bf16 or f16 are finite values too).
  explicit Model(const std::vector<std::int64_t>& sizes, const std::vector<std::vector<std::int64_t>>& shapes = {},
                 optgen::DType dtype = optgen::DType::F32)
      : numels(sizes) {
    std::vector<std::size_t> offsets;
    std::size_t bytes = 0;
    for (auto n : numels) {
      offsets.push_back(bytes);
      bytes += (static_cast<std::size_t>(n) * optgen::size_of(dtype) + 255) / 256 * 256;
    }
    check(api().cuMemAlloc(&params, bytes), "cuMemAlloc");
    check(api().cuMemAlloc(&grads, bytes), "cuMemAlloc");
    fill_random(params, bytes, 1, dtype);
    fill_random(grads, bytes, 2, dtype);
    for (size_t i = 0; i < numels.size(); ++i)
      tensors.push_back({reinterpret_cast<void*>(params + offsets[i]), reinterpret_cast<void*>(grads + offsets[i]),
                         numels[i], dtype, nullptr, -1, i < shapes.size() ? shapes[i] : std::vector<std::int64_t>{}});
  }
  ~Model() {
    api().cuMemFree(params);
    api().cuMemFree(grads);
  }

  /// Random values in [-1, 1) of `dtype`: a 64 MiB random block, tiled over the buffer.
  static void fill_random(CUdeviceptr buffer, std::size_t bytes, unsigned seed, optgen::DType dtype) {
    const std::size_t block = std::min<std::size_t>(bytes, 64u << 20) / 4 * 4;
    std::vector<unsigned char> host(block);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (std::size_t at = 0; at + optgen::size_of(dtype) <= block; at += optgen::size_of(dtype)) {
      const float x = uniform(rng);
      std::uint16_t half = 0;
      switch (dtype) {
        case optgen::DType::F32: std::memcpy(&host[at], &x, 4); continue;
        case optgen::DType::BF16: half = optgen::float_to_bf16(x); break;
        case optgen::DType::F16: half = optgen::float_to_f16(x); break;
        case optgen::DType::Q8:
        case optgen::DType::UQ8: throw std::logic_error("fill_random: params and grads are never 8-bit");
      }
      std::memcpy(&host[at], &half, 2);
    }
    check(api().cuMemcpyHtoD(buffer, host.data(), block), "cuMemcpyHtoD");
    for (std::size_t at = block; at < bytes; at += block)
      check(api().cuMemcpyDtoD(buffer + at, buffer, std::min(block, bytes - at)), "cuMemcpyDtoD");
  }
};

/// Device-to-device copy bandwidth (bytes read + written per second) of a 2 GiB copy.
double copy_bandwidth(CUstream stream, Timer& timer) {
  const std::size_t bytes = std::size_t{2} << 30;
  CUdeviceptr a, b;
  check(api().cuMemAlloc(&a, bytes), "cuMemAlloc");
  check(api().cuMemAlloc(&b, bytes), "cuMemAlloc");
  check(api().cuMemsetD32(a, 0x3f800000u, bytes / 4), "cuMemsetD32");
  auto copy = [&] { check(api().cuMemcpyDtoDAsync(b, a, bytes, stream), "cuMemcpyDtoDAsync"); };
  for (int i = 0; i < 3; ++i) copy();
  const double us = timer.median_us(stream, 10, 5, copy);
  api().cuMemFree(a);
  api().cuMemFree(b);
  return 2.0 * bytes / (us * 1e-6);
}

/// What one step must move per parameter: the param read and written, the gradient read, each
/// state (by name) read and written, so many times each (the Reduce stages read some twice).
struct Traffic {
  int param_reads, param_writes, grad_reads;
  std::vector<std::pair<std::string, int>> states;

  /// Bytes per parameter of a tensor of `numel` in `storage`: with a master copy the param is only
  /// written, and the master read and written in its place; an 8-bit state is its code and 4 bytes
  /// of absmax per block of 256 (f32 in a tensor under 4096 elements, optgen::stored_dtype).
  double bytes(const optgen::Storage& storage, std::int64_t numel) const {
    const double p = static_cast<double>(optgen::size_of(storage.param));
    double total = p * grad_reads;
    if (storage.param_write == optgen::ParamWrite::Master)
      total += p * param_writes + 4.0 * (param_reads + param_writes);
    else
      total += p * (param_reads + param_writes);
    for (const auto& [state, accesses] : states) {
      const optgen::DType dtype = optgen::stored_dtype(storage.state_dtype(state), numel);
      const double size = optgen::is_blockwise(dtype) ? 1.0 + 4.0 / optgen::blockwise8::kBlockSize
                                                      : static_cast<double>(optgen::size_of(dtype));
      total += size * accesses;
    }
    return total;
  }
  /// The same for every tensor of a model.
  double bytes(const optgen::Storage& storage, const std::vector<std::int64_t>& numels) const {
    double total = 0;
    for (std::int64_t n : numels) total += bytes(storage, n) * static_cast<double>(n);
    return total;
  }
};

struct OptimizerCase {
  std::string name;
  Traffic traffic;
  std::function<std::unique_ptr<optgen::FusedOptimizer>(const optgen::StorageOptions&)> make;
};

std::vector<OptimizerCase> optimizer_cases() {
  auto with_defaults = [](const optgen::OptimizerInfo& info, optgen::FusedOptimizer::Overrides overrides) {
    return [&info, overrides](const optgen::StorageOptions& storage) {
      auto opt = std::make_unique<optgen::FusedOptimizer>(info, optgen::default_hyperparameters(info), storage);
      for (const auto& [name, value] : overrides) opt->set(name, value);
      return opt;
    };
  };
  return {
      {"adam", {1, 1, 1, {{"exp_avg", 2}, {"exp_avg_sq", 2}}}, with_defaults(optgen::Adam::info(), {})},
      {"adamw", {1, 1, 1, {{"exp_avg", 2}, {"exp_avg_sq", 2}}}, with_defaults(optgen::AdamW::info(), {})},
      // AMSGrad: AdamW's bytes and max_exp_avg_sq's (read and written).
      {"adamw_amsgrad",
       {1, 1, 1, {{"exp_avg", 2}, {"exp_avg_sq", 2}, {"max_exp_avg_sq", 2}}},
       with_defaults(optgen::AdamW::info(), {{"amsgrad", 1.0}})},
      {"sgd", {1, 1, 1, {{"momentum_buffer", 2}}}, with_defaults(optgen::SGD::info(), {{"momentum", 0.9}})},
      // Two launches: the gradients' global norm (reads g), then AdamW (reads p, g, m, v; writes p, m, v).
      {"adamw_clip",
       {1, 1, 2, {{"exp_avg", 2}, {"exp_avg_sq", 2}}},
       with_defaults(optgen::AdamW::info(), {{"max_grad_norm", 1.0}})},
      // Two launches: both norms of every tensor (reads p, g, m, v), then the update (as Adam's).
      {"lamb", {2, 1, 2, {{"exp_avg", 3}, {"exp_avg_sq", 3}}}, with_defaults(optgen::LAMB::info(), {})},
      // Three: the global norm, LAMB's norms, the update.
      {"lamb_clip",
       {2, 1, 3, {{"exp_avg", 3}, {"exp_avg_sq", 3}}},
       with_defaults(optgen::LAMB::info(), {{"max_grad_norm", 1.0}})},
      // Four launches: norm(param) and the row and column sums of grad^2 (reads p, g, g), the new
      // row_var's mean per matrix (rows only), the update's norm (reads g), the update (reads p,
      // g; writes p). Row and column states are negligible; 1-D tensors also read and write
      // `variance` (not counted). The floor issue 32 set: a tensor whose rows are whole tiles of
      // 128 columns reads g once in the first stage (kernel_abi::rows_in_column_segments), so a
      // step of gpt2's moves about 24 bytes a parameter.
      {"adafactor", {2, 1, 4, {}}, with_defaults(optgen::Adafactor::info(), {})},
      // Two launches: the D estimate's two sums over the group (reads p, g, p0, s), then the update
      // (reads p, g, m, v, s; writes p, m, v, s). p0 is read-only: written at the first step only.
      {"prodigy",
       {2, 1, 2, {{"exp_avg", 2}, {"exp_avg_sq", 2}, {"s", 3}, {"p0", 1}}},
       with_defaults(optgen::Prodigy::info(), {})},
      // Two launches: the D estimate's two sums (reads p, g, v, s), then the update (as Prodigy's).
      {"dadapt_adam",
       {2, 1, 2, {{"exp_avg", 2}, {"exp_avg_sq", 3}, {"s", 3}}},
       with_defaults(optgen::DAdaptAdam::info(), {})},
      // Two launches: the mean of g^2 over each row, a block of Adam-mini's (reads g), then the
      // update (reads p, g, m; writes p, m). A row per tensor's first dimension, as its neurons'
      // rule binds a matrix; the second moment per row is negligible, and 1-D tensors' `v` per
      // element is not counted.
      {"adam_mini", {1, 1, 2, {{"m", 2}}}, with_defaults(optgen::AdamMini::info(), {})},
      // One launch: schedule-free AdamW (reads p, g, z, v; writes p, z, v): AdamW's bytes, z in
      // exp_avg's place.
      {"adamw_schedule_free",
       {1, 1, 1, {{"z", 2}, {"exp_avg_sq", 2}}},
       with_defaults(optgen::AdamWScheduleFree::info(), {})},
  };
}

/// One step captured in a CUDA graph, replayed by launch().
class CapturedStep {
 public:
  CapturedStep(optgen::FusedOptimizer& opt, CUstream stream) : stream_(stream) {
    opt.prepare(stream);
    check(api().cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
    opt.step(stream);
    check(api().cuStreamEndCapture(stream, &graph_), "cuStreamEndCapture");
    check(api().cuGraphInstantiate(&exec_, graph_, 0), "cuGraphInstantiate");
  }
  ~CapturedStep() {
    api().cuGraphExecDestroy(exec_);
    api().cuGraphDestroy(graph_);
  }
  void launch() { check(api().cuGraphLaunch(exec_, stream_), "cuGraphLaunch"); }

 private:
  CUstream stream_;
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
};

/// AMP's device inputs: grad_scale 1024, found_inf 0.
class AmpInputs {
 public:
  AmpInputs() {
    check(api().cuMemAlloc(&memory_, 2 * sizeof(float)), "cuMemAlloc");
    const float values[] = {1024.0f, 0.0f};
    check(api().cuMemcpyHtoD(memory_, values, sizeof values), "cuMemcpyHtoD");
  }
  ~AmpInputs() { api().cuMemFree(memory_); }
  optgen::AmpInputs get() const {
    const auto* p = reinterpret_cast<const float*>(memory_);
    return {p, p + 1};
  }

 private:
  CUdeviceptr memory_ = 0;
};

/// Host time inside `optimizer`.step(): the GPU is idle before each call, so no queueing is
/// counted. The first steps load the kernels, build the tables and (Muon) choose cuBLAS's algorithms.
template <typename Optimizer>
void host_time(Optimizer& optimizer, const std::string& what, CUstream stream) {
  for (int i = 0; i < 3; ++i) optimizer.step(stream);
  std::vector<double> us;
  for (int i = 0; i < 200; ++i) {
    check(api().cuStreamSynchronize(stream), "cuStreamSynchronize");
    auto t0 = std::chrono::steady_clock::now();
    optimizer.step(stream);
    auto t1 = std::chrono::steady_clock::now();
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  check(api().cuStreamSynchronize(stream), "cuStreamSynchronize");
  std::sort(us.begin(), us.end());
  std::printf("\nhost time inside %s: median %.2f us, p90 %.2f us, min %.2f us\n", what.c_str(), us[us.size() / 2],
              us[us.size() * 9 / 10], us[0]);
}

/// Adam's host time for `tensors` tensors of 64 to 4096 elements.
void adam_host_time(int tensors, CUstream stream) {
  std::vector<std::int64_t> sizes;
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> size(64, 4096);
  for (int i = 0; i < tensors; ++i) sizes.push_back(size(rng));
  Model model(sizes);
  optgen::Adam adam;
  adam.add_param_group(model.tensors);
  host_time(adam,
            "Adam::step() for " + std::to_string(tensors) + " tensors (1 group, " +
                std::to_string(std::accumulate(sizes.begin(), sizes.end(), std::int64_t{0})) + " parameters)",
            stream);
}

/// Muon's host time for `matrices` matrices of 20 shapes, 32 to 108 rows by 64 columns (as
/// bench/torch_muon.py --many).
void muon_host_time(int matrices, CUstream stream) {
  std::vector<std::int64_t> sizes;
  std::vector<std::vector<std::int64_t>> shapes;
  for (int i = 0; i < matrices; ++i) {
    shapes.push_back({32 + 4 * (i % 20), 64});
    sizes.push_back(shapes.back()[0] * shapes.back()[1]);
  }
  Model model(sizes, shapes);
  optgen::Muon muon;
  muon.add_param_group(model.tensors);
  host_time(muon,
            "Muon::step() for " + std::to_string(matrices) + " matrices of " + std::to_string(std::min(matrices, 20)) +
                " shapes (1 group)",
            stream);
}

/// What the command line asks for; the defaults are a full run.
struct Arguments {
  std::string dir = "bench/workloads";  ///< relative to the repository root, where it runs from
  std::vector<std::string> workloads = {"ghostnet_100", "resnet50", "gpt2", "llama-1b"};
  std::vector<std::string> optimizers = {"adam", "adamw", "sgd"};
  std::vector<std::string> modes = {"eager", "graph", "amp"};
  std::vector<long long> chunk_sizes = {0};  // 0: the launcher's default
  std::vector<std::string> storage = {"f32"};
  std::vector<std::string> launch_shapes = {"default"};  ///< BxE, or default: the launcher's own
  int steps = 50;
  int host_tensors = 10000;
  int host_matrices = 10000;
  std::string tune;  ///< where --tune writes its table; empty: no tuning
};

/// "a,b,c".
template <typename T>
std::string join(const std::vector<T>& items) {
  std::string text;
  for (const T& item : items) {
    if (!text.empty()) text += ",";
    if constexpr (std::is_same_v<T, std::string>)
      text += item;
    else
      text += std::to_string(item);
  }
  return text;
}

/// The chunk sizes --tune tries when --chunk-sizes names none.
const std::vector<long long> kTuneChunkSizes = {1024, 2048, 4096, 8192, 16384, 32768, 65536};

/// What --tune measured: per kernel set (optgen::tuning_name), the fastest chunk size for each
/// workload's size, and how much faster than the launcher's default it was.
struct TuneResults {
  struct Best {
    std::string workload;
    std::int64_t elements;
    long long chunk;
    optgen::LaunchShape shape;
    double us;
    double default_us;  ///< at the launcher's default chunk size and launch shape (0: not measured)
  };
  std::map<std::string, std::vector<Best>> kernels;
  bool shapes_measured = false;  ///< more than one launch shape: the table names the best

  void write(const std::string& path, const std::string& device, const std::string& measured) const {
    optgen::Tuning tuning(device);
    for (const auto& [kernel, bests] : kernels) {
      std::vector<optgen::Tuning::Entry> entries;
      for (const Best& b : bests)
        entries.push_back({b.elements, b.chunk, shapes_measured ? b.shape.block_size : 0,
                           shapes_measured ? b.shape.elements_per_thread : 0});
      tuning.set(kernel, entries);
    }
    std::ofstream out(path);
    out << tuning.to_json(measured);
    if (!out) throw std::runtime_error("cannot write the tuning table " + path);
  }

  void print() const {
    std::printf("\n| kernel set | workload | parameters | fastest chunk | shape | us/step | default us/step |\n");
    std::printf("|---|---|---|---|---|---|---|\n");
    for (const auto& [kernel, bests] : kernels)
      for (const Best& b : bests)
        std::printf("| %s | %s | %lld | %lld | %s | %.1f | %.1f |\n", kernel.c_str(), b.workload.c_str(),
                    static_cast<long long>(b.elements), b.chunk, optgen::to_string(b.shape).c_str(), b.us,
                    b.default_us);
  }
};

/// Accepts what FusedOptimizer::set_chunk_size does, and 0 for the launcher's default, so that a
/// bad size stops the run before it measures anything.
const CLI::Validator kChunkSize(
    [](const std::string& text) -> std::string {
      char* end = nullptr;
      const long long elements = std::strtoll(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0') return "not an integer: " + text;
      if (elements == 0 || (elements >= 64 && elements % 64 == 0 && elements <= (1LL << 30))) return "";
      return "chunk size " + text + " must be 0 (the launcher's default) or a multiple of 64 up to 2^30";
    },
    "0|64*K", "chunk size");

/// `default` (the launcher's own launch shape: {0, 0}) or BxE, e.g. 128x8.
std::optional<optgen::LaunchShape> parse_launch_shape(const std::string& text) {
  if (text == "default") return optgen::LaunchShape{0, 0};
  int threads = 0, elements = 0;
  char x = 0, rest = 0;
  if (std::sscanf(text.c_str(), "%d%c%d%c", &threads, &x, &elements, &rest) != 3 || x != 'x') return std::nullopt;
  if (!optgen::kernel_abi::valid_block_size(threads) || !optgen::kernel_abi::valid_elements_per_thread(elements))
    return std::nullopt;
  return optgen::LaunchShape{threads, elements};
}

/// Compiles every non-default launch shape of every optimizer the run steps, a thread each, before
/// anything is timed (NVRTC takes seconds to a minute per source and shape; then the cache has it).
void compile_launch_shapes(const Arguments& args) {
  std::vector<std::future<bool>> compiling;
  std::vector<std::string> what;
  const int arch = optgen::driver::compute_capability(optgen::driver::current_device());
  std::vector<const optgen::OptimizerInfo*> infos;
  for (const auto& c : optimizer_cases()) {
    if (std::find(args.optimizers.begin(), args.optimizers.end(), c.name) == args.optimizers.end()) continue;
    const optgen::OptimizerInfo* info = &c.make({})->info();
    if (std::find(infos.begin(), infos.end(), info) != infos.end()) continue;
    infos.push_back(info);
    for (const std::string& text : args.launch_shapes) {
      const optgen::LaunchShape shape = *parse_launch_shape(text);  // checked by the option
      if (shape.block_size == 0) continue;
      what.push_back(std::string(info->spec) + " " + text);
      compiling.push_back(std::async(std::launch::async, optgen::compile_launch_shape, std::cref(*info), shape, arch));
    }
  }
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < compiling.size(); ++i)
    std::printf("kernels of %s: %s\n", what[i].c_str(), compiling[i].get() ? "compiled" : "cached or as generated");
  if (!compiling.empty())
    std::printf("launch shapes compiled in %.1f s\n\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

void add_options(CLI::App& app, Arguments& args) {
  using optgen::command_line::add_list;
  app.add_option("--workload-dir", args.dir, "where the workloads' JSON files are")->capture_default_str();
  add_list(app, "--workloads", args.workloads, "workloads: DIR/<name>.json, comma-separated");
  std::vector<std::string> optimizers;  // every case optimizer_cases() has
  for (const OptimizerCase& c : optimizer_cases()) optimizers.push_back(c.name);
  add_list(app, "--optimizers", args.optimizers, "optimizers, comma-separated", CLI::IsMember(optimizers));
  add_list(app, "--modes", args.modes,
           "eager: steps launched from C++; graph: one step captured in a CUDA graph, replayed; "
           "amp: eager steps with AMP's grad_scale and found_inf",
           CLI::IsMember({"eager", "graph", "amp"}));
  app.add_option("--steps", args.steps, "steps per timed repetition (the median of 5 is reported)")
      ->check(optgen::command_line::whole_number(1, 1000000))
      ->capture_default_str();
  add_list(app, "--chunk-sizes", args.chunk_sizes, "elements per block, comma-separated; 0: the launcher's default",
           kChunkSize);
  add_list(app, "--storage", args.storage,
           "storage types, comma-separated (PARAM[+master|+sr][:STATES][:STATE=DTYPE]..., e.g. bf16:bf16); an "
           "optimizer without kernels for one is skipped",
           CLI::Validator(
               [](const std::string& text) {
                 std::string error;
                 return optgen::parse_storage(text, &error) ? std::string() : error;
               },
               "STORAGE", "storage type"));
  add_list(app, "--launch-shapes", args.launch_shapes,
           "launch shapes, comma-separated: BxE (threads per block x elements per thread, e.g. 128x8; "
           "compiled with NVRTC) or default (the launcher's own)",
           CLI::Validator(
               [](const std::string& text) {
                 return parse_launch_shape(text) ? std::string()
                                                 : "launch shape " + text +
                                                       " must be default or BxE: B a power of two from 32 to 1024, "
                                                       "E a power of two up to 64";
               },
               "SHAPE", "launch shape"));
  app.add_option("--host-tensors", args.host_tensors, "tensors of Adam's host-time measurement; 0: skip it")
      ->check(optgen::command_line::whole_number(0, 10000000))
      ->capture_default_str();
  app.add_option("--host-matrices", args.host_matrices, "matrices of Muon's host-time measurement; 0: skip it")
      ->check(optgen::command_line::whole_number(0, 10000000))
      ->capture_default_str();
  app.add_option("--tune", args.tune,
                 "write FILE, a table of each kernel set's fastest chunk size (and launch shape, of several "
                 "--launch-shapes) per workload size (eager steps over --chunk-sizes, or 1024 to 65536, and the "
                 "launcher's default), which the runtime reads through OPTGEN_TUNING")
      ->check(
          [](const std::string& path) -> std::string {
            // Checked before the measurements, which take minutes, rather than when the table is written.
            const std::filesystem::path parent = std::filesystem::path(path).parent_path();
            if (!parent.empty() && !std::filesystem::is_directory(parent))
              return "no directory " + parent.string() + " to write " + path + " in";
            return "";
          },
          "FILE in an existing directory");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "Times the generated launchers on real models' parameter shapes against the device's copy bandwidth, "
      "then the host time inside step().",
      "optgen_bench");
  Arguments args;
  add_options(app, args);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help prints, and succeeds
    std::cerr << "optgen_bench: " << e.what() << "\n(run 'optgen_bench --help' for usage)\n";
    return 2;
  }
  try {
    optgen::driver::current_device();
    CUstream stream;
    check(api().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    Timer timer;
    const double copy = copy_bandwidth(stream, timer);
    std::printf("device copy bandwidth (2 GiB device-to-device, read + write): %.3f TB/s\n\n", copy / 1e12);
    std::printf(
        "| workload | tensors | parameters | optimizer | storage | chunk | shape | mode | us/step | floor us | TB/s | "
        "of copy |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    AmpInputs amp;
    TuneResults tuned;
    tuned.shapes_measured = args.launch_shapes.size() > 1;
    compile_launch_shapes(args);
    if (!args.tune.empty()) {
      args.modes = {"eager"};
      if (args.chunk_sizes == std::vector<long long>{0}) args.chunk_sizes = kTuneChunkSizes;
      // The default too: the table's gain is measured against it, in the same run.
      if (std::find(args.chunk_sizes.begin(), args.chunk_sizes.end(), 0) == args.chunk_sizes.end())
        args.chunk_sizes.insert(args.chunk_sizes.begin(), 0);
    }
    for (const auto& name : args.workloads) {
      Workload w = load_workload(args.dir + "/" + name + ".json");
      for (const auto& text : args.storage) {
        std::string error;
        const optgen::Storage storage = *optgen::parse_storage(text, &error);  // checked by the option
        const optgen::StorageOptions options{storage.states, storage.state_dtypes, storage.param_write, 1};
        Model model(w.numels, w.shapes, storage.param);
        for (const auto& c : optimizer_cases()) {
          if (std::find(args.optimizers.begin(), args.optimizers.end(), c.name) == args.optimizers.end()) continue;
          TuneResults::Best best{w.name, w.parameters, 0, {0, 0}, 0.0, 0.0};
          std::string kernel;  // the kernel set's tuning name
          for (const std::string& shape_text : args.launch_shapes)
            for (long long chunk : args.chunk_sizes) {
              const optgen::LaunchShape shape = *parse_launch_shape(shape_text);
              std::unique_ptr<optgen::FusedOptimizer> opt;
              try {
                opt = c.make(options);
                if (chunk > 0) opt->set_chunk_size(chunk);  // an 8-bit set takes multiples of 256
                if (shape.block_size > 0) opt->set_launch_shape(shape);
                opt->add_param_group(model.tensors, optgen::FusedOptimizer::Overrides{});
              } catch (const optgen::Error& e) {  // no kernels for this storage, or a state it lacks
                std::fprintf(stderr, "%s: %s\n", c.name.c_str(), e.what());
                continue;
              }
              const bool is_default = chunk == 0 && shape.block_size == 0;
              opt->prepare(stream);  // the default chunk size is the plan's (FusedOptimizer::chunk_size)
              chunk = opt->chunk_size(0);
              const optgen::LaunchShape measured = opt->launch_shape(0);
              kernel = optgen::tuning_name(opt->info(), opt->kernel_set(0));
              for (const auto& mode : args.modes) {
                std::function<void()> step;
                std::unique_ptr<CapturedStep> captured;
                if (mode == "eager")
                  step = [&] { opt->step(stream); };
                else if (mode == "amp")
                  step = [&] { opt->step(stream, amp.get()); };
                else if (mode == "graph") {
                  captured = std::make_unique<CapturedStep>(*opt, stream);
                  step = [&] { captured->launch(); };
                } else
                  throw std::runtime_error("unknown mode '" + mode + "' (modes: eager, graph, amp)");
                for (int i = 0; i < 5; ++i) step();
                const double us = timer.median_us(stream, args.steps, 5, step);
                const double bytes = c.traffic.bytes(storage, w.numels);
                std::printf("| %s | %zu | %lld | %s | %s | %lld | %s | %s | %.1f | %.1f | %.3f | %.0f%% |\n",
                            w.name.c_str(), w.numels.size(), static_cast<long long>(w.parameters), c.name.c_str(),
                            text.c_str(), chunk, optgen::to_string(measured).c_str(), mode.c_str(), us,
                            bytes / copy * 1e6, bytes / (us * 1e-6) / 1e12, 100.0 * bytes / (us * 1e-6) / copy);
                std::fflush(stdout);
                if (is_default) best.default_us = us;
                if (best.chunk == 0 || us < best.us) {
                  best.chunk = chunk;
                  best.shape = measured;
                  best.us = us;
                }
              }
            }
          if (!args.tune.empty() && best.chunk > 0) tuned.kernels[kernel].push_back(best);
        }
      }
    }
    if (!args.tune.empty()) {
      tuned.print();
      const std::string device = optgen::driver::device_name(optgen::driver::current_device());
      const std::time_t now = std::time(nullptr);
      char date[16];
      std::strftime(date, sizeof(date), "%Y-%m-%d", std::gmtime(&now));
      tuned.write(args.tune, device,
                  std::string(date) + ", optgen_bench --tune: eager steps of " + std::to_string(args.steps) +
                      " (median of 5) on workloads " + join(args.workloads) + ", chunk sizes " +
                      join(args.chunk_sizes) + " (0: the launcher's default)" +
                      (tuned.shapes_measured ? ", launch shapes " + join(args.launch_shapes) : std::string()));
      std::printf("\nwrote %s (%s): OPTGEN_TUNING=%s uses it on this GPU\n", args.tune.c_str(), device.c_str(),
                  args.tune.c_str());
    }
    if (args.host_tensors > 0) adam_host_time(args.host_tensors, stream);
    if (args.host_matrices > 0) muon_host_time(args.host_matrices, stream);
    api().cuStreamDestroy(stream);
  } catch (const std::exception& e) {
    std::cerr << "optgen_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
