#include "optgen/cublas.h"

#include <cstdlib>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "optgen/driver.h"
#include "optgen/error.h"
#include "shared_library.h"

namespace optgen::cublas {
namespace {

constexpr const char* kInstall =
    "install cuBLAS (the CUDA toolkit's libcublasLt, or the nvidia-cublas wheel torch ships), put it on the library "
    "path, or set OPTGEN_CUBLASLT to its path";

/// Where cublasLt is looked for when $OPTGEN_CUBLASLT does not say: libcublasLt.so.13, then .so.12,
/// on the loader's path (where a process that loaded the nvidia-cublas wheel's, as optgen's Python
/// package does, finds it by name), then in the toolkit's library directory CMake found, then in
/// /usr/local/cuda/lib64.
std::vector<std::string> candidates() {
  const char* const names[] = {"libcublasLt.so.13", "libcublasLt.so.12"};
  std::vector<std::string> paths(std::begin(names), std::end(names));
  for (const std::string& directory : shared_library::cuda_library_directories())
    for (const char* name : names) paths.push_back(directory + "/" + name);
  return paths;
}

Api load() {
  std::string library_path;
  void* library = nullptr;
  if (const char* given = std::getenv("OPTGEN_CUBLASLT"); given != nullptr && *given != '\0') {
    library_path = given;
    library = shared_library::open(library_path, kInstall);
  } else {
    std::optional<Error> first_failure;  // the loader's reason for the first name, if none loads
    for (const std::string& path : candidates()) {
      try {
        library = shared_library::open(path, kInstall);
        library_path = path;
        break;
      } catch (const Error& e) {
        if (!first_failure) first_failure = e;
      }
    }
    if (library == nullptr) throw *first_failure;
  }
  Api api{};
  auto get = [&](auto& slot, const char* name) { shared_library::load(library, library_path, slot, name, kInstall); };
  get(api.Create, "cublasLtCreate");
  get(api.Destroy, "cublasLtDestroy");
  get(api.MatmulDescCreate, "cublasLtMatmulDescCreate");
  get(api.MatmulDescDestroy, "cublasLtMatmulDescDestroy");
  get(api.MatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute");
  get(api.MatrixLayoutCreate, "cublasLtMatrixLayoutCreate");
  get(api.MatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy");
  get(api.MatrixLayoutSetAttribute, "cublasLtMatrixLayoutSetAttribute");
  get(api.MatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate");
  get(api.MatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy");
  get(api.MatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute");
  get(api.MatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic");
  get(api.Matmul, "cublasLtMatmul");
  get(api.GetStatusString, "cublasLtGetStatusString");
  return api;
}

}  // namespace

const Api& api() { return shared_library::loaded_once(&load); }

bool available(std::string* why) { return shared_library::loads(&api, why); }

void check(int status, const char* call) {
  if (status != 0) throw Error(call, api().GetStatusString(status));
}

/// A product's descriptors (the operation, the layouts of A, B and C = D) and its algorithm.
struct Handle::Plan {
  Descriptor op = nullptr, a = nullptr, b = nullptr, c = nullptr;
  Heuristic chosen{};
  ~Plan() {
    const Api& lt = api();
    for (Descriptor layout : {a, b, c})
      if (layout) lt.MatrixLayoutDestroy(layout);
    if (op) lt.MatmulDescDestroy(op);
  }
};

Handle::Handle() {
  check(api().Create(&handle_), "cublasLtCreate");
  if (const CUresult status = driver::api().cuMemAlloc(&workspace_, kWorkspaceBytes); status != CUDA_SUCCESS) {
    api().Destroy(handle_);
    driver::check(status, "cuMemAlloc");
  }
}

Handle::~Handle() {
  plans_.clear();
  api().Destroy(handle_);
  if (workspace_) driver::api().cuMemFree(workspace_);
}

const Handle::Plan& Handle::plan(const Product& p) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = plans_.find(p); it != plans_.end()) return *it->second;
  const Api& lt = api();
  auto plan = std::make_unique<Plan>();
  check(lt.MatmulDescCreate(&plan->op, kCompute32F, kF32), "cublasLtMatmulDescCreate");
  check(lt.MatmulDescSetAttribute(plan->op, kTransA, &p.trans_a, sizeof p.trans_a), "cublasLtMatmulDescSetAttribute");
  check(lt.MatmulDescSetAttribute(plan->op, kTransB, &p.trans_b, sizeof p.trans_b), "cublasLtMatmulDescSetAttribute");
  auto layout = [&](Descriptor& d, int rows, int cols, int ld, long long stride) {
    check(lt.MatrixLayoutCreate(&d, p.dtype, static_cast<std::uint64_t>(rows), static_cast<std::uint64_t>(cols), ld),
          "cublasLtMatrixLayoutCreate");
    const std::int32_t count = p.count;
    const std::int64_t offset = stride;
    check(lt.MatrixLayoutSetAttribute(d, kBatchCount, &count, sizeof count), "cublasLtMatrixLayoutSetAttribute");
    check(lt.MatrixLayoutSetAttribute(d, kBatchStride, &offset, sizeof offset), "cublasLtMatrixLayoutSetAttribute");
  };
  layout(plan->a, p.trans_a == kOpN ? p.r : p.k, p.trans_a == kOpN ? p.k : p.r, p.lda, p.stride_a);
  layout(plan->b, p.trans_b == kOpN ? p.k : p.c, p.trans_b == kOpN ? p.c : p.k, p.ldb, p.stride_b);
  layout(plan->c, p.r, p.c, p.ldc, p.stride_c);
  Descriptor preference = nullptr;
  check(lt.MatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
  const std::uint64_t workspace = kWorkspaceBytes;
  int returned = 0;
  int status = lt.MatmulPreferenceSetAttribute(preference, kMaxWorkspaceBytes, &workspace, sizeof workspace);
  if (status == 0)
    status = lt.MatmulAlgoGetHeuristic(handle_, plan->op, plan->a, plan->b, plan->c, plan->c, preference, 1,
                                       &plan->chosen, &returned);
  lt.MatmulPreferenceDestroy(preference);
  check(status, "cublasLtMatmulAlgoGetHeuristic");
  if (returned == 0)
    throw Error("cublasLtMatmulAlgoGetHeuristic", "no algorithm for a batch of " + std::to_string(p.count) +
                                                      (p.dtype == kF32 ? " f32" : " bf16") + " products of " +
                                                      std::to_string(p.r) + " x " + std::to_string(p.k) + " by " +
                                                      std::to_string(p.k) + " x " + std::to_string(p.c));
  return *plans_.emplace(p, std::move(plan)).first->second;
}

void Handle::multiply(const Product& p, float alpha, CUdeviceptr a, CUdeviceptr b, float beta, CUdeviceptr c,
                      CUdeviceptr d, CUstream stream, CUdeviceptr workspace) const {
  const Plan& q = plan(p);
  check(api().Matmul(handle_, q.op, &alpha, reinterpret_cast<const void*>(a), q.a, reinterpret_cast<const void*>(b),
                     q.b, &beta, reinterpret_cast<const void*>(c), q.c, reinterpret_cast<void*>(d), q.c, &q.chosen.algo,
                     reinterpret_cast<void*>(workspace ? workspace : workspace_), kWorkspaceBytes, stream),
        "cublasLtMatmul");
}

}  // namespace optgen::cublas
