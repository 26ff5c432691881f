// The property check behind the fuzz target: every spec that `optgen check` accepts emits code that
// compiles. For each spec file given (or each file of each directory given) that check accepts, it
// writes what `optgen emit` writes into a temporary directory, then
//   (a) compiles <name>_kernels.cu with NVRTC, with the options optgen builds kernels with, for
//       each --arch (default sm_90), and writes <name>_images.cpp from the cubins as `optgen
//       compile` does;
//   (b) compiles with the host compiler (-std=c++17 -fsyntax-only): a source that includes
//       <name>_reference.h and uses its optimizer() (which instantiates step<float> and
//       step<double>), the launcher <name>.cpp (which includes <name>.h) and <name>_images.cpp.
// Each failure is reported with the spec's path and the compiler's log; the exit status is 1 when
// any accepted spec fails to compile, or when a spec breaks the fuzz target's promise (an
// InternalError, an unlocated SpecError, ...: spec_pipeline.h); 2 on a usage error or without
// NVRTC. Specs check rejects are counted. A file not named <identifier>.yaml (a corpus file is
// named by its hash) is loaded as fuzz.yaml, as the fuzz target loads its input. Needs NVRTC, not
// a GPU.
//
// usage: optgen_spec_compiles [options] SPEC_OR_DIRECTORY...
//   --arch LIST          NVRTC targets, e.g. 80,90 (default 90)
//   --cxx COMPILER       the host compiler (default $CXX, else c++)
//   -I DIR               another include directory for the host compiler (the emitted files'
//                        directory, the runtime's include/ and CUDA's are always there)
//   --warnings           host compiles with -Wall -Wextra -Wpedantic -Werror, as the built-in
//                        launchers are built
//   --max-accepted N     stop after N specs check accepts (0, the default: no limit)
//   --from FILE          also read paths from FILE, one per line ("-": standard input), in order
//   --findings DIR       copy each failing spec there, with its compilers' logs
//   --keep               keep the temporary directory (its path is printed)
//   --verbose            also list the specs check rejects, with the first line of the error
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "emit_images.h"
#include "optgen/error.h"
#include "optgen/nvrtc.h"
#include "spec_pipeline.h"

namespace fs = std::filesystem;

namespace {

struct Options {
  std::vector<int> archs = {90};
  std::string cxx;
  std::vector<std::string> includes;
  bool warnings = false;
  long max_accepted = 0;
  std::string findings;
  bool keep = false;
  bool verbose = false;
  std::vector<fs::path> specs;
};

struct Usage : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

/// `text` quoted for sh.
std::string quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

/// The file stem as the spec loader takes it: the base name up to its first dot.
std::string stem(const fs::path& path) {
  std::string base = path.filename().string();
  return base.substr(0, base.find('.'));
}

bool is_identifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

void add_path(Options& options, const fs::path& path) {
  std::error_code error;
  if (fs::is_directory(path, error)) {
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(path))
      if (entry.is_regular_file()) files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    options.specs.insert(options.specs.end(), files.begin(), files.end());
  } else if (fs::is_regular_file(path, error)) {
    options.specs.push_back(path);
  } else {
    throw Usage(path.string() + ": no such file or directory");
  }
}

