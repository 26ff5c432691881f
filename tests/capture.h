#pragma once
// A CUDA-graph capture for tests: a stream of its own and the graph of what was enqueued on it
// between begin() and end().
#include <cuda.h>

#include "optgen/driver.h"

namespace optgen_test {

/// A stream, and a graph of what was enqueued on it between begin() and end().
class Capture {
 public:
  Capture() { optgen::driver::check(api().cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate"); }
  ~Capture() {
    if (exec_) api().cuGraphExecDestroy(exec_);
    if (graph_) api().cuGraphDestroy(graph_);
    api().cuStreamDestroy(stream_);
  }
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;

  CUstream stream() const { return stream_; }
  void begin() {
    optgen::driver::check(api().cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
  }
  void end() {
    optgen::driver::check(api().cuStreamEndCapture(stream_, &graph_), "cuStreamEndCapture");
    optgen::driver::check(api().cuGraphInstantiate(&exec_, graph_, 0), "cuGraphInstantiate");
  }
  void replay() { optgen::driver::check(api().cuGraphLaunch(exec_, stream_), "cuGraphLaunch"); }
  CUgraphExec exec() const { return exec_; }
  void synchronize() { optgen::driver::check(api().cuStreamSynchronize(stream_), "cuStreamSynchronize"); }

 private:
  static const optgen::driver::Api& api() { return optgen::driver::api(); }
  CUstream stream_ = nullptr;
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
};

}  // namespace optgen_test
