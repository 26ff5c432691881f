#pragma once
/// What the [gpu] tests share: the skip mechanism (Catch2 v2 has no SKIP) and device memory.
///
/// A [gpu] test starts with OPTGEN_REQUIRE_GPU(). With no usable GPU the test records why and
/// returns; main() prints the reason and, when every test it ran was skipped, exits with
/// kSkipExitCode, which ctest reports as "Skipped".

#include <cuda.h>

#include <cstring>
#include <string>
#include <vector>

#include "optgen/driver.h"

namespace optgen_test {

constexpr int kSkipExitCode = 4;

void record_skip(const std::string& test, const std::string& reason);
int skipped_count();
const std::string& skip_reason();

/// Device memory that frees itself, with typed copies.
class DeviceMemory {
 public:
  explicit DeviceMemory(std::size_t bytes);
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  CUdeviceptr get() const { return ptr_; }
  void* at(std::size_t byte_offset) const { return reinterpret_cast<void*>(ptr_ + byte_offset); }

  template <typename T>
  void upload(const std::vector<T>& host, std::size_t byte_offset = 0) {
    if (!host.empty())
      optgen::driver::check(
          optgen::driver::api().cuMemcpyHtoD(ptr_ + byte_offset, host.data(), host.size() * sizeof(T)), "cuMemcpyHtoD");
  }
  template <typename T>
  std::vector<T> download(std::size_t count, std::size_t byte_offset = 0) const {
    std::vector<T> host(count);
    if (count)
      optgen::driver::check(optgen::driver::api().cuMemcpyDtoH(host.data(), ptr_ + byte_offset, count * sizeof(T)),
                            "cuMemcpyDtoH");
    return host;
  }

 private:
  CUdeviceptr ptr_ = 0;
};

}  // namespace optgen_test

#define OPTGEN_REQUIRE_GPU()                                                                 \
  do {                                                                                       \
    std::string optgen_why_;                                                                 \
    if (!optgen::driver::available(&optgen_why_)) {                                          \
      optgen_test::record_skip(Catch::getResultCapture().getCurrentTestName(), optgen_why_); \
      return;                                                                                \
    }                                                                                        \
    optgen::driver::current_device();                                                        \
  } while (0)
