# Writes a C++ source that holds every template as a string, so the generator needs no files at
# run time. Called as: cmake -DOUTPUT=... -DTEMPLATES="a|b" -P embed_templates.cmake
string(REPLACE "|" ";" TEMPLATES "${TEMPLATES}")
set(body "#include \"code_writer.h\"\n#include \"diagnostic.h\"\n#include <map>\n\nnamespace optgen {\n\nconst std::map<std::string, std::string>& templates() {\n  static const std::map<std::string, std::string> templates = {\n")
foreach(path IN LISTS TEMPLATES)
  get_filename_component(name "${path}" NAME)
  file(READ "${path}" text)
  string(APPEND body "    {\"${name}\", R\"optgen_template(${text})optgen_template\"},\n")
endforeach()
string(APPEND body "  };\n  return templates;\n}\n\nconst std::string& template_text(const std::string& name) {\n  auto it = templates().find(name);\n  if (it == templates().end()) throw InternalError(\"no template named \" + name);\n  return it->second;\n}\n\n}  // namespace optgen\n")
file(WRITE "${OUTPUT}.tmp" "${body}")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
