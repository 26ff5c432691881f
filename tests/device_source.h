#pragma once
/// What the tests of a header of the device library that the host compiles too (random.h,
/// element_math.h) share: the header's text as NVRTC is handed it, a float's bits, and a test
/// kernel compiled by NVRTC for the current device and loaded.

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "optgen/driver.h"
#include "optgen/kernel_images.h"
#include "optgen/nvrtc.h"

namespace optgen_test {

/// A header of the device library (`name` as a kernel source includes it), as nvrtc::compile
/// hands it to NVRTC; empty when there is none.
inline std::string device_header(const std::string& name) {
  for (const auto& [include_name, text] : optgen::nvrtc::device_library())
    if (include_name == name) return text;
  return {};
}

inline std::uint32_t bits_of(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}
inline float float_of(std::uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

/// `source` compiled by NVRTC with `options` for the current device, and loaded.
inline optgen::Module compile_for_device(const std::string& source, const std::string& name,
                                         const std::vector<std::string>& options = {}) {
  const int arch = optgen::driver::compute_capability(optgen::driver::current_device());
  const auto compiled = optgen::nvrtc::compile(source, name, options, arch);
  CUmodule loaded = nullptr;
  optgen::driver::check(optgen::driver::api().cuModuleLoadData(&loaded, compiled.image.data()), "cuModuleLoadData");
  return optgen::Module(loaded, optgen::ModuleOrigin::CompiledNow);
}

}  // namespace optgen_test
