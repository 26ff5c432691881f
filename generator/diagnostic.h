#pragma once
/// Errors the generator reports. A SpecError is the spec author's mistake and reads like a
/// compiler's (`file:line:col: error: ...`, the line, a caret); an InternalError is a broken
/// invariant inside optgen itself and says so.

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace optgen {

/// The text of one spec file, kept so that errors can quote the offending line.
struct SourceFile {
  std::string path;  ///< as given on the command line; used verbatim in messages
  std::string text;
  std::string line(int line_number) const;  ///< 1-based; empty if out of range
};

/// A position in a spec file. Lines and columns count from 1; line 0 means "no position".
struct SourceLoc {
  std::shared_ptr<const SourceFile> file;
  int line = 0;
  int column = 0;

  bool known() const { return file && line > 0; }
  SourceLoc shifted(int columns) const { return {file, line, column + columns}; }
};

/// A mistake in a spec: the message is complete, formatted with location, line and caret.
class SpecError : public std::runtime_error {
 public:
  SpecError(const SourceLoc& loc, const std::string& message, const std::string& hint = "");
  const std::string& bare_message() const { return bare_; }

 private:
  std::string bare_;
};

/// A bug in optgen: an invariant that the generator itself broke.
class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& message);
};

/// `file:line:col: error: message`, then the source line and a caret, then `note: hint`;
/// `severity` "warning" for a warning.
std::string format_diagnostic(const SourceLoc& loc, const std::string& message, const std::string& hint = "",
                              const char* severity = "error");

/// The candidate closest to `name` by edit distance, if it is close enough to be a likely typo.
std::string closest_name(const std::string& name, const std::vector<std::string>& candidates);

/// " (did you mean 'x'?)" or "".
std::string did_you_mean(const std::string& name, const std::vector<std::string>& candidates);

}  // namespace optgen
