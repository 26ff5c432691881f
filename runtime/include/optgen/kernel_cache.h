#pragma once
/// The on-disk cache of kernels compiled by NVRTC at load time. An entry's key covers everything
/// the machine code depends on: the source, the files it includes (the device library), the NVRTC
/// options, the architecture and the NVRTC version. Entries are written atomically (temporary
/// file, then rename) and carry a header with their size and a checksum, so a truncated or corrupt
/// entry is detected, reported as a miss, and overwritten by the next store. Any number of
/// processes and threads may use one directory at once: a load finds a whole entry as some store
/// wrote it, or none.

#include <atomic>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace optgen {

class KernelCache {
 public:
  /// The cache in `directory`, created on first store.
  explicit KernelCache(std::string directory);
  /// $OPTGEN_CACHE_DIR, else $XDG_CACHE_HOME/optgen, else $HOME/.cache/optgen.
  static KernelCache from_environment();

  /// The include files a source is compiled with, as (include name, text) pairs: for optgen's
  /// kernels, nvrtc::device_library(), which nvrtc::compile hands NVRTC.
  using Headers = std::vector<std::pair<std::string, std::string>>;

  /// The key for one compilation (the XXH3 128-bit hash of the fields, the include files among
  /// them; as 32 hex digits, the file name of its entry). The same inputs give the same key on
  /// every machine and in every release that keeps the entry format.
  static std::string key(const std::string& source, const Headers& headers, const std::vector<std::string>& options,
                         int arch, const std::string& nvrtc_version);

  /// The entry for `key`, or nullopt when there is none or it is corrupt (a corrupt entry is
  /// removed). Something other than a regular file at the entry's path (a directory, a FIFO) is a
  /// miss, and is left where it is.
  std::optional<std::vector<char>> load(const std::string& key) const;
  /// Writes the entry atomically. A cache that cannot be written, or whose entry path holds a
  /// directory, is not an error (the kernel is still usable); returns false then.
  bool store(const std::string& key, const std::vector<char>& image) const;

  const std::string& directory() const { return directory_; }
  std::string path(const std::string& key) const;  ///< the entry's file

  /// What the last load() found, for tests and logging. Threads may share one cache (every member
  /// is const); then it is what one of the latest loads found.
  enum class Outcome { None, Hit, Miss, Corrupt };
  Outcome last_outcome() const { return last_.load(std::memory_order_relaxed); }

  KernelCache(const KernelCache& other) : directory_(other.directory_), last_(other.last_outcome()) {}
  KernelCache& operator=(const KernelCache& other);

 private:
  std::string directory_;
  mutable std::atomic<Outcome> last_{Outcome::None};  ///< written by const load(), so atomic
};

}  // namespace optgen
