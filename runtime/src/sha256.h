#pragma once
/// SHA-256 (FIPS 180-4), for the kernel cache's keys and entry checksums.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace optgen::detail {

using Sha256Digest = std::array<std::uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void update(const void* data, std::size_t size);
  /// The digest of everything passed to update(); the object must not be used afterwards.
  Sha256Digest finish();

 private:
  void compress(const std::uint8_t* block);

  std::array<std::uint32_t, 8> state_;
  std::array<std::uint8_t, 64> buffer_{};
  std::size_t buffered_ = 0;
  std::uint64_t total_bytes_ = 0;
};

Sha256Digest sha256(const void* data, std::size_t size);

/// Lower-case hexadecimal, two digits per byte.
std::string to_hex(const Sha256Digest& digest);

}  // namespace optgen::detail
