#ifndef OPTGEN_TOOLS_COMMAND_LINE_H_
#define OPTGEN_TOOLS_COMMAND_LINE_H_
/// What optgen's programs (optgen, optgen_bench, optgen_newton_schulz_bench) add to CLI11 2.1,
/// Debian's, so that a mistyped number or list is an error that names it:
/// - whole_number(lo, hi): CLI11's Range says "Value abc not in range 32 to 1024" of a word that
///   is no number at all.
/// - add_list(): CLI11's delimiter drops an empty item ("f32,,bf16" is two storage types), and an
///   option whose word is commas only ("--storage ,") adds no value, so CLI11 takes the next
///   argument as its value ("--storage , --out dir" said "--out is required").

#include <CLI/CLI.hpp>

#include <sstream>
#include <string>
#include <vector>

namespace optgen::command_line {

/// A whole number from lo to hi.
inline CLI::Validator whole_number(long long lo, long long hi) {
  const std::string lo_text = std::to_string(lo), hi_text = std::to_string(hi);
  return CLI::Validator(
      [=](const std::string& text) -> std::string {
        long long value = 0;
        if (!CLI::detail::lexical_cast(text, value)) return text + " is not a whole number";
        if (value < lo || value > hi) return text + " is not between " + lo_text + " and " + hi_text;
        return "";
      },
      "from " + lo_text + " to " + hi_text, "whole number");
}

/// A list option: its items comma-separated or as several words (`--storage f32,bf16` or
/// `--storage f32 bf16`), each checked by `item` and converted to T; `out` keeps its defaults
/// unless the option is given. An empty item is an error that names the word.
template <typename T>
CLI::Option* add_list(CLI::App& app, const std::string& name, std::vector<T>& out, const std::string& description,
                      CLI::Validator item = CLI::Validator()) {
  const auto items = [](const std::string& word) {
    std::vector<std::string> split;
    std::stringstream in(word);
    for (std::string piece; std::getline(in, piece, ',');) split.push_back(piece);
    if (word.empty() || word.back() == ',') split.emplace_back();
    return split;
  };
  std::string defaults;
  for (const T& value : out) {
    std::ostringstream text;
    text << value;
    defaults += (defaults.empty() ? "" : ",") + text.str();
  }
  return app
      .add_option_function<std::vector<std::string>>(
          name,
          [&out, items](const std::vector<std::string>& words) {
            out.clear();
            for (const std::string& word : words)
              for (const std::string& piece : items(word)) {
                T value{};
                CLI::detail::lexical_cast(piece, value);  // checked below
                out.push_back(value);
              }
          },
          description)
      ->check(CLI::Validator(
          [items, item](const std::string& word) mutable -> std::string {
            for (std::string piece : items(word)) {
              if (piece.empty()) return "an empty item in '" + word + "'";
              if (std::string error = item(piece); !error.empty()) return error;
            }
            return "";
          },
          item.get_description().empty() ? "" : item.get_description() + ", comma-separated"))
      ->default_str(defaults);
}

}  // namespace optgen::command_line

#endif  // OPTGEN_TOOLS_COMMAND_LINE_H_
