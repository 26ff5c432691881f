#pragma once
/// The CUDA driver API, loaded at run time with dlopen("libcuda.so.1"), so that a program linked
/// with optgen starts, and explains itself, on a machine with no GPU or driver. Only the functions
/// optgen uses are loaded. Types come from the toolkit's <cuda.h>; nothing links libcuda.

#include <cuda.h>

#include <string>

namespace optgen::driver {

/// The loaded entry points (named without the _v2 suffixes cuda.h's macros add).
struct Api {
  CUresult (*cuInit)(unsigned int);
  CUresult (*cuGetErrorName)(CUresult, const char**);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetAttribute)(int*, CUdevice_attribute, CUdevice);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxGetCurrent)(CUcontext*);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxGetDevice)(CUdevice*);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuFuncSetAttribute)(CUfunction, CUfunction_attribute, int);
  CUresult (*cuFuncGetAttribute)(int*, CUfunction_attribute, CUfunction);
  CUresult (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int*, CUfunction, int, size_t);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                             void**, void**);
  /// Null where the driver predates it (CUDA 12.0): launches then go through cuLaunchKernel.
  CUresult (*cuLaunchKernelEx)(const CUlaunchConfig*, CUfunction, void**, void**);
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*cuMemsetD16)(CUdeviceptr, unsigned short, size_t);
  CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*cuMemsetD32)(CUdeviceptr, unsigned int, size_t);
  CUresult (*cuPointerGetAttribute)(void*, CUpointer_attribute, CUdeviceptr);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuStreamCreate)(CUstream*, unsigned int);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuMemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);
  CUresult (*cuEventCreate)(CUevent*, unsigned int);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned int);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent);
  CUresult (*cuStreamIsCapturing)(CUstream, CUstreamCaptureStatus*);
  CUresult (*cuThreadExchangeStreamCaptureMode)(CUstreamCaptureMode*);
  CUresult (*cuStreamBeginCapture)(CUstream, CUstreamCaptureMode);
  CUresult (*cuStreamEndCapture)(CUstream, CUgraph*);
  CUresult (*cuGraphInstantiate)(CUgraphExec*, CUgraph, unsigned long long);
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
  CUresult (*cuGraphDestroy)(CUgraph);
  CUresult (*cuGraphExecDestroy)(CUgraphExec);
};

/// The driver, loaded and initialised (cuInit(0)) on first use. Throws optgen::Error naming
/// dlopen or cuInit, and saying what to do, when there is no usable driver. Thread-safe.
const Api& api();

/// Whether a usable driver with at least one device is present; never throws. `why`, when given,
/// receives the reason when it returns false (for skip messages).
bool available(std::string* why = nullptr);

/// Throws optgen::Error naming `call` and the driver's error name and text unless `result` is
/// CUDA_SUCCESS. `fix` says what to do; when empty, a generic hint for the error code is used.
void check(CUresult result, const char* call, const std::string& fix = "");

/// The current context's device, making the device's primary context current first when the
/// thread has no context (device 0, or `fallback_ordinal`). Throws optgen::Error.
CUdevice current_device(int fallback_ordinal = 0);

/// The device's compute capability as major * 10 + minor (90 for an H100 or H200).
int compute_capability(CUdevice device);

/// The device's streaming multiprocessors.
int multiprocessor_count(CUdevice device);

/// The device's name, e.g. "NVIDIA H200".
std::string device_name(CUdevice device);

/// Whether `launch(..., early_start = true)` lets a kernel start before the previous one ends on
/// `device`: programmatic dependent launch, on compute capability 9.0 and later with a driver that
/// has cuLaunchKernelEx.
bool early_start_supported(CUdevice device);

/// Launches `function` (`grid` blocks of `block` threads, `shared_bytes` of dynamic shared memory)
/// on `stream`. With `early_start`, where supported, the kernel may start while the kernel before it
/// on the stream is still running, once every block of that one has started or ended (programmatic
/// dependent launch): it must execute griddepcontrol.wait (optgen/device/group.cuh's
/// wait_for_previous_kernel) before it reads what the previous kernel wrote, or writes anything
/// the previous kernel reads. Throws optgen::Error naming the call, with `fix`.
void launch(CUfunction function, unsigned grid, unsigned block, CUstream stream, void** args, bool early_start,
            const std::string& fix, unsigned shared_bytes = 0);

/// Whether work enqueued on `stream` is being captured into a CUDA graph (also when the legacy
/// default stream would join a capture elsewhere).
bool is_capturing(CUstream stream);

/// For tests: pretend libcuda.so.1 is not installed (the next api() call fails as dlopen would).
/// Only effective before the first successful api() call.
void simulate_missing_driver_for_testing(bool missing);
/// For tests: compute_capability() answers `capability` (e.g. 75) for every device; 0 restores the
/// devices' own.
void simulate_compute_capability_for_testing(int capability);

}  // namespace optgen::driver
