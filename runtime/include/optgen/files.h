#pragma once
/// Reading and writing whole files safely: the runtime's and the generator's one way to read a file
/// a user names (a spec, a tuning table, a checkpoint, a cache entry) and to replace one.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace optgen {

/// The whole content of the regular file at `path`; nullopt, with why not in `error`, when it
/// cannot be opened, is something other than a regular file (a directory, a FIFO, a device: checked
/// on the opened descriptor, opened without waiting for a FIFO's writer) or holds more than
/// `max_bytes` (checked before reading). `absent`, where given, tells a failure because no regular
/// file is there (the path names nothing, or something else) from one of a file that is (too
/// large, unreadable): from what the one open and fstat saw, so that a file another process renames
/// into place meanwhile is never taken for a broken one.
std::optional<std::string> read_regular_file(const std::string& path, std::uint64_t max_bytes, std::string* error,
                                             bool* absent = nullptr);

/// Replaces `path` with `pieces`, one after the other, atomically: written to a temporary of its own in the same
/// directory (created exclusively, so that writers of one path never share one), flushed to disk,
/// then renamed over `path`. A reader sees the old file or the new one, never a mix; on failure the
/// temporary is removed and `error` says why (false).
bool replace_file(const std::string& path, const std::vector<std::string_view>& pieces, std::string* error);

}  // namespace optgen
