/// The optgen command: check, emit and dump optimizer specs. See `optgen --help`.

#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "emit_common.h"
#include "emit_cuda.h"
#include "emit_images.h"
#include "emit_launcher.h"
#include "emit_reference.h"
#include "ir_printer.h"
#include "pipeline.h"
#include "optgen/error.h"
#include "optgen/kernel_abi.h"
#include "optgen/nvrtc.h"
#include "spec.h"

namespace {

constexpr int kExitOk = 0;
constexpr int kExitSpecError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitInternal = 3;

const char* const kHelp = R"(usage: optgen <command> [options] SPEC...

Generates fused optimizer kernels, launchers and CPU references from YAML optimizer specs.

commands:
  check SPEC...                 validate specs: load, lower and compile every variant
  emit SPEC... --out DIR        write the generated sources for each spec into DIR:
                                <name>_kernels.cu (CUDA kernels), <name>.h and <name>.cpp
                                (the launcher) and <name>_reference.h (the CPU reference);
                                files whose content is unchanged are not rewritten
  compile SPEC... --out DIR [--arch 80,86,89,90]
                                compile each spec's kernels with NVRTC for each architecture
                                (plus PTX for the newest) into DIR/<name>_images.cpp
  dump SPEC [--after PASS] [--variant NAME]
                                print the IR after each pass, or only after PASS
                                (passes: lower specialize constant_fold cse assign_levels dce
                                verify_states plan_stages);
                                --variant limits the output to one variant, e.g. adam_amsgrad

options of emit and compile:
  --storage LIST                storage types to generate kernels for, e.g. f32,bf16,bf16:bf16
                                (PARAM[:STATE]; default: the spec's 'storage:', else f32,bf16)
  --block-size N                threads per block (default 256)
  --elements-per-thread N       elements in flight per thread and loop iteration (default 8)
  --min-blocks-per-sm N         blocks each SM must fit: caps registers (default 3; 0: ptxas chooses)
  --chunk-size N                default elements per block, a multiple of 64 (default 2048)
  --variants LIST               generate kernels for these variants only, e.g. adam (default: all)

options:
  -h, --help                    show this help
  --version                     print optgen's version

exit status:
  0  success
  1  a spec has errors (each printed as file:line:col: error: ...)
  2  bad command line
  3  internal error in optgen, or a file could not be written
)";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Arguments {
  std::string command;
  std::vector<std::string> specs;
  std::string out_dir;
  std::string after;
  std::string variant;
  std::vector<int> archs = {80, 86, 89, 90};
  std::set<std::string> kernel_variants;  ///< --variants; empty: all
  std::vector<optgen::Storage> storage;  ///< --storage; empty: the spec's, else the default
  optgen::KernelTuning tuning;
};

/// "a,b,c" -> {"a", "b", "c"} (an empty item stays, for the caller to reject).
std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> items;
  for (size_t start = 0; start <= list.size();) {
    size_t comma = std::min(list.find(',', start), list.size());
    items.push_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  return items;
}

