#include "optgen/cublas.h"

#include <cstdlib>

#include "optgen/driver.h"
#include "optgen/error.h"
#include "shared_library.h"

namespace optgen::cublas {
namespace {

constexpr const char* kInstall =
    "install cuBLAS (the CUDA toolkit's libcublas, or the nvidia-cublas wheel torch ships), put it on the library "
    "path, or set OPTGEN_CUBLAS to its path";

/// cuBLAS's workspace: what it asks for on Hopper (32 MiB), enough for every GPU before it.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

Api load() {
  // $OPTGEN_CUBLAS, else the newest cuBLAS on the library path.
  std::string library_path;
  void* library = nullptr;
  if (const char* given = std::getenv("OPTGEN_CUBLAS"); given != nullptr && *given != '\0') {
    library_path = given;
    library = shared_library::open(library_path, kInstall);
  } else {
    for (const char* name : {"libcublas.so.13", "libcublas.so.12"}) {
      try {
        library = shared_library::open(name, kInstall);
        library_path = name;
        break;
      } catch (const Error&) {
        if (std::string(name) == "libcublas.so.12") throw;
      }
    }
  }
  Api api{};
  auto get = [&](auto& slot, const char* name) { shared_library::load(library, library_path, slot, name, kInstall); };
  get(api.Create, "cublasCreate_v2");
  get(api.Destroy, "cublasDestroy_v2");
  get(api.SetStream, "cublasSetStream_v2");
  get(api.SetWorkspace, "cublasSetWorkspace_v2");
  get(api.GemmStridedBatchedEx, "cublasGemmStridedBatchedEx");
  get(api.GetStatusString, "cublasGetStatusString");
  return api;
}

}  // namespace

const Api& api() { return shared_library::loaded_once(&load); }

bool available(std::string* why) { return shared_library::loads(&api, why); }

void check(int status, const char* call) {
  if (status != 0) throw Error(call, api().GetStatusString(status));
}

Handle::Handle() {
  check(api().Create(&handle_), "cublasCreate");
  try {
    driver::check(driver::api().cuMemAlloc(&workspace_, kWorkspaceBytes), "cuMemAlloc");
    check(api().SetWorkspace(handle_, reinterpret_cast<void*>(workspace_), kWorkspaceBytes), "cublasSetWorkspace");
  } catch (...) {
    if (workspace_) driver::api().cuMemFree(workspace_);
    api().Destroy(handle_);
    throw;
  }
}

Handle::~Handle() {
  api().Destroy(handle_);
  if (workspace_) driver::api().cuMemFree(workspace_);
}

HandlePointer Handle::on(CUstream stream) const {
  check(api().SetStream(handle_, stream), "cublasSetStream");
  return handle_;
}

}  // namespace optgen::cublas
