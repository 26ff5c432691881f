#pragma once
/// NVRTC, loaded at run time with dlopen, used by the generator at build time and by the runtime
/// for a GPU that has no matching embedded cubin. Looks for $OPTGEN_NVRTC_LIBRARY if set, else
/// libnvrtc.so.<major> for the CUDA majors optgen supports (13, 12), else libnvrtc.so.

#include <string>
#include <utility>
#include <vector>

namespace optgen::nvrtc {

/// optgen's device library as compiled into this library: every header a kernel source may
/// include, as (include name, text) pairs sorted by name: "optgen/device/kernels.cuh" (what a
/// generated source includes), the other headers of optgen/device/, and optgen/codec.h,
/// kernel_abi.h, random.h, blockwise8.h and element_math.h, which the host compiles too. compile() hands them
/// all to NVRTC as in-memory headers.
const std::vector<std::pair<std::string, std::string>>& device_library();

/// Whether NVRTC can be loaded; never throws. `why` receives the reason when it cannot.
bool available(std::string* why = nullptr);

/// NVRTC's version as "13.0". Throws optgen::Error when NVRTC cannot be loaded.
std::string version();

/// The architectures NVRTC compiles for (e.g. 75, 80, 86, ..., 120), ascending. Throws
/// optgen::Error when NVRTC cannot be loaded.
std::vector<int> supported_archs();

struct Compiled {
  std::vector<char> image;  ///< a cubin for an sm_XY target, PTX text (NUL-terminated) for compute_XY
  /// For an sm_XY target, the PTX NVRTC made on the way to the cubin (NUL-terminated): the same
  /// text as compiling for compute_XY gives, without a second compilation. Empty for compute_XY.
  std::vector<char> ptx;
  std::string log;  ///< NVRTC's log: warnings, and ptxas's report when asked for with -Xptxas=-v
};

/// Compiles `source` (named `name` in messages), with device_library() as its include files, for
/// `arch` (e.g. 90) to a cubin, or to PTX when `ptx` is true. `options` are passed as they are,
/// after --gpu-architecture (plus --no-cache when they ask for ptxas's report on NVRTC 12.9 or
/// newer, whose cache would skip ptxas and its report). Throws optgen::Error with the whole log on a
/// compile error, or when NVRTC cannot be loaded.
Compiled compile(const std::string& source, const std::string& name, const std::vector<std::string>& options, int arch,
                 bool ptx = false);

/// Whether `options` ask ptxas for its report (NVRTC passes each -Xptxas value to ptxas whole).
bool asks_for_ptxas_report(const std::vector<std::string>& options);

/// ptxas's spill figures in a log from compile(..., {"-Xptxas=-v"}, ...): the sum over the
/// kernels of "N bytes spill stores" and "N bytes spill loads"; also the largest stack frame.
struct SpillReport {
  long spill_store_bytes = 0;
  long spill_load_bytes = 0;
  long max_stack_frame_bytes = 0;
  int kernels = 0;  ///< how many entry functions ("Compiling entry function") the log had; called
                    ///< device functions (e.g. double pow) report their properties too, and are not counted
  /// The entry functions that spill or keep a stack frame (local memory either way), in the log's order.
  std::vector<std::string> spilling;
};
SpillReport parse_ptxas_report(const std::string& log);

/// For tests: pretend NVRTC is not installed (available() false, compile() throws).
void simulate_missing_nvrtc_for_testing(bool missing);

}  // namespace optgen::nvrtc
