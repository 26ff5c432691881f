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

/// `key`: what the images were compiled from (compilation_key), written into the file so that the
/// next `optgen compile` of the same inputs can leave it as it is (images_key).
std::string emit_images(const std::string& spec_name, const std::string& spec_file, const std::string& kernel_source,
                        const std::vector<CompiledImage>& images, const std::string& nvrtc_version,
                        const std::string& key);

/// The key of one `optgen compile`: a hash of the kernel source, the device library it includes,
/// the NVRTC options, the architectures and NVRTC's version (KernelCache::key's fields).
std::string compilation_key(const std::string& kernel_source, const std::vector<std::string>& options,
                            const std::vector<int>& archs, const std::string& nvrtc_version);

/// The compilation key an `<name>_images.cpp` holds, or "" when it holds none.
std::string images_key(const std::string& images_text);

}  // namespace optgen
