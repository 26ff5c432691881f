#include <catch2/catch.hpp>
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "gpu.h"
#include "scoped_resources.h"
#include "optgen/driver.h"
#include "optgen/error.h"
#include "optgen/files.h"
#include "optgen/kernel_abi.h"
#include "optgen/kernel_cache.h"
#include "optgen/kernel_images.h"
#include "optgen/nvrtc.h"

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using optgen::KernelCache;
using optgen::read_regular_file;
using optgen_test::ScopedEnvironment;
using optgen_test::TemporaryDirectory;

namespace {

namespace fs = std::filesystem;

const char* const kFillSource = R"(extern "C" __global__ void fill(float* out, float value, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value + i;
}
)";

/// NVRTC looks missing until destroyed.
class MissingNvrtc {
 public:
  MissingNvrtc() { optgen::nvrtc::simulate_missing_nvrtc_for_testing(true); }
  MissingNvrtc(const MissingNvrtc&) = delete;
  MissingNvrtc& operator=(const MissingNvrtc&) = delete;
  ~MissingNvrtc() { optgen::nvrtc::simulate_missing_nvrtc_for_testing(false); }
};

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

bool is_elf(const std::vector<char>& image) {
  return image.size() > 4 && image[0] == '\x7f' && image[1] == 'E' && image[2] == 'L' && image[3] == 'F';
}

/// The message of the optgen::Error that `action` throws ("" when it throws none).
template <typename Action>
std::string error_message(Action action) {
  try {
    action();
  } catch (const optgen::Error& error) {
    return error.what();
  }
  return "";
}

}  // namespace

TEST_CASE("Error says what failed, what went wrong and what to do", "[runtime]") {
  optgen::Error with_fix("cuModuleLoadData", "CUDA_ERROR_INVALID_IMAGE: device kernel image is invalid",
                         "rebuild the kernels");
  CHECK(std::string(with_fix.what()) ==
        "cuModuleLoadData failed: CUDA_ERROR_INVALID_IMAGE: device kernel image is invalid\n"
        "  fix: rebuild the kernels");
  CHECK(with_fix.call() == "cuModuleLoadData");
  CHECK(with_fix.error() == "CUDA_ERROR_INVALID_IMAGE: device kernel image is invalid");
  CHECK(with_fix.fix() == "rebuild the kernels");

  optgen::Error without_fix("AdamW::add_param_group", "lr must be positive");
  CHECK(std::string(without_fix.what()) == "AdamW::add_param_group failed: lr must be positive");
}

TEST_CASE("NVRTC compiles a kernel to cubins and to PTX", "[runtime]") {
  std::string why;
  const bool available = optgen::nvrtc::available(&why);
  INFO(why);
  REQUIRE(available);
  CHECK_THAT(optgen::nvrtc::version(), StartsWith("1"));

  for (int arch : {80, 90}) {
    optgen::nvrtc::Compiled compiled = optgen::nvrtc::compile(kFillSource, "fill.cu", {}, arch);
    INFO("sm_" << arch);
    CHECK(is_elf(compiled.image));
  }

  optgen::nvrtc::Compiled ptx = optgen::nvrtc::compile(kFillSource, "fill.cu", {"--std=c++17"}, 90, true);
  REQUIRE(!ptx.image.empty());
  CHECK(ptx.image.back() == '\0');
  const std::string text(ptx.image.data());
  CHECK_THAT(text, Contains(".target sm_90"));
  CHECK_THAT(text, Contains(".entry fill("));
}

TEST_CASE("a compile error carries NVRTC's log and the source's name", "[runtime]") {
  const char* broken = "extern \"C\" __global__ void k(float* x) { x[0] = undefined_name; }\n";
  try {
    optgen::nvrtc::compile(broken, "broken.cu", {}, 90);
    FAIL("compile() accepted a broken source");
  } catch (const optgen::Error& error) {
    CHECK(error.call() == "nvrtcCompileProgram(broken.cu)");
    CHECK_THAT(error.error(), StartsWith("NVRTC_ERROR_COMPILATION:\n"));
    CHECK_THAT(error.what(), Contains("broken.cu(1): error: identifier \"undefined_name\" is undefined"));
    CHECK_THAT(error.fix(), Contains("bug in optgen's generated code"));
  }

  std::string message = error_message([] { optgen::nvrtc::compile(kFillSource, "fill.cu", {}, 10); });
  CHECK_THAT(message, Contains("nvrtcCompileProgram(fill.cu) failed: NVRTC_ERROR_INVALID_OPTION"));
  CHECK_THAT(message, Contains("fix: NVRTC ") && Contains("cannot compile for sm_10"));
}

