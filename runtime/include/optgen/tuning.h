#pragma once
/// Launch parameters measured on one GPU: the table `optgen_bench --tune` writes and the runtime
/// reads (bench/README.md, "Tuning for a GPU"). For each kernel set, named by its Update stage's
/// kernel (KernelInfo::stages' last, e.g. adamw_f32_q8_exp_avg_sq_uq8_update), the chunk size and, where
/// measured, the launch shape (threads per block, elements in flight per thread: kernel_abi.h,
/// "Launch shape") that stepped models of a few sizes fastest: a plan takes the entry of the model
/// nearest its own size. The file is JSON:
///
///   {"device": "NVIDIA H200", "measured": "...",
///    "kernels": {"adamw_f32_q8_exp_avg_sq_uq8_update": [{"elements": 5182508, "chunk_size": 8192}, ...],
///                "adam_f32_f32_update": [{"elements": 124439808, "chunk_size": 2048,
///                                         "block_size": 128, "elements_per_thread": 8}, ...]}}
///
/// FusedOptimizer reads the tables the environment variable OPTGEN_TUNING names (paths separated
/// by ':') and uses the one for the current device (its name as the driver gives it), if any;
/// set_chunk_size and set_launch_shape win over it, and the generator's choices apply where
/// neither says. A launch shape other than the generator's compiles the kernels with NVRTC when
/// they are first loaded (then from the kernel cache).

#include <map>
#include <string>
#include <vector>

namespace optgen {

struct OptimizerInfo;
struct KernelInfo;

/// The name a tuning table knows kernel set `kernel` of `info` by: its Update stage's kernel.
std::string tuning_name(const OptimizerInfo& info, const KernelInfo& kernel);

class Tuning {
 public:
  /// One measurement: a plan of `elements` elements stepped fastest in chunks of `chunk_size`,
  /// with blocks of `block_size` threads of `elements_per_thread` elements in flight (both 0: the
  /// shape was not measured, the generator's applies).
  struct Entry {
    long long elements;
    long long chunk_size;
    int block_size = 0;
    int elements_per_thread = 0;
  };

  Tuning() = default;
  explicit Tuning(std::string device) : device_(std::move(device)) {}

  /// Reads a table. Throws optgen::Error naming the file and what is wrong with it: JSON that
  /// does not parse (with its line and column), a missing or mistyped field, a chunk size that is
  /// not a multiple of 64 up to 2^30, an element count that is not positive or measured twice, a block size or
  /// elements per thread that kernel_abi.h does not allow, one of the two without the other.
  static Tuning load(const std::string& path);
  /// The same from text; `origin` names it in errors.
  static Tuning parse(const std::string& text, const std::string& origin);
  /// Throws optgen::Error naming the table and the kernel set when the table names a kernel set
  /// that `info` would own (one of its variants, then a params dtype: adamw_f32_...) but does not
  /// have, with the names of those it has: such an entry would do nothing.
  void check_kernel_names(const OptimizerInfo& info) const;
  /// The tables OPTGEN_TUNING names, the one for `device` (a device name); an empty table when the
  /// variable is unset or names none for it. Throws what load throws.
  static Tuning from_environment(const std::string& device);

  const std::string& device() const { return device_; }
  bool empty() const { return kernels_.empty(); }
  /// Kernel set `kernel`'s entry for a plan of `elements` elements: the one whose element count is
  /// nearest by ratio (the larger on a tie); null where the table has none for it.
  const Entry* find(const std::string& kernel, long long elements) const;
  /// That entry's chunk size; 0 where the table has none.
  long long chunk_size(const std::string& kernel, long long elements) const;
  /// Adds (or replaces) kernel set `kernel`'s entries.
  void set(const std::string& kernel, std::vector<Entry> entries);
  const std::map<std::string, std::vector<Entry>>& kernels() const { return kernels_; }
  /// The table as load reads it; `measured` says when and how it was measured.
  std::string to_json(const std::string& measured) const;

 private:
  std::string device_;
  std::string origin_;                                 ///< the file it was read from (parse's `origin`)
  std::map<std::string, std::vector<Entry>> kernels_;  ///< entries by increasing `elements`
};

}  // namespace optgen
