#pragma once
/// Kernels as a generated launcher carries them: the CUDA source, the NVRTC options it was built
/// with, and the images compiled at build time (a cubin per architecture, PTX for the newest).
/// `load_module` picks what the current GPU can run and loads it.

#include <cuda.h>

#include <cstddef>
#include <string>
#include <vector>

#include "optgen/nvrtc.h"

namespace optgen {

struct KernelImage {
  int arch;  ///< e.g. 90
  bool ptx;  ///< PTX text (for arch and newer) rather than a cubin
  const unsigned char* data;
  std::size_t size;
};

struct KernelImages {
  const char* name;            ///< the source's name, e.g. "adamw_kernels.cu"
  const char* source;          ///< CUDA source, for NVRTC at load time
  const char* const* options;  ///< NVRTC options (without --gpu-architecture)
  int num_options;
  const KernelImage* images;
  int num_images;
};

/// How a module came to be, for tests and logs.
enum class ModuleOrigin { EmbeddedCubin, EmbeddedPtx, CacheHit, CompiledNow };
const char* to_string(ModuleOrigin origin);

/// A loaded CUmodule; unloads on destruction. Move-only.
class Module {
 public:
  Module() = default;
  Module(CUmodule module, ModuleOrigin origin) : module_(module), origin_(origin) {}
  Module(Module&& other) noexcept;
  Module& operator=(Module&& other) noexcept;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  ~Module();

  /// The kernel `name`; throws optgen::Error naming the kernel when the module has none.
  CUfunction function(const char* name) const;
  ModuleOrigin origin() const { return origin_; }
  CUmodule get() const { return module_; }

 private:
  CUmodule module_ = nullptr;
  ModuleOrigin origin_ = ModuleOrigin::EmbeddedCubin;
};

/// Loads `images` for `device` (compute capability major*10+minor):
///   1. an embedded cubin of the same major architecture and the highest minor not above the
///      device's (a cubin for 8.0 runs on 8.6 and 8.9, never on 9.0);
///   2. otherwise, when NVRTC is available, the source compiled for the device's architecture,
///      through the KernelCache (from_environment() unless `cache` is given);
///   3. otherwise embedded PTX for an architecture not above the device's, JIT-compiled by the
///      driver;
///   4. otherwise optgen::Error: no cubin for sm_XY among those embedded (listing them), and no
///      NVRTC to compile one; with what to do (rebuild with ARCHS XY, or install NVRTC).
/// Setting $OPTGEN_FORCE_NVRTC=1 skips step 1 (to test or to use a newer NVRTC).
class KernelCache;
Module load_module(const KernelImages& images, int compute_capability, const KernelCache* cache = nullptr);

/// Loads `images` compiled with `definitions` besides their own options (NVRTC options, e.g.
/// -DOPTGEN_BLOCK_SIZE=512: another launch shape, kernel_abi.h). The embedded images were compiled
/// without them, so only step 2 applies: the source through NVRTC and the cache; optgen::Error
/// when NVRTC is missing (saying why) or the kernels carry no source. With no definitions, the
/// load_module above.
Module load_module(const KernelImages& images, int compute_capability, const std::vector<std::string>& definitions,
                   const KernelCache* cache = nullptr);

/// A generated kernel source compiled by NVRTC for `arch` (nvrtc::compile with `options` and
/// ptxas's report), and where an Update stage with 8-bit states spilled (or kept a stack frame) at
/// its blocks per SM, again with those kernels named in kernel_abi::kFewerBlocksMacro, which gives
/// them one block fewer. The build (optgen compile) and the runtime's compilations both go through
/// it, so that a source compiles to the same kernels wherever it is compiled.
nvrtc::Compiled compile_kernels(const std::string& source, const std::string& name, std::vector<std::string> options,
                                int arch);

/// Compiles into the cache (from_environment() unless `cache` is given) what load_module(images,
/// compute_capability, definitions) compiles, without loading it: no GPU is needed, and threads
/// may compile several at once. Returns false when the cache held it already. Throws what the
/// compilation throws.
bool compile_into_cache(const KernelImages& images, int compute_capability, const std::vector<std::string>& definitions,
                        const KernelCache* cache = nullptr);

}  // namespace optgen
