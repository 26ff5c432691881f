#include "optgen/kernel_images.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "optgen/driver.h"
#include "optgen/error.h"
#include "optgen/kernel_abi.h"
#include "optgen/kernel_cache.h"
#include "optgen/nvrtc.h"

namespace optgen {

namespace {

void unload(CUmodule module) noexcept {
  if (module == nullptr) return;
  try {
    driver::api().cuModuleUnload(module);  // errors ignored: there is nothing to do about them here
  } catch (...) {}
}

bool force_nvrtc() {
  const char* value = std::getenv("OPTGEN_FORCE_NVRTC");
  return value != nullptr && std::strcmp(value, "1") == 0;
}

/// Step 1: a cubin of the device's major architecture with the highest minor not above its own.
const KernelImage* best_cubin(const KernelImages& images, int compute_capability) {
  const KernelImage* best = nullptr;
  for (int i = 0; i < images.num_images; ++i) {
    const KernelImage& image = images.images[i];
    if (image.ptx || image.arch / 10 != compute_capability / 10 || image.arch > compute_capability) continue;
    if (best == nullptr || image.arch > best->arch) best = &image;
  }
  return best;
}

/// Step 3: the newest PTX not above the device's architecture.
const KernelImage* best_ptx(const KernelImages& images, int compute_capability) {
  const KernelImage* best = nullptr;
  for (int i = 0; i < images.num_images; ++i) {
    const KernelImage& image = images.images[i];
    if (!image.ptx || image.arch > compute_capability) continue;
    if (best == nullptr || image.arch > best->arch) best = &image;
  }
  return best;
}

std::string join(const std::vector<std::string>& parts) {
  std::string text;
  for (const std::string& part : parts) text += (text.empty() ? "" : ", ") + part;
  return text.empty() ? "none" : text;
}

CUmodule load_image(const void* data, const std::string& what) {
  CUmodule module = nullptr;
  driver::check(driver::api().cuModuleLoadData(&module, data), ("cuModuleLoadData(" + what + ")").c_str());
  return module;
}

/// The NVRTC options of `images` and then `definitions`.
std::vector<std::string> nvrtc_options(const KernelImages& images, const std::vector<std::string>& definitions) {
  std::vector<std::string> options(images.options, images.options + images.num_options);
  options.insert(options.end(), definitions.begin(), definitions.end());
  return options;
}

/// Step 2: the source compiled by NVRTC for the device with `options`, through the cache.
Module compile_now(const KernelImages& images, int compute_capability, const std::vector<std::string>& options,
                   const KernelCache* cache) {
  const std::string source = images.source;
  const std::string key =
      KernelCache::key(source, nvrtc::device_library(), options, compute_capability, nvrtc::version());
  std::optional<KernelCache> default_cache;
  if (cache == nullptr) cache = &default_cache.emplace(KernelCache::from_environment());

  if (std::optional<std::vector<char>> cached = cache->load(key)) {
    CUmodule module = nullptr;
    if (driver::api().cuModuleLoadData(&module, cached->data()) == CUDA_SUCCESS) {
      return Module(module, ModuleOrigin::CacheHit);
    }
    // An intact entry this driver will not load: compile again, and overwrite it below.
  }
  nvrtc::Compiled compiled = compile_kernels(source, images.name, options, compute_capability);
  cache->store(key, compiled.image);  // a cache that cannot be written only costs time
  return Module(load_image(compiled.image.data(),
                           std::string(images.name) + ", compiled for sm_" + std::to_string(compute_capability)),
                ModuleOrigin::CompiledNow);
}

Module load_ptx(const KernelImages& images, const KernelImage& image) {
  const std::string what = std::string(images.name) + ", compute_" + std::to_string(image.arch) + " PTX";
  const char* text = reinterpret_cast<const char*>(image.data);
  if (image.size > 0 && text[image.size - 1] == '\0') {
    return Module(load_image(text, what), ModuleOrigin::EmbeddedPtx);
  }
  const std::string terminated(text, image.size);  // the driver reads PTX up to a NUL
  return Module(load_image(terminated.c_str(), what), ModuleOrigin::EmbeddedPtx);
}

[[noreturn]] void throw_no_image(const KernelImages& images, int compute_capability, const std::string& nvrtc_why) {
  std::vector<std::string> cubins, ptx;
  for (int i = 0; i < images.num_images; ++i) {
    const KernelImage& image = images.images[i];
    (image.ptx ? ptx : cubins).push_back((image.ptx ? "compute_" : "sm_") + std::to_string(image.arch));
  }
  const std::string arch = std::to_string(compute_capability);
  const bool forced = force_nvrtc();
  std::string error = "no cubin for sm_" + arch + " among those embedded (" + join(cubins) + ")";
  if (forced) error += " that OPTGEN_FORCE_NVRTC=1 lets it use";
  error += ", no PTX for compute_" + arch + " or older (embedded: " + join(ptx) + "), and no NVRTC to compile one (" +
           nvrtc_why.substr(0, nvrtc_why.find('\n')) + ")";
  std::string fix = "rebuild the kernels with ARCHS " + arch +
                    " (add it to the architectures they are built for), or install NVRTC, CUDA 12 or newer, so "
                    "that optgen compiles them for this GPU at load time";
  if (forced) fix += ", or unset OPTGEN_FORCE_NVRTC";
  throw Error(std::string("optgen::load_module(") + images.name + ")", error, fix);
}

/// What load_module and compile_into_cache with definitions need: a source and NVRTC.
void require_nvrtc(const KernelImages& images, const std::vector<std::string>& definitions, const char* call) {
  std::string why = "the kernels carry no source";
  if (images.source != nullptr && nvrtc::available(&why)) return;
  std::string given;
  for (const std::string& d : definitions) given += (given.empty() ? "" : " ") + d;
  throw Error(std::string("optgen::") + call + "(" + (images.name ? images.name : "kernels.cu") + ")",
              "compiling the kernels with " + given + " needs NVRTC and their source (" +
                  why.substr(0, why.find('\n')) + "); the embedded images are compiled without them",
              "install NVRTC (CUDA 12 or newer), or use the kernels' own launch shape (no OPTGEN_TUNING table "
              "that gives a block size, no set_launch_shape)");
}

}  // namespace

const char* to_string(ModuleOrigin origin) {
  switch (origin) {
    case ModuleOrigin::EmbeddedCubin: return "embedded cubin";
    case ModuleOrigin::EmbeddedPtx: return "embedded PTX";
    case ModuleOrigin::CacheHit: return "cache hit";
    case ModuleOrigin::CompiledNow: return "compiled now";
  }
  return "unknown origin";
}

Module::Module(Module&& other) noexcept : module_(std::exchange(other.module_, nullptr)), origin_(other.origin_) {}

Module& Module::operator=(Module&& other) noexcept {
  if (this != &other) {
    unload(module_);
    module_ = std::exchange(other.module_, nullptr);
    origin_ = other.origin_;
  }
  return *this;
}

Module::~Module() { unload(module_); }

CUfunction Module::function(const char* name) const {
  const std::string call = std::string("cuModuleGetFunction(") + name + ")";
  if (module_ == nullptr) {
    throw Error(call, "the module is empty (default-constructed or moved from)", "load it with optgen::load_module");
  }
  CUfunction function = nullptr;
  CUresult result = driver::api().cuModuleGetFunction(&function, module_, name);
  if (result == CUDA_ERROR_NOT_FOUND) {
    throw Error(call, std::string("the module has no kernel named ") + name,
                "the kernels and their launcher are out of step: regenerate both with the same optgen");
  }
  driver::check(result, call.c_str());
  return function;
}

Module load_module(const KernelImages& given, int compute_capability, const KernelCache* cache) {
  KernelImages images = given;
  if (images.name == nullptr) images.name = "kernels.cu";
  const std::string name = images.name;
  if (compute_capability < 10) {
    throw Error("optgen::load_module(" + name + ")", "invalid compute capability " + std::to_string(compute_capability),
                "pass major * 10 + minor, e.g. driver::compute_capability(driver::current_device())");
  }
  if (!force_nvrtc()) {
    if (const KernelImage* cubin = best_cubin(images, compute_capability)) {
      return Module(load_image(cubin->data, name + ", sm_" + std::to_string(cubin->arch) + " cubin"),
                    ModuleOrigin::EmbeddedCubin);
    }
  }
  std::string nvrtc_why = "the kernels carry no source";
  if (images.source != nullptr && nvrtc::available(&nvrtc_why)) {
    return compile_now(images, compute_capability, nvrtc_options(images, {}), cache);
  }
  if (const KernelImage* ptx = best_ptx(images, compute_capability)) return load_ptx(images, *ptx);
  throw_no_image(images, compute_capability, nvrtc_why);
}

Module load_module(const KernelImages& images, int compute_capability, const std::vector<std::string>& definitions,
                   const KernelCache* cache) {
  if (definitions.empty()) return load_module(images, compute_capability, cache);
  require_nvrtc(images, definitions, "load_module");
  return compile_now(images, compute_capability, nvrtc_options(images, definitions), cache);
}

nvrtc::Compiled compile_kernels(const std::string& source, const std::string& name, std::vector<std::string> options,
                                int arch) {
  if (!nvrtc::asks_for_ptxas_report(options)) options.push_back("-Xptxas=-v");
  nvrtc::Compiled compiled = nvrtc::compile(source, name, options, arch);
  std::string fewer;
  for (const std::string& kernel : nvrtc::parse_ptxas_report(compiled.log).spilling)
    if (source.find(std::string(kernel_abi::kBlockwiseLaunchBoundsMacro) + "(" + kernel + ",") != std::string::npos)
      fewer += (fewer.empty() ? "" : ",") + kernel;
  if (fewer.empty()) return compiled;
  options.push_back("-D" + std::string(kernel_abi::kFewerBlocksMacro) + "=\"" + fewer + "\"");
  return nvrtc::compile(source, name, options, arch);
}

bool compile_into_cache(const KernelImages& images, int compute_capability, const std::vector<std::string>& definitions,
                        const KernelCache* cache) {
  require_nvrtc(images, definitions, "compile_into_cache");
  const std::vector<std::string> options = nvrtc_options(images, definitions);
  const std::string key =
      KernelCache::key(images.source, nvrtc::device_library(), options, compute_capability, nvrtc::version());
  std::optional<KernelCache> default_cache;
  if (cache == nullptr) cache = &default_cache.emplace(KernelCache::from_environment());
  if (cache->load(key)) return false;
  cache->store(
      key, compile_kernels(images.source, images.name ? images.name : "kernels.cu", options, compute_capability).image);
  return true;
}

}  // namespace optgen