long long integer(const std::string& text, const char* option) {
  try {
    size_t used = 0;
    long long v = std::stoll(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  throw UsageError(std::string(option) + " needs an integer, not '" + text + "'");
}

Arguments parse_arguments(int argc, char** argv) {
  Arguments args;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* option) {
      if (i + 1 >= argc) throw UsageError(std::string(option) + " needs a value");
      return std::string(argv[++i]);
    };
    if (a == "-h" || a == "--help") {
      args.command = "help";
      return args;
    }
    if (a == "--version") {
      args.command = "version";
      return args;
    }
    if (a == "--out") args.out_dir = value("--out");
    else if (a == "--after") args.after = value("--after");
    else if (a == "--variant") args.variant = value("--variant");
    else if (a == "--storage") {
      for (const auto& item : split_list(value("--storage"))) {
        std::string error;
        auto storage = optgen::parse_storage(item, &error);
        if (!storage) throw UsageError("--storage: " + error);
        args.storage.push_back(*storage);
      }
    }
    else if (a == "--arch") {
      args.archs.clear();
      for (const auto& item : split_list(value("--arch"))) {
        long long arch = integer(item, "--arch");
        if (arch < 50 || arch > 200) throw UsageError("--arch: " + std::to_string(arch) + " is not a GPU architecture such as 80 or 90");
        args.archs.push_back(static_cast<int>(arch));
      }
      std::sort(args.archs.begin(), args.archs.end());
    }
    else if (a == "--variants") {
      for (const auto& item : split_list(value("--variants"))) args.kernel_variants.insert(item);
    }
    else if (a == "--block-size") args.tuning.block_size = integer(value("--block-size"), "--block-size");
    else if (a == "--elements-per-thread")
      args.tuning.elements_per_thread = integer(value("--elements-per-thread"), "--elements-per-thread");
    else if (a == "--min-blocks-per-sm")
      args.tuning.min_blocks_per_sm = static_cast<int>(integer(value("--min-blocks-per-sm"), "--min-blocks-per-sm"));
    else if (a == "--chunk-size") args.tuning.chunk_size = integer(value("--chunk-size"), "--chunk-size");
    else if (!a.empty() && a[0] == '-') throw UsageError("unknown option '" + a + "'");
    else if (args.command.empty()) args.command = a;
    else args.specs.push_back(a);
  }
  if (args.command.empty()) throw UsageError("no command given");
  if (args.command != "check" && args.command != "emit" && args.command != "compile" && args.command != "dump")
    throw UsageError("unknown command '" + args.command + "'");
  if (args.specs.empty()) throw UsageError("no spec files given");
  if ((args.command == "emit" || args.command == "compile") && args.out_dir.empty())
    throw UsageError(args.command + " needs --out DIR");
  if (args.command == "dump" && args.specs.size() != 1) throw UsageError("dump takes one spec");
  if (std::string problem = args.tuning.check(); !problem.empty()) throw UsageError(problem);
  if (!args.after.empty()) {
    const auto& names = optgen::pass_names();
    if (std::find(names.begin(), names.end(), args.after) == names.end())
      throw UsageError("unknown pass '" + args.after + "'");
  }
  return args;
}

/// Writes `text` to `path` unless the file already holds exactly that (keeps rebuilds minimal).
void write_if_changed(const std::filesystem::path& path, const std::string& text) {
  {
    std::ifstream in(path, std::ios::binary);
    if (in) {
      std::ostringstream current;
      current << in.rdbuf();
      if (current.str() == text) return;
    }
  }
  std::filesystem::path temporary = path;
  temporary += ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary);
    out << text;
    if (!out) throw std::runtime_error("cannot write " + temporary.string());
  }
  std::filesystem::rename(temporary, path);
}

/// Compiles a spec's kernels for each architecture, and to PTX for the newest, and writes
/// <name>_images.cpp. ptxas's report is read: spills are reported as warnings.
void compile(const optgen::Spec& spec, const std::string& source, const std::vector<int>& archs,
             const std::filesystem::path& out) {
  const std::string name = spec.name + "_kernels.cu";
  std::vector<optgen::CompiledImage> images;
  for (size_t i = 0; i <= archs.size(); ++i) {
    const bool ptx = i == archs.size();
    const int arch = ptx ? archs.back() : archs[i];
    auto options = optgen::kernel_compile_options();
    if (!ptx) options.push_back("-Xptxas=-v");
    auto compiled = optgen::nvrtc::compile(source, name, options, arch, ptx);
    if (!ptx) {
      auto report = optgen::nvrtc::parse_ptxas_report(compiled.log);
      if (report.spill_store_bytes > 0 || report.spill_load_bytes > 0)
        std::cerr << "optgen: warning: " << name << " for sm_" << arch << ": " << report.spill_store_bytes
                  << " bytes of spill stores and " << report.spill_load_bytes
                  << " of spill loads (try a smaller --elements-per-thread)\n";
    }
    images.push_back({arch, ptx, std::move(compiled.image)});
  }
  write_if_changed(out / (spec.name + "_images.cpp"),
                   optgen::emit_images(spec.name, optgen::spec_file_name(spec), source, images,
                                       optgen::nvrtc::version()));
}

