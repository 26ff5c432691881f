#pragma once
/// What the tests of a header the generator copies verbatim into kernel sources (random.h,
/// element_math.h) share: the header's text, a float's bits, and a test kernel compiled by NVRTC
/// for the current device and loaded.

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "optgen/driver.h"
#include "optgen/kernel_images.h"
#include "optgen/nvrtc.h"

namespace optgen_test {

/// A file of the source tree (`path` relative to its root), as text.
inline std::string source_text(const std::string& path) {
  std::ifstream in(OPTGEN_SOURCE_DIR "/" + path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
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
