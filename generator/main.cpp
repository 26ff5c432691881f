/// The optgen command: check, emit, compile and dump optimizer specs. See `optgen --help`.
/// Arguments are parsed by CLI11; each command has only the options that apply to it.

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <fstream>
#include <future>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "command_line.h"
#include "emit_common.h"
#include "emit_cuda.h"
#include "emit_images.h"
#include "emit_launcher.h"
#include "emit_reference.h"
#include "ir_printer.h"
#include "optgen/error.h"
#include "optgen/kernel_abi.h"
#include "optgen/kernel_images.h"
#include "optgen/nvrtc.h"
#include "pipeline.h"
#include "spec.h"

namespace {

using optgen::command_line::add_list;
using optgen::command_line::whole_number;

constexpr int kExitOk = 0;
constexpr int kExitSpecError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitInternal = 3;

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// What the command line asked for.
struct Arguments {
  std::string command;
  std::vector<std::string> specs;
  std::string out_dir;
  std::string after;
  std::string variant;
  std::vector<int> archs = {80, 90};
  std::set<std::string> kernel_variants;     ///< --variants; empty: all
  bool reference_only = false;               ///< emit --reference-only
  std::vector<optgen::Storage> storage;      ///< --storage; empty: the spec's, else the default
  std::vector<std::string> storage_written;  ///< --storage's items as written, for messages
  optgen::KernelTuning tuning;
  bool quiet = false;
};

/// Options shared by emit and compile: what to generate kernels for, and their tuning.
void add_generation_options(CLI::App& command, Arguments& args, std::vector<std::string>& storage,
                            std::vector<std::string>& variants) {
  command.add_option("--out", args.out_dir, "the directory to write into")->required();
  add_list(command, "--storage", storage,
           "storage types to generate kernels for, e.g. f32,bf16,bf16:bf16,bf16+master "
           "(PARAM[+master|+sr][:STATES][:STATE=DTYPE]...; default: the spec's 'storage:', else f32,bf16)");
  add_list(command, "--variants", variants, "generate kernels for these variants only, e.g. adam (default: all)");
  command
      .add_option("--block-size", args.tuning.block_size, "threads per block (a power of two, 32 to 1024; default 256)")
      ->check(whole_number(32, 1024));
  command
      .add_option("--shaped-block-size", args.tuning.shaped_block_size,
                  "threads per block of a spec whose every variant has rows and columns (default 128)")
      ->check(whole_number(32, 1024));
  command
      .add_option("--elements-per-thread", args.tuning.elements_per_thread,
                  "elements in flight per thread and loop iteration (a power of two up to 64; default 8)")
      ->check(whole_number(1, 64));
  command
      .add_option("--min-blocks-per-sm", args.tuning.min_blocks_per_sm,
                  "blocks each SM must fit, which caps registers (0: ptxas chooses; default 3)")
      ->check(whole_number(0, 32));
  command
      .add_option("--reduce-min-blocks-per-sm", args.tuning.reduce_min_blocks_per_sm,
                  "the same for the Reduce stages' kernels (0: ptxas chooses; default 4)")
      ->check(whole_number(0, 32));
  command
      .add_option("--shaped-min-blocks-per-sm", args.tuning.shaped_min_blocks_per_sm,
                  "the same for the Reduce stages of a spec with rows and columns (0: ptxas chooses; default 2)")
      ->check(whole_number(0, 32));
  command
      .add_option("--shaped-runs-min-blocks-per-sm", args.tuning.shaped_runs_min_blocks_per_sm,
                  "the same for a Reduce stage of a spec with rows and columns that is chunk runs only, in "
                  "blocks of --shaped-block-size (0: ptxas chooses; default 7)")
      ->check(whole_number(0, 32));
  command
      .add_option("--blockwise-min-blocks-per-sm", args.tuning.blockwise_min_blocks_per_sm,
                  "the same for the Update stages of kernel sets with 8-bit states (0: ptxas chooses; default 3)")
      ->check(whole_number(0, 32));
  command
      .add_option("--chunk-size", args.tuning.chunk_size,
                  "elements per block of f32 kernel sets, a multiple of 64 (default 2048)")
      ->check(whole_number(64, 1LL << 30));
  command
      .add_option("--narrow-chunk-size", args.tuning.narrow_chunk_size,
                  "elements per block of the other kernel sets (bf16 or f16 params or states, master copies), a "
                  "multiple of 64 (default 8192)")
      ->check(whole_number(64, 1LL << 30));
  command
      .add_option("--blockwise-chunk-size", args.tuning.blockwise_chunk_size,
                  "elements per block of kernel sets with 8-bit states, a multiple of 256 (default 32768)")
      ->check(whole_number(256, 1LL << 30));
  command
      .add_option("--shaped-chunk-size", args.tuning.shaped_chunk_size,
                  "elements per block of every kernel set of a variant with rows and columns, a multiple of 64 "
                  "(default 8192)")
      ->check(whole_number(64, 1LL << 30));
  command
      .add_option("--reduce-chunk-size", args.tuning.reduce_chunk_size,
                  "elements per block of f32 kernel sets with Reduce stages (clipping, norms), a multiple of 64 "
                  "(default 4096)")
      ->check(whole_number(64, 1LL << 30));
  command.add_flag("-q,--quiet", args.quiet, "no progress lines");
}

/// Parses the command line; throws UsageError for what CLI11 accepts but optgen does not.
Arguments parse_arguments(CLI::App& app, int argc, char** argv) {
  Arguments args;
  std::vector<std::string> storage, variants;
  app.require_subcommand(1, 1);
  app.set_version_flag(
      "--version", optgen::generator_banner() + " (kernel ABI " + std::to_string(optgen::kernel_abi::kVersion) + ")");
  app.footer(
      "Passes, in order: lower specialize constant_fold cse assign_levels dce verify_states plan_stages.\n"
      "Exit status: 0 success; 1 a spec has errors (each printed as file:line:col: error: ...); 2 bad command line;\n"
      "3 internal error in optgen, or a file that could not be written.");

  CLI::App* check = app.add_subcommand("check", "validate specs: load, lower and compile every variant");
  check->add_option("specs", args.specs, "spec files")->required();

  CLI::App* emit = app.add_subcommand(
      "emit",
      "write <name>_kernels.cu, <name>.h, <name>.cpp and <name>_reference.h for each spec into --out (a file whose "
      "content is unchanged is not rewritten)");
  emit->add_option("specs", args.specs, "spec files")->required();
  add_generation_options(*emit, args, storage, variants);
  emit->add_flag("--reference-only", args.reference_only,
                 "write <name>_reference.h only: the CPU reference, built for rows and columns before the kernels are");

  CLI::App* compile = app.add_subcommand("compile",
                                         "compile each spec's kernels with NVRTC for each architecture (and PTX for "
                                         "the newest) into --out/<name>_images.cpp");
  compile->add_option("specs", args.specs, "spec files")->required();
  add_generation_options(*compile, args, storage, variants);
  add_list(*compile, "--arch", args.archs, "GPU architectures (a cubin of 80 runs on 86 and 89)",
           whole_number(50, 200));

  CLI::App* dump = app.add_subcommand("dump", "print the IR after each pass, or only after --after");
  dump->add_option("spec", args.specs, "one spec file")->required();
  dump->add_option("--after", args.after, "the pass to print after")->check(CLI::IsMember(optgen::pass_names()));
  dump->add_option("--variant", args.variant, "print one variant only, e.g. adam_amsgrad");

  if (argc > 1 && argv[1][0] != '-') {
    const std::string command = argv[1];
    const auto commands = app.get_subcommands([&](const CLI::App* c) { return c->get_name() == command; });
    if (commands.empty()) throw UsageError("unknown command '" + command + "' (commands: check, emit, compile, dump)");
  }
  app.parse(argc, argv);
  args.command = app.get_subcommands().front()->get_name();
  if (args.command == "dump" && args.specs.size() != 1) throw UsageError("dump takes one spec");
  if ((args.command == "emit" || args.command == "compile") && args.out_dir.empty())
    throw UsageError("--out: give the directory to write into");
  if (args.command == "emit" || args.command == "compile") {
    // Each spec's files are named by its stem: two of one stem would overwrite each other's.
    std::map<std::string, std::string> stems;
    for (const auto& path : args.specs)
      if (auto [it, fresh] = stems.emplace(std::filesystem::path(path).stem().string(), path); !fresh)
        throw UsageError(it->second + " and " + path + " share the stem '" + it->first +
                         "', which names their generated files: emit them into different --out directories");
  }

  for (const auto& item : storage) {
    std::string error;
    auto parsed = optgen::parse_storage(item, &error);
    if (!parsed) throw UsageError("--storage: " + error);
    if (auto same = std::find(args.storage.begin(), args.storage.end(), *parsed); same != args.storage.end())
      throw UsageError("--storage: " +
                       optgen::repeated_storage(item, args.storage_written[same - args.storage.begin()]));
    args.storage.push_back(*parsed);
    args.storage_written.push_back(item);
  }
  args.kernel_variants.insert(variants.begin(), variants.end());
  std::sort(args.archs.begin(), args.archs.end());
  args.archs.erase(std::unique(args.archs.begin(), args.archs.end()), args.archs.end());
  if (args.command == "compile" && optgen::nvrtc::available()) {  // else compiling says what is missing
    const std::vector<int> supported = optgen::nvrtc::supported_archs();
    for (int arch : args.archs)
      if (std::find(supported.begin(), supported.end(), arch) == supported.end()) {
        std::string list;
        for (int s : supported) list += (list.empty() ? "" : ", ") + std::to_string(s);
        throw UsageError("--arch: NVRTC " + optgen::nvrtc::version() + " does not compile for sm_" +
                         std::to_string(arch) + "; it compiles for " + list);
      }
  }
  if (std::string problem = args.tuning.check(); !problem.empty()) throw UsageError(problem);
  return args;
}

/// Writes `text` to `path` unless the file already holds exactly that (keeps rebuilds minimal).
/// The first lines of a file (where emit_images writes its compilation key), or "" when there is none.
std::string read_head(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string head(1024, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  return head;
}

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

/// "1.18 s" or "3.2 ms": the time since `start`, for progress lines.
std::string time_since(std::chrono::steady_clock::time_point start) {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  char text[32];
  if (seconds >= 1)
    std::snprintf(text, sizeof text, "%.2f s", seconds);
  else
    std::snprintf(text, sizeof text, "%.1f ms", seconds * 1e3);
  return text;
}

std::string arch_list(const std::vector<int>& archs) {
  std::string list;
  for (int arch : archs) list += (list.empty() ? "sm_" : ", sm_") + std::to_string(arch);
  return list + " and PTX for compute_" + std::to_string(archs.back());
}

/// Compiles a spec's kernels for each architecture and writes <name>_images.cpp: a cubin each,
/// then the PTX of the newest, which NVRTC made on the way to its cubin (one compilation per
/// architecture, all at once on threads of their own: NVRTC compiles programs concurrently, and a
/// build's longest step is one spec's kernels). ptxas's report is read: spills are reported as
/// warnings.
void compile(const optgen::Spec& spec, const std::string& source, const Arguments& args,
             const std::filesystem::path& out) {
  const auto start = std::chrono::steady_clock::now();
  const std::string name = spec.name + "_kernels.cu";
  const std::filesystem::path path = out / (spec.name + "_images.cpp");
  auto options = optgen::kernel_compile_options();
  options.push_back("-Xptxas=-v");
  // The images of the same source, library, options and NVRTC are there already (a generator
  // change that changed no kernel): kept, and marked new for the build that asked.
  const std::string key = optgen::compilation_key(source, options, args.archs, optgen::nvrtc::version());
  if (optgen::images_key(read_head(path)) == key) {
    std::filesystem::last_write_time(path, std::filesystem::file_time_type::clock::now());
    if (!args.quiet) std::cout << "optgen: " << name << "'s images are up to date" << std::endl;
    return;
  }
  if (!args.quiet)
    std::cout << "optgen: compiling " << name << " with NVRTC for " << arch_list(args.archs) << std::endl;
  std::vector<std::future<optgen::nvrtc::Compiled>> compilations;
  for (int arch : args.archs)
    compilations.push_back(
        std::async(std::launch::async, [&, arch] { return optgen::compile_kernels(source, name, options, arch); }));
  std::vector<optgen::CompiledImage> images;
  std::vector<char> newest_ptx;
  for (size_t i = 0; i < args.archs.size(); ++i) {
    const int arch = args.archs[i];
    auto compiled = compilations[i].get();
    auto report = optgen::nvrtc::parse_ptxas_report(compiled.log);
    if (report.spill_store_bytes > 0 || report.spill_load_bytes > 0)
      std::cerr << "optgen: warning: " << name << " for sm_" << arch << ": " << report.spill_store_bytes
                << " bytes of spill stores and " << report.spill_load_bytes
                << " of spill loads (try a smaller --elements-per-thread, or a smaller --min-blocks-per-sm)\n";
    images.push_back({arch, false, std::move(compiled.image)});
    newest_ptx = std::move(compiled.ptx);
  }
  images.push_back({args.archs.back(), true, std::move(newest_ptx)});
  write_if_changed(path, optgen::emit_images(spec.name, optgen::spec_file_name(spec), source, images,
                                             optgen::nvrtc::version(), key));
  if (!args.quiet) std::cout << "optgen: compiled " << name << " in " << time_since(start) << std::endl;
}

/// The variants named by --variants (all when none is), checked against the spec's.
std::vector<optgen::Program> kernel_variants(const std::vector<optgen::Program>& variants,
                                             const std::set<std::string>& names, const std::string& path) {
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

void dump(const optgen::Spec& spec, const Arguments& args) {
  if (!args.variant.empty()) {
    std::string known;
    bool found = false;
    for (const auto& flags : optgen::enumerate_variants(spec)) {
      const std::string name = spec.variant_name(flags);
      known += (known.empty() ? "" : ", ") + name;
      found = found || name == args.variant;
    }
    if (!found)
      throw UsageError("--variant: " + spec.file->path + " has no variant '" + args.variant +
                       "' (its variants: " + known + ")");
  }
  optgen::compile_spec(spec, [&](const std::string& pass, const optgen::Program& program) {
    if (!args.after.empty() && pass != args.after) return;
    if (!args.variant.empty() && pass != "lower" && program.variant != args.variant) return;
    std::cout << "# after " << pass << "\n" << optgen::dump(program) << "\n";
  });
}

void emit(const optgen::Spec& spec, const std::vector<optgen::Program>& variants, const Arguments& args) {
  const auto start = std::chrono::steady_clock::now();
  std::filesystem::path out(args.out_dir);
  std::filesystem::create_directories(out);
  if (args.reference_only) {
    write_if_changed(out / (spec.name + "_reference.h"), optgen::emit_reference(spec, variants));
    if (!args.quiet)
      std::cout << "optgen: " << spec.file->path << " -> " << (out / spec.name).string() << "_reference.h, in "
                << time_since(start) << std::endl;
    return;
  }
  std::vector<optgen::Storage> storage;
  try {
    storage = optgen::kernel_storage(spec, variants, args.storage, args.storage_written);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--storage: ") + e.what());
  }
  const std::vector<optgen::Program> with_kernels = kernel_variants(variants, args.kernel_variants, spec.file->path);
  const std::string kernels = optgen::emit_cuda(spec, with_kernels, storage, args.tuning);
  if (args.command == "compile") {
    compile(spec, kernels, args, out);
    return;
  }
  write_if_changed(out / (spec.name + "_reference.h"), optgen::emit_reference(spec, variants));
  write_if_changed(out / (spec.name + "_kernels.cu"), kernels);
  write_if_changed(out / (spec.name + ".h"), optgen::emit_launcher_header(spec, variants));
  write_if_changed(out / (spec.name + ".cpp"),
                   optgen::emit_launcher_source(spec, variants, storage, args.tuning, args.kernel_variants));
  if (!args.quiet)
    std::cout << "optgen: " << spec.file->path << " -> " << (out / spec.name).string()
              << "{_kernels.cu,.h,.cpp,_reference.h}: " << variants.size() << " variant"
              << (variants.size() == 1 ? "" : "s") << ", kernels for " << with_kernels.size() << " of them in "
              << storage.size() << " storage type" << (storage.size() == 1 ? "" : "s") << ", in " << time_since(start)
              << std::endl;
}

int run(const Arguments& args) {
  int status = kExitOk;
  for (const auto& path : args.specs) {
    try {
      optgen::Spec spec = optgen::load_spec(path);
      for (const std::string& warning : spec.warnings) std::cerr << warning;
      if (args.command == "dump") {
        dump(spec, args);
        continue;
      }
      auto variants =
          optgen::compile_spec(spec, {}, args.reference_only ? optgen::Emitters::ReferenceOnly : optgen::Emitters::All);
      if (args.command == "check")
        std::cout << path << ": ok (" << spec.optimizer << ", " << variants.size() << " variant"
                  << (variants.size() == 1 ? "" : "s") << ")\n";
      else
        emit(spec, variants, args);
    } catch (const optgen::SpecError& e) {
      std::cerr << e.what();
      status = kExitSpecError;
    }
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Generates fused optimizer kernels, launchers and CPU references from YAML optimizer specs.", "optgen");
  try {
    Arguments args = parse_arguments(app, argc, argv);
    return run(args);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help and --version print, and succeed
    std::cerr << "optgen: " << e.what() << "\n(run 'optgen --help' for usage)\n";
    return kExitUsage;
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
