#pragma once
/// An indenting writer for generated code. `block()` opens a scope that indents what is written
/// inside it and closes with its own closing line when it goes out of scope.

#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace optgen {

class CodeWriter {
 public:
  class Scope {
   public:
    Scope(CodeWriter& writer, std::string closer) : writer_(&writer), closer_(std::move(closer)) { ++writer_->indent_; }
    Scope(Scope&& other) noexcept : writer_(other.writer_), closer_(std::move(other.closer_)) {
      other.writer_ = nullptr;
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    ~Scope() {
      if (!writer_) return;
      --writer_->indent_;
      writer_->line(closer_);
    }

   private:
    CodeWriter* writer_;
    std::string closer_;
  };

  /// Writes one line at the current indentation (an empty line stays empty).
  CodeWriter& line(const std::string& text = "") {
    if (!text.empty()) out_ << std::string(2 * indent_, ' ') << text;
    out_ << '\n';
    return *this;
  }
  /// Writes `header {` and returns the scope that closes it with `closer`.
  [[nodiscard]] Scope block(const std::string& header, std::string closer = "}") {
    line(header.empty() ? "{" : header + " {");
    return Scope(*this, std::move(closer));
  }
  std::string str() const { return out_.str(); }

 private:
  int indent_ = 0;
  std::ostringstream out_;
};

/// Fills `${name}` placeholders in a template. A placeholder with no value, or a value no
/// placeholder uses, is an internal error: templates and emitters must agree exactly.
std::string render_template(const std::string& template_name, const std::map<std::string, std::string>& values);

/// The text of a template from templates/, embedded in the generator at build time.
const std::string& template_text(const std::string& template_name);
/// Every template of templates/ as (file name, text), as cmake/embed_text.cmake embedded them.
const std::vector<std::pair<std::string, std::string>>& embedded_templates();

}  // namespace optgen
