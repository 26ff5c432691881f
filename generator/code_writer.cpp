#include "code_writer.h"

#include <set>
#include <utility>
#include <vector>

#include "diagnostic.h"

namespace optgen {

const std::string& template_text(const std::string& template_name) {
  for (const auto& [name, text] : embedded_templates())
    if (name == template_name) return text;
  throw InternalError("no template named " + template_name);
}

std::string render_template(const std::string& template_name, const std::map<std::string, std::string>& values) {
  const std::string& text = template_text(template_name);
  std::string out;
  std::set<std::string> used;
  size_t pos = 0;
  while (true) {
    size_t start = text.find("${", pos);
    if (start == std::string::npos) {
      out += text.substr(pos);
      break;
    }
    size_t end = text.find('}', start);
    if (end == std::string::npos) throw InternalError("template " + template_name + ": unterminated placeholder");
    std::string key = text.substr(start + 2, end - start - 2);
    auto it = values.find(key);
    if (it == values.end()) throw InternalError("template " + template_name + ": no value for ${" + key + "}");
    used.insert(key);
    out += text.substr(pos, start - pos) + it->second;
    pos = end + 1;
  }
  for (const auto& [key, value] : values)
    if (!used.count(key)) throw InternalError("template " + template_name + " has no placeholder ${" + key + "}");
  return out;
}

}  // namespace optgen
