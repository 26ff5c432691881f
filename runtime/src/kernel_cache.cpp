#include "optgen/kernel_cache.h"

#include "optgen/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <system_error>
#include <utility>

// xxHash, compiled into this file with every function static: the static runtime library needs
// no libxxhash at link time, and neither do the programs that link it.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace optgen {

namespace {

namespace fs = std::filesystem;

/// An entry: the magic, the payload's size (8 bytes, little-endian), the payload's checksum (its
/// XXH3 128-bit hash, canonical byte order), the payload. The magic's digit is the format's
/// version (1 had a SHA-256 checksum).
constexpr char kMagic[8] = {'O', 'P', 'T', 'G', 'E', 'N', 'K', '2'};
constexpr std::size_t kSizeOffset = sizeof(kMagic);
constexpr std::size_t kDigestOffset = kSizeOffset + 8;
constexpr std::size_t kDigestSize = sizeof(XXH128_canonical_t);
constexpr std::size_t kHeaderSize = kDigestOffset + kDigestSize;

void put_u64(unsigned char* out, std::uint64_t value) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(value >> (8 * i));
}

std::uint64_t get_u64(const char* in) {
  std::uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value |= std::uint64_t{static_cast<unsigned char>(in[i])} << (8 * i);
  return value;
}

/// The hash in its canonical (big-endian) bytes: the same on every machine.
XXH128_canonical_t canonical(XXH128_hash_t hash) {
  XXH128_canonical_t bytes;
  XXH128_canonicalFromHash(&bytes, hash);
  return bytes;
}

XXH128_canonical_t checksum(const char* data, std::size_t size) { return canonical(XXH3_128bits(data, size)); }

/// Hashes `text` preceded by its length, so that no two different field lists hash the same bytes.
void hash_field(XXH3_state_t& hash, const std::string& text) {
  unsigned char length[8];
  put_u64(length, text.size());
  XXH3_128bits_update(&hash, length, sizeof(length));
  XXH3_128bits_update(&hash, text.data(), text.size());
}

std::string to_hex(const XXH128_canonical_t& hash) {
  static const char kDigits[] = "0123456789abcdef";
  std::string text;
  for (unsigned char byte : hash.digest) {
    text += kDigits[byte >> 4];
    text += kDigits[byte & 15];
  }
  return text;
}

bool is_valid_entry(const std::vector<char>& bytes) {
  if (bytes.size() < kHeaderSize || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) return false;
  if (get_u64(bytes.data() + kSizeOffset) != bytes.size() - kHeaderSize) return false;
  const XXH128_canonical_t digest = checksum(bytes.data() + kHeaderSize, bytes.size() - kHeaderSize);
  return std::memcmp(digest.digest, bytes.data() + kDigestOffset, kDigestSize) == 0;
}

/// No kernel image comes near this: a larger entry is not one (and reading it could take all memory).
constexpr std::uint64_t kMaxEntryBytes = std::uint64_t{1} << 30;

/// The whole entry file; nullopt when there is none or the path names something other than a
/// regular file (a directory, a FIFO, a device: checked on the opened descriptor, which a FIFO does
/// not wait on). A regular file that cannot be read (larger than any kernel image, more than memory
/// holds) comes back empty, so that load() takes it for corrupt and removes it: it threw
/// std::bad_alloc out of every load. Which of the two is decided by what the read saw, not by a
/// second look at the path: between a read that found no entry and that look, another process
/// could rename its whole entry into place, which load() then removed as corrupt.
std::optional<std::vector<char>> read_entry(const std::string& path) {
  std::string error;
  bool absent = false;
  std::optional<std::string> bytes = read_regular_file(path, kMaxEntryBytes, &error, &absent);
  if (!bytes) {
    if (absent) return std::nullopt;
    return std::vector<char>();
  }
  return std::vector<char>(bytes->begin(), bytes->end());
}

/// Makes temporary file names unique across processes that share a cache (even in other PID
/// namespaces) and across threads of one process.
std::string unique_suffix() {
  static std::atomic<std::uint64_t> counter{0};
  std::uint64_t value = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  value ^= counter.fetch_add(1) << 48;
  try {
    value ^= std::uint64_t{std::random_device{}()} << 16;
  } catch (const std::exception&) {
    // No entropy source: the clock and the counter still separate this process's writers.
  }
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(value));
  return std::to_string(getpid()) + "." + text;
}

