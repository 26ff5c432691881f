#pragma once
/// The libraries the runtime loads when first asked for them, with dlopen (libcuda, NCCL, cuBLASLt), so that
/// nothing links them and a program without one runs until it needs it. A library stays open for
/// the life of the process: its functions are used until exit.

#include <dlfcn.h>

#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include "optgen/error.h"

namespace optgen::shared_library {

/// The CUDA toolkit's library directories, searched after the loader's path for the libraries it
/// ships (NVRTC, cuBLASLt): the one CMake found (OPTGEN_CUDA_LIBRARY_DIR), then /usr/local/cuda/lib64.
inline std::vector<std::string> cuda_library_directories() {
  std::vector<std::string> directories;
#ifdef OPTGEN_CUDA_LIBRARY_DIR
  directories.push_back(OPTGEN_CUDA_LIBRARY_DIR);
#endif
  if (directories.empty() || directories.front() != "/usr/local/cuda/lib64") {
    directories.push_back("/usr/local/cuda/lib64");
  }
  return directories;
}

/// dlopen(path); throws Error naming the call, with dlerror's reason and `fix`.
inline void* open(const std::string& path, const std::string& fix) {
  dlerror();
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* reason = dlerror();
    throw Error("dlopen(" + path + ")", reason != nullptr ? reason : "unknown error", fix);
  }
  return library;
}

/// Sets `slot` to the function `name` of `library` (opened from `path`); throws Error naming the
/// call, `path has no name (reason)`, and `fix` when it has none.
template <typename Function>
void load(void* library, const std::string& path, Function& slot, const char* name, const std::string& fix) {
  dlerror();
  void* symbol = dlsym(library, name);
  if (symbol == nullptr) {
    const char* reason = dlerror();
    throw Error(std::string("dlsym(") + name + ")",
                path + " has no " + name + (reason != nullptr ? std::string(" (") + reason + ")" : ""), fix);
  }
  slot = reinterpret_cast<Function>(symbol);
}

/// The entry points `load` returns, loaded on the first call (thread-safe); a failure is kept and
/// thrown again at every call. One set per type Api (NCCL's, cuBLAS's).
template <typename Api>
const Api& loaded_once(Api (*load)()) {
  static std::once_flag once;
  static Api loaded{};
  static std::exception_ptr failure;
  std::call_once(once, [load] {
    try {
      loaded = load();
    } catch (const Error&) {
      failure = std::current_exception();
    }
  });
  if (failure) std::rethrow_exception(failure);
  return loaded;
}

/// Whether `api` loads its library; never throws. `why`, when given, receives the reason when not.
template <typename Api>
bool loads(const Api& (*api)(), std::string* why) {
  try {
    api();
    return true;
  } catch (const Error& e) {
    if (why != nullptr) *why = e.what();
    return false;
  }
}

}  // namespace optgen::shared_library