/// The variants named by --variants (all when none is), checked against the spec's.
std::vector<optgen::Program> kernel_variants(const std::vector<optgen::Program>& variants, const std::set<std::string>& names,
                                             const std::string& path) {
  if (names.empty()) return variants;
  std::vector<optgen::Program> chosen;
  std::string known;
  for (const auto& v : variants) {
    known += (known.empty() ? "" : ", ") + v.variant;
    if (names.count(v.variant)) chosen.push_back(v);
  }
  for (const auto& name : names)
    if (std::none_of(variants.begin(), variants.end(), [&](const optgen::Program& v) { return v.variant == name; }))
      throw UsageError("--variants: " + path + " has no variant '" + name + "' (its variants: " + known + ")");
  return chosen;
}

int run(const Arguments& args) {
  int status = kExitOk;
  for (const auto& path : args.specs) {
    try {
      optgen::Spec spec = optgen::load_spec(path);
      if (args.command == "dump") {
        optgen::compile_spec(spec, [&](const std::string& pass, const optgen::Program& program) {
          if (!args.after.empty() && pass != args.after) return;
          if (!args.variant.empty() && pass != "lower" && program.variant != args.variant) return;
          std::cout << "# after " << pass << "\n" << optgen::dump(program) << "\n";
        });
        continue;
      }
      auto variants = optgen::compile_spec(spec);
      if (args.command == "check") {
        std::cout << path << ": ok (" << spec.optimizer << ", " << variants.size() << " variant"
                  << (variants.size() == 1 ? "" : "s") << ")\n";
      } else {
        std::filesystem::path out(args.out_dir);
        std::filesystem::create_directories(out);
        auto storage = !args.storage.empty() ? args.storage : !spec.storage.empty() ? spec.storage : optgen::default_storage();
        std::vector<optgen::Program> with_kernels = kernel_variants(variants, args.kernel_variants, path);
        if (args.command == "compile") {
          compile(spec, optgen::emit_cuda(spec, with_kernels, storage, args.tuning), args.archs, out);
          continue;
        }
        write_if_changed(out / (spec.name + "_reference.h"), optgen::emit_reference(spec, variants));
        write_if_changed(out / (spec.name + "_kernels.cu"), optgen::emit_cuda(spec, with_kernels, storage, args.tuning));
        write_if_changed(out / (spec.name + ".h"), optgen::emit_launcher_header(spec, variants));
        write_if_changed(out / (spec.name + ".cpp"), optgen::emit_launcher_source(spec, variants, storage, args.tuning, args.kernel_variants));
      }
    } catch (const optgen::SpecError& e) {
      std::cerr << e.what();
      status = kExitSpecError;
    }
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Arguments args = parse_arguments(argc, argv);
    if (args.command == "help") {
      std::cout << kHelp;
      return kExitOk;
    }
    if (args.command == "version") {
      std::cout << optgen::generator_banner() << " (kernel ABI " << optgen::kernel_abi::kVersion << ")\n";
      return kExitOk;
    }
    return run(args);
  } catch (const UsageError& e) {
    std::cerr << "optgen: " << e.what() << "\n(run 'optgen --help' for usage)\n";
    return kExitUsage;
  } catch (const optgen::Error& e) {
    std::cerr << "optgen: error: " << e.what() << "\n";
    return kExitInternal;
  } catch (const optgen::InternalError& e) {
    std::cerr << "optgen: " << e.what() << "\n";
    return kExitInternal;
  } catch (const std::exception& e) {
    std::cerr << "optgen: error: " << e.what() << "\n";
    return kExitInternal;
  }
}
