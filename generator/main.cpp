/// The optgen command: check, emit and dump optimizer specs. See `optgen --help`.

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "emit_reference.h"
#include "ir_printer.h"
#include "pipeline.h"
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
  emit SPEC... --out DIR        write the generated sources for each spec into DIR
                                (now: <name>_reference.h, the CPU reference); files whose
                                content is unchanged are not rewritten
  dump SPEC [--after PASS] [--variant NAME]
                                print the IR after each pass, or only after PASS
                                (passes: lower specialize constant_fold cse hoist dce verify_states);
                                --variant limits the output to one variant, e.g. adam_amsgrad

options:
  -h, --help                    show this help

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
};

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
    if (a == "--out") args.out_dir = value("--out");
    else if (a == "--after") args.after = value("--after");
    else if (a == "--variant") args.variant = value("--variant");
    else if (!a.empty() && a[0] == '-') throw UsageError("unknown option '" + a + "'");
    else if (args.command.empty()) args.command = a;
    else args.specs.push_back(a);
  }
  if (args.command.empty()) throw UsageError("no command given");
  if (args.command != "check" && args.command != "emit" && args.command != "dump")
    throw UsageError("unknown command '" + args.command + "'");
  if (args.specs.empty()) throw UsageError("no spec files given");
  if (args.command == "emit" && args.out_dir.empty()) throw UsageError("emit needs --out DIR");
  if (args.command == "dump" && args.specs.size() != 1) throw UsageError("dump takes one spec");
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
        std::filesystem::create_directories(args.out_dir);
        write_if_changed(std::filesystem::path(args.out_dir) / (spec.name + "_reference.h"),
                         optgen::emit_reference(spec, variants));
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
    return run(args);
  } catch (const UsageError& e) {
    std::cerr << "optgen: " << e.what() << "\n(run 'optgen --help' for usage)\n";
    return kExitUsage;
  } catch (const optgen::InternalError& e) {
    std::cerr << "optgen: " << e.what() << "\n";
    return kExitInternal;
  } catch (const std::exception& e) {
    std::cerr << "optgen: error: " << e.what() << "\n";
    return kExitInternal;
  }
}
