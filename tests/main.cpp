// The test runner: Catch2's, plus the report of [gpu] tests skipped for want of a GPU (see gpu.h).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <iostream>

#include "gpu.h"

namespace optgen_test {
namespace {
int skipped = 0;
int started = 0;
std::string reason;
}  // namespace

void record_skip(const std::string& test, const std::string& why) {
  ++skipped;
  reason = why;
  std::cout << "SKIPPED: " << test << ": no GPU: " << why << "\n";
}
int skipped_count() { return skipped; }
const std::string& skip_reason() { return reason; }

DeviceMemory::DeviceMemory(std::size_t bytes) {
  if (bytes) optgen::driver::check(optgen::driver::api().cuMemAlloc(&ptr_, bytes), "cuMemAlloc");
}
DeviceMemory::~DeviceMemory() {
  if (ptr_) optgen::driver::api().cuMemFree(ptr_);
}

/// Counts the test cases that run, so that main() knows whether all of them were skipped.
struct CountingListener : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseStarting(const Catch::TestCaseInfo& info) override {
    ++started;
    TestEventListenerBase::testCaseStarting(info);
  }
};
CATCH_REGISTER_LISTENER(CountingListener)

}  // namespace optgen_test

int main(int argc, char* argv[]) {
  Catch::Session session;
  if (int status = session.applyCommandLine(argc, argv)) return status;
  const int failed = session.run();
  using namespace optgen_test;
  if (skipped > 0)
    std::cout << "SKIPPED: " << skipped << " [gpu] test case" << (skipped == 1 ? "" : "s") << " (no GPU: " << reason
              << ")\n";
  if (failed == 0 && skipped > 0 && skipped == started) return kSkipExitCode;
  // Catch returns the number of failed assertions, which may be kSkipExitCode itself: a run with
  // four failures read as skipped by ctest.
  return failed == 0 ? 0 : 1;
}
