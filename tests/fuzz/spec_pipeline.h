#pragma once
/// What `optgen emit` does to one spec, with every outcome classified: the fuzz target
/// (spec_fuzzer.cpp) and the property check (spec_compiles.cpp) share it, so that "the spec was
/// accepted" means the same to both, and the same as to `optgen check` (generator/main.cpp).

#include <cstddef>
#include <string>

namespace optgen::fuzz {

/// Every file `optgen emit` writes for a spec, with the storage and tuning it uses by default.
struct Sources {
  std::string name;       ///< the spec's name: <name>_kernels.cu, <name>.h, ...
  std::string file_name;  ///< the spec's file name, for <name>_images.cpp
  std::string reference;  ///< <name>_reference.h
  std::string kernels;    ///< <name>_kernels.cu
  std::string header;     ///< <name>.h
  std::string source;     ///< <name>.cpp
  int variants = 0;
};

struct Outcome {
  enum Kind {
    Emitted,         ///< `check` accepts it and every emitter ran: `sources` holds the files
    Rejected,        ///< `check` rejects it with a located SpecError: the promised behaviour
    Unlocated,       ///< a SpecError without `path:line:col: error:` inside the text (a finding)
    EmitRejected,    ///< `check` accepted it, then an emitter threw a SpecError (a finding)
    Internal,        ///< optgen::InternalError (a finding)
    OtherException,  ///< any other exception (a finding)
    Slow,            ///< a spec under kBudgetedBytes took longer than kEmitBudget (a finding)
  };
  Kind kind = Rejected;
  std::string message;  ///< the exception's what(), for every kind but Emitted
  Sources sources;

  bool is_finding() const { return kind != Emitted && kind != Rejected; }
};
const char* to_string(Outcome::Kind kind);

/// The time the pipeline may take for a spec under kBudgetedBytes, sanitizers and all: the
/// built-in specs take milliseconds, and a printer that doubled its work per operand of a sum took
/// minutes at 24 terms while `check` took 10 ms.
constexpr double kEmitBudgetSeconds = 5;
constexpr std::size_t kBudgetedBytes = 4096;

/// Loads `text` as the spec file `path` (its stem names the spec), compiles every variant, and
/// runs every emitter: emit_reference, emit_cuda (the spec's `storage:`, else default_storage(),
/// and a default KernelTuning), emit_launcher_header and emit_launcher_source. Over the time
/// budget, whatever the result, it is Slow.
Outcome run_pipeline(const std::string& path, const std::string& text);

/// Whether `message` (a SpecError's what()) starts with `path:LINE:COL: error: ` for a line of
/// `text` (or the one just past its end, where YAML reports an unexpected end) and a column >= 1.
bool is_located(const std::string& message, const std::string& path, const std::string& text);

}  // namespace optgen::fuzz