TEST_CASE("ptxas's report is read from a real -Xptxas=-v log", "[runtime]") {
  // Each twice: NVRTC's own cache (12.9 and newer) must not swallow the report the second time.
  for (const char* option : {"-Xptxas=-v", "-Xptxas=-v", "--ptxas-options=--verbose", "--ptxas-options=--verbose"}) {
    optgen::nvrtc::Compiled compiled = optgen::nvrtc::compile(kFillSource, "fill.cu", {"-Xptxas=-O3", option}, 90);
    INFO(option << "\n" << compiled.log);
    CHECK_THAT(compiled.log, Contains("ptxas info    : Function properties for fill"));
    optgen::nvrtc::SpillReport report = optgen::nvrtc::parse_ptxas_report(compiled.log);
    CHECK(report.kernels == 1);
    CHECK(report.spill_store_bytes == 0);
    CHECK(report.spill_load_bytes == 0);
    CHECK(report.max_stack_frame_bytes == 0);
  }
}

TEST_CASE("ptxas's report sums spills over the kernels", "[runtime]") {
  const std::string log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function 'first' for 'sm_90'\n"
      "ptxas info    : Function properties for first\n"
      "ptxas         .     16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 255 registers, used 0 barriers, 368 bytes cmem[0]\n"
      "ptxas info    : Compiling entry function 'second' for 'sm_90'\n"
      "ptxas info    : Function properties for second\n"
      "ptxas         .     40 bytes stack frame, 100 bytes spill stores, 200 bytes spill loads\n"
      "ptxas info    : Used 32 registers, used 0 barriers, 368 bytes cmem[0]";
  optgen::nvrtc::SpillReport report = optgen::nvrtc::parse_ptxas_report(
      log +
      "\n"
      "ptxas info    : Function properties for __internal_accurate_pow\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Compiling entry function 'third' for 'sm_90'\n"
      "ptxas info    : Function properties for third\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Compiling entry function 'fourth' for 'sm_90'\n"
      "ptxas info    : Function properties for fourth\n"
      "ptxas         .     16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Function properties for __internal_trig_reduction\n"
      "ptxas         .     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads");
  CHECK(report.kernels == 4);  // a called device function is not a kernel
  // The entry functions that spill or keep a stack frame, by name: not a called device function.
  CHECK(report.spilling == std::vector<std::string>{"first", "second", "fourth"});
  CHECK(report.spill_store_bytes == 112);
  CHECK(report.spill_load_bytes == 216);
  CHECK(report.max_stack_frame_bytes == 40);

  optgen::nvrtc::SpillReport empty = optgen::nvrtc::parse_ptxas_report("");
  CHECK(empty.kernels == 0);
  CHECK(empty.spill_store_bytes == 0);
}

TEST_CASE("kernel_abi::named_in finds a kernel's name in a comma-separated list", "[runtime]") {
  using optgen::kernel_abi::named_in;
  STATIC_REQUIRE(named_in("a_update,b_update", "b_update"));
  STATIC_REQUIRE(named_in("a_update", "a_update"));
  STATIC_REQUIRE_FALSE(named_in("", "a_update"));
  STATIC_REQUIRE_FALSE(named_in("a_update_x,b", "a_update"));  // a longer name
  STATIC_REQUIRE_FALSE(named_in("x_a_update", "a_update"));    // a name that ends the same
  STATIC_REQUIRE_FALSE(named_in("a_upd,b", "a_update"));       // a prefix of the name
  STATIC_REQUIRE(named_in("a_upd,a_update", "a_update"));
}

TEST_CASE("without NVRTC, compile() says to install it", "[runtime]") {
  {
    MissingNvrtc missing;
    std::string why;
    CHECK_FALSE(optgen::nvrtc::available(&why));
    CHECK_THAT(why, Contains("NVRTC") && Contains("install NVRTC"));
    std::string message = error_message([] { optgen::nvrtc::compile(kFillSource, "fill.cu", {}, 90); });
    CHECK_THAT(message, Contains("NVRTC is not installed") && Contains("fix: install NVRTC"));
    CHECK_THROWS_AS(optgen::nvrtc::version(), optgen::Error);
  }
  CHECK(optgen::nvrtc::available());
}