/// With no HOME: a per-user directory under the system's temporary directory, created private.
/// If another user already owns that name (the temporary directory is shared), a fresh private
/// directory for this process instead, so that nobody else can plant a kernel in our cache.
std::string temporary_cache_directory() {
  std::error_code error;
  fs::path temporary = fs::temp_directory_path(error);
  if (error) temporary = "/tmp";
  std::string shared = (temporary / ("optgen-cache-" + std::to_string(getuid()))).string();
  mkdir(shared.c_str(), 0700);
  struct stat info {};
  if (lstat(shared.c_str(), &info) == 0 && S_ISDIR(info.st_mode) && info.st_uid == getuid() &&
      (info.st_mode & 077) == 0) {
    return shared;
  }
  std::string fresh = (temporary / "optgen-cache-XXXXXX").string();
  if (mkdtemp(fresh.data()) != nullptr) return fresh;
  return shared + ".unusable";  // store() fails and load() misses: kernels are compiled every time
}

}  // namespace

KernelCache::KernelCache(std::string directory) : directory_(std::move(directory)) {}

KernelCache KernelCache::from_environment() {
  const char* chosen = std::getenv("OPTGEN_CACHE_DIR");
  if (chosen != nullptr && *chosen != '\0') return KernelCache(chosen);
  // The XDG base directory spec says to ignore a relative XDG_CACHE_HOME.
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/') return KernelCache((fs::path(xdg) / "optgen").string());
  const char* home = std::getenv("HOME");
  if (home != nullptr && *home != '\0') return KernelCache((fs::path(home) / ".cache" / "optgen").string());
  return KernelCache(temporary_cache_directory());
}

std::string KernelCache::key(const std::string& source, const Headers& headers, const std::vector<std::string>& options,
                             int arch, const std::string& nvrtc_version) {
  XXH3_state_t hash;
  XXH3_INITSTATE(&hash);
  XXH3_128bits_reset(&hash);
  hash_field(hash, "optgen kernel cache key 3");
  hash_field(hash, source);
  hash_field(hash, std::to_string(headers.size()));
  for (const auto& [name, text] : headers) {
    hash_field(hash, name);
    hash_field(hash, text);
  }
  hash_field(hash, std::to_string(options.size()));
  for (const std::string& option : options) hash_field(hash, option);
  hash_field(hash, std::to_string(arch));
  hash_field(hash, nvrtc_version);
  return to_hex(canonical(XXH3_128bits_digest(&hash)));
}

KernelCache& KernelCache::operator=(const KernelCache& other) {
  directory_ = other.directory_;
  last_.store(other.last_outcome(), std::memory_order_relaxed);
  return *this;
}

std::string KernelCache::path(const std::string& key) const { return (fs::path(directory_) / key).string(); }

std::optional<std::vector<char>> KernelCache::load(const std::string& key) const {
  const std::string file = path(key);
  std::optional<std::vector<char>> bytes = read_entry(file);
  if (!bytes) {
    last_ = Outcome::Miss;
    return std::nullopt;
  }
  if (!is_valid_entry(*bytes)) {
    last_ = Outcome::Corrupt;
    std::error_code ignored;
    fs::remove(file, ignored);
    return std::nullopt;
  }
  last_ = Outcome::Hit;
  bytes->erase(bytes->begin(), bytes->begin() + kHeaderSize);
  return bytes;
}

bool KernelCache::store(const std::string& key, const std::vector<char>& image) const {
  std::error_code error;
  fs::create_directories(directory_, error);
  if (error) return false;

  unsigned char header[kHeaderSize];
  std::memcpy(header, kMagic, sizeof(kMagic));
  put_u64(header + kSizeOffset, image.size());
  const XXH128_canonical_t digest = checksum(image.data(), image.size());
  std::memcpy(header + kDigestOffset, digest.digest, kDigestSize);

  const std::string file = path(key);
  const std::string temporary = file + ".tmp." + unique_suffix();
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(header), sizeof(header));
    out.write(image.data(), static_cast<std::streamsize>(image.size()));
    out.close();
    if (!out) {
      fs::remove(temporary, error);
      return false;
    }
  }
  fs::rename(temporary, file, error);
  if (error) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    return false;
  }
  return true;
}

}  // namespace optgen
