// The libFuzzer target: the bytes are a spec file's text, run through everything `optgen emit`
// does (load, lower, the passes for every variant, every emitter; spec_pipeline.h). The promise it
// checks: a spec is either emitted or rejected with a located optgen::SpecError. An
// optgen::InternalError, any other exception, an unlocated SpecError, a SpecError from an emitter
// after `check` accepted the spec, a crash, a sanitizer report or a hang is a finding.
//
// The property check (spec_compiles.cpp) compiles accepted specs, seconds each: far too slow for
// every execution, and the corpus keeps only inputs that add coverage, so a spec whose names or
// summary break the emitted C++ (same coverage as a sound one) would never reach it. With
// $OPTGEN_FUZZ_SAMPLE_DIR set, the target also saves a sample of the accepted inputs there (one
// in $OPTGEN_FUZZ_SAMPLE_RATE, default 16, chosen by a hash of the bytes, so a replay samples
// the same ones), for scripts/fuzz.sh to hand to the property check with the corpus.
//
// Built two ways (tests/fuzz/CMakeLists.txt): with clang's -fsanitize=fuzzer for scripts/fuzz.sh,
// and with the project's compiler and replay_main.cpp as a plain program that replays files (the
// seed corpus in ctest, or a finding without clang).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "spec_pipeline.h"

namespace {

constexpr size_t kMaxInput = 16 * 1024;  // specs are a few hundred bytes: explore those, not blobs

uint64_t fnv1a(const uint8_t* data, size_t size) {
  uint64_t hash = 14695981039346656037ull;
  for (size_t i = 0; i < size; ++i) hash = (hash ^ data[i]) * 1099511628211ull;
  return hash;
}

/// Saves one in `rate` accepted inputs into $OPTGEN_FUZZ_SAMPLE_DIR, when it is set.
void sample_accepted(const uint8_t* data, size_t size) {
  static const char* const dir = std::getenv("OPTGEN_FUZZ_SAMPLE_DIR");
  static const unsigned long long rate = [] {
    const char* text = std::getenv("OPTGEN_FUZZ_SAMPLE_RATE");
    unsigned long long value = text ? std::strtoull(text, nullptr, 10) : 0;
    return value ? value : 16;
  }();
  if (!dir || !*dir) return;
  const uint64_t hash = fnv1a(data, size);
  if (hash % rate != 0) return;
  const std::string path = std::string(dir) + "/sample_" + std::to_string(hash) + ".yaml";
  if (FILE* file = std::fopen(path.c_str(), "wb")) {
    std::fwrite(data, 1, size, file);
    std::fclose(file);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > kMaxInput) return -1;  // -1: libFuzzer does not add the input to the corpus
  const std::string text(reinterpret_cast<const char*>(data), size);
  const optgen::fuzz::Outcome outcome = optgen::fuzz::run_pipeline("fuzz.yaml", text);
  if (outcome.kind == optgen::fuzz::Outcome::Emitted) sample_accepted(data, size);
  if (!outcome.is_finding()) return 0;
  std::fprintf(stderr, "\n==== optgen fuzz finding: %s\n%s\n==== the spec (%zu bytes):\n%s\n==== end of the spec\n",
               optgen::fuzz::to_string(outcome.kind), outcome.message.c_str(), text.size(), text.c_str());
  std::abort();  // libFuzzer saves the input as a crash-<sha1> artifact
}
