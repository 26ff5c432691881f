#include "spec_pipeline.h"

#include <cxxabi.h>

#include <algorithm>
#include <chrono>
#include <cctype>
#include <cstdlib>
#include <exception>
#include <typeinfo>
#include <utility>
#include <vector>

#include "diagnostic.h"
#include "emit_common.h"
#include "emit_cuda.h"
#include "emit_launcher.h"
#include "emit_reference.h"
#include "pipeline.h"
#include "spec.h"

namespace optgen::fuzz {

namespace {

/// "std::out_of_range: vector::_M_range_check: ..." : the type says more than what() alone.
std::string describe(const std::exception& e) {
  const char* mangled = typeid(e).name();
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string type = status == 0 && demangled ? demangled : mangled;
  std::free(demangled);
  return type + ": " + e.what();
}

}  // namespace

const char* to_string(Outcome::Kind kind) {
  switch (kind) {
    case Outcome::Emitted: return "emitted";
    case Outcome::Rejected: return "rejected";
    case Outcome::Unlocated: return "a SpecError without a location in the spec";
    case Outcome::EmitRejected: return "accepted by check (or emit --reference-only), then a SpecError from an emitter";
    case Outcome::Internal: return "optgen::InternalError";
    case Outcome::OtherException: return "an exception other than optgen::SpecError";
    case Outcome::Slow: return "over the time budget of emit";
  }
  return "?";
}

bool is_located(const std::string& message, const std::string& path, const std::string& text) {
  const std::string prefix = path + ":";
  if (message.compare(0, prefix.size(), prefix) != 0) return false;
  size_t at = prefix.size();
  auto number = [&](long* value) {
    size_t start = at;
    *value = 0;
    while (at < message.size() && std::isdigit(static_cast<unsigned char>(message[at])) && at - start < 9)
      *value = *value * 10 + (message[at++] - '0');
    return at > start && at < message.size() && message[at++] == ':';
  };
  long line = 0, column = 0;
  if (!number(&line) || !number(&column)) return false;
  if (message.compare(at, 8, " error: ") != 0) return false;
  const long lines = static_cast<long>(std::count(text.begin(), text.end(), '\n')) + 1;
  return line >= 1 && line <= lines + 1 && column >= 1;
}

namespace {

Outcome run_stages(const std::string& path, const std::string& text) {
  Outcome outcome;
  bool accepted = false;  // by `optgen check`: loaded, lowered, every variant compiled
  try {
    Spec spec = load_spec_text(path, text);
    // The CPU reference is built for more of the language than the kernels (rows and columns):
    // what `optgen emit --reference-only` accepts, it must emit.
    std::vector<Program> variants = compile_spec(spec, {}, Emitters::ReferenceOnly);
    accepted = true;
    std::string reference = emit_reference(spec, variants);
    accepted = false;
    check_emitters(spec, variants, Emitters::All);
    accepted = true;
    const std::vector<Storage> storage = spec.storage.empty() ? default_storage() : spec.storage;
    const KernelTuning tuning;
    Sources& s = outcome.sources;
    s.name = spec.name;
    s.file_name = spec_file_name(spec);
    s.variants = static_cast<int>(variants.size());
    s.reference = std::move(reference);
    s.kernels = emit_cuda(spec, variants, storage, tuning);
    s.header = emit_launcher_header(spec, variants);
    s.source = emit_launcher_source(spec, variants, storage, tuning);
    outcome.kind = Outcome::Emitted;
  } catch (const SpecError& e) {
    outcome.message = e.what();
    if (accepted)
      outcome.kind = Outcome::EmitRejected;
    else
      outcome.kind = is_located(outcome.message, path, text) ? Outcome::Rejected : Outcome::Unlocated;
  } catch (const InternalError& e) {
    outcome.kind = Outcome::Internal;
    outcome.message = e.what();
  } catch (const std::exception& e) {
    outcome.kind = Outcome::OtherException;
    outcome.message = describe(e);
  } catch (...) {
    outcome.kind = Outcome::OtherException;
    outcome.message = "an exception not derived from std::exception";
  }
  return outcome;
}

}  // namespace

Outcome run_pipeline(const std::string& path, const std::string& text) {
  const auto start = std::chrono::steady_clock::now();
  Outcome outcome = run_stages(path, text);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (text.size() < kBudgetedBytes && seconds > kEmitBudgetSeconds && !outcome.is_finding()) {
    outcome.message = "the pipeline took " + std::to_string(seconds) + " s on a spec of " +
                      std::to_string(text.size()) + " bytes (budget: " + std::to_string(kEmitBudgetSeconds) +
                      " s under " + std::to_string(kBudgetedBytes) + " bytes); it " +
                      (outcome.kind == Outcome::Emitted ? "was emitted" : "was rejected: " + outcome.message);
    outcome.kind = Outcome::Slow;
  }
  return outcome;
}

}  // namespace optgen::fuzz
