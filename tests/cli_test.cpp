// The optgen command: each mistake on the command line is exit status 2 with a message saying what
// is wrong, options apply only to the commands they belong to, and progress lines say what was
// generated and compiled.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

namespace {

struct Run {
  int status;
  std::string output;  ///< stdout and stderr together
};

Run optgen(const std::string& arguments) {
  const std::string command = std::string(OPTGEN_EXECUTABLE) + " " + arguments + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string output;
  std::array<char, 4096> buffer;
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

const std::string kSpec = std::string(OPTGEN_SOURCE_DIR) + "/specs/adam.yaml";
const std::string kScratch = "/tmp/optgen_cli_test";

}  // namespace

TEST_CASE("command-line mistakes are exit status 2 and say what is wrong", "[cli]") {
  struct Case {
    std::string arguments, message;
  };
  const Case cases[] = {
      {"emit " + kSpec + " --out " + kScratch + " --storage f32,f32", "--storage: f32 is listed twice"},
      {"emit " + kSpec + " --out " + kScratch + " --storage f64", "--storage: unknown parameter storage 'f64'"},
      // Equal only once canonical: the same kernels twice were an internal error (exit 3).
      {"emit " + kSpec + " --out " + kScratch + " --storage f32,f32:exp_avg=f32",
       "--storage: f32:exp_avg=f32 is f32 again, listed before it"},
      {"emit " + kSpec + " --out " + kScratch + " --storage bf16:bf16,bf16:bf16:exp_avg=bf16:exp_avg_sq=bf16",
       "--storage: bf16:bf16:exp_avg=bf16:exp_avg_sq=bf16 is bf16:bf16 again, listed before it"},
      // Quoted as written, not as optgen spells it.
      {"emit " + kSpec + " --out " + kScratch + " --storage bf16:f32:nope=f32",
       "--storage: storage 'bf16:f32:nope=f32' names state 'nope', which the spec does not declare"},
      {"emit " + kSpec + " --out " + kScratch + " --block-size 99999999999",
       "--block-size: 99999999999 is not between 32 and 1024"},
      {"emit " + kSpec + " --out " + kScratch + " --block-size 100",
       "block size 100 must be a power of two from 32 to 1024"},
      {"emit " + kSpec + " --out " + kScratch + " --variants adam_nesterov",
       "has no variant 'adam_nesterov' (its variants: adam, adam_amsgrad, adam_clip_grad_norm, "
       "adam_amsgrad_clip_grad_norm)"},
      {"dump " + kSpec + " --variant nope", "--variant: " + kSpec +
                                                " has no variant 'nope' (its variants: adam, adam_amsgrad, "
                                                "adam_clip_grad_norm, adam_amsgrad_clip_grad_norm)"},
      {"dump " + kSpec + " --after hoist",
       "--after: hoist not in {lower,specialize,constant_fold,cse,assign_levels,dce,verify_states,plan_stages}"},
      {"check " + kSpec + " --out " + kScratch, "The following argument was not expected: --out"},
      {"check " + kSpec + " --after lower", "The following argument was not expected: --after"},
      {"dump " + kSpec + " --storage f32", "The following argument was not expected: --storage"},
      {"emit " + kSpec + " --out " + kScratch + " --arch 90", "The following argument was not expected: --arch"},
      {"dump " + kSpec + " " + kSpec, "dump takes one spec"},
      {"emit " + kSpec, "--out is required"},
      {"frobnicate " + kSpec, "unknown command 'frobnicate' (commands: check, emit, compile, dump)"},
      {"", "A subcommand is required"},
  };
  for (const auto& c : cases) {
    INFO("optgen " << c.arguments);
    const Run run = optgen(c.arguments);
    CHECK(run.status == 2);
    CHECK_THAT(run.output, Catch::Contains(c.message));
    CHECK_THAT(run.output, Catch::Contains("(run 'optgen --help' for usage)"));
  }
}

TEST_CASE("a directory given as a spec is a spec error that says so", "[cli]") {
  const Run run = optgen("check " + std::string(OPTGEN_SOURCE_DIR) + "/specs");
  CHECK(run.status == 1);
  CHECK_THAT(run.output, Catch::Contains("specs: error: this is a directory, not a spec file"));
}

TEST_CASE("emit says what it wrote, and --quiet silences it", "[cli]") {
  Run run = optgen("emit " + kSpec + " --out " + kScratch);
  CHECK(run.status == 0);
  CHECK_THAT(run.output, Catch::Contains("adam.yaml -> " + kScratch +
                                         "/adam{_kernels.cu,.h,.cpp,_reference.h}: 4 variants, kernels for 4 "
                                         "of them in 11 storage types, in "));
  run = optgen("emit " + kSpec + " --out " + kScratch + " --quiet");
  CHECK(run.status == 0);
  CHECK(run.output.empty());
}

TEST_CASE("compile takes an --arch older than bf16 needs: bf16 kernel sets are empty there", "[cli][nvrtc]") {
  // bf16 needs sm_80 (cvt.rn.bf16.f32): below it those kernels compile empty, and the runtime refuses
  // to launch them (FusedOptimizer::prepare), so one module serves every GPU NVRTC compiles for.
  const std::string sgd = std::string(OPTGEN_SOURCE_DIR) + "/specs/sgd.yaml";
  Run run = optgen("compile " + sgd + " --out " + kScratch + " --arch 75,90 --storage f32,f16,f32:bf16,bf16 --quiet");
  CHECK(run.status == 0);
  CHECK(run.output.empty());
  std::ifstream kernels(kScratch + "/sgd_images.cpp");  // the kernel source is embedded there
  const std::string source((std::istreambuf_iterator<char>(kernels)), std::istreambuf_iterator<char>());
  CHECK(source.find("#if __CUDA_ARCH__ >= 800") != std::string::npos);
}

TEST_CASE("uq8 for a state that can be negative is refused where it becomes negative", "[cli]") {
  // Every negative value was stored as 0.
  const Run run =
      optgen("emit " + std::string(OPTGEN_SOURCE_DIR) + "/specs/sgd.yaml --out " + kScratch + " --storage f32:uq8");
  CHECK(run.status == 1);
  CHECK_THAT(run.output, Catch::Contains("sgd.yaml:20:10: error: the value assigned to state 'momentum_buffer' here "
                                         "can be negative (in variant sgd_use_momentum); storage 'f32:uq8' keeps it "
                                         "in uq8, which stores a negative value as 0"));
  CHECK(optgen("check " + std::string(OPTGEN_SOURCE_DIR) + "/specs/adamw.yaml").status == 0);  // exp_avg_sq=uq8
}

TEST_CASE("a spec path that is no regular file is refused before it is read", "[cli]") {
  // /dev/zero was read until memory ran out; a FIFO blocked for good.
  Run run = optgen("check /dev/zero");
  CHECK(run.status == 1);
  CHECK_THAT(run.output,
             Catch::Contains("/dev/zero: error: cannot read spec file: this is a device, not a regular file"));
  const std::string fifo = "/tmp/optgen_cli_test_fifo_" + std::to_string(getpid()) + ".yaml";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  run = optgen("check " + fifo);
  unlink(fifo.c_str());
  CHECK(run.status == 1);
  CHECK_THAT(run.output, Catch::Contains(fifo + ": error: cannot read spec file: this is a FIFO, not a regular file"));
}

TEST_CASE("a literal beyond float is a located warning on stderr, and the spec is still emitted", "[cli]") {
  const std::string spec = "/tmp/optgen_cli_test_wide_" + std::to_string(getpid()) + ".yaml";
  {
    FILE* file = std::fopen(spec.c_str(), "w");
    REQUIRE(file != nullptr);
    std::fputs("optimizer: Wide\nsummary: s\nupdate:\n  - param = param - 1e39 * grad\n", file);
    std::fclose(file);
  }
  const Run run = optgen("check " + spec);
  std::remove(spec.c_str());
  CHECK(run.status == 0);
  CHECK_THAT(run.output, Catch::Contains(spec + ":4:21: warning: '1e39' is beyond float range: it is infinity"));
}

TEST_CASE("dump --variant knows a variant by the name its kernels have, flags in declaration order", "[cli]") {
  const std::string dir = "/tmp/optgen_cli_test_flag_order_" + std::to_string(getpid());
  REQUIRE(mkdir(dir.c_str(), 0700) == 0);
  const std::string spec = dir + "/order.yaml";  // the spec's name is its file's stem
  {
    FILE* file = std::fopen(spec.c_str(), "w");
    REQUIRE(file != nullptr);
    std::fputs(
        "optimizer: Order\nsummary: s\ngrad_clipping: false\nhyperparameters:\n"
        "  lr: {type: float, default: 0.1}\n"
        "  zed: {type: bool, default: false, specialize: true}\n"
        "  alpha: {type: bool, default: false, specialize: true}\n"
        "update:\n  - \"g = zed ? 2 * grad : grad\"\n  - \"g = alpha ? 3 * g : g\"\n"
        "  - param = param - lr * g\n",
        file);
    std::fclose(file);
  }
  const Run run = optgen("dump " + spec + " --variant order_zed_alpha --after plan_stages");
  const Run other = optgen("dump " + spec + " --variant order_alpha_zed");
  std::remove(spec.c_str());
  rmdir(dir.c_str());
  CHECK(run.status == 0);
  CHECK_THAT(run.output, Catch::Contains("program order_zed_alpha (alpha=true, zed=true)"));
  CHECK(other.status == 2);
  CHECK_THAT(other.output, Catch::Contains("(its variants: order, order_zed, order_alpha, order_zed_alpha)"));
}
