/// The kernel images a build embeds (<spec>_images.cpp, written by emit_images as string literals):
/// every built-in's cubins are whole ELF files, to their last byte, and its PTX is text ending in
/// its one NUL, so no byte was lost, added or changed on the way through the generated C++.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "builtin_launchers.h"

namespace {

template <typename T>
T read(const unsigned char* data, size_t offset) {
  T value;
  std::memcpy(&value, data + offset, sizeof value);
  return value;
}

/// Where an ELF64 file's contents end: the furthest of its header tables and its sections' data.
uint64_t elf_extent(const unsigned char* elf) {
  const auto section_headers = read<uint64_t>(elf, 0x28);
  const auto program_headers = read<uint64_t>(elf, 0x20);
  const auto program_header_size = read<uint16_t>(elf, 0x36);
  const auto program_header_count = read<uint16_t>(elf, 0x38);
  const auto section_header_size = read<uint16_t>(elf, 0x3A);
  const auto section_header_count = read<uint16_t>(elf, 0x3C);
  uint64_t end = std::max<uint64_t>(section_headers + uint64_t{section_header_size} * section_header_count,
                                    program_headers + uint64_t{program_header_size} * program_header_count);
  constexpr uint32_t kNoBits = 8;  // SHT_NOBITS: a section with no data in the file
  for (uint16_t i = 0; i < section_header_count; ++i) {
    const unsigned char* header = elf + section_headers + uint64_t{section_header_size} * i;
    if (read<uint32_t>(header, 4) == kNoBits) continue;
    end = std::max(end, read<uint64_t>(header, 0x18) + read<uint64_t>(header, 0x20));
  }
  return end;
}

}  // namespace

TEST_CASE("embedded images: cubins are whole ELF files, PTX is text ending in one NUL", "[images]") {
  for (const auto& [name, info] : optgen::builtin_launchers()) {
    INFO(name);
    const optgen::KernelImages& images = *info->images;
    REQUIRE(images.num_images >= 2);  // a cubin per architecture, then the newest one's PTX
    for (int i = 0; i < images.num_images; ++i) {
      const optgen::KernelImage& image = images.images[i];
      INFO((image.ptx ? "compute_" : "sm_") << image.arch);
      if (image.ptx) {
        const char* text = reinterpret_cast<const char*>(image.data);
        REQUIRE(image.size > 0);
        CHECK(text[image.size - 1] == '\0');
        CHECK(std::strlen(text) == image.size - 1);
        CHECK(std::strstr(text, (".target sm_" + std::to_string(image.arch)).c_str()) != nullptr);
      } else {
        REQUIRE(image.size > 64);
        REQUIRE(std::memcmp(image.data, "\177ELF\2", 5) == 0);  // ELF, 64-bit
        CHECK(elf_extent(image.data) == image.size);
      }
    }
  }
}
