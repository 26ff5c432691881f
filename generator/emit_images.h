#pragma once
/// The build-time half of the CUDA backend: `<name>_images.cpp`, the kernels of `<name>_kernels.cu`
/// compiled by NVRTC for each requested architecture (plus PTX for the newest) and embedded as
/// byte arrays with the source, so the runtime can load a cubin or compile the source itself.
/// Build output only: binaries are never committed.

#include <string>
#include <vector>

namespace optgen {

struct CompiledImage {
  int arch;
  bool ptx;
  std::vector<char> data;
};

/// NVRTC options every kernel is compiled with, at build time and at load time.
const std::vector<std::string>& kernel_compile_options();

std::string emit_images(const std::string& spec_name, const std::string& spec_file, const std::string& kernel_source,
                        const std::vector<CompiledImage>& images, const std::string& nvrtc_version);

}  // namespace optgen
