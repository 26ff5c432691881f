#include "diagnostic.h"

#include <algorithm>
#include <sstream>

namespace optgen {

std::string SourceFile::line(int line_number) const {
  if (line_number < 1) return {};
  size_t begin = 0;
  for (int i = 1; i < line_number; ++i) {
    begin = text.find('\n', begin);
    if (begin == std::string::npos) return {};
    ++begin;
  }
  size_t end = text.find('\n', begin);
  std::string result = text.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
  if (!result.empty() && result.back() == '\r') result.pop_back();
  return result;
}

namespace {
/// `text` with each control character but tab as its Unicode picture (NUL as U+2400), one column
/// wide: a raw NUL ended the message (what() is a C string), others moved the terminal's cursor.
std::string visible(const std::string& text) {
  std::string out;
  for (char c : text) {
    const unsigned char byte = static_cast<unsigned char>(c);
    if ((byte < 0x20 && byte != '\t') || byte == 0x7f) {
      const unsigned picture = byte == 0x7f ? 0x2421 : 0x2400 + byte;
      out += static_cast<char>(0xE0 | (picture >> 12));
      out += static_cast<char>(0x80 | ((picture >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (picture & 0x3F));
    } else {
      out += c;
    }
  }
  return out;
}
}  // namespace

std::string format_diagnostic(const SourceLoc& loc, const std::string& message, const std::string& hint,
                              const char* severity) {
  std::ostringstream out;
  if (loc.file) {
    out << loc.file->path << ':';
    if (loc.line > 0) out << loc.line << ':' << loc.column << ':';
    out << ' ';
  }
  out << severity << ": " << message << '\n';
  if (loc.known()) {
    std::string text = loc.file->line(loc.line);
    out << visible(text) << '\n';
    // One pad character per character before the caret's column, not per byte: a UTF-8
    // sequence's continuation bytes take no column on screen.
    std::string pad;
    for (int i = 1; i < loc.column && i - 1 < static_cast<int>(text.size()); ++i) {
      const unsigned char byte = static_cast<unsigned char>(text[i - 1]);
      if ((byte & 0xC0) == 0x80) continue;
      pad += byte == '\t' ? '\t' : ' ';
    }
    out << pad << "^\n";
  }
  if (!hint.empty()) out << "note: " << hint << '\n';
  return out.str();
}

SpecError::SpecError(const SourceLoc& loc, const std::string& message, const std::string& hint)
    : std::runtime_error(format_diagnostic(loc, message, hint)), bare_(message) {}

InternalError::InternalError(const std::string& message)
    : std::logic_error("internal error in optgen (a bug, please report it): " + message) {}

namespace {
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}
}  // namespace

std::string closest_name(const std::string& name, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::max<size_t>(1, name.size() / 3) + 1;
  for (const auto& candidate : candidates) {
    size_t d = edit_distance(name, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

std::string did_you_mean(const std::string& name, const std::vector<std::string>& candidates) {
  std::string best = closest_name(name, candidates);
  return best.empty() ? "" : " (did you mean '" + best + "'?)";
}

}  // namespace optgen
