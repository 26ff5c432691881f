#pragma once
/// What optgen's benchmarks share: the workloads (bench/workloads/*.json: a model's parameter
/// shapes) and a timer of CUDA events.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "optgen/driver.h"

namespace optgen_bench {

using optgen::driver::api;
using optgen::driver::check;

struct Workload {
  std::string name;
  std::vector<std::int64_t> numels;
  std::vector<std::vector<std::int64_t>> shapes;
  std::int64_t parameters = 0;
};

/// Reads the "name" and "shapes" (a list of lists of sizes) of a workload file.
inline Workload load_workload(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  const nlohmann::json doc = nlohmann::json::parse(in);
  Workload w;
  w.name = doc.value("name", path);
  for (const auto& shape : doc.at("shapes")) {
    std::int64_t numel = 1;
    w.shapes.emplace_back();
    for (const auto& d : shape) {
      numel *= d.get<std::int64_t>();
      w.shapes.back().push_back(d.get<std::int64_t>());
    }
    w.numels.push_back(numel);
    w.parameters += numel;
  }
  return w;
}

class Timer {
 public:
  Timer() {
    check(api().cuEventCreate(&start_, CU_EVENT_DEFAULT), "cuEventCreate");
    check(api().cuEventCreate(&stop_, CU_EVENT_DEFAULT), "cuEventCreate");
  }
  ~Timer() {
    api().cuEventDestroy(start_);
    api().cuEventDestroy(stop_);
  }
  /// Median over `repeats` of the time per call of `f` called `count` times, in microseconds.
  template <typename F>
  double median_us(CUstream stream, int count, int repeats, F&& f) {
    std::vector<double> times;
    for (int r = 0; r < repeats; ++r) {
      check(api().cuEventRecord(start_, stream), "cuEventRecord");
      for (int i = 0; i < count; ++i) f();
      check(api().cuEventRecord(stop_, stream), "cuEventRecord");
      check(api().cuEventSynchronize(stop_), "cuEventSynchronize");
      float ms = 0;
      check(api().cuEventElapsedTime(&ms, start_, stop_), "cuEventElapsedTime");
      times.push_back(1000.0 * ms / count);
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  }

 private:
  CUevent start_, stop_;
};

}  // namespace optgen_bench
