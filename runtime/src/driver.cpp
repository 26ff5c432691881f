#include "optgen/driver.h"

#include <dlfcn.h>

#include <atomic>
#include <mutex>
#include <optional>

#include "optgen/error.h"
#include "shared_library.h"

namespace optgen::driver {

namespace {

constexpr const char* kLibrary = "libcuda.so.1";
constexpr const char* kInstallDriver = "install the NVIDIA driver, or run on a machine with an NVIDIA GPU";
constexpr const char* kContextLost =
    "the GPU context is now unusable (restart the process); run under compute-sanitizer to find the faulty "
    "kernel and access";
constexpr const char* kBadImage =
    "the kernel image does not suit this GPU or driver: rebuild the kernels for this GPU's architecture, "
    "update the NVIDIA driver, or set OPTGEN_FORCE_NVRTC=1 to compile them at load time";

/// Common driver errors: their names and texts (for when the driver cannot be asked, e.g. it is not
/// loaded) and what to do about them.
struct KnownError {
  CUresult code;
  const char* name;
  const char* text;
  const char* fix;
};

constexpr KnownError kKnownErrors[] = {
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument",
     "an argument is out of range (a size, pointer or launch dimension); check the tensors and options passed "
     "to optgen, else report it as a bug"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory",
     "free GPU memory (other tensors, or other processes: see nvidia-smi), or train a smaller model or batch"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error",
     "cuInit has not succeeded in this process; this is a bug in optgen, please report it"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down",
     "the process is exiting; do not use optgen from static destructors or atexit handlers"},
    {CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library",
     "libcuda.so.1 is the CUDA toolkit's stub (lib64/stubs), not the driver: remove the stubs directory from "
     "LD_LIBRARY_PATH, and install the NVIDIA driver"},
    {CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER",
     "the API call requires a newer CUDA driver", "update the NVIDIA driver"},
    {CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA_ERROR_DEVICE_UNAVAILABLE",
     "CUDA-capable device(s) is/are busy or unavailable",
     "the GPU is in exclusive-process mode and another process holds it (see nvidia-smi), or it is in an "
     "error state"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected",
     "no NVIDIA GPU is visible to this process: check nvidia-smi, and CUDA_VISIBLE_DEVICES if it is set"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal",
     "the device number is out of range; check it against nvidia-smi and CUDA_VISIBLE_DEVICES"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid", kBadImage},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context",
     "no valid CUDA context is current on this thread; make the GPU's context current (e.g. "
     "torch.cuda.set_device) before calling optgen"},
    {CUDA_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU",
     "no kernel image is available for execution on the device", kBadImage},
    {CUDA_ERROR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed", kBadImage},
    {CUDA_ERROR_JIT_COMPILER_NOT_FOUND, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND", "PTX JIT compiler library not found",
     "the driver's PTX compiler (libnvidia-ptxjitcompiler.so.1) is missing: reinstall the NVIDIA driver"},
    {CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
     "the provided PTX was compiled with an unsupported toolchain.",
     "the PTX is newer than the driver: update the NVIDIA driver, or rebuild the kernels with a cubin for this "
     "GPU"},
    {CUDA_ERROR_OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS",
     "check the system log (dmesg) for NVIDIA driver messages"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle",
     "a stream, module or function handle is stale or belongs to another context; this is likely a bug in "
     "optgen or its caller"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found",
     "the kernel module and its launcher are out of step: regenerate them with the same optgen"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered",
     kContextLost},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
     "too many resources requested for launch",
     "the kernel needs more registers or shared memory per block than the GPU has; use a smaller block size"},
    {CUDA_ERROR_LAUNCH_TIMEOUT, "CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated",
     "the GPU also drives a display and its watchdog stopped the kernel; use a GPU without a display"},
    {CUDA_ERROR_ASSERT, "CUDA_ERROR_ASSERT", "device-side assert triggered", kContextLost},
    {CUDA_ERROR_HARDWARE_STACK_ERROR, "CUDA_ERROR_HARDWARE_STACK_ERROR", "unspecified launch failure", kContextLost},
    {CUDA_ERROR_ILLEGAL_INSTRUCTION, "CUDA_ERROR_ILLEGAL_INSTRUCTION", "an illegal instruction was encountered",
     kContextLost},
    {CUDA_ERROR_MISALIGNED_ADDRESS, "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address", kContextLost},
    {CUDA_ERROR_INVALID_ADDRESS_SPACE, "CUDA_ERROR_INVALID_ADDRESS_SPACE",
     "operation not supported on global/shared address space", kContextLost},
    {CUDA_ERROR_INVALID_PC, "CUDA_ERROR_INVALID_PC", "invalid program counter", kContextLost},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure", kContextLost},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported",
     "this GPU or driver does not support the operation; update the NVIDIA driver"},
    {CUDA_ERROR_SYSTEM_NOT_READY, "CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized",
     "the GPU system is still starting; on NVSwitch systems, start nvidia-fabricmanager"},
    {CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
     "system has unsupported display driver / cuda driver combination",
     "the NVIDIA kernel module and libcuda.so.1 come from different driver versions: reinstall the driver or "
     "reboot"},
    {CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
     "forward compatibility was attempted on non supported HW",
     "the CUDA forward-compatibility libraries do not support this GPU: remove them from LD_LIBRARY_PATH, or "
     "update the NVIDIA driver"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error",
     "check the system log (dmesg) for NVIDIA driver messages (Xid errors)"},
};

