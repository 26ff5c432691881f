// The runtime's thread model (optimizer.h, docs/DESIGN.md): the disk cache shared by processes and
// threads, the driver and NVRTC loaded from many threads at once, and (on a GPU) independent
// optimizers stepping on their own threads and streams at once.
//
// Catch2's assertions are not thread-safe: workers record what they saw, and the test's own thread
// checks it after joining them.
#include <catch2/catch.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "capture.h"
#include "optgen/kernel_cache.h"
#include "optgen/nvrtc.h"
#include "optimizer_harness.h"
#include "scoped_resources.h"

using optgen::KernelCache;
using namespace optgen_test;

namespace {

namespace fs = std::filesystem;

/// Lets a number of workers start at once: each waits until all have arrived.
class StartTogether {
 public:
  explicit StartTogether(int workers) : waiting_(workers) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (--waiting_ == 0) {
      all_arrived_.notify_all();
      return;
    }
    all_arrived_.wait(lock, [&] { return waiting_ == 0; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable all_arrived_;
  int waiting_;
};

// ---- The kernel cache: workers storing and loading shared keys and keys of their own. ----

constexpr int kWorkers = 8;
constexpr int kSharedKeys = 3;  ///< every worker stores these, each with bytes of its own
constexpr int kRounds = 25;

/// A key that every worker stores (0 <= k < kSharedKeys), or that only worker k - kSharedKeys does.
std::string cache_key(int k) { return KernelCache::key("entry " + std::to_string(k), {}, {}, 90, "threads_test"); }

/// What `writer` stores for key `k`: its number, then bytes drawn from both, 100 to 300 KB, so that
/// an entry takes several writes and a torn one would show.
std::vector<char> entry_bytes(int k, int writer) {
  std::mt19937 rng(static_cast<unsigned>(k * 1000 + writer));
  std::vector<char> bytes(100000 + static_cast<std::size_t>(k * 7919 + writer * 104729) % 200000);
  bytes[0] = static_cast<char>(writer);
  for (std::size_t i = 1; i < bytes.size(); ++i) bytes[i] = static_cast<char>(rng());
  return bytes;
}

/// Every entry any worker may store: [key][writer], empty where that worker never stores the key.
std::vector<std::vector<std::vector<char>>> all_entries() {
  std::vector<std::vector<std::vector<char>>> entries(kSharedKeys + kWorkers, std::vector<std::vector<char>>(kWorkers));
  for (int k = 0; k < kSharedKeys + kWorkers; ++k) {
    for (int writer = 0; writer < kWorkers; ++writer) {
      if (k < kSharedKeys || k - kSharedKeys == writer) entries[k][writer] = entry_bytes(k, writer);
    }
  }
  return entries;
}

/// "" when `loaded` is what some worker stored for key `k` whole, else what is wrong with it.
std::string check_loaded(const std::optional<std::vector<char>>& loaded, KernelCache::Outcome outcome, int k,
                         const std::vector<std::vector<std::vector<char>>>& entries) {
  const std::string where = "key " + std::to_string(k) + ": ";
  if (outcome == KernelCache::Outcome::Corrupt) return where + "load() found a partial or damaged entry";
  if (!loaded) return outcome == KernelCache::Outcome::Miss ? "" : where + "no entry, but the outcome is not a miss";
  if (outcome != KernelCache::Outcome::Hit) return where + "an entry, but the outcome is not a hit";
  const int writer = loaded->empty() ? -1 : static_cast<unsigned char>((*loaded)[0]);
  if (writer < 0 || writer >= kWorkers || entries[k][writer].empty()) return where + "bytes no worker stored";
  if (*loaded != entries[k][writer]) return where + "worker " + std::to_string(writer) + "'s entry, but not its bytes";
  return "";
}

/// One worker's rounds: store a shared key and its own key, then load every key, through `cache`;
/// and through `shared` too when given (a cache object other workers use at the same time, whose
/// last_outcome() is theirs as much as ours). "" when every load found a whole entry or none, and
/// its own key always its own entry; else the first thing that was wrong.
std::string exercise_cache(const KernelCache& cache, const KernelCache* shared, int worker,
                           const std::vector<std::vector<std::vector<char>>>& entries) {
  const int own = kSharedKeys + worker;
  for (int round = 0; round < kRounds; ++round) {
    const int k = round % kSharedKeys;
    const KernelCache& storing = shared != nullptr && round % 2 == 1 ? *shared : cache;
    if (!storing.store(cache_key(k), entries[k][worker])) return "store() of key " + std::to_string(k) + " failed";
    if (!storing.store(cache_key(own), entries[own][worker])) return "store() of its own key failed";
    for (int key = 0; key < kSharedKeys + kWorkers; ++key) {
      std::optional<std::vector<char>> loaded = cache.load(cache_key(key));
      std::string wrong = check_loaded(loaded, cache.last_outcome(), key, entries);
      if (wrong.empty() && key == own && loaded != entries[own][worker]) wrong = "its own key does not hold its entry";
      if (!wrong.empty()) return wrong;
      if (shared != nullptr) {
        loaded = shared->load(cache_key(key));
        const bool whole_or_none = !loaded || check_loaded(loaded, KernelCache::Outcome::Hit, key, entries).empty();
        if (!whole_or_none) return "through the shared cache object, key " + std::to_string(key) + ": a wrong entry";
      }
    }
  }
  return "";
}

/// After the workers: exactly one entry per key, each whole, and no temporary file left behind.
void check_cache_directory(const KernelCache& cache, const std::vector<std::vector<std::vector<char>>>& entries) {
  const auto files = std::distance(fs::directory_iterator(cache.directory()), fs::directory_iterator());
  CHECK(files == kSharedKeys + kWorkers);
  for (int k = 0; k < kSharedKeys + kWorkers; ++k) {
    std::optional<std::vector<char>> loaded = cache.load(cache_key(k));
    INFO("key " << k);
    CHECK(loaded.has_value());
    CHECK(check_loaded(loaded, cache.last_outcome(), k, entries).empty());
  }
}

}  // namespace

TEST_CASE("processes sharing one OPTGEN_CACHE_DIR load whole entries or none", "[runtime][threads]") {
  TemporaryDirectory temporary("optgen_threads_test");
  ScopedEnvironment variable("OPTGEN_CACHE_DIR", (temporary.path() + "/cache").c_str());
  const std::vector<std::vector<std::vector<char>>> entries = all_entries();

  // The children wait for the pipe to close, so that they all start at once.
  int start[2];
  REQUIRE(pipe(start) == 0);
  std::vector<pid_t> children;
  for (int worker = 0; worker < kWorkers; ++worker) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      // The child: no Catch2 in here, and _exit() so that nothing of the parent's runs at exit.
      close(start[1]);
      char byte;
      while (read(start[0], &byte, 1) < 0 && errno == EINTR) {}
      std::string wrong;
      try {
        wrong = exercise_cache(KernelCache::from_environment(), nullptr, worker, entries);
      } catch (const std::exception& error) {
        wrong = std::string("exception: ") + error.what();
      }
      if (!wrong.empty()) std::cerr << "cache worker process " << worker << ": " << wrong << std::endl;
      _exit(wrong.empty() ? 0 : 1);
    }
    children.push_back(pid);
  }
  close(start[0]);
  close(start[1]);
  for (int worker = 0; worker < kWorkers; ++worker) {
    int status = 0;
    REQUIRE(waitpid(children[worker], &status, 0) == children[worker]);
    INFO("cache worker process " << worker << " (its message, if any, is on stderr above)");
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  check_cache_directory(KernelCache::from_environment(), entries);
}

TEST_CASE("threads sharing one cache directory and one cache object load whole entries or none", "[runtime][threads]") {
  TemporaryDirectory temporary("optgen_threads_test");
  const KernelCache shared(temporary.path() + "/cache");
  const std::vector<std::vector<std::vector<char>>> entries = all_entries();
  std::vector<std::string> wrong(kWorkers);
  StartTogether start(kWorkers);
  std::vector<std::thread> threads;
  for (int worker = 0; worker < kWorkers; ++worker) {
    threads.emplace_back([&, worker] {
      start.arrive_and_wait();
      try {
        wrong[worker] = exercise_cache(KernelCache(shared.directory()), &shared, worker, entries);
      } catch (const std::exception& error) {
        wrong[worker] = std::string("exception: ") + error.what();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int worker = 0; worker < kWorkers; ++worker) {
    INFO("cache worker thread " << worker);
    CHECK(wrong[worker] == "");
  }
  check_cache_directory(shared, entries);
}

TEST_CASE("driver::available and nvrtc::available give one answer to many threads at once", "[runtime][threads]") {
  // Each test case runs in a process of its own (ctest), so these are the first calls: the
  // threads race to load libcuda.so.1 and NVRTC.
  constexpr int kThreads = 16;
  struct Answers {
    bool driver = false, nvrtc = false;
    std::string driver_why, nvrtc_why, nvrtc_version, wrong;
  };
  std::vector<Answers> answers(kThreads);
  StartTogether start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Answers& mine = answers[t];
      start.arrive_and_wait();
      for (int call = 0; call < 20; ++call) {
        std::string driver_why, nvrtc_why;
        const bool driver = optgen::driver::available(&driver_why);
        const bool nvrtc = optgen::nvrtc::available(&nvrtc_why);
        if (call == 0) {
          mine.driver = driver;
          mine.nvrtc = nvrtc;
          mine.driver_why = driver_why;
          mine.nvrtc_why = nvrtc_why;
        } else if (driver != mine.driver || nvrtc != mine.nvrtc || driver_why != mine.driver_why ||
                   nvrtc_why != mine.nvrtc_why) {
          mine.wrong = "call " + std::to_string(call) + " answered differently from the first";
        }
      }
      try {
        if (mine.nvrtc) mine.nvrtc_version = optgen::nvrtc::version();
      } catch (const std::exception& error) {
        mine.wrong = std::string("nvrtc::version() threw: ") + error.what();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  std::string driver_why, nvrtc_why;
  const bool driver = optgen::driver::available(&driver_why);
  const bool nvrtc = optgen::nvrtc::available(&nvrtc_why);
  for (int t = 0; t < kThreads; ++t) {
    INFO("thread " << t);
    CHECK(answers[t].wrong == "");
    CHECK(answers[t].driver == driver);
    CHECK(answers[t].driver_why == driver_why);
    CHECK(answers[t].nvrtc == nvrtc);
    CHECK(answers[t].nvrtc_why == nvrtc_why);
    CHECK(answers[t].nvrtc_version == (nvrtc ? optgen::nvrtc::version() : ""));
  }
}

// ---- On a GPU: optimizers on threads and streams of their own, all at once. ----

namespace {

constexpr int kSteps = 6;

/// What one optimizer did on its thread, for the test's thread to check against the CPU reference.
struct Trajectory {
  const optgen::OptimizerInfo* info = nullptr;
  int kernel = 0;  ///< index into info->kernels
  std::vector<std::int64_t> sizes;
  std::vector<double> initial_h;                        ///< when the group was added
  std::vector<std::vector<double>> h;                   ///< [step - 1]: the group's hyperparameters at each step
  std::vector<std::vector<std::vector<float>>> grads;   ///< [step - 1][tensor]
  std::vector<std::vector<std::vector<float>>> params;  ///< [0]: before the first step; [step]: after it
  std::vector<StateSnapshot> states;                    ///< likewise
  std::string error;                                    ///< what the thread threw
};

/// One thread's work: an optimizer of `run.kernel` on tensors and a stream of its own, kSteps
/// steps, each after copying new gradients on that stream and setting a new learning rate. Records
/// the device's params and states before the first step and after each. Everything from the
/// optimizer's construction on runs while the other threads do the same.
void step_on_own_thread(Trajectory& run, unsigned seed) {
  optgen::driver::current_device();  // the primary context, current on this thread
  const optgen::OptimizerInfo& info = *run.info;
  const optgen::KernelInfo& kernel = info.kernels[run.kernel];
  const optgen::reference::Optimizer& ref = reference_of(info.spec);
  std::mt19937 rng(seed);
  const Stream stream;
  const std::vector<double> h = hyperparameters_for(info, kernel.variant);
  DeviceGroup group(kernel.param, shapes_for(info, run.sizes), std::vector<bool>{false, true, false}, rng);
  std::vector<std::unique_ptr<DeviceMemory>> gradients;  // [step - 1][tensor], flattened
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (int step = 1; step <= kSteps; ++step) {
    run.grads.emplace_back();
    for (std::int64_t numel : run.sizes) {
      std::vector<float> values(static_cast<std::size_t>(numel));
      for (float& x : values) x = round_to(kernel.param, uniform(rng));
      gradients.push_back(std::make_unique<DeviceMemory>(values.size() * optgen::size_of(kernel.param)));
      upload(kernel.param, gradients.back()->at(0), values);
      run.grads.back().push_back(std::move(values));
    }
  }

  optgen::FusedOptimizer opt(info, h, storage_of(info, kernel));
  opt.add_param_group(group.tensors, h);
  run.initial_h = opt.hyperparameters(0);
  opt.prepare(stream.get());  // synchronizes the context: the uploads above are done
  stream.synchronize();
  run.params.push_back(group.params);
  run.states.push_back(snapshot_states(opt, ref, 0, group));

  const int lr = hyperparameter_index(info, "lr");
  for (int step = 1; step <= kSteps; ++step) {
    for (std::size_t t = 0; t < run.sizes.size(); ++t) {
      const std::size_t bytes = static_cast<std::size_t>(run.sizes[t]) * optgen::size_of(kernel.param);
      optgen::driver::check(optgen::driver::api().cuMemcpyDtoDAsync(
                                reinterpret_cast<CUdeviceptr>(group.tensors[t].grad),
                                gradients[(step - 1) * run.sizes.size() + t]->get(), bytes, stream.get()),
                            "cuMemcpyDtoDAsync");
    }
    if (lr >= 0) opt.set("lr", run.initial_h[lr] * (1.0 - 0.1 * step));
    run.h.push_back(opt.hyperparameters(0));
    opt.step(stream.get());
    stream.synchronize();
    run.params.emplace_back();
    for (std::size_t t = 0; t < run.sizes.size(); ++t)
      run.params.back().push_back(
          download(kernel.param, group.tensors[t].param, static_cast<std::size_t>(run.sizes[t])));
    run.states.push_back(snapshot_states(opt, ref, 0, group));
  }
}

/// Replays a trajectory on the CPU reference, each step from the values the device held before it,
/// and checks each step's params and states against the device's.
void check_trajectory(const Trajectory& run) {
  const optgen::OptimizerInfo& info = *run.info;
  const optgen::KernelInfo& kernel = info.kernels[run.kernel];
  INFO(kernel.stages[0] << " on a thread of its own");
  REQUIRE(run.error == "");
  REQUIRE(run.params.size() == kSteps + 1);
  const optgen::reference::Optimizer& ref = reference_of(info.spec);
  std::vector<double> scalar_state = initial_scalar_state(info, run.initial_h);
  double worst = 0;
  std::string where;
  auto compare = [&](const std::vector<float>& actual, const std::vector<float>& expected, const std::string& what) {
    const double error = relative_error(actual, expected);
    if (!(error <= worst)) {
      worst = std::isnan(error) ? INFINITY : error;
      where = what;
    }
  };
  for (int step = 1; step <= kSteps; ++step) {
    std::vector<std::vector<float>> params = run.params[step - 1];
    std::vector<std::vector<float>> grads = run.grads[step - 1];
    StateSnapshot states = run.states[step - 1];
    std::vector<std::vector<float*>> state_pointers(run.sizes.size());
    std::vector<optgen::reference::Tensor<float>> tensors;
    for (std::size_t t = 0; t < run.sizes.size(); ++t) {
      for (std::vector<float>& state : states[t]) state_pointers[t].push_back(state.empty() ? nullptr : state.data());
      // A spec that steps matrices reads their rows and columns (shape_for's); no other spec here does.
      const std::vector<std::int64_t> shape = shape_for(info, run.sizes[t]);
      const bool matrix = shape.size() == 2;
      tensors.push_back({static_cast<std::size_t>(run.sizes[t]), params[t].data(), grads[t].data(),
                         state_pointers[t].data(), matrix ? static_cast<std::size_t>(shape[0]) : 0,
                         matrix ? static_cast<std::size_t>(shape[1]) : 0});
    }
    ref.step_float(run.h[step - 1].data(), scalar_state.data(), step, tensors.data(), tensors.size(), 1.0f, nullptr);
    for (std::size_t t = 0; t < run.sizes.size(); ++t) {
      const std::string of = " of tensor " + std::to_string(t) + " at step " + std::to_string(step);
      compare(run.params[step][t], params[t], "param" + of);
      for (int s = 0; s < info.num_states; ++s)
        if (!states[t][s].empty()) compare(run.states[step][t][s], states[t][s], std::string(info.states[s].name) + of);
    }
  }
  INFO("worst relative error " << worst << " in " << where);
  // Each step from the device's values; Muon's matrices are no taller than wide (scale 1).
  CHECK(worst <= (steps_matrices(info) ? matrix_tolerance(info, kernel, hyperparameter(info, run.h[0], "lr"), 1.0, 1)
                                       : tolerance(info, kernel)));
}

}  // namespace

TEST_CASE("optimizers on threads and streams of their own step at once and each matches the CPU reference",
          "[gpu][threads]") {
  OPTGEN_REQUIRE_GPU();
  // One optimizer per built-in spec, each with another of its kernels, and two more of Adam: the
  // same launcher on several threads too.
  std::vector<Trajectory> runs;
  for (const auto& [name, info] : optgen::builtin_launchers()) {
    for (int copy = 0; copy < (std::string(name) == "adam" ? 3 : 1); ++copy) {
      Trajectory run;
      run.info = info;
      run.kernel = static_cast<int>(runs.size()) % info->num_kernels;
      run.sizes = {1, 4097, 65536 + 3};
      runs.push_back(std::move(run));
    }
  }
  StartTogether start(static_cast<int>(runs.size()));
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      try {
        step_on_own_thread(runs[i], static_cast<unsigned>(1000 + i));
      } catch (const std::exception& error) {
        runs[i].error = error.what();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const Trajectory& run : runs) check_trajectory(run);
}
