#pragma once
/// The libraries the runtime loads when first asked for them, with dlopen (libcuda, NCCL), so that
/// nothing links them and a program without one runs until it needs it. A library stays open for
/// the life of the process: its functions are used until exit.

#include <dlfcn.h>

#include <string>

#include "optgen/error.h"

namespace optgen::shared_library {

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

}  // namespace optgen::shared_library