TEST_CASE("a cache key covers the source, the options, the architecture and the NVRTC version", "[runtime]") {
  const std::string base = KernelCache::key("source", {}, {"-O3", "--std=c++17"}, 90, "13.0");
  CHECK(base.size() == 32);
  CHECK(base.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(KernelCache::key("source", {}, {"-O3", "--std=c++17"}, 90, "13.0") == base);
  CHECK(KernelCache::key("source!", {}, {"-O3", "--std=c++17"}, 90, "13.0") != base);
  CHECK(KernelCache::key("source", {}, {"-O3"}, 90, "13.0") != base);
  CHECK(KernelCache::key("source", {}, {"--std=c++17", "-O3"}, 90, "13.0") != base);
  CHECK(KernelCache::key("source", {}, {"-O3", "--std=c++17"}, 89, "13.0") != base);
  CHECK(KernelCache::key("source", {}, {"-O3", "--std=c++17"}, 90, "13.1") != base);
  // The include files, names and texts (nvrtc::device_library() for optgen's kernels).
  const KernelCache::Headers headers = {{"optgen/a.cuh", "int a;"}};
  CHECK(KernelCache::key("source", headers, {"-O3", "--std=c++17"}, 90, "13.0") != base);
  CHECK(KernelCache::key("source", {{"optgen/a.cuh", "int b;"}}, {"-O3", "--std=c++17"}, 90, "13.0") !=
        KernelCache::key("source", headers, {"-O3", "--std=c++17"}, 90, "13.0"));
  CHECK(KernelCache::key("source", {{"optgen/b.cuh", "int a;"}}, {"-O3", "--std=c++17"}, 90, "13.0") !=
        KernelCache::key("source", headers, {"-O3", "--std=c++17"}, 90, "13.0"));
  // Fields are length-prefixed: moving a boundary changes the key.
  CHECK(KernelCache::key("source", {}, {"ab"}, 90, "13.0") != KernelCache::key("source", {}, {"a", "b"}, 90, "13.0"));
  CHECK(KernelCache::key("sourc", {}, {"e"}, 90, "13.0") != KernelCache::key("source", {}, {""}, 90, "13.0"));
  CHECK(KernelCache::key("source", {}, {}, 90, "13.0") != KernelCache::key("source", {}, {""}, 90, "13.0"));
  // A source longer than the hash's internal buffers: its last byte counts too.
  std::string long_source(1 << 20, 'x');
  const std::string long_key = KernelCache::key(long_source, {}, {}, 90, "13.0");
  long_source.back() = 'y';
  CHECK(KernelCache::key(long_source, {}, {}, 90, "13.0") != long_key);
}

TEST_CASE("cache keys and entry checksums are the same in every build and on every machine", "[runtime]") {
  // XXH3's 128-bit hash of the fields, each preceded by its length as 8 little-endian bytes:
  // "optgen kernel cache key 3", the source, the number of include files, each one's name and
  // text, the number of options, each option, the architecture, the NVRTC version. Debian's
  // xxh128sum gives the same digests for those bytes.
  CHECK(KernelCache::key("source", {}, {"-O3", "--std=c++17"}, 90, "13.0") == "c4b319713d36b7df4db603594fbd0158");
  CHECK(KernelCache::key("source", {{"optgen/a.cuh", "int a;"}}, {"-O3", "--std=c++17"}, 90, "13.0") ==
        "a962b9d6cde5659d1c05ef4902317c53");
  CHECK(KernelCache::key("", {}, {}, 0, "") == "ae388d9b0aa0d0c9a8a35b98c524499e");

  TemporaryDirectory temporary("optgen_runtime_test");
  KernelCache cache(temporary.path());
  const std::string key = KernelCache::key("source", {}, {}, 90, "13.0");
  const std::vector<char> image = {'\x7f', 'E', 'L', 'F', '\0', 'x', 'y', 'z'};
  REQUIRE(cache.store(key, image));
  const std::vector<char> entry = read_bytes(cache.path(key));
  REQUIRE(entry.size() == 32 + image.size());
  CHECK(std::string(entry.data(), 8) == "OPTGENK2");
  CHECK(std::vector<char>(entry.begin() + 8, entry.begin() + 16) == std::vector<char>{8, 0, 0, 0, 0, 0, 0, 0});
  std::string checksum;
  for (auto byte = entry.begin() + 16; byte != entry.begin() + 32; ++byte) {
    const char* digits = "0123456789abcdef";
    checksum += digits[static_cast<unsigned char>(*byte) >> 4];
    checksum += digits[static_cast<unsigned char>(*byte) & 15];
  }
  CHECK(checksum == "4e1f4e48b926b5a2ec00599eec1832f5");  // xxh128sum of the image's 8 bytes
}

TEST_CASE("the kernel cache stores, loads, and drops corrupt entries", "[runtime]") {
  TemporaryDirectory temporary("optgen_runtime_test");
  KernelCache cache(temporary.path() + "/nested/cache");
  const std::string key = KernelCache::key(kFillSource, {}, {}, 90, "13.0");
  const std::vector<char> image = {'\x7f', 'E', 'L', 'F', '\0', 'x', 'y', 'z'};
  CHECK(cache.last_outcome() == KernelCache::Outcome::None);

  CHECK_FALSE(cache.load(key).has_value());
  CHECK(cache.last_outcome() == KernelCache::Outcome::Miss);

  REQUIRE(cache.store(key, image));
  CHECK(cache.path(key) == temporary.path() + "/nested/cache/" + key);
  std::optional<std::vector<char>> loaded = cache.load(key);
  CHECK(cache.last_outcome() == KernelCache::Outcome::Hit);
  REQUIRE(loaded.has_value());
  CHECK(*loaded == image);

  const std::vector<char> entry = read_bytes(cache.path(key));
  REQUIRE(entry.size() == 32 + image.size());
  CHECK(std::string(entry.data(), 8) == "OPTGENK2");

  std::vector<char> damaged = entry;
  SECTION("truncated") { damaged.resize(entry.size() - 3); }
  SECTION("only half a header") { damaged.resize(20); }
  SECTION("empty") { damaged.clear(); }
  SECTION("a flipped payload byte") { damaged.back() ^= 0x01; }
  SECTION("a flipped checksum byte") { damaged[20] ^= 0x40; }
  SECTION("a wrong magic: the SHA-256 format") { damaged[7] = '1'; }
  SECTION("a trailing byte") { damaged.push_back('!'); }
  write_bytes(cache.path(key), damaged);

  CHECK_FALSE(cache.load(key).has_value());
  CHECK(cache.last_outcome() == KernelCache::Outcome::Corrupt);
  CHECK_FALSE(fs::exists(cache.path(key)));

  REQUIRE(cache.store(key, image));
  loaded = cache.load(key);
  CHECK(cache.last_outcome() == KernelCache::Outcome::Hit);
  CHECK(loaded == image);
  // Only the entry is left: no temporary files.
  CHECK(std::distance(fs::directory_iterator(cache.directory()), fs::directory_iterator()) == 1);
}

TEST_CASE("a cache that cannot be written is not an error", "[runtime]") {
  TemporaryDirectory temporary("optgen_runtime_test");
  write_bytes(temporary.path() + "/file", {'x'});
  KernelCache under_a_file(temporary.path() + "/file/cache");
  CHECK_FALSE(under_a_file.store(KernelCache::key("s", {}, {}, 90, "13.0"), {'a'}));
  CHECK_FALSE(under_a_file.load(KernelCache::key("s", {}, {}, 90, "13.0")).has_value());
  CHECK(under_a_file.last_outcome() == KernelCache::Outcome::Miss);
}

TEST_CASE("a cache entry that is not a regular file is a miss, and a store skips it", "[runtime]") {
  TemporaryDirectory temporary("optgen_runtime_test");
  KernelCache cache(temporary.path());
  const std::string key = KernelCache::key("s", {}, {}, 90, "13.0");
  const std::string entry = cache.path(key);
  const std::vector<char> image = {'\x7f', 'E', 'L', 'F'};
  auto entries = [&] { return std::distance(fs::directory_iterator(cache.directory()), fs::directory_iterator()); };

  SECTION("a directory: left as it is, and the store cannot replace it") {
    REQUIRE(fs::create_directories(entry + "/inside"));
    CHECK_FALSE(cache.load(key).has_value());
    CHECK(cache.last_outcome() == KernelCache::Outcome::Miss);
    CHECK_FALSE(cache.store(key, image));
    CHECK(fs::is_directory(entry + "/inside"));
    CHECK(entries() == 1);  // no temporary file left behind
    CHECK_FALSE(cache.load(key).has_value());
  }
  SECTION("a FIFO: load does not wait for a writer, and the store replaces it") {
    REQUIRE(mkfifo(entry.c_str(), 0600) == 0);
    CHECK_FALSE(cache.load(key).has_value());
    CHECK(cache.last_outcome() == KernelCache::Outcome::Miss);
    CHECK(cache.store(key, image));
    CHECK(cache.load(key) == image);
    CHECK(cache.last_outcome() == KernelCache::Outcome::Hit);
  }
  SECTION("a symbolic link to a directory: the store replaces the link, not the directory") {
    const std::string elsewhere = temporary.path() + "/elsewhere";
    REQUIRE(fs::create_directory(elsewhere));
    KernelCache in_subdirectory(temporary.path() + "/cache");
    REQUIRE(fs::create_directory(in_subdirectory.directory()));
    fs::create_directory_symlink(elsewhere, in_subdirectory.path(key));
    CHECK_FALSE(in_subdirectory.load(key).has_value());
    CHECK(in_subdirectory.last_outcome() == KernelCache::Outcome::Miss);
    CHECK(in_subdirectory.store(key, image));
    CHECK(in_subdirectory.load(key) == image);
    CHECK(fs::is_directory(elsewhere));
  }
}

TEST_CASE("a cache entry larger than any kernel image is corrupt: a miss, and removed", "[runtime]") {
  // Read whole, it threw std::bad_alloc out of every prepare() and stayed.
  TemporaryDirectory temporary("optgen_runtime_test");
  KernelCache cache(temporary.path());
  const std::string key = KernelCache::key("s", {}, {}, 90, "13.0");
  const std::string entry = cache.path(key);
  REQUIRE(cache.store(key, {'\x7f', 'E', 'L', 'F'}));
  fs::resize_file(entry, std::uintmax_t{1} << 40);  // sparse: no disk used
  CHECK_FALSE(cache.load(key).has_value());
  CHECK(cache.last_outcome() == KernelCache::Outcome::Corrupt);
  CHECK_FALSE(fs::exists(entry));
}

TEST_CASE("read_regular_file says whether a failure found no regular file there", "[runtime]") {
  // The kernel cache tells a missing entry from a broken one by it: looking at the path again
  // after a failed read raced with another process renaming its entry into place, and load()
  // removed that whole entry as corrupt (the processes test found it under load).
  TemporaryDirectory temporary("optgen_runtime_test");
  std::string error;
  bool absent = false;
  CHECK_FALSE(read_regular_file(temporary.path() + "/missing", 16, &error, &absent).has_value());
  CHECK(absent);
  CHECK_FALSE(read_regular_file(temporary.path() + "/missing/below", 16, &error, &absent).has_value());
  CHECK(absent);
  CHECK_FALSE(read_regular_file(temporary.path(), 16, &error, &absent).has_value());
  CHECK(absent);
  write_bytes(temporary.path() + "/large", std::vector<char>(17, 'x'));
  CHECK_FALSE(read_regular_file(temporary.path() + "/large", 16, &error, &absent).has_value());
  CHECK_FALSE(absent);
  CHECK(error.find("more than the 16") != std::string::npos);
  CHECK(read_regular_file(temporary.path() + "/large", 17, &error, &absent) == std::string(17, 'x'));
  CHECK_FALSE(absent);
}

TEST_CASE("the cache directory comes from OPTGEN_CACHE_DIR, XDG_CACHE_HOME or HOME", "[runtime]") {
  TemporaryDirectory temporary("optgen_runtime_test");
  ScopedEnvironment chosen("OPTGEN_CACHE_DIR", "/chosen/cache");
  ScopedEnvironment xdg("XDG_CACHE_HOME", "/xdg");
  ScopedEnvironment home("HOME", "/home/someone");
  ScopedEnvironment tmpdir("TMPDIR", temporary.path().c_str());
  CHECK(KernelCache::from_environment().directory() == "/chosen/cache");
  chosen.set("");
  CHECK(KernelCache::from_environment().directory() == "/xdg/optgen");
  chosen.set(nullptr);
  CHECK(KernelCache::from_environment().directory() == "/xdg/optgen");
  xdg.set("relative/cache");  // ignored, as the XDG base directory spec says
  CHECK(KernelCache::from_environment().directory() == "/home/someone/.cache/optgen");
  xdg.set(nullptr);
  CHECK(KernelCache::from_environment().directory() == "/home/someone/.cache/optgen");

  home.set(nullptr);
  const std::string shared = temporary.path() + "/optgen-cache-" + std::to_string(getuid());
  CHECK(KernelCache::from_environment().directory() == shared);
  struct stat info {};
  REQUIRE(stat(shared.c_str(), &info) == 0);
  CHECK((info.st_mode & 0777) == 0700);

  // A shared directory that others can write to is not trusted: a fresh private one is used.
  REQUIRE(chmod(shared.c_str(), 0777) == 0);
  const std::string fresh = KernelCache::from_environment().directory();
  CHECK(fresh != shared);
  CHECK_THAT(fresh, StartsWith(temporary.path() + "/optgen-cache-"));
  CHECK(fs::is_directory(fresh));
}

namespace {

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

/// The entry points driver.h's Api holds: the names of its `CUresult (*name)(...)` members.
std::vector<std::string> driver_api_members() {
  const std::string header = read_text(fs::path(OPTGEN_SOURCE_DIR) / "runtime/include/optgen/driver.h");
  std::vector<std::string> names;
  for (std::size_t at = header.find("(*cu"); at != std::string::npos; at = header.find("(*cu", at + 1)) {
    names.push_back(header.substr(at + 2, header.find(')', at) - at - 2));
  }
  return names;
}

/// Every source that may call the driver, less the lines of driver.cpp that load the entry points.
std::string driver_callers() {
  std::string text;
  for (const char* directory : {"runtime", "tests", "bench", "examples", "generator", "templates"}) {
    for (const auto& entry : fs::recursive_directory_iterator(fs::path(OPTGEN_SOURCE_DIR) / directory)) {
      const std::string extension = entry.path().extension().string();
      if (extension != ".cpp" && extension != ".h" && extension != ".cu" && extension != ".in") continue;
      std::istringstream lines(read_text(entry.path()));
      for (std::string line; std::getline(lines, line);) {
        if (line.find("load_symbol(") == std::string::npos) text += line + "\n";
      }
    }
  }
  return text;
}

}  // namespace

TEST_CASE("the driver API loads only entry points that something calls", "[runtime]") {
  // Each entry point is one more symbol an old driver may lack, failing every program at load.
  const std::vector<std::string> members = driver_api_members();
  REQUIRE(members.size() >= 30);
  CHECK(std::find(members.begin(), members.end(), "cuLaunchKernel") != members.end());
  const std::string callers = driver_callers();
  for (const std::string& name : members) {
    INFO(
        name << " is loaded by driver.cpp but called nowhere: remove it from Api in driver.h and its load_symbol line");
    CHECK(
        (callers.find("." + name + "(") != std::string::npos || callers.find("->" + name + "(") != std::string::npos));
  }
}

TEST_CASE("driver::check names the call, the driver's error and a fix", "[runtime]") {
  CHECK_NOTHROW(optgen::driver::check(CUDA_SUCCESS, "cuMemAlloc"));
  try {
    optgen::driver::check(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc");
    FAIL("check() accepted an error");
  } catch (const optgen::Error& error) {
    CHECK(error.call() == "cuMemAlloc");
    CHECK(error.error() == "CUDA_ERROR_OUT_OF_MEMORY: out of memory");
    CHECK_THAT(error.fix(), Contains("free GPU memory"));
    CHECK_THAT(error.what(), StartsWith("cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY: out of memory\n  fix: "));
  }
  CHECK_THAT(error_message([] { optgen::driver::check(CUDA_ERROR_ILLEGAL_ADDRESS, "cuCtxSynchronize"); }),
             Contains("CUDA_ERROR_ILLEGAL_ADDRESS") && Contains("compute-sanitizer"));
  CHECK_THAT(error_message([] { optgen::driver::check(CUDA_ERROR_NO_DEVICE, "cuInit"); }),
             Contains("CUDA_ERROR_NO_DEVICE") && Contains("nvidia-smi"));
  CHECK(error_message([] { optgen::driver::check(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel", "use fewer threads"); }) ==
        "cuLaunchKernel failed: CUDA_ERROR_INVALID_VALUE: invalid argument\n  fix: use fewer threads");
  CHECK_THAT(error_message([] { optgen::driver::check(static_cast<CUresult>(123456), "cuSomething"); }),
             Contains("cuSomething failed: ") && Contains("123456"));
}

TEST_CASE("without a usable driver, the driver explains itself", "[runtime]") {
  std::string why;
  if (optgen::driver::available(&why)) {
    CHECK(why.empty());
    CHECK(optgen::driver::compute_capability(optgen::driver::current_device()) >= 50);
    return;
  }
  INFO(why);
  CHECK(!why.empty());

  void* probe = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (probe == nullptr) {
    CHECK_THAT(why, Contains("dlopen(libcuda.so.1) failed"));
    CHECK_THAT(error_message([] { optgen::driver::api(); }), StartsWith("dlopen(libcuda.so.1) failed: ") &&
                                                                 Contains("libcuda.so.1") &&
                                                                 Contains("fix: install the NVIDIA driver"));
    CHECK_THROWS_AS(optgen::driver::current_device(), optgen::Error);
  } else {
    dlclose(probe);
  }

  bool loaded = true;
  try {
    optgen::driver::api();
  } catch (const optgen::Error&) {
    loaded = false;
  }
  if (!loaded) {
    optgen::driver::simulate_missing_driver_for_testing(true);
    std::string simulated;
    CHECK_FALSE(optgen::driver::available(&simulated));
    CHECK_THAT(simulated, StartsWith("dlopen(libcuda.so.1) failed: ") && Contains("fix: install the NVIDIA driver"));
    optgen::driver::simulate_missing_driver_for_testing(false);
  }
}

namespace {

/// Runs fill() from `module` on the GPU and checks what it wrote.
void check_fill(const optgen::Module& module) {
  const optgen::driver::Api& cuda = optgen::driver::api();
  CUfunction fill = module.function("fill");
  int n = 1000;
  float value = 2.5f;
  CUdeviceptr out = 0;
  optgen::driver::check(cuda.cuMemAlloc(&out, n * sizeof(float)), "cuMemAlloc");
  struct Free {
    CUdeviceptr pointer;
    ~Free() { optgen::driver::api().cuMemFree(pointer); }
  } free_out{out};
  optgen::driver::check(cuda.cuMemsetD32(out, 0, n), "cuMemsetD32");
  void* arguments[] = {&out, &value, &n};
  optgen::driver::check(cuda.cuLaunchKernel(fill, (n + 255) / 256, 1, 1, 256, 1, 1, 0, nullptr, arguments, nullptr),
                        "cuLaunchKernel");
  optgen::driver::check(cuda.cuCtxSynchronize(), "cuCtxSynchronize");
  std::vector<float> host(n);
  optgen::driver::check(cuda.cuMemcpyDtoH(host.data(), out, n * sizeof(float)), "cuMemcpyDtoH");
  int wrong = 0;
  for (int i = 0; i < n; ++i) wrong += host[i] != value + static_cast<float>(i);
  CHECK(wrong == 0);
}

const unsigned char* bytes(const std::vector<char>& image) {
  return reinterpret_cast<const unsigned char*>(image.data());
}

}  // namespace

TEST_CASE("load_module loads an embedded cubin, compiles through the cache, or falls back to PTX", "[runtime][gpu]") {
  OPTGEN_REQUIRE_GPU();
  const CUdevice device = optgen::driver::current_device();
  const int arch = optgen::driver::compute_capability(device);
  const int other = arch / 10 == 8 ? 90 : 80;  // a cubin for it cannot run here
  const int ptx_arch = std::min(arch, other);
  ScopedEnvironment force("OPTGEN_FORCE_NVRTC", nullptr);
  TemporaryDirectory temporary("optgen_runtime_test");
  const KernelCache cache(temporary.path());

  const char* const options[] = {"--std=c++17"};
  const std::vector<std::string> option_list(std::begin(options), std::end(options));
  const std::vector<char> native = optgen::nvrtc::compile(kFillSource, "fill.cu", option_list, arch).image;
  const std::vector<char> foreign = optgen::nvrtc::compile(kFillSource, "fill.cu", option_list, other).image;
  const std::vector<char> ptx = optgen::nvrtc::compile(kFillSource, "fill.cu", option_list, ptx_arch, true).image;
  const optgen::KernelImage both[] = {{other, false, bytes(foreign), foreign.size()},
                                      {arch, false, bytes(native), native.size()}};
  const optgen::KernelImage foreign_only[] = {{other, false, bytes(foreign), foreign.size()}};
  const optgen::KernelImage foreign_and_ptx[] = {{other, false, bytes(foreign), foreign.size()},
                                                 {ptx_arch, true, bytes(ptx), ptx.size()}};
  auto images = [&](const optgen::KernelImage* list, int count) {
    return optgen::KernelImages{"fill.cu", kFillSource, options, 1, list, count};
  };

  SECTION("an embedded cubin for the device") {
    optgen::Module module = optgen::load_module(images(both, 2), arch, &cache);
    CHECK(module.origin() == optgen::ModuleOrigin::EmbeddedCubin);
    check_fill(module);
    CHECK_THAT(error_message([&] { module.function("missing"); }),
               Contains("cuModuleGetFunction(missing) failed") && Contains("no kernel named missing"));

    optgen::Module moved = std::move(module);
    CHECK(module.get() == nullptr);
    CHECK(moved.get() != nullptr);
    check_fill(moved);
  }

  SECTION("no cubin for the device: NVRTC, through the cache") {
    const std::string entry = cache.path(
        KernelCache::key(kFillSource, optgen::nvrtc::device_library(), option_list, arch, optgen::nvrtc::version()));
    optgen::Module first = optgen::load_module(images(foreign_only, 1), arch, &cache);
    CHECK(first.origin() == optgen::ModuleOrigin::CompiledNow);
    CHECK(cache.last_outcome() == KernelCache::Outcome::Miss);
    CHECK(fs::exists(entry));
    check_fill(first);

    optgen::Module second = optgen::load_module(images(foreign_only, 1), arch, &cache);
    CHECK(second.origin() == optgen::ModuleOrigin::CacheHit);
    check_fill(second);

    std::vector<char> damaged = read_bytes(entry);
    damaged[damaged.size() / 2] ^= 0x10;
    write_bytes(entry, damaged);
    optgen::Module third = optgen::load_module(images(foreign_only, 1), arch, &cache);
    CHECK(cache.last_outcome() == KernelCache::Outcome::Corrupt);
    CHECK(third.origin() == optgen::ModuleOrigin::CompiledNow);
    check_fill(third);
    CHECK(optgen::load_module(images(foreign_only, 1), arch, &cache).origin() == optgen::ModuleOrigin::CacheHit);
  }

  SECTION("OPTGEN_FORCE_NVRTC=1 skips the embedded cubins") {
    force.set("1");
    optgen::Module module = optgen::load_module(images(both, 2), arch, &cache);
    CHECK(module.origin() == optgen::ModuleOrigin::CompiledNow);
    check_fill(module);
  }

  SECTION("no cubin and no NVRTC: embedded PTX") {
    MissingNvrtc missing;
    optgen::Module module = optgen::load_module(images(foreign_and_ptx, 2), arch, &cache);
    CHECK(module.origin() == optgen::ModuleOrigin::EmbeddedPtx);
    check_fill(module);
  }

  SECTION("no cubin, no PTX and no NVRTC: an error that says what to do") {
    MissingNvrtc missing;
    const std::string message = error_message([&] { optgen::load_module(images(foreign_only, 1), arch, &cache); });
    INFO(message);
    CHECK_THAT(message, StartsWith("optgen::load_module(fill.cu) failed: no cubin for sm_" + std::to_string(arch) +
                                   " among those embedded (sm_" + std::to_string(other) + ")"));
    CHECK_THAT(message, Contains("no NVRTC to compile one"));
    CHECK_THAT(message, Contains("fix: rebuild the kernels with ARCHS " + std::to_string(arch)));
    CHECK_THAT(message, Contains("install NVRTC"));
  }
}
