#include "optgen/nvrtc.h"

// The toolkit's NVRTC header, for its types and signatures only: libnvrtc is loaded with dlopen.
#include <nvrtc.h>

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>

#include "optgen/error.h"
#include "shared_library.h"

namespace optgen::nvrtc {

namespace {

constexpr const char* kLoadCall = "dlopen(libnvrtc)";
constexpr const char* kInstallNvrtc =
    "install NVRTC, CUDA 12 or newer: pip install nvidia-cuda-nvrtc-cu12 (or nvidia-cuda-nvrtc for CUDA 13; the "
    "optgen Python package finds these wheels), or the CUDA toolkit's cuda-nvrtc package; or set "
    "OPTGEN_NVRTC_LIBRARY to the path of a libnvrtc.so";
constexpr const char* kLibraryVariable = "OPTGEN_NVRTC_LIBRARY";
constexpr const char* kFileNames[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
constexpr int kOldestMajor = 12;

/// The entry points optgen uses, typed after the toolkit's declarations.
struct Library {
  decltype(&::nvrtcVersion) nvrtcVersion;
  decltype(&::nvrtcGetErrorString) nvrtcGetErrorString;
  decltype(&::nvrtcCreateProgram) nvrtcCreateProgram;
  decltype(&::nvrtcDestroyProgram) nvrtcDestroyProgram;
  decltype(&::nvrtcCompileProgram) nvrtcCompileProgram;
  decltype(&::nvrtcGetProgramLogSize) nvrtcGetProgramLogSize;
  decltype(&::nvrtcGetProgramLog) nvrtcGetProgramLog;
  decltype(&::nvrtcGetCUBINSize) nvrtcGetCUBINSize;
  decltype(&::nvrtcGetCUBIN) nvrtcGetCUBIN;
  decltype(&::nvrtcGetPTXSize) nvrtcGetPTXSize;
  decltype(&::nvrtcGetPTX) nvrtcGetPTX;
  decltype(&::nvrtcGetNumSupportedArchs) nvrtcGetNumSupportedArchs;
  decltype(&::nvrtcGetSupportedArchs) nvrtcGetSupportedArchs;
  int major = 0;
  int minor = 0;
};

std::string join(const std::vector<std::string>& parts, const char* separator) {
  std::string text;
  for (const std::string& part : parts) {
    if (!text.empty()) text += separator;
    text += part;
  }
  return text;
}

template <typename Function>
bool load_symbol(void* handle, Function& slot, const char* name) {
  slot = reinterpret_cast<Function>(dlsym(handle, name));
  return slot != nullptr;
}

/// The library at `path` with every entry point resolved, or nullopt with `why` set.
std::optional<Library> open_library(const std::string& path, std::string& why) {
  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* reason = dlerror();
    why = reason != nullptr ? reason : path + ": unknown dlopen error";
    return std::nullopt;
  }
  Library library{};
  const char* missing = nullptr;
#define OPTGEN_LOAD(name) \
  if (missing == nullptr && !load_symbol(handle, library.name, #name)) missing = #name
  OPTGEN_LOAD(nvrtcVersion);
  OPTGEN_LOAD(nvrtcGetErrorString);
  OPTGEN_LOAD(nvrtcCreateProgram);
  OPTGEN_LOAD(nvrtcDestroyProgram);
  OPTGEN_LOAD(nvrtcCompileProgram);
  OPTGEN_LOAD(nvrtcGetProgramLogSize);
  OPTGEN_LOAD(nvrtcGetProgramLog);
  OPTGEN_LOAD(nvrtcGetCUBINSize);
  OPTGEN_LOAD(nvrtcGetCUBIN);
  OPTGEN_LOAD(nvrtcGetPTXSize);
  OPTGEN_LOAD(nvrtcGetPTX);
  OPTGEN_LOAD(nvrtcGetNumSupportedArchs);
  OPTGEN_LOAD(nvrtcGetSupportedArchs);
#undef OPTGEN_LOAD
  if (missing != nullptr) {
    why = path + " has no " + missing + " (not NVRTC, or an NVRTC older than CUDA 12)";
  } else if (library.nvrtcVersion(&library.major, &library.minor) != NVRTC_SUCCESS) {
    why = path + ": nvrtcVersion failed";
  } else if (library.major < kOldestMajor) {
    why = path + " is NVRTC " + std::to_string(library.major) + "." + std::to_string(library.minor) +
          "; optgen needs CUDA 12 or newer";
  } else {
    return library;  // stays loaded for the life of the process
  }
  dlclose(handle);
  return std::nullopt;
}

/// $OPTGEN_NVRTC_LIBRARY alone when it is set; else the file names on the loader's path, then in
/// the toolkit's directories (shared_library::cuda_library_directories).
Library load_library() {
  const char* chosen = std::getenv(kLibraryVariable);
  if (chosen != nullptr && *chosen != '\0') {
    std::string why;
    if (std::optional<Library> library = open_library(chosen, why)) return *library;
    throw Error(
        kLoadCall, std::string("cannot load NVRTC from ") + kLibraryVariable + "=" + chosen + ": " + why,
        std::string("set ") + kLibraryVariable + " to the path of a libnvrtc.so from CUDA 12 or newer, or unset it");
  }
  std::vector<std::string> directories = shared_library::cuda_library_directories();
  std::vector<std::string> paths(std::begin(kFileNames), std::end(kFileNames));
  for (const std::string& directory : directories) {
    for (const char* name : kFileNames) paths.push_back(directory + "/" + name);
  }
  // A file that does not exist is expected for most candidates; any other failure is worth telling.
  std::vector<std::string> reasons;
  for (const std::string& path : paths) {
    std::string why;
    if (std::optional<Library> library = open_library(path, why)) return *library;
    if (why.find("No such file or directory") == std::string::npos) reasons.push_back(why);
  }
  std::vector<std::string> names(std::begin(kFileNames), std::end(kFileNames));
  std::string error = "NVRTC could not be loaded: tried " + join(names, ", ") + " on the library path and in " +
                      join(directories, ", ");
  error += reasons.empty() ? " (none exists)" : "; " + join(reasons, "; ");
  throw Error(kLoadCall, error, kInstallNvrtc);
}

/// NVRTC's state: loaded once; a failed load is remembered and reported again.
struct State {
  std::mutex mutex;
  std::atomic<const Library*> loaded{nullptr};
  Library library{};
  std::optional<Error> failure;
  std::atomic<bool> simulate_missing{false};
};

State& state() {
  static State instance;
  return instance;
}

const Library& library() {
  State& s = state();
  if (s.simulate_missing.load()) {
    throw Error(kLoadCall, "NVRTC is not installed (simulated for testing)", kInstallNvrtc);
  }
  if (const Library* loaded = s.loaded.load(std::memory_order_acquire)) return *loaded;
  std::lock_guard<std::mutex> lock(s.mutex);
  if (const Library* loaded = s.loaded.load(std::memory_order_relaxed)) return *loaded;
  if (!s.failure) {
    try {
      s.library = load_library();
      s.loaded.store(&s.library, std::memory_order_release);
      return s.library;
    } catch (const Error& error) {
      s.failure = error;
    }
  }
  throw *s.failure;
}

/// Destroys the program on every path out of compile().
class Program {
 public:
  Program(const Library& library, const std::string& source, const std::string& name) : library_(library) {
    std::vector<const char*> headers, include_names;
    for (const auto& [include_name, text] : device_library()) {
      include_names.push_back(include_name.c_str());
      headers.push_back(text.c_str());
    }
    nvrtcResult result =
        library.nvrtcCreateProgram(&program_, source.c_str(), name.c_str(), static_cast<int>(headers.size()),
                                   headers.data(), include_names.data());
    if (result != NVRTC_SUCCESS) {
      throw Error("nvrtcCreateProgram(" + name + ")", library.nvrtcGetErrorString(result),
                  result == NVRTC_ERROR_OUT_OF_MEMORY ? "free host memory" : "");
    }
  }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  ~Program() { library_.nvrtcDestroyProgram(&program_); }
  nvrtcProgram get() const { return program_; }

 private:
  const Library& library_;
  nvrtcProgram program_ = nullptr;
};

void check(const Library& library, nvrtcResult result, const std::string& call) {
  if (result != NVRTC_SUCCESS) {
    throw Error(call, library.nvrtcGetErrorString(result), "this is a bug in optgen or NVRTC; please report it");
  }
}

std::string program_log(const Library& library, nvrtcProgram program, const std::string& name) {
  size_t size = 0;
  check(library, library.nvrtcGetProgramLogSize(program, &size), "nvrtcGetProgramLogSize(" + name + ")");
  std::string log(size, '\0');
  if (size > 0) check(library, library.nvrtcGetProgramLog(program, log.data()), "nvrtcGetProgramLog(" + name + ")");
  while (!log.empty() && log.back() == '\0') log.pop_back();
  return log;
}

std::string compile_fix(nvrtcResult result, const std::string& log, const std::string& architecture) {
  switch (result) {
    case NVRTC_ERROR_INVALID_OPTION:
      if (log.find("--gpu-architecture") != std::string::npos) {
        return "NVRTC " + version() + " cannot compile for " + architecture.substr(architecture.find('=') + 1) +
               ": use an NVRTC that supports this GPU (set OPTGEN_NVRTC_LIBRARY to it)";
      }
      return "NVRTC " + version() +
             " does not accept an option the kernels were generated with: use the NVRTC "
             "they were built with (set OPTGEN_NVRTC_LIBRARY to it), or regenerate them";
    case NVRTC_ERROR_BUILTIN_OPERATION_FAILURE:
      return "NVRTC could not load its libnvrtc-builtins.so; install the one from the same CUDA version next to "
             "libnvrtc.so";
    case NVRTC_ERROR_OUT_OF_MEMORY: return "free host memory";
    default: return "this is a bug in optgen's generated code or in a hand-edited source; report it with the log";
  }
}

/// The number just before `label` in `line` ("0 bytes spill stores" -> 0), or nullopt.
std::optional<long> number_before(const std::string& line, const char* label) {
  std::size_t at = line.find(label);
  if (at == std::string::npos) return std::nullopt;
  std::size_t end = at;
  while (end > 0 && line[end - 1] == ' ') --end;
  std::size_t begin = end;
  while (begin > 0 && std::isdigit(static_cast<unsigned char>(line[begin - 1]))) --begin;
  if (begin == end) return std::nullopt;
  return std::strtol(line.c_str() + begin, nullptr, 10);
}

}  // namespace

bool available(std::string* why) {
  try {
    library();
    return true;
  } catch (const std::exception& error) {
    if (why != nullptr) *why = error.what();
  } catch (...) {
    if (why != nullptr) *why = "unknown exception while loading NVRTC";
  }
  return false;
}

std::string version() {
  const Library& nvrtc = library();
  return std::to_string(nvrtc.major) + "." + std::to_string(nvrtc.minor);
}

std::vector<int> supported_archs() {
  const Library& nvrtc = library();
  int count = 0;
  check(nvrtc, nvrtc.nvrtcGetNumSupportedArchs(&count), "nvrtcGetNumSupportedArchs");
  std::vector<int> archs(static_cast<size_t>(count));
  if (count > 0) check(nvrtc, nvrtc.nvrtcGetSupportedArchs(archs.data()), "nvrtcGetSupportedArchs");
  return archs;
}

Compiled compile(const std::string& source, const std::string& name, const std::vector<std::string>& options, int arch,
                 bool ptx) {
  const Library& nvrtc = library();
  Program program(nvrtc, source, name);

  std::string architecture = std::string("--gpu-architecture=") + (ptx ? "compute_" : "sm_") + std::to_string(arch);
  std::vector<const char*> arguments = {architecture.c_str()};
  for (const std::string& option : options) arguments.push_back(option.c_str());
  // NVRTC 12.9 and newer cache their output, and a cached compilation runs no ptxas, so it logs no report.
  const bool caches = nvrtc.major > 12 || (nvrtc.major == 12 && nvrtc.minor >= 9);
  if (caches && asks_for_ptxas_report(options) &&
      std::find(options.begin(), options.end(), "--no-cache") == options.end()) {
    arguments.push_back("--no-cache");
  }
  nvrtcResult result = nvrtc.nvrtcCompileProgram(program.get(), static_cast<int>(arguments.size()), arguments.data());

  Compiled compiled;
  compiled.log = program_log(nvrtc, program.get(), name);
  if (result != NVRTC_SUCCESS) {
    std::string log = compiled.log;
    while (!log.empty() && std::isspace(static_cast<unsigned char>(log.back()))) log.pop_back();
    throw Error("nvrtcCompileProgram(" + name + ")", std::string(nvrtc.nvrtcGetErrorString(result)) + ":\n" + log,
                compile_fix(result, log, architecture));
  }

  size_t size = 0;
  std::vector<char>& ptx_text = ptx ? compiled.image : compiled.ptx;
  check(nvrtc, nvrtc.nvrtcGetPTXSize(program.get(), &size), "nvrtcGetPTXSize(" + name + ")");
  ptx_text.resize(size);
  check(nvrtc, nvrtc.nvrtcGetPTX(program.get(), ptx_text.data()), "nvrtcGetPTX(" + name + ")");
  if (ptx_text.empty() || ptx_text.back() != '\0') ptx_text.push_back('\0');
  if (!ptx) {
    check(nvrtc, nvrtc.nvrtcGetCUBINSize(program.get(), &size), "nvrtcGetCUBINSize(" + name + ")");
    compiled.image.resize(size);
    check(nvrtc, nvrtc.nvrtcGetCUBIN(program.get(), compiled.image.data()), "nvrtcGetCUBIN(" + name + ")");
  }
  return compiled;
}

bool asks_for_ptxas_report(const std::vector<std::string>& options) {
  for (const char* flag : {"-Xptxas=-v", "-Xptxas=--verbose", "--ptxas-options=-v", "--ptxas-options=--verbose"}) {
    if (std::find(options.begin(), options.end(), flag) != options.end()) return true;
  }
  return false;
}

SpillReport parse_ptxas_report(const std::string& log) {
  SpillReport report;
  // "Compiling entry function 'k' for 'sm_90'" names the entry functions; "Function properties for
  // k" starts the lines of k's figures (a called device function's too).
  const auto quoted = [](const std::string& line) {
    const std::size_t open = line.find('\'');
    const std::size_t close = open == std::string::npos ? open : line.find('\'', open + 1);
    return close == std::string::npos ? std::string() : line.substr(open + 1, close - open - 1);
  };
  std::vector<std::string> entries;
  std::string function;
  std::size_t start = 0;
  while (start < log.size()) {
    std::size_t end = log.find('\n', start);
    if (end == std::string::npos) end = log.size();
    std::string line = log.substr(start, end - start);
    start = end + 1;
    if (line.compare(0, 5, "ptxas") != 0) continue;
    if (line.find("Compiling entry function") != std::string::npos) {
      ++report.kernels;
      entries.push_back(quoted(line));
    }
    if (const std::size_t at = line.find("Function properties for "); at != std::string::npos) {
      function = line.substr(at + std::strlen("Function properties for "));
      while (!function.empty() && std::isspace(static_cast<unsigned char>(function.back()))) function.pop_back();
    }
    const std::optional<long> frame = number_before(line, "bytes stack frame");
    report.max_stack_frame_bytes = std::max(report.max_stack_frame_bytes, frame.value_or(0));
    const std::optional<long> stores = number_before(line, "bytes spill stores");
    const std::optional<long> loads = number_before(line, "bytes spill loads");
    report.spill_store_bytes += stores.value_or(0);
    report.spill_load_bytes += loads.value_or(0);
    if (frame.value_or(0) + stores.value_or(0) + loads.value_or(0) > 0 &&
        std::find(entries.begin(), entries.end(), function) != entries.end() &&
        std::find(report.spilling.begin(), report.spilling.end(), function) == report.spilling.end())
      report.spilling.push_back(function);
  }
  return report;
}

void simulate_missing_nvrtc_for_testing(bool missing) { state().simulate_missing.store(missing); }

}  // namespace optgen::nvrtc