const KnownError* find_known(CUresult code) {
  for (const KnownError& known : kKnownErrors) {
    if (known.code == code) return &known;
  }
  return nullptr;
}

/// "CUDA_ERROR_OUT_OF_MEMORY: out of memory", from the driver when `api` is given, else from the
/// table above.
std::string describe(const Api* api, CUresult code) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api != nullptr) {
    if (api->cuGetErrorName(code, &name) != CUDA_SUCCESS) name = nullptr;
    if (api->cuGetErrorString(code, &text) != CUDA_SUCCESS) text = nullptr;
  }
  if (const KnownError* known = find_known(code)) {
    if (name == nullptr) name = known->name;
    if (text == nullptr) text = known->text;
  }
  std::string description = name != nullptr ? name : "CUresult " + std::to_string(static_cast<int>(code));
  description += ": ";
  description += text != nullptr ? text : "unrecognised error code";
  return description;
}

std::string hint(CUresult code) {
  const KnownError* known = find_known(code);
  return known != nullptr ? known->fix : "";
}

/// The driver's entry point `name` into `slot`: a driver without it is older than this program.
template <typename Function>
void load_symbol(void* library, Function& slot, const char* name) {
  shared_library::load(library, kLibrary, slot, name,
                       "the NVIDIA driver is too old for this program; update it to one that supports CUDA " +
                           std::to_string(CUDA_VERSION / 1000) + "." + std::to_string(CUDA_VERSION % 1000 / 10));
}

