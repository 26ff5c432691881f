#include "optgen/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

namespace optgen {
namespace {

/// Closes a file descriptor on every path out.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() { release(); }
  int get() const { return fd_; }
  int release() {
    int result = 0;
    if (fd_ >= 0) result = close(fd_);
    fd_ = -1;
    return result;
  }

 private:
  int fd_;
};

const char* file_type(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

std::optional<std::string> read_regular_file(const std::string& path, std::uint64_t max_bytes, std::string* error,
                                             bool* absent) {
  bool ignored = false;
  bool& nothing_regular = absent != nullptr ? *absent : ignored;
  nothing_regular = false;
  FileDescriptor file(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (file.get() < 0) {
    nothing_regular = errno == ENOENT || errno == ENOTDIR;
    *error = std::string("cannot open the file: ") + std::strerror(errno);
    return std::nullopt;
  }
  struct stat info {};
  if (fstat(file.get(), &info) != 0) {
    *error = std::string("cannot read the file's type: ") + std::strerror(errno);
    return std::nullopt;
  }
  if (!S_ISREG(info.st_mode)) {
    nothing_regular = true;
    *error = std::string("this is ") + file_type(info.st_mode) + ", not a regular file";
    return std::nullopt;
  }
  if (static_cast<std::uint64_t>(info.st_size) > max_bytes) {
    *error = "the file holds " + std::to_string(info.st_size) + " bytes, more than the " + std::to_string(max_bytes) +
             " it may have";
    return std::nullopt;
  }
  std::string bytes;
  try {
    bytes.resize(static_cast<std::size_t>(info.st_size));
  } catch (const std::bad_alloc&) {
    *error = "the file does not fit in memory (" + std::to_string(info.st_size) + " bytes)";
    return std::nullopt;
  }
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got = read(file.get(), bytes.data() + done, bytes.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      *error = std::string("reading the file failed: ") + std::strerror(errno);
      return std::nullopt;
    }
    if (got == 0) break;  // shorter than its size said (it shrank): what was read
    done += static_cast<std::size_t>(got);
  }
  bytes.resize(done);
  return bytes;
}

bool replace_file(const std::string& path, const std::vector<std::string_view>& pieces, std::string* error) {
  std::string temporary = path + ".tmp.XXXXXX";
  FileDescriptor file(mkostemp(temporary.data(), O_CLOEXEC));
  if (file.get() < 0) {
    *error = "cannot create a temporary file " + temporary + ": " + std::strerror(errno);
    return false;
  }
  const auto fail = [&](const std::string& what) {
    const int saved = errno;
    file.release();
    unlink(temporary.c_str());
    *error = what + ": " + std::strerror(saved);
    return false;
  };
  // mkostemp makes the file private; a checkpoint is as readable as any file its writer creates.
  const mode_t mask = umask(0);
  umask(mask);
  if (fchmod(file.get(), 0666 & ~mask) != 0) return fail("cannot set the permissions of " + temporary);
  for (std::string_view bytes : pieces)
    for (std::size_t done = 0; done < bytes.size();) {
      const ssize_t put = write(file.get(), bytes.data() + done, bytes.size() - done);
      if (put < 0 && errno == EINTR) continue;
      if (put <= 0) return fail("writing " + temporary + " failed");
      done += static_cast<std::size_t>(put);
    }
  if (fsync(file.get()) != 0) return fail("flushing " + temporary + " to disk failed");
  if (file.release() != 0) return fail("closing " + temporary + " failed");
  if (rename(temporary.c_str(), path.c_str()) != 0) {
    const int saved = errno;
    unlink(temporary.c_str());
    *error = "cannot rename " + temporary + " to " + path + ": " + std::strerror(saved);
    return false;
  }
  return true;
}

}  // namespace optgen