Options parse(int argc, char** argv) {
  Options options;
  const char* cxx = std::getenv("CXX");
  options.cxx = cxx && *cxx ? cxx : "c++";
  options.includes.push_back(OPTGEN_RUNTIME_INCLUDE_DIR);
  std::stringstream cuda(OPTGEN_CUDA_INCLUDE_DIRS);  // a CMake list
  for (std::string dir; std::getline(cuda, dir, ';');)
    if (!dir.empty()) options.includes.push_back(dir);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() {
      if (i + 1 >= argc) throw Usage(a + " needs a value");
      return std::string(argv[++i]);
    };
    if (a == "--arch") {
      options.archs.clear();
      std::stringstream list(value());
      for (std::string item; std::getline(list, item, ',');) {
        char* end = nullptr;
        long arch = std::strtol(item.c_str(), &end, 10);
        if (item.empty() || *end || arch < 50 || arch > 200)
          throw Usage("--arch: '" + item + "' is not an architecture such as 90");
        options.archs.push_back(static_cast<int>(arch));
      }
    } else if (a == "--cxx") {
      options.cxx = value();
    } else if (a == "-I") {
      options.includes.push_back(value());
    } else if (a == "--warnings") {
      options.warnings = true;
    } else if (a == "--max-accepted") {
      std::string v = value();
      char* end = nullptr;
      options.max_accepted = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end || options.max_accepted < 0) throw Usage("--max-accepted needs a count, not '" + v + "'");
    } else if (a == "--from") {
      std::string list = value();
      std::ifstream file;
      if (list != "-") {
        file.open(list);
        if (!file) throw Usage("--from: cannot read " + list);
      }
      std::istream& in = list == "-" ? std::cin : file;
      for (std::string line; std::getline(in, line);)
        if (!line.empty()) add_path(options, line);
    } else if (a == "--findings") {
      options.findings = value();
    } else if (a == "--keep") {
      options.keep = true;
    } else if (a == "--verbose") {
      options.verbose = true;
    } else if (a == "-h" || a == "--help") {
      throw Usage("");
    } else if (!a.empty() && a[0] == '-') {
      throw Usage("unknown option " + a);
    } else {
      add_path(options, a);
    }
  }
  if (options.specs.empty()) throw Usage("no spec files given");
  return options;
}

/// One host compile: `cxx -std=c++17 -fsyntax-only ... file`, its status and output.
struct HostCompile {
  std::string what;
  int status = 0;
  std::string log;
};

HostCompile host_compile(const Options& options, const fs::path& dir, const std::string& file,
                         const std::string& what) {
  std::string command = "timeout 300 " + options.cxx + " -std=c++17 -fsyntax-only";
  if (options.warnings) command += " -Wall -Wextra -Wpedantic -Werror";
  command += " -I" + quoted(dir.string());
  for (const auto& include : options.includes) command += " -I" + quoted(include);
  command += " " + quoted((dir / file).string());
  const fs::path log = dir / (file + ".log");
  command += " > " + quoted(log.string()) + " 2>&1";
  HostCompile result{what, std::system(command.c_str()), ""};
  result.log = "$ " + command + "\n" + read_file(log);
  return result;
}

struct Failure {
  std::string what;  ///< e.g. "NVRTC for sm_90"
  std::string log;
};

/// Writes the spec's emitted files into `dir` and compiles them; the failures.
std::vector<Failure> compile_all(const Options& options, const optgen::fuzz::Sources& s, const fs::path& dir) {
  fs::create_directories(dir);
  write_file(dir / (s.name + "_reference.h"), s.reference);
  write_file(dir / (s.name + "_kernels.cu"), s.kernels);
  write_file(dir / (s.name + ".h"), s.header);
  write_file(dir / (s.name + ".cpp"), s.source);
  write_file(dir / "uses_reference.cpp",
             "// Includes the CPU reference and uses its descriptor, which instantiates step<float> and step<double>.\n"
             "#include \"" +
                 s.name +
                 "_reference.h\"\n\n"
                 "const optgen::reference::Optimizer& optgen_spec_compiles_reference() { return optgen::reference::" +
                 s.name + "::optimizer(); }\n");

  std::vector<std::future<HostCompile>> host;
  host.push_back(std::async(std::launch::async, host_compile, std::cref(options), dir, "uses_reference.cpp",
                            "the host compiler on " + s.name + "_reference.h"));
  host.push_back(std::async(std::launch::async, host_compile, std::cref(options), dir, s.name + ".cpp",
                            "the host compiler on " + s.name + ".cpp"));

  std::vector<Failure> failures;
  std::vector<optgen::CompiledImage> images;
  for (int arch : options.archs) {
    try {
      auto compiled = optgen::nvrtc::compile(s.kernels, s.name + "_kernels.cu", optgen::kernel_compile_options(), arch);
      images.push_back({arch, false, std::move(compiled.image)});
    } catch (const optgen::Error& e) {
      failures.push_back({"NVRTC on " + s.name + "_kernels.cu for sm_" + std::to_string(arch), e.what()});
    }
  }
  if (failures.empty()) {
    write_file(dir / (s.name + "_images.cpp"),
               optgen::emit_images(s.name, s.file_name, s.kernels, images, optgen::nvrtc::version(), ""));
    host.push_back(std::async(std::launch::async, host_compile, std::cref(options), dir, s.name + "_images.cpp",
                              "the host compiler on " + s.name + "_images.cpp"));
  }
  for (auto& h : host) {
    HostCompile result = h.get();
    if (result.status != 0) failures.push_back({result.what, result.log});
  }
  return failures;
}

