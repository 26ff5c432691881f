#include "emit_common.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "expr_printer.h"

namespace optgen {

std::string generator_banner() { return std::string("optgen ") + OPTGEN_VERSION; }

std::string spec_file_name(const Spec& spec) {
  const std::string& path = spec.file->path;
  size_t slash = path.find_last_of('/');
  return comment_text(slash == std::string::npos ? path : path.substr(slash + 1));
}

std::string variant_banner(const Program& variant) {
  std::string flags;
  for (const auto& [flag, value] : variant.flags)
    flags += (flags.empty() ? "" : ", ") + flag + "=" + (value ? "true" : "false");
  return "// ---- variant " + variant.variant + (flags.empty() ? "" : " (" + flags + ")") + " ----";
}

namespace {
/// The length of the well-formed UTF-8 sequence at text[i], or 0 when there is none.
std::size_t utf8_sequence(const std::string& text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  const std::size_t length = lead >= 0xC2 && lead <= 0xDF   ? 2
                             : lead >= 0xE0 && lead <= 0xEF ? 3
                             : lead >= 0xF0 && lead <= 0xF4 ? 4
                                                            : 0;
  if (length == 0 || i + length > text.size()) return 0;
  for (std::size_t k = i + 1; k < i + length; ++k)
    if ((byte(k) & 0xC0) != 0x80) return 0;
  return length;
}
}  // namespace

std::string comment_text(const std::string& text) {
  // One line of printable text: line breaks become spaces; other control characters and bytes
  // that are not UTF-8 become '?' (NVRTC's front end reads a 0xFF byte as the end of the source).
  std::string line;
  for (std::size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\n' || c == '\r' || c == '\t') {
      line += ' ';
      ++i;
    } else if (c < 0x20 || c == 0x7F) {
      line += '?';
      ++i;
    } else if (c < 0x80) {
      line += static_cast<char>(c);
      ++i;
    } else if (const std::size_t length = utf8_sequence(text, i)) {
      line += text.substr(i, length);
      i += length;
    } else {
      line += '?';
      ++i;
    }
  }
  while (!line.empty() && (line.back() == '\\' || std::isspace(static_cast<unsigned char>(line.back()))))
    line.pop_back();
  return line;
}

namespace {
std::string with_fraction(std::string s) {
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}
}  // namespace

std::string cpp_double_literal(double value) {
  if (std::isinf(value))
    return value > 0 ? "::std::numeric_limits<double>::infinity()" : "-::std::numeric_limits<double>::infinity()";
  return with_fraction(format_number(value));
}

std::string cuda_double_literal(double value) {
  if (std::isinf(value))
    return value > 0 ? "__longlong_as_double(0x7ff0000000000000ll)" : "__longlong_as_double(0xfff0000000000000ll)";
  return with_fraction(format_number(value));
}

std::string cuda_float_literal(double value) {
  const float f = static_cast<float>(value);
  if (std::isinf(f)) return f > 0 ? "__int_as_float(0x7f800000)" : "__int_as_float(0xff800000)";
  char buffer[40];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(buffer, sizeof buffer, "%.*g", digits, static_cast<double>(f));
    if (std::strtof(buffer, nullptr) == f) break;
  }
  return with_fraction(buffer) + "f";
}

std::vector<const HoistedValue*> tensor_values_read(const Program& p, const std::vector<Expr>& roots) {
  std::set<std::string> read;
  for (const auto& r : roots)
    for_each_node(r, [&](const Expr& e) {
      if (e->kind == NodeKind::Var && e->var == VarKind::Hoisted && e->level == Domain::Tensor) read.insert(e->name);
    });
  std::vector<const HoistedValue*> values;
  for (const auto& t : p.values[Domain::Tensor])
    if (read.count(t.name)) values.push_back(&t);
  return values;
}

}  // namespace optgen
