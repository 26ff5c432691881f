#pragma once
// Streams for tests: a stream of a test's own, and a CUDA-graph capture (such a stream and the
// graph of what was enqueued on it between begin() and end()).
#include <cuda.h>

#include "optgen/driver.h"

namespace optgen_test {

/// A stream of a test's own, non-blocking (the legacy default stream would wait for it).
class Stream {
 public:
  Stream() { optgen::driver::check(api().cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate"); }
  ~Stream() { api().cuStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  CUstream get() const { return stream_; }
  void synchronize() const { optgen::driver::check(api().cuStreamSynchronize(stream_), "cuStreamSynchronize"); }

 private:
  static const optgen::driver::Api& api() { return optgen::driver::api(); }
  CUstream stream_ = nullptr;
};

/// A stream, and a graph of what was enqueued on it between begin() and end().
class Capture {
 public:
  Capture() = default;
  ~Capture() {
    if (exec_) api().cuGraphExecDestroy(exec_);
    if (graph_) api().cuGraphDestroy(graph_);
  }
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;

  CUstream stream() const { return stream_.get(); }
  void begin() {
    optgen::driver::check(api().cuStreamBeginCapture(stream(), CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
  }
  void end() {
    optgen::driver::check(api().cuStreamEndCapture(stream(), &graph_), "cuStreamEndCapture");
    optgen::driver::check(api().cuGraphInstantiate(&exec_, graph_, 0), "cuGraphInstantiate");
  }
  void replay() { optgen::driver::check(api().cuGraphLaunch(exec_, stream()), "cuGraphLaunch"); }
  CUgraphExec exec() const { return exec_; }
  void synchronize() { stream_.synchronize(); }

 private:
  static const optgen::driver::Api& api() { return optgen::driver::api(); }
  // Destroyed after the graph and its executable (members are destroyed in reverse order).
  Stream stream_;
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
};

}  // namespace optgen_test
