#pragma once
/// Reading whole files safely: the runtime's and the generator's one way to read a file a user
/// names (a spec, a tuning table, a checkpoint, a cache entry).

#include <cstdint>
#include <optional>
#include <string>

namespace optgen {

/// The whole content of the regular file at `path`; nullopt, with why not in `error`, when it
/// cannot be opened, is something other than a regular file (a directory, a FIFO, a device: checked
/// on the opened descriptor, opened without waiting for a FIFO's writer) or holds more than
/// `max_bytes` (checked before reading).
std::optional<std::string> read_regular_file(const std::string& path, std::uint64_t max_bytes, std::string* error);

}  // namespace optgen