fs::path make_temporary_directory() {
  std::error_code error;
  fs::path base = fs::temp_directory_path(error);
  if (error) base = "/tmp";
  std::string pattern = (base / "optgen-spec-compiles-XXXXXX").string();
  if (!mkdtemp(pattern.data())) throw std::runtime_error("cannot create a temporary directory in " + base.string());
  return pattern;
}

int run(const Options& options) {
  std::string why;
  if (!optgen::nvrtc::available(&why)) {
    std::cerr << "optgen_spec_compiles: NVRTC is not available: " << why << "\n";
    return 2;
  }
  const fs::path temporary = make_temporary_directory();
  if (!options.findings.empty()) fs::create_directories(options.findings);
  long accepted = 0, rejected = 0, failed = 0, index = 0;
  for (const auto& path : options.specs) {
    if (options.max_accepted > 0 && accepted >= options.max_accepted) {
      std::cout << "stopping after " << accepted << " accepted specs (--max-accepted); " << options.specs.size() - index
                << " files not looked at\n";
      break;
    }
    ++index;
    const std::string text = read_file(path);
    // A corpus file is named by its hash, without .yaml: load it as the fuzzer did, as fuzz.yaml.
    const bool spec_file = path.extension() == ".yaml" && is_identifier(stem(path));
    const fs::path as = spec_file ? path : path.parent_path() / "fuzz.yaml";
    const optgen::fuzz::Outcome outcome = optgen::fuzz::run_pipeline(as.string(), text);
    std::vector<Failure> failures;
    if (outcome.kind == optgen::fuzz::Outcome::Rejected) {
      ++rejected;
      if (options.verbose)
        std::cout << "rejected " << path.string() << ": " << outcome.message.substr(0, outcome.message.find('\n'))
                  << "\n";
      continue;
    }
    if (outcome.is_finding()) {
      failures.push_back({optgen::fuzz::to_string(outcome.kind), outcome.message});
    } else {
      ++accepted;
      const fs::path dir = temporary / (std::to_string(index) + "_" + outcome.sources.name);
      failures = compile_all(options, outcome.sources, dir);
      if (failures.empty()) {
        std::cout << "ok " << path.string() << " (" << outcome.sources.name << ", " << outcome.sources.variants
                  << " variant" << (outcome.sources.variants == 1 ? "" : "s") << ")" << std::endl;
        if (!options.keep) fs::remove_all(dir);
        continue;
      }
    }
    ++failed;
    std::ostringstream report;
    for (const auto& f : failures)
      report << "---- " << f.what << ":\n" << f.log << (f.log.empty() || f.log.back() == '\n' ? "" : "\n");
    std::cout << "FAILED " << path.string() << ": " << failures.front().what << (failures.size() > 1 ? ", ..." : "")
              << "\n"
              << report.str() << "---- the spec:\n"
              << text << (text.empty() || text.back() == '\n' ? "" : "\n") << "---- end of " << path.string()
              << std::endl;
    if (!options.findings.empty()) {
      const std::string kind = outcome.is_finding() ? "broken-promise-" : "uncompilable-";
      const fs::path saved = fs::path(options.findings) / (kind + path.filename().string());
      write_file(saved, text);
      write_file(saved.string() + ".log", report.str());
      std::cout << "saved as " << saved.string() << " (and .log)\n";
    }
  }
  if (options.keep)
    std::cout << "emitted files kept in " << temporary.string() << "\n";
  else
    fs::remove_all(temporary);
  std::cout << "optgen_spec_compiles: " << index << " files: " << accepted << " accepted by check, " << rejected
            << " rejected; " << failed << " failed" << std::endl;
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const Usage& e) {
    if (*e.what()) std::cerr << "optgen_spec_compiles: " << e.what() << "\n";
    std::cerr << "usage: " << argv[0]
              << " [--arch 80,90] [--cxx COMPILER] [-I DIR] [--warnings] [--max-accepted N] [--from FILE]\n"
                 "       [--findings DIR] [--keep] [--verbose] SPEC_OR_DIRECTORY...\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "optgen_spec_compiles: error: " << e.what() << "\n";
    return 2;
  }
}