/// Opens libcuda.so.1, resolves every entry point of Api by its exported name, and runs cuInit.
/// cuda.h #defines several names to versioned ones (cuMemAlloc to cuMemAlloc_v2); the member names
/// below are expanded the same way as in driver.h, and the strings are the symbols libcuda exports.
Api load_api() {
  void* library = shared_library::open(kLibrary, kInstallDriver);
  Api api{};
  load_symbol(library, api.cuInit, "cuInit");
  load_symbol(library, api.cuGetErrorName, "cuGetErrorName");
  load_symbol(library, api.cuGetErrorString, "cuGetErrorString");
  load_symbol(library, api.cuDeviceGetCount, "cuDeviceGetCount");
  load_symbol(library, api.cuDeviceGet, "cuDeviceGet");
  load_symbol(library, api.cuDeviceGetAttribute, "cuDeviceGetAttribute");
  load_symbol(library, api.cuDeviceGetName, "cuDeviceGetName");
  load_symbol(library, api.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  load_symbol(library, api.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
  load_symbol(library, api.cuCtxGetCurrent, "cuCtxGetCurrent");
  load_symbol(library, api.cuCtxSetCurrent, "cuCtxSetCurrent");
  load_symbol(library, api.cuCtxGetDevice, "cuCtxGetDevice");
  load_symbol(library, api.cuCtxSynchronize, "cuCtxSynchronize");
  load_symbol(library, api.cuModuleLoadData, "cuModuleLoadData");
  load_symbol(library, api.cuModuleUnload, "cuModuleUnload");
  load_symbol(library, api.cuModuleGetFunction, "cuModuleGetFunction");
  load_symbol(library, api.cuFuncSetAttribute, "cuFuncSetAttribute");
  load_symbol(library, api.cuFuncGetAttribute, "cuFuncGetAttribute");
  load_symbol(library, api.cuOccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor");
  load_symbol(library, api.cuLaunchKernel, "cuLaunchKernel");
  api.cuLaunchKernelEx = reinterpret_cast<decltype(api.cuLaunchKernelEx)>(dlsym(library, "cuLaunchKernelEx"));
  load_symbol(library, api.cuMemAlloc, "cuMemAlloc_v2");
  load_symbol(library, api.cuMemFree, "cuMemFree_v2");
  load_symbol(library, api.cuMemcpyHtoD, "cuMemcpyHtoD_v2");
  load_symbol(library, api.cuMemcpyDtoH, "cuMemcpyDtoH_v2");
  load_symbol(library, api.cuMemsetD16, "cuMemsetD16_v2");
  load_symbol(library, api.cuMemsetD8, "cuMemsetD8_v2");
  load_symbol(library, api.cuMemsetD32, "cuMemsetD32_v2");
  load_symbol(library, api.cuPointerGetAttribute, "cuPointerGetAttribute");
  load_symbol(library, api.cuStreamSynchronize, "cuStreamSynchronize");
  load_symbol(library, api.cuStreamCreate, "cuStreamCreate");
  load_symbol(library, api.cuStreamDestroy, "cuStreamDestroy_v2");
  load_symbol(library, api.cuMemcpyDtoD, "cuMemcpyDtoD_v2");
  load_symbol(library, api.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
  load_symbol(library, api.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
  load_symbol(library, api.cuEventCreate, "cuEventCreate");
  load_symbol(library, api.cuEventDestroy, "cuEventDestroy_v2");
  load_symbol(library, api.cuEventRecord, "cuEventRecord");
  load_symbol(library, api.cuStreamWaitEvent, "cuStreamWaitEvent");
  load_symbol(library, api.cuEventSynchronize, "cuEventSynchronize");
  // _v2 since CUDA 12.8; the first version, with the same signature, on older drivers.
  if (dlsym(library, "cuEventElapsedTime_v2"))
    load_symbol(library, api.cuEventElapsedTime, "cuEventElapsedTime_v2");
  else
    load_symbol(library, api.cuEventElapsedTime, "cuEventElapsedTime");
  load_symbol(library, api.cuStreamIsCapturing, "cuStreamIsCapturing");
  load_symbol(library, api.cuThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode");
  load_symbol(library, api.cuStreamBeginCapture, "cuStreamBeginCapture_v2");
  load_symbol(library, api.cuStreamEndCapture, "cuStreamEndCapture");
  load_symbol(library, api.cuGraphInstantiate, "cuGraphInstantiateWithFlags");
  load_symbol(library, api.cuGraphLaunch, "cuGraphLaunch");
  load_symbol(library, api.cuGraphDestroy, "cuGraphDestroy");
  load_symbol(library, api.cuGraphExecDestroy, "cuGraphExecDestroy");

  CUresult result = api.cuInit(0);
  if (result != CUDA_SUCCESS) {
    std::string fix = hint(result);
    if (fix.empty()) fix = kInstallDriver;
    throw Error("cuInit", describe(&api, result), fix);
  }
  return api;
}

/// The driver's state: loaded once; a failed load is remembered and reported again.
struct State {
  std::mutex mutex;
  std::atomic<const Api*> loaded{nullptr};
  Api api{};
  std::optional<Error> failure;
  bool simulate_missing = false;
};

State& state() {
  static State instance;
  return instance;
}

}  // namespace

const Api& api() {
  State& s = state();
  if (const Api* loaded = s.loaded.load(std::memory_order_acquire)) return *loaded;
  std::lock_guard<std::mutex> lock(s.mutex);
  if (const Api* loaded = s.loaded.load(std::memory_order_relaxed)) return *loaded;
  if (s.simulate_missing) {
    throw Error(std::string("dlopen(") + kLibrary + ")",
                std::string(kLibrary) + ": cannot open shared object file: No such file or directory (simulated)",
                kInstallDriver);
  }
  if (!s.failure) {
    try {
      s.api = load_api();
      s.loaded.store(&s.api, std::memory_order_release);
      return s.api;
    } catch (const Error& error) {
      s.failure = error;
    }
  }
  throw *s.failure;
}

bool available(std::string* why) {
  try {
    const Api& driver = api();
    int count = 0;
    CUresult result = driver.cuDeviceGetCount(&count);
    if (result != CUDA_SUCCESS) {
      if (why != nullptr) *why = Error("cuDeviceGetCount", describe(&driver, result), hint(result)).what();
      return false;
    }
    if (count == 0) {
      if (why != nullptr) *why = "the CUDA driver found no GPU (cuDeviceGetCount returned 0)";
      return false;
    }
    return true;
  } catch (const std::exception& error) {
    if (why != nullptr) *why = error.what();
  } catch (...) {
    if (why != nullptr) *why = "unknown exception while loading the CUDA driver";
  }
  return false;
}

void check(CUresult result, const char* call, const std::string& fix) {
  if (result == CUDA_SUCCESS) return;
  const Api* loaded = state().loaded.load(std::memory_order_acquire);
  throw Error(call, describe(loaded, result), fix.empty() ? hint(result) : fix);
}

CUdevice current_device(int fallback_ordinal) {
  const Api& driver = api();
  CUcontext context = nullptr;
  check(driver.cuCtxGetCurrent(&context), "cuCtxGetCurrent");
  CUdevice device = 0;
  if (context != nullptr) {
    check(driver.cuCtxGetDevice(&device), "cuCtxGetDevice");
    return device;
  }
  CUresult result = driver.cuDeviceGet(&device, fallback_ordinal);
  if (result != CUDA_SUCCESS) {
    int count = 0;
    std::string fix = "device " + std::to_string(fallback_ordinal) + " does not exist";
    if (driver.cuDeviceGetCount(&count) == CUDA_SUCCESS) {
      fix += " (this process sees " + std::to_string(count) + " GPU" + (count == 1 ? "" : "s") + ")";
    }
    check(result, "cuDeviceGet", fix + "; check the device number and CUDA_VISIBLE_DEVICES");
  }
  // The primary context is retained for the life of the process, as the CUDA runtime does.
  check(driver.cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain");
  result = driver.cuCtxSetCurrent(context);
  if (result != CUDA_SUCCESS) {
    driver.cuDevicePrimaryCtxRelease(device);
    check(result, "cuCtxSetCurrent");
  }
  return device;
}

namespace {
std::atomic<int> simulated_compute_capability{0};  // simulate_compute_capability_for_testing's
}  // namespace

int compute_capability(CUdevice device) {
  const Api& driver = api();
  if (const int simulated = simulated_compute_capability.load()) return simulated;
  int major = 0;
  int minor = 0;
  check(driver.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device),
        "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)");
  check(driver.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device),
        "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)");
  return major * 10 + minor;
}

int multiprocessor_count(CUdevice device) {
  int count = 0;
  check(api().cuDeviceGetAttribute(&count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device),
        "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)");
  return count;
}

std::string device_name(CUdevice device) {
  char name[256] = {};
  check(api().cuDeviceGetName(name, static_cast<int>(sizeof(name)) - 1, device), "cuDeviceGetName");
  return name;
}

bool early_start_supported(CUdevice device) {
  return api().cuLaunchKernelEx != nullptr && compute_capability(device) >= 90;
}

void launch(CUfunction function, unsigned grid, unsigned block, CUstream stream, void** args, bool early_start,
            const std::string& fix, unsigned shared_bytes) {
  const Api& a = api();
  if (!early_start || a.cuLaunchKernelEx == nullptr) {
    check(a.cuLaunchKernel(function, grid, 1, 1, block, 1, 1, shared_bytes, stream, args, nullptr), "cuLaunchKernel",
          fix);
    return;
  }
  CUlaunchAttribute attribute{};
  attribute.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attribute.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig config{};
  config.gridDimX = grid;
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = block;
  config.blockDimY = config.blockDimZ = 1;
  config.sharedMemBytes = shared_bytes;
  config.hStream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  check(a.cuLaunchKernelEx(&config, function, args, nullptr), "cuLaunchKernelEx", fix);
}

bool is_capturing(CUstream stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUresult result = api().cuStreamIsCapturing(stream, &status);
  // The legacy stream, asked while another (blocking) stream captures, answers that it would join.
  if (result == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) return true;
  check(result, "cuStreamIsCapturing");
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

void simulate_compute_capability_for_testing(int capability) { simulated_compute_capability = capability; }

void simulate_missing_driver_for_testing(bool missing) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.simulate_missing = missing;
}

}  // namespace optgen::driver
