// safetensors files: the format of huggingface/safetensors (README, "Format"), read and written
// with nlohmann-json for the header.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <optional>
#include <string_view>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "optgen/checkpoint.h"
#include "optgen/error.h"
#include "optgen/files.h"

namespace optgen {
namespace {

constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;  // the limit safetensors itself enforces

[[noreturn]] void bad_file(const std::string& path, const std::string& what) {
  throw Error("read_safetensors(" + path + ")", what, "the file is not a complete safetensors file; write it again");
}

std::uint64_t read_le64(const unsigned char* bytes) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | bytes[i];
  return v;
}

/// The element count of `shape`, or nothing when it does not fit in 64 bits.
std::optional<std::uint64_t> element_count(const std::vector<std::int64_t>& shape) {
  std::uint64_t count = 1;
  for (auto d : shape)
    if (d < 0 || __builtin_mul_overflow(count, static_cast<std::uint64_t>(d), &count)) return std::nullopt;
  return count;
}

/// The bytes of `shape` elements of `size` bytes, or nothing when that does not fit in 64 bits.
std::optional<std::uint64_t> byte_count(const std::vector<std::int64_t>& shape, std::size_t size) {
  std::optional<std::uint64_t> count = element_count(shape);
  std::uint64_t bytes;
  if (!count || __builtin_mul_overflow(*count, static_cast<std::uint64_t>(size), &bytes)) return std::nullopt;
  return bytes;
}

}  // namespace

std::size_t dtype_size(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64") return 8;
  if (dtype == "F32" || dtype == "I32") return 4;
  if (dtype == "BF16" || dtype == "F16") return 2;
  if (dtype == "U8") return 1;
  return 0;
}

const CheckpointTensor* Checkpoint::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

void write_safetensors(const std::string& path, const Checkpoint& checkpoint) {
  const std::string call = "write_safetensors(" + path + ")";
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!checkpoint.metadata.empty()) header["__metadata__"] = checkpoint.metadata;
  std::uint64_t offset = 0;
  for (const auto& t : checkpoint.tensors) {
    const std::size_t size = dtype_size(t.dtype);
    if (size == 0)
      throw Error(call, "tensor '" + t.name + "' has dtype '" + t.dtype + "', which optgen does not write");
    if (t.name == "__metadata__" || header.contains(t.name))
      throw Error(call, "tensor name '" + t.name + "' is used twice");
    if (byte_count(t.shape, size) != std::optional<std::uint64_t>(t.data.size()))
      throw Error(call,
                  "tensor '" + t.name + "' holds " + std::to_string(t.data.size()) + " bytes, not what its shape says");
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // pad the header so the data starts 8-byte aligned
  unsigned char length[8];
  for (int i = 0; i < 8; ++i)
    length[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(text.size()) >> (8 * i));

  std::vector<std::string_view> pieces = {{reinterpret_cast<const char*>(length), 8}, text};
  for (const auto& t : checkpoint.tensors)
    pieces.emplace_back(reinterpret_cast<const char*>(t.data.data()), t.data.size());
  // A temporary of this writer's own, then a rename: writers of one path (every rank of a job)
  // shared `<path>.tmp` and truncated each other's.
  std::string error;
  if (!replace_file(path, pieces, &error)) throw Error(call, error, "check the directory and the free space");
}

Checkpoint read_safetensors(const std::string& path) {
  std::string error;
  std::optional<std::string> file = read_regular_file(path, UINT64_MAX, &error);
  if (!file) throw Error("read_safetensors(" + path + ")", error, "name an optimizer checkpoint file");
  const std::string_view bytes(*file);
  if (bytes.size() < 8)
    bad_file(path, "it has " + std::to_string(bytes.size()) + " bytes, fewer than the 8 of the header length");
  const std::uint64_t header_bytes = read_le64(reinterpret_cast<const unsigned char*>(bytes.data()));
  if (header_bytes > kMaxHeaderBytes)
    bad_file(path, "its header length, " + std::to_string(header_bytes) + " bytes, is beyond any real header");
  if (8 + header_bytes > bytes.size())
    bad_file(path, "its header is " + std::to_string(header_bytes) + " bytes long but the file ends after " +
                       std::to_string(bytes.size() - 8));

  nlohmann::ordered_json header;
  try {
    header =
        nlohmann::ordered_json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(header_bytes));
  } catch (const nlohmann::json::exception& e) {
    bad_file(path, std::string("its header is not JSON: ") + e.what());
  }
  if (!header.is_object()) bad_file(path, "its header is not a JSON object");

  Checkpoint checkpoint;
  const std::uint64_t data_bytes = bytes.size() - 8 - header_bytes;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const auto& entry = it.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) bad_file(path, "__metadata__ is not a JSON object");
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        if (!m.value().is_string()) bad_file(path, "__metadata__ entry '" + m.key() + "' is not a string");
        checkpoint.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string what = "tensor '" + name + "'";
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets"))
      bad_file(path, what + " lacks its dtype, shape or data_offsets");
    CheckpointTensor t;
    t.name = name;
    if (!entry["dtype"].is_string()) bad_file(path, what + ": its dtype is not a string");
    t.dtype = entry["dtype"].get<std::string>();
    const std::size_t size = dtype_size(t.dtype);
    if (size == 0) bad_file(path, what + " has dtype '" + t.dtype + "', which optgen does not read");
    if (!entry["shape"].is_array()) bad_file(path, what + ": its shape is not a list");
    for (const auto& d : entry["shape"]) {
      if (!d.is_number_unsigned() || d.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
        bad_file(path, what + ": its shape holds something other than sizes");
      t.shape.push_back(d.get<std::int64_t>());
    }
    const auto& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned())
      bad_file(path, what + ": its data_offsets are not two byte offsets");
    const std::uint64_t begin = offsets[0].get<std::uint64_t>(), end = offsets[1].get<std::uint64_t>();
    if (begin > end) bad_file(path, what + " ends before it begins");
    if (end > data_bytes)
      bad_file(path, what + " ends at byte " + std::to_string(end) + " of the data, but the file holds " +
                         std::to_string(data_bytes) + ": it is truncated");
    if (byte_count(t.shape, size) != std::optional<std::uint64_t>(end - begin))
      bad_file(path, what + " has " + std::to_string(end - begin) + " bytes, which does not match its shape and dtype");
    t.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(8 + header_bytes + begin),
                  bytes.begin() + static_cast<std::ptrdiff_t>(8 + header_bytes + end));
    ranges.emplace_back(begin, end);
    checkpoint.tensors.push_back(std::move(t));
  }
  // The byte ranges must tile the data section exactly: no gaps, no overlaps, nothing after.
  std::sort(ranges.begin(), ranges.end());
  std::uint64_t covered = 0;
  for (const auto& [begin, end] : ranges) {
    if (begin != covered)
      bad_file(path, "its tensors leave a gap or overlap at byte " + std::to_string(covered) + " of the data");
    covered = end;
  }
  if (covered != data_bytes)
    bad_file(path, "its tensors cover " + std::to_string(covered) + " bytes of data but the file holds " +
                       std::to_string(data_bytes));
  return checkpoint;
}

}  // namespace optgen
