#pragma once
/// Specs loaded at run time: a YAML spec becomes an optimizer with no C++ compiler. The spec is
/// loaded, lowered and compiled as `optgen check` does; the engine gets the tables a generated
/// launcher would hold (generator/optimizer_tables.h builds both), the derived flags are evaluated
/// from the spec's IR, and the kernels are the source `optgen emit` writes to <spec>_kernels.cu,
/// compiled by NVRTC at prepare() through the kernel cache (optgen/kernel_cache.h).
///
///   optgen::RuntimeSpec spec = optgen::load_spec_at_run_time("my_lion.yaml");
///   optgen::FusedOptimizer opt(spec.info(), spec.defaults(), optgen::DType::F32);
///   opt.add_param_group(tensors, {{"lr", 1e-4}});  // then prepare() and step(), as with a launcher
///
/// A RuntimeSpec must outlive every optimizer made from it: they point into it. It is immutable,
/// so threads may share one. Defined by the library optgen_spec_loader (which links the generator
/// and yaml-cpp); the runtime alone does not have it.

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "optgen/optimizer.h"

namespace optgen {

/// How a spec loaded at run time is generated.
struct SpecOptions {
  /// Storage types to generate kernels for, as `optgen emit --storage` takes them: "PARAM[:STATE]",
  /// e.g. "f32" or "bf16:bf16". Empty: the spec's `storage:` list, else f32 and bf16.
  std::vector<std::string> storage;
};

/// A mistake in a spec loaded at run time, or a spec file that cannot be read: what() is the
/// message `optgen check` prints, `file:line:col: error: ...` followed by the source line and a
/// caret.
class SpecLoadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// An optimizer described by a spec loaded at run time: everything its OptimizerInfo points at.
class RuntimeSpec {
 public:
  RuntimeSpec(RuntimeSpec&&) noexcept;
  RuntimeSpec& operator=(RuntimeSpec&&) noexcept;
  ~RuntimeSpec();

  /// What FusedOptimizer needs; valid as long as this object (moving it keeps it valid).
  const OptimizerInfo& info() const;
  /// Every hyperparameter's default from the spec, in declaration order (derived flags as 0): the
  /// `defaults` argument of FusedOptimizer.
  const std::vector<double>& defaults() const;
  /// The kernels' CUDA source, as `optgen emit` writes it to <spec>_kernels.cu.
  const std::string& kernel_source() const;
  /// What the spec does that is allowed but likely not meant (a literal beyond float range), each
  /// as `optgen check` prints it: `file:line:col: warning: ...`, the line and a caret.
  const std::vector<std::string>& warnings() const;

  struct Impl;  ///< defined by the loader's sources
  explicit RuntimeSpec(std::unique_ptr<const Impl> impl);

 private:
  std::unique_ptr<const Impl> impl_;
};

/// Loads, checks and compiles the spec at `path` (its file stem names it, as for `optgen emit`).
/// Throws SpecLoadError for a mistake in the spec or a file it cannot read, and optgen::Error for
/// bad `options`. Needs no GPU: the kernels are compiled when an optimizer is prepared.
RuntimeSpec load_spec_at_run_time(const std::string& path, const SpecOptions& options = {});

}  // namespace optgen
