#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "builtins.h"
#include "clipping.h"
#include "matrices.h"
#include "names.h"
#include "reductions.h"
#include "optgen/files.h"
#include "spec.h"

namespace optgen {

namespace {

bool is_identifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

/// A line of YAML without its comment (a '#' at the line's start or after a space or tab).
std::string without_comment(std::string line) {
  for (size_t i = 0; i < line.size(); ++i)
    if (line[i] == '#' && (i == 0 || line[i - 1] == ' ' || line[i - 1] == '\t')) {
      line.erase(i);
      break;
    }
  return line;
}

/// Wraps yaml-cpp nodes so that every error points at the node it is about.
class Loader {
 public:
  explicit Loader(std::shared_ptr<const SourceFile> file) : file_(std::move(file)) {}

  SourceLoc loc(const YAML::Node& node) const {
    const YAML::Mark mark = node.Mark();
    if (mark.line < 0) return {file_, 0, 0};
    SourceLoc result{file_, mark.line + 1, mark.column + 1};
    if (node.IsNull()) return null_loc(result);
    // Quoted scalars: point inside the quotes, where the text an error is about starts.
    if (node.IsScalar()) {
      std::string line = file_->line(result.line);
      if (mark.column < static_cast<int>(line.size()) && (line[mark.column] == '"' || line[mark.column] == '\''))
        result.column += 1;
    }
    return result;
  }

  /// A value left empty (`key:` or `-` with nothing after it) has the place of what follows it,
  /// often the next line's key: the place of the line that left it empty instead, at its key or
  /// `-`. (A null written out, `key: ~` or a key `Null:`, is where it is written.)
  SourceLoc null_loc(SourceLoc at) const {
    const std::string here = without_comment(file_->line(at.line));
    if (here.find_first_not_of(" \t") < static_cast<size_t>(at.column - 1)) return at;  // after something on its line
    const std::string written = here.substr(static_cast<size_t>(at.column - 1));
    for (const char* null : {"~", "null", "Null", "NULL"})  // a null written out, as a key can be
      if (written.rfind(null, 0) == 0 && (written.size() == std::strlen(null) ||
                                          !std::isalnum(static_cast<unsigned char>(written[std::strlen(null)]))))
        return at;
    for (int line = at.line - 1; line >= 1; --line) {
      std::string text = without_comment(file_->line(line));
      text.erase(text.find_last_not_of(" \t") + 1);
      if (text.empty()) continue;
      size_t key = text.find_first_not_of(" \t");
      if (text.back() == ':') {  // the key whose value is empty: the last on the line
        key = text.size() - 1;
        while (key > 0 && !std::strchr(" \t{[,", text[key - 1])) --key;
      }
      return {file_, line, static_cast<int>(key) + 1};
    }
    return at;
  }

  /// Where each byte of scalar `node`'s value stands in the file, where the value is not its source
  /// as written from loc(node) on: a block scalar (`|`, `>`), a scalar folded over several lines, a
  /// double-quoted one with escapes. The value's bytes are found in the source in order, passing
  /// over what YAML drops (indentation, line breaks it folds, indicators, quotes); an escape's
  /// bytes stand at its backslash.
  TextPlaces places(const YAML::Node& node) const {
    const SourceLoc start = loc(node);
    const YAML::Mark mark = node.Mark();
    const std::string& value = node.Scalar();
    const std::string& source = file_->text;
    if (mark.line < 0) return start;
    // The node's place in the text from its line and column (yaml-cpp's byte offset leaves out a
    // byte order mark).
    size_t j = 0;
    for (int skipped = 0; skipped < mark.line; ++skipped) {
      const size_t newline = source.find('\n', j);
      if (newline == std::string::npos) return start;
      j = newline + 1;
    }
    if (j + static_cast<size_t>(mark.column) >= source.size()) return start;
    int line = mark.line + 1, column = 1;
    const auto pass = [&](size_t n) {  // n bytes of source
      for (; n > 0 && j < source.size(); --n, ++j) {
        if (source[j] == '\n')
          ++line, column = 1;
        else
          ++column;
      }
    };
    pass(static_cast<size_t>(mark.column));
    // Past a tag (!!str) and an anchor (&a), then the opening quote; a block scalar's value starts
    // on the line after its header (|, >, their indicators and a comment).
    while (j < source.size() && (source[j] == '!' || source[j] == '&')) {
      while (j < source.size() && !std::isspace(static_cast<unsigned char>(source[j]))) pass(1);
      while (j < source.size() && (source[j] == ' ' || source[j] == '\t')) pass(1);
    }
    const bool double_quoted = j < source.size() && source[j] == '"';
    if (j < source.size() && (source[j] == '"' || source[j] == '\'')) pass(1);
    if (j < source.size() && (source[j] == '|' || source[j] == '>'))
      while (j < source.size() && source[j] != '\n') pass(1);
    if (value.find('\n') == std::string::npos && source.compare(j, value.size(), value) == 0)
      return TextPlaces({file_, line, column});
    std::vector<SourceLoc> bytes;
    while (bytes.size() < value.size() && j < source.size()) {
      if (double_quoted && source[j] == '\\' && j + 1 < source.size()) {
        const SourceLoc at{file_, line, column};
        const char e = source[j + 1];
        const size_t hex = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        unsigned long code = hex ? std::strtoul(source.substr(j + 2, hex).c_str(), nullptr, 16) : 0;
        // UTF-8 bytes of the escape's character; a line break escaped (a continuation) has none.
        size_t n = e == '\n' || e == '\r' ? 0
                   : hex                  ? (code < 0x80      ? 1
                                             : code < 0x800   ? 2
                                             : code < 0x10000 ? 3
                                                              : 4)
                   : e == 'N' || e == '_' ? 2
                   : e == 'L' || e == 'P' ? 3
                                          : 1;
        for (; n > 0 && bytes.size() < value.size(); --n) bytes.push_back(at);
        pass(2 + hex);
        continue;
      }
      if (source[j] == value[bytes.size()]) bytes.push_back({file_, line, column});
      pass(1);
    }
    while (bytes.size() <= value.size()) bytes.push_back({file_, line, column});
    return TextPlaces(start, std::move(bytes));
  }

  [[noreturn]] void fail(const YAML::Node& node, const std::string& message, const std::string& hint = "") const {
    throw SpecError(loc(node), message, hint);
  }

  /// The entries of a mapping, in file order, rejecting duplicate and unknown keys.
  std::vector<std::pair<YAML::Node, YAML::Node>> entries(const YAML::Node& map, const std::string& what,
                                                         const std::vector<std::string>& allowed = {}) const {
    if (!map.IsMap()) fail(map, what + " must be a mapping (`key: value` lines)");
    std::vector<std::pair<YAML::Node, YAML::Node>> result;
    std::map<std::string, YAML::Node> seen;
    for (auto it = map.begin(); it != map.end(); ++it) {
      if (it->first.IsNull())
        fail(it->first, "a key of " + what + " reads as YAML's null (null, Null, NULL or ~)", "choose another name");
      if (!it->first.IsScalar()) fail(it->first, "keys of " + what + " must be plain names");
      std::string key = it->first.Scalar();
      if (auto previous = seen.find(key); previous != seen.end())
        fail(it->first, "duplicate key '" + key + "' in " + what,
             "first given at line " + std::to_string(loc(previous->second).line));
      if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), key) == allowed.end())
        fail(it->first, "unknown key '" + key + "' in " + what + did_you_mean(key, allowed),
             "allowed keys: " + join(allowed));
      seen.emplace(key, it->first);
      result.emplace_back(it->first, it->second);
    }
    return result;
  }

  static std::string join(const std::vector<std::string>& names) {
    std::string out;
    for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
    return out;
  }

  std::string scalar(const YAML::Node& node, const std::string& what) const {
    if (node.IsNull()) fail(node, what + " is empty", "give it a value");
    if (!node.IsScalar()) fail(node, what + " must be a single value");
    return node.Scalar();
  }

  /// Refuses `node`, whose text reads as `kind` (a number; true or false), where YAML reads it as
  /// text, and so does the spec: in quotes, a block scalar (| or >), or tagged !!str.
  void refuse_text(const YAML::Node& node, const std::string& what, const std::string& kind) const {
    if (node.Tag() != "!" && node.Tag() != "tag:yaml.org,2002:str") return;  // "!": quoted or a block scalar
    std::string plain = node.Scalar();
    while (!plain.empty() && std::isspace(static_cast<unsigned char>(plain.back()))) plain.pop_back();
    fail(node, what + " is written as text (in quotes, a block scalar or !!str), not as " + kind,
         "write it plainly: " + plain);
  }

  YAML::Node field(const YAML::Node& map, const YAML::Node& map_key, const char* key, const std::string& what) const {
    YAML::Node value = map[key];
    if (!value) fail(map_key, what + " has no '" + key + "'");
    return value;
  }

  /// A bool as the spec spells it: true or false (True, False); none for any other text.
  static std::optional<bool> bool_value(const std::string& s) {
    if (s == "true" || s == "True") return true;
    if (s == "false" || s == "False") return false;
    return std::nullopt;
  }

  bool parse_bool(const YAML::Node& node, const std::string& what) const {
    std::string s = scalar(node, what);
    const std::optional<bool> value = bool_value(s);
    if (!value) fail(node, what + " must be true or false, not '" + s + "'");
    refuse_text(node, what, "true or false");
    return *value;
  }

  /// A number in digits, or an infinity: inf or YAML's .inf (.Inf, .INF), either signed.
  std::optional<double> parse_number(const std::string& s) const {
    if (s.empty()) return std::nullopt;
    const bool negative = s[0] == '-';
    const std::string magnitude = s[0] == '-' || s[0] == '+' ? s.substr(1) : s;
    if (magnitude == "inf" || magnitude == ".inf" || magnitude == ".Inf" || magnitude == ".INF")
      return negative ? -HUGE_VAL : HUGE_VAL;
    char* end = nullptr;
    double value = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size() || !std::isfinite(value)) return std::nullopt;
    return value;
  }

  /// A number in digits that reads as infinity (1e999) is out of range, not a name or a typo.
  void refuse_beyond_range(const YAML::Node& node, const std::string& s, const std::string& what) const {
    if (char* end = nullptr; std::isinf(std::strtod(s.c_str(), &end)) && end == s.c_str() + s.size() &&
                             s.find_first_of("0123456789") != std::string::npos)
      fail(node, what + " is a number beyond double's range",
           "write a number within it, or inf (-inf) for an infinite one");
  }

  double parse_default(const YAML::Node& node, ValueType type, const std::string& name) const {
    const std::string what = "the default of '" + name + "'";
    std::string s = scalar(node, what);
    if (type == ValueType::Bool) {
      const std::optional<bool> value = bool_value(s);
      if (!value) fail(node, "bad default '" + s + "' for bool hyperparameter '" + name + "': expected true or false");
      refuse_text(node, what, "true or false");
      return *value ? 1 : 0;
    }
    std::optional<double> value = parse_number(s);
    if (value) refuse_text(node, what, "a number");
    if (!value) refuse_beyond_range(node, s, "default '" + s + "' of '" + name + "'");
    if (!value)
      fail(node,
           "bad default '" + s + "' for " + to_string(type) + " hyperparameter '" + name + "': expected a number");
    if (type == ValueType::Int && (*value != std::floor(*value) || s.find_first_of(".eE") != std::string::npos))
      fail(node, "bad default '" + s + "' for int hyperparameter '" + name + "': expected an integer");
    if (type == ValueType::Int && std::fabs(*value) > 9007199254740992.0)
      fail(node, "default " + s + " of int hyperparameter '" + name + "' is beyond 2^53",
           "hyperparameters travel as doubles, which hold every integer up to 2^53 exactly");
    return *value;
  }

  std::shared_ptr<Syntax> expression(const YAML::Node& node, const std::string& what) const {
    std::string text = scalar(node, what);
    return std::shared_ptr<Syntax>(parse_expression(text, places(node)));
  }

  /// YAML reads `- g = c ? a : b` as a one-entry mapping, because of ': '. Such an item is a
  /// statement: take its text from the source line as written (up to a `#` comment).
  std::optional<std::string> statement_with_colon(const YAML::Node& item) const {
    if (!item.IsMap() || item.size() != 1) return std::nullopt;
    const auto entry = *item.begin();
    if (!entry.first.IsScalar() || entry.first.Scalar() == "when" || entry.first.Scalar() == "do") return std::nullopt;
    if (entry.first.Scalar().find('=') == std::string::npos || !entry.second.IsScalar()) return std::nullopt;
    SourceLoc at = loc(item);
    if (at.line != loc(entry.second).line) return std::nullopt;
    std::string text = file_->line(at.line).substr(at.column - 1);
    size_t comment = text.find(" #");
    if (comment != std::string::npos) text.erase(comment);
    return text;
  }

  std::shared_ptr<const SourceFile> file_;
};

void check_new_name(const Loader& loader, const YAML::Node& key, std::map<std::string, SourceLoc>& names,
                    const std::string& what, NameUse use) {
  std::string name = key.Scalar();
  if (!is_identifier(name)) loader.fail(key, "'" + name + "' is not a valid name for " + what, name_problem(name, use));
  if (is_reserved_name(name)) loader.fail(key, "'" + name + "' is a reserved name and cannot be used for " + what);
  if (std::string why = name_problem(name, use); !why.empty())
    loader.fail(key, "'" + name + "' cannot be used for " + what, why);
  if (auto previous = names.find(name); previous != names.end())
    loader.fail(key, "duplicate name '" + name + "'",
                "first declared at line " + std::to_string(previous->second.line));
  names.emplace(name, loader.loc(key));
}

/// `init:` of a state buffer (`per_element`) or of a scalar state.
Init parse_init(const Loader& loader, const YAML::Node& node, const Spec& spec, const std::string& owner,
                bool per_element) {
  Init init;
  init.loc = loader.loc(node);
  std::string s = loader.scalar(node, "the init of '" + owner + "'");
  if (s == "zeros" || s == "zero") return init;
  if (s == "param") {
    if (!per_element)
      loader.fail(node, "scalar state '" + owner + "' cannot start as the parameter: it is one number per group",
                  "init: param is for state buffers, which have an element per element of the parameter");
    init.param = true;
    return init;
  }
  if (std::optional<double> value = loader.parse_number(s)) {
    loader.refuse_text(node, "the init of '" + owner + "'", "a number");
    init.value = *value;
    return init;
  }
  loader.refuse_beyond_range(node, s, "init '" + s + "' of '" + owner + "'");
  const Hyperparameter* h = spec.find_hyperparameter(s);
  if (!h) {
    std::vector<std::string> names;
    for (const auto& hp : spec.hyperparameters) names.push_back(hp.name);
    loader.fail(node, "bad init '" + s + "' for '" + owner + "': expected zeros, a number, a hyperparameter" +
                          std::string(per_element ? " or param" : "") + did_you_mean(s, names));
  }
  if (h->type == ValueType::Bool)
    loader.fail(node, "cannot initialise '" + owner + "' from bool hyperparameter '" + s + "'");
  init.hyperparameter = s;
  return init;
}

/// Warns of each number in `syntax` that float, the kernels' element arithmetic, cannot hold: it
/// becomes infinity or 0 there, where group code and the double reference keep it.
void warn_of_float_range(const Syntax& syntax, Spec& spec) {
  if (syntax.kind == Syntax::Kind::Number && std::isfinite(syntax.number)) {
    const float rounded = static_cast<float>(syntax.number);
    const char* becomes = std::isinf(rounded) ? "infinity" : rounded == 0 && syntax.number != 0 ? "0" : nullptr;
    if (becomes)
      spec.warnings.push_back(format_diagnostic(syntax.loc,
                                                "'" + syntax.text + "' is beyond float range: it is " + becomes +
                                                    " where the kernels compute in float (their element code)",
                                                "", "warning"));
  }
  for (const auto& operand : syntax.operands) warn_of_float_range(*operand, spec);
}

void warn_of_float_range(const Block& block, Spec& spec) {
  for (const BlockItem& item : block.items) {
    if (item.statement) warn_of_float_range(*item.statement->value, spec);
    if (item.body) warn_of_float_range(*item.body, spec);
  }
}

/// A block's or a matrix function's `do:` with nothing after it (YAML's null) or `do: []`: an
/// error at the key, where the null value's own place is the next line's.
void refuse_empty_do(const Loader& loader, const YAML::Node& item) {
  for (const auto& field : item)
    if (field.first.Scalar() == "do" &&
        (field.second.IsNull() || (field.second.IsSequence() && field.second.size() == 0)))
      loader.fail(field.first, "this 'do' is empty", "give it a list of statements");
}

/// `section`'s statements: each a statement or a guarded block, or in a matrix function
/// (`matrix`) a repeated one.
void parse_block(const Loader& loader, const YAML::Node& node, Block& block, const std::string& section,
                 bool matrix = false) {
  if (!node.IsSequence()) loader.fail(node, "'" + section + "' must be a list of statements (`- name = expression`)");
  size_t index = 0;
  for (const YAML::Node& item : node) {
    BlockItem entry;
    entry.loc = loader.loc(item);
    // `[a = min(b, c)]`: YAML ends a flow list's plain item at its comma, inside parentheses too.
    const bool last = ++index == node.size();
    if (item.IsScalar() && item.Tag() == "?" && node.Style() == YAML::EmitterStyle::Flow && !last &&
        std::count(item.Scalar().begin(), item.Scalar().end(), '(') !=
            std::count(item.Scalar().begin(), item.Scalar().end(), ')'))
      loader.fail(item, "YAML ended this statement at a comma of the [ ] list it is in",
                  "write the statements as a block list, a '- statement' a line, or quote each one");
    if (item.IsScalar()) {
      entry.statement = parse_statement(item.Scalar(), loader.places(item));
    } else if (std::optional<std::string> text = loader.statement_with_colon(item)) {
      entry.statement = parse_statement(*text, loader.loc(item));
    } else if (item.IsMap() && matrix) {
      loader.entries(item, "a repeated block", {"repeat", "do"});
      if (!item["repeat"]) loader.fail(item, "a block of a matrix function has no 'repeat'");
      if (!item["do"]) loader.fail(item, "a repeated block has no 'do'");
      entry.repeat = loader.expression(item["repeat"], "'repeat'");
      refuse_empty_do(loader, item);
      entry.body = std::make_shared<Block>();
      parse_block(loader, item["do"], *entry.body, section, matrix);
    } else if (item.IsMap()) {
      auto fields = loader.entries(item, "a guarded block", {"when", "do"});
      if (!item["when"]) loader.fail(item, "a guarded block has no 'when'");
      if (!item["do"]) loader.fail(item, "a guarded block has no 'do'");
      entry.when = loader.expression(item["when"], "'when'");
      entry.when_text = item["when"].Scalar();
      refuse_empty_do(loader, item);
      entry.body = std::make_shared<Block>();
      parse_block(loader, item["do"], *entry.body, section);
    } else {
      loader.fail(item, "each entry of '" + section + "' must be a statement or a `" + (matrix ? "repeat" : "when") +
                            ":`/`do:` block");
    }
    block.items.push_back(std::move(entry));
  }
}

/// `matrix_functions:`: each a name, its parameters (the matrix first), whether it sees a tall
/// matrix transposed, its statements and the variable it returns.
void load_matrix_functions(const Loader& loader, const YAML::Node& node, std::vector<MatrixFunctionSpec>& out) {
  for (auto& [key, value] : loader.entries(node, "'matrix_functions'")) {
    MatrixFunctionSpec f;
    f.name = key.Scalar();
    f.loc = loader.loc(key);
    if (std::string why = name_problem(f.name, NameUse::Value); !why.empty())
      throw SpecError(f.loc, "'" + f.name + "' cannot name a matrix function", why);
    if (std::string why = name_problem(f.name, NameUse::MatrixFunction); !why.empty())
      throw SpecError(f.loc, "'" + f.name + "' cannot name a matrix function", why);
    const std::string what = "matrix function '" + f.name + "'";
    loader.entries(value, what, {"parameters", "transpose_tall", "do", "result", "doc"});
    const YAML::Node parameters = loader.field(value, key, "parameters", what);
    if (!parameters.IsSequence() || parameters.size() == 0)
      loader.fail(parameters, "the parameters of " + what + " must be a list of names, the matrix first");
    for (const YAML::Node& p : parameters) {
      if (!p.IsScalar()) loader.fail(p, "a parameter of " + what + " must be a name");
      if (std::string why = name_problem(p.Scalar(), NameUse::Value); !why.empty())
        loader.fail(p, "'" + p.Scalar() + "' cannot name a parameter", why);
      if (std::find(f.parameters.begin(), f.parameters.end(), p.Scalar()) != f.parameters.end())
        loader.fail(p, what + " has two parameters called '" + p.Scalar() + "'");
      f.parameters.push_back(p.Scalar());
      f.parameter_locs.push_back(loader.loc(p));
    }
    if (const YAML::Node tall = value["transpose_tall"]) f.transpose_tall = loader.parse_bool(tall, "'transpose_tall'");
    if (const YAML::Node doc = value["doc"]) f.doc = doc.Scalar();
    refuse_empty_do(loader, value);
    parse_block(loader, loader.field(value, key, "do", what), f.body, "matrix_functions: " + f.name, true);
    const YAML::Node result = loader.field(value, key, "result", what);
    if (!result.IsScalar()) loader.fail(result, "the result of " + what + " must be the name of a matrix variable");
    f.result = result.Scalar();
    f.result_loc = loader.loc(result);
    out.push_back(std::move(f));
  }
}

/// The launcher's members made from the spec's names (states and scalar states as accessors,
/// programs as methods, set_<name> setters of hyperparameters and scalar states, the class itself)
/// must not collide.
void check_launcher_names(const Spec& spec) {
  std::map<std::string, std::string> setters;  // set_<name> -> what it sets
  for (const auto& h : spec.hyperparameters) setters["set_" + h.name] = "hyperparameter '" + h.name + "'";
  for (const auto& s : spec.scalar_states) setters["set_" + s.name] = "scalar state '" + s.name + "'";
  auto check = [&](const std::string& name, const SourceLoc& loc, const std::string& what) {
    if (auto it = setters.find(name); it != setters.end())
      throw SpecError(loc, what + " '" + name + "' would collide with the launcher's setter of " + it->second,
                      "rename one of them");
    if (name == spec.optimizer)
      throw SpecError(loc, what + " '" + name + "' would collide with the launcher's class " + spec.optimizer,
                      "rename one of them");
  };
  for (const auto& s : spec.states) check(s.name, s.loc, "state");
  for (const auto& s : spec.scalar_states) check(s.name, s.loc, "scalar state");
  for (const auto& p : spec.programs) check(p.name, p.loc, "program");
}

/// `programs:`: each a name (a launcher method, run by FusedOptimizer::run) and its statements.
void load_programs(const Loader& loader, const YAML::Node& node, Spec& spec) {
  // The launcher's own members, and the names a spec already gives a meaning.
  static const std::set<std::string> members = {"step", "prepare", "options", "info",       "engine",
                                                "save", "load",    "run",     "step_count", "set_step_count"};
  for (auto& [key, value] : loader.entries(node, "'programs'")) {
    const std::string name = key.Scalar();
    const SourceLoc at = loader.loc(key);
    if (std::string why = name_problem(name, NameUse::Value); !why.empty())
      throw SpecError(at, "'" + name + "' cannot name a program", why);
    // A program's kernels are <variant>_<storage>_<program>, the step's <variant>_<storage>_<stage>.
    // (update_long_rows and update_unit_matrices name kernels of the Update stage too.)
    const bool stage_name =
        name == "update" || name.rfind("update_", 0) == 0 ||
        (name.rfind("reduce", 0) == 0 && name.find_first_not_of("0123456789", 6) == std::string::npos);
    if (stage_name)
      throw SpecError(at, "program '" + name + "' would name its kernels as the step's stages' are named",
                      "a program's kernels are <variant>_<storage>_<program>, and the step's stages are update, "
                      "reduce, reduce1, ...: name it after what it does, e.g. 'eval' or 'train'");
    if (members.count(name) || is_reserved_name(name))
      throw SpecError(at,
                      "program '" + name + "' would collide with " +
                          (members.count(name) ? "the launcher's method " + name + "()" : "a reserved name"),
                      "name it after what it does, e.g. 'eval' or 'train'");
    auto clash = [&](const std::string& other, const std::string& what) {
      if (name == other) throw SpecError(at, "program '" + name + "' has the name of " + what + " '" + other + "'");
      if (name == "set_" + other)
        throw SpecError(
            at, "program '" + name + "' would collide with the launcher's setter of " + what + " '" + other + "'",
            "rename one of them");
    };
    for (const auto& h : spec.hyperparameters) clash(h.name, "hyperparameter");
    for (const auto& s : spec.states) clash(s.name, "state");
    for (const auto& s : spec.scalar_states) clash(s.name, "scalar state");
    ProgramSpec program{name, at, {}};
    parse_block(loader, value, program.body, "programs: " + name);
    if (program.body.items.empty()) throw SpecError(at, "program '" + name + "' has no statements");
    warn_of_float_range(program.body, spec);
    spec.programs.push_back(std::move(program));
  }
}

std::string file_stem(const std::string& path) {
  size_t slash = path.find_last_of('/');
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  size_t dot = base.find('.');
  return dot == std::string::npos ? base : base.substr(0, dot);
}

/// The most characters YAML reads as a key written without quotes or `?` (yaml-cpp's limit).
constexpr std::size_t kMaxYamlKey = 1024;

/// Refuses a control character (other than tab and line ends) where it is: it reached the
/// messages raw (a NUL showed as another character or none), and a spec is text.
void refuse_control_characters(const std::shared_ptr<const SourceFile>& file) {
  int line = 1, column = 1;
  for (unsigned char c : file->text) {
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f) {
      std::ostringstream byte;
      byte << "0x" << std::hex << (c < 0x10 ? "0" : "") << static_cast<int>(c);
      throw SpecError(SourceLoc{file, line, column},
                      "control character " + byte.str() + (c == 0 ? " (NUL)" : "") + " in the spec",
                      "a spec is text: remove it");
    }
    if (c == '\n') {
      ++line;
      column = 1;
    } else if ((c & 0xC0) != 0x80) {
      ++column;
    }
  }
}

/// Whether the statement around line `line` (it and the lines before it back to its `- `) has a
/// `?`: YAML took its ` : ` for a mapping's.
bool statement_has_question_mark(const SourceFile& file, int line) {
  for (int l = line; l >= 1 && l > line - 50; --l) {
    const std::string text = file.line(l);
    if (text.find('?') != std::string::npos) return true;
    const std::size_t first = text.find_first_not_of(" \t");
    if (first != std::string::npos && text[first] == '-') return false;
  }
  return false;
}

/// yaml-cpp reads a quoted scalar that the file ends inside, after a line end, as if it were closed:
/// each quoted scalar must have its closing quote. Each mapping and sequence is visited once (by
/// its place in the file), however many aliases (`*name`) repeat it: nested aliases name
/// exponentially many nodes in a few lines, and walking them all took minutes.
void check_closed_quotes(const std::shared_ptr<const SourceFile>& file, const YAML::Node& node,
                         std::set<std::pair<int, bool>>& visited) {
  if (node.IsMap() || node.IsSequence()) {
    if (!visited.insert({node.Mark().pos, node.IsMap()}).second) return;
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (node.IsMap()) {
        check_closed_quotes(file, it->first, visited);
        check_closed_quotes(file, it->second, visited);
      } else {
        check_closed_quotes(file, *it, visited);
      }
    }
    return;
  }
  if (!node.IsScalar() || node.Tag() != "!") return;  // a quoted scalar is tagged "!"
  const std::string& text = file->text;
  const std::size_t open = static_cast<std::size_t>(std::max(node.Mark().pos, 0));
  if (open >= text.size() || (text[open] != '"' && text[open] != '\'')) return;
  const char quote = text[open];
  for (std::size_t i = open + 1; i < text.size(); ++i) {
    if (quote == '"' && text[i] == '\\') {
      ++i;
    } else if (text[i] == quote) {
      if (quote == '\'' && i + 1 < text.size() && text[i + 1] == '\'') {
        ++i;  // '' is a quote inside single quotes
        continue;
      }
      return;
    }
  }
  throw SpecError(SourceLoc{file, node.Mark().line + 1, node.Mark().column + 1},
                  std::string("this quoted text has no closing ") + quote + ": it runs to the end of the file",
                  std::string("close it with ") + quote);
}

/// Where the first YAML document of `text` after its first that is not empty starts, if any. The
/// documents parsed are bounded by the '---' lines: YAML::LoadAll, which would say, parses on for
/// ever after some malformed input (yaml-cpp 0.7's static library; a fuzzing finding).
std::optional<YAML::Mark> second_document(const std::string& text) {
  struct FirstContent : YAML::EventHandler {
    std::optional<YAML::Mark> at;
    void seen(const YAML::Mark& mark) {
      if (!at) at = mark;
    }
    void OnDocumentStart(const YAML::Mark&) override {}
    void OnDocumentEnd() override {}
    void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
    void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { seen(mark); }
    void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t, const std::string&) override {
      seen(mark);
    }
    void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                         YAML::EmitterStyle::value) override {
      seen(mark);
    }
    void OnSequenceEnd() override {}
    void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
      seen(mark);
    }
    void OnMapEnd() override {}
  };
  // Empty documents ('---' and nothing) are passed over: at most one a '---' line.
  size_t markers = text.rfind("---", 0) == 0 ? 1 : 0;
  for (size_t at = text.find("\n---"); at != std::string::npos; at = text.find("\n---", at + 1)) ++markers;
  std::istringstream in(text);
  YAML::Parser parser(in);
  FirstContent first;
  if (!parser.HandleNextDocument(first)) return std::nullopt;
  for (size_t document = 0; document <= markers; ++document) {
    FirstContent next;
    if (!parser.HandleNextDocument(next)) return std::nullopt;
    if (next.at) return next.at;
  }
  return std::nullopt;
}

/// The YAML document of `file`, a mapping; YAML's own errors located like ours.
YAML::Node parse_yaml(const Loader& loader, const std::shared_ptr<const SourceFile>& file) {
  refuse_control_characters(file);
  YAML::Node root;
  try {
    root = YAML::Load(file->text);
    if (const std::optional<YAML::Mark> second = second_document(file->text))
      throw SpecError(SourceLoc{file, second->line + 1, second->column + 1},
                      "a second YAML document: optgen reads one spec a file, and would pass this one over",
                      "put each spec in a file of its own");
  } catch (const YAML::DeepRecursion& e) {
    // yaml-cpp's own message for its depth limit is "bad file".
    throw SpecError(SourceLoc{file, e.mark.line + 1, e.mark.column + 1},
                    "YAML nests deeper than yaml-cpp reads (" + std::to_string(e.depth()) + " levels) by here",
                    "a spec nests a few levels; look for a bracket or brace that is opened and not closed");
  } catch (const YAML::ParserException& e) {
    SourceLoc at{file, e.mark.line + 1, e.mark.column + 1};
    const std::string line = file->line(at.line);
    const std::size_t indent = std::min(line.find_first_not_of(" \t-"), line.size());
    if (e.msg == "illegal map value" && static_cast<std::size_t>(e.mark.column) > indent + kMaxYamlKey)
      throw SpecError(SourceLoc{file, at.line, static_cast<int>(indent) + 1},
                      "this key is " + std::to_string(e.mark.column - indent) +
                          " characters long; YAML reads keys of " + std::to_string(kMaxYamlKey) + " at most",
                      "choose a shorter name");
    std::string hint;
    if (statement_has_question_mark(*file, at.line))
      hint = "a statement with ' : ' in it (as in 'c ? a : b') must be quoted: - \"x = c ? a : b\"";
    else if (line.find('\t') < line.find_first_not_of(" \t"))
      hint = "YAML indents with spaces: this line's indentation holds a tab";
    throw SpecError(at, "YAML syntax error: " + e.msg, hint);
  }
  std::set<std::pair<int, bool>> visited;
  check_closed_quotes(file, root, visited);
  if (!root || root.IsNull()) {
    // Nothing but comments and blank lines; or text YAML reads as no document (a line that starts
    // with ','), which yaml-cpp passes over without an error.
    const int lines = 1 + static_cast<int>(std::count(file->text.begin(), file->text.end(), '\n'));
    for (int line = 1; line <= lines; ++line) {
      const size_t first = without_comment(file->line(line)).find_first_not_of(" \t");
      if (first != std::string::npos)
        throw SpecError(SourceLoc{file, line, static_cast<int>(first) + 1}, "YAML reads no spec from this text",
                        "a spec is a mapping of keys (optimizer:, summary:, ...), each at the start of a line");
    }
    throw SpecError(SourceLoc{file, 1, 1}, "the spec is empty");
  }
  if (!root.IsMap())
    loader.fail(root, "a spec must be a mapping with 'optimizer', 'hyperparameters', 'state', 'update', ...");
  return root;
}

/// The optimizer's name, the spec's (from its file), its summary and reference.
void load_names(const Loader& loader, const YAML::Node& root, Spec& spec) {
  const auto& file = spec.file;
  spec.optimizer = loader.scalar(root["optimizer"], "'optimizer'");
  if (!is_identifier(spec.optimizer))
    loader.fail(root["optimizer"],
                "optimizer name '" + spec.optimizer + "' must be an identifier (it names a C++ class)");
  if (std::string why = name_problem(spec.optimizer, NameUse::Optimizer); !why.empty())
    loader.fail(root["optimizer"], "optimizer name '" + spec.optimizer + "' cannot name the launcher's C++ class", why);
  spec.name = file_stem(file->path);
  if (!is_identifier(spec.name))
    throw SpecError(SourceLoc{file, 0, 0},
                    "the spec's file name must be an identifier (it names generated files and namespaces)");
  if (std::string why = name_problem(spec.name, NameUse::SpecFile); !why.empty())
    throw SpecError(SourceLoc{file, 0, 0},
                    "the spec's file name '" + spec.name + "' cannot name generated files and namespaces", why);
  spec.summary = loader.scalar(root["summary"], "'summary'");
  if (root["reference"]) spec.reference = loader.scalar(root["reference"], "'reference'");
}

/// `storage:`, a list of storage types (optgen/storage.h: PARAM[+master|+sr][:STATES][:STATE=DTYPE]...)
/// without repeats, checked against the spec's states and matrix values (loaded before).
void load_storage(const Loader& loader, const YAML::Node& storage, Spec& spec) {
  if (!storage.IsSequence() || storage.size() == 0)
    loader.fail(storage, "'storage' must be a non-empty list such as [f32, bf16, \"bf16:bf16\"]");
  for (const auto& item : storage) {
    std::string error;
    const std::string written = loader.scalar(item, "a storage type");
    auto parsed = parse_storage(written, &error);
    if (!parsed)
      loader.fail(item, error,
                  "write PARAM[+master|+sr][:STATES][:STATE=DTYPE]..., e.g. bf16, \"bf16:bf16\" or \"bf16+master\"");
    auto canonical = canonical_storage(*parsed, spec.state_names(), spec.matrix_value_names(), &error, written);
    if (!canonical) loader.fail(item, error);
    if (std::string problem = spec.storage_problem(*canonical, written); !problem.empty())
      loader.fail(item, problem,
                  problem.find("matrix value") != std::string::npos
                      ? "assign the second result to a variable of its own, and name that one in the storage"
                      : "give that state f32, bf16 or f16 (STATE=DTYPE)");
    if (std::string clash = storage_clash(spec.storage, spec.storage_written, *canonical, written); !clash.empty())
      loader.fail(item, clash.rfind("storage ", 0) == 0 ? clash : "storage " + clash,
                  clash.rfind("storage ", 0) == 0 ? "rename one of the states" : "");
    spec.storage.push_back(*canonical);
    spec.storage_written.push_back(written);
  }
}

/// `grad_clipping:` false, true, or {max_grad_norm: DEFAULT} (clipping.h).
void load_grad_clipping(const Loader& loader, const YAML::Node& root, Spec& spec) {
  spec.grad_clipping_loc = loader.loc(root["optimizer"]);
  const YAML::Node node = root["grad_clipping"];
  if (!node) return;
  spec.grad_clipping_loc = loader.loc(node);
  if (node.IsMap()) {
    loader.entries(node, "'grad_clipping'", {clipping::kMaxNorm});
    const YAML::Node value = loader.field(node, node, clipping::kMaxNorm, "'grad_clipping'");
    spec.max_grad_norm_default = loader.parse_default(value, ValueType::Float, clipping::kMaxNorm);
    if (!(spec.max_grad_norm_default >= 0))
      loader.fail(value, "max_grad_norm's default must be 0 (no clipping) or positive");
    return;
  }
  if (!node.IsScalar()) loader.fail(node, "'grad_clipping' must be true, false or {max_grad_norm: DEFAULT}");
  spec.grad_clipping = loader.parse_bool(node, "'grad_clipping'");
}

/// `block_elements: B`, a whole number from 1 to 2^31 - 1 (Spec::block_elements).
void load_block_elements(const Loader& loader, const YAML::Node& root, Spec& spec) {
  const YAML::Node node = root["block_elements"];
  if (!node) return;
  spec.block_elements_loc = loader.loc(node);
  const std::string text = loader.scalar(node, "'block_elements'");
  const std::optional<double> value = loader.parse_number(text);
  if (!value || *value != std::floor(*value) || text.find_first_of(".eE") != std::string::npos || *value < 1 ||
      *value > 2147483647.0)
    loader.fail(node, "bad block_elements '" + text + "': expected a whole number of elements from 1 to 2^31 - 1",
                "the elements of one block, e.g. 'block_elements: 256'");
  loader.refuse_text(node, "'block_elements'", "a number");
  spec.block_elements = static_cast<long long>(*value);
}

/// One entry of `hyperparameters:`, `key: {type, default | derived, specialize, doc}`.
Hyperparameter load_hyperparameter(const Loader& loader, const YAML::Node& key, const YAML::Node& value,
                                   const Spec& spec) {
  Hyperparameter h;
  h.name = key.Scalar();
  h.loc = loader.loc(key);
  const std::string what = "hyperparameter '" + h.name + "'";
  loader.entries(value, what, {"type", "default", "specialize", "derived", "doc"});
  std::string type = loader.scalar(loader.field(value, key, "type", what), "the type of " + what);
  if (type == "float")
    h.type = ValueType::Float;
  else if (type == "int")
    h.type = ValueType::Int;
  else if (type == "bool")
    h.type = ValueType::Bool;
  else
    loader.fail(value["type"], "unknown type '" + type + "' for " + what + ": expected float, int or bool");
  if (value["specialize"]) {
    h.specialize = loader.parse_bool(value["specialize"], "'specialize'");
    if (h.specialize && h.type != ValueType::Bool)
      loader.fail(value["specialize"],
                  "only bool hyperparameters can be specialized; '" + h.name + "' is " + to_string(h.type));
  }
  if (value["derived"]) {
    if (!h.specialize)
      loader.fail(value["derived"], "'derived' needs 'specialize: true': a derived value selects a kernel variant");
    if (value["default"])
      loader.fail(value["default"], "a derived flag has no default: its value comes from 'derived'");
    h.derived = loader.expression(value["derived"], "'derived'");
    h.derived_text = value["derived"].Scalar();
  } else {
    h.default_value = loader.parse_default(loader.field(value, key, "default", what), h.type, h.name);
  }
  if (value["doc"]) h.doc = loader.scalar(value["doc"], "'doc'");
  // Clipping's derived flag (clipping.h, added after these) is one of them unless clipping is off:
  // six of a spec's own and it made 128 variants.
  const std::size_t own = kMaxFlags - (spec.grad_clipping ? 1 : 0);
  if (h.specialize && spec.flags().size() == own)
    loader.fail(key,
                "'" + h.name + "' would be specialized flag number " + std::to_string(own + 1) +
                    (spec.grad_clipping ? " besides clipping's " + std::string(clipping::kFlag) : "") +
                    "; a spec may have " + std::to_string(kMaxFlags) +
                    (spec.grad_clipping ? ", clipping's among them" : ""),
                "each flag doubles the kernel variants (" + std::to_string(1 << kMaxFlags) +
                    " at most); make it a run-time bool (no 'specialize')" +
                    (spec.grad_clipping ? ", or turn clipping off with 'grad_clipping: false'" : ""));
  return h;
}

/// One entry of `state:`, `key: {init, when}`.
ElementState load_state(const Loader& loader, const YAML::Node& key, const YAML::Node& value, const Spec& spec) {
  ElementState s;
  s.name = key.Scalar();
  s.loc = loader.loc(key);
  loader.entries(value, "state '" + s.name + "'", {"init", "when", "shape"});
  s.init = parse_init(loader, loader.field(value, key, "init", "state '" + s.name + "'"), spec, s.name, true);
  if (YAML::Node shape = value["shape"]) {
    s.shape_loc = loader.loc(shape);
    const std::string text = loader.scalar(shape, "the shape of '" + s.name + "'");
    const bool blocks = spec.block_elements > 0;
    if (text == "rows" || text == "cols") {
      if (blocks)
        loader.fail(shape,
                    "state '" + s.name + "' has one value per " + (text == "rows" ? "row" : "column") +
                        ", but this spec views its tensors as blocks of " + std::to_string(spec.block_elements) +
                        " elements (block_elements)",
                    "a spec of blocks has no rows or columns of its own; give it 'shape: blocks'");
      s.shape = text == "rows" ? StateShape::Rows : StateShape::Cols;
    } else if (text == "blocks") {
      if (!blocks)
        loader.fail(shape, "state '" + s.name + "' has one value per block, but the spec declares no blocks",
                    "declare their size at the top of the spec, e.g. 'block_elements: 256'");
      s.shape = StateShape::Rows;  // a block is a row of the tensor's view (Spec::block_elements)
    } else if (text == "tensor") {
      s.shape = StateShape::Tensor;
    } else if (text != "elements") {
      loader.fail(
          shape, "bad shape '" + text + "' for state '" + s.name + "': expected elements, rows, cols, blocks or tensor",
          text == "scalar" ? "a value per param group (or per optimizer) is declared under 'scalar_state:'" : "");
    }
    if (s.shape != StateShape::Elements && s.init.param)
      loader.fail(shape, "state '" + s.name + "' has a value per " +
                             (text == "blocks"              ? "block"
                              : s.shape == StateShape::Rows ? "row"
                              : s.shape == StateShape::Cols ? "column"
                                                            : "tensor") +
                             " and cannot start as the parameter, which has one per element");
  }
  if (value["when"]) {
    s.when = loader.expression(value["when"], "'when'");
    s.when_text = value["when"].Scalar();
  }
  return s;
}

/// One entry of `scalar_state:`, `key: {init, scope}` (scope `group`, the default, or `optimizer`).
ScalarState load_scalar_state(const Loader& loader, const YAML::Node& key, const YAML::Node& value, const Spec& spec) {
  ScalarState s;
  s.name = key.Scalar();
  s.loc = loader.loc(key);
  loader.entries(value, "scalar state '" + s.name + "'", {"init", "scope"});
  s.init = parse_init(loader, loader.field(value, key, "init", "scalar state '" + s.name + "'"), spec, s.name, false);
  if (const YAML::Node scope = value["scope"]) {
    const std::string text = loader.scalar(scope, "'scope'");
    if (text != "group" && text != "optimizer")
      loader.fail(scope, "bad scope '" + text + "' for scalar state '" + s.name + "': expected group or optimizer",
                  "group: one value per param group; optimizer: one value shared by every group");
    s.per_optimizer = text == "optimizer";
  }
  return s;
}

Spec load(const std::shared_ptr<const SourceFile>& file) {
  Loader loader(file);
  const YAML::Node root = parse_yaml(loader, file);

  Spec spec;
  spec.file = file;
  auto top =
      loader.entries(root, "the spec",
                     {"optimizer", "summary", "reference", "hyperparameters", "state", "scalar_state", "per_step",
                      "update", "programs", "matrix_functions", "storage", "grad_clipping", "block_elements"});
  for (const auto& [key, value] : top)
    if (key.Scalar() == "update") spec.update_loc = loader.loc(key);
  for (const char* required : {"optimizer", "summary", "update"})
    if (!root[required])
      throw SpecError(SourceLoc{file, 1, 1}, std::string("missing required field '") + required + "'");
  load_names(loader, root, spec);
  load_grad_clipping(loader, root, spec);
  load_block_elements(loader, root, spec);  // before the states: `shape: blocks` needs it

  // Hyperparameters, states and scalar states share one namespace.
  std::map<std::string, SourceLoc> names;
  if (YAML::Node hyper = root["hyperparameters"]) {
    for (auto& [key, value] : loader.entries(hyper, "'hyperparameters'")) {
      check_new_name(loader, key, names, "a hyperparameter", NameUse::Hyperparameter);
      spec.hyperparameters.push_back(load_hyperparameter(loader, key, value, spec));
    }
  }
  clipping::add_hyperparameters(spec);
  for (const char* name : {clipping::kMaxNorm, clipping::kFlag})
    if (spec.grad_clipping) names.emplace(name, spec.grad_clipping_loc);
  if (YAML::Node state = root["state"]) {
    for (auto& [key, value] : loader.entries(state, "'state'")) {
      check_new_name(loader, key, names, "a state buffer", NameUse::State);
      spec.states.push_back(load_state(loader, key, value, spec));
    }
  }
  if (YAML::Node scalars = root["scalar_state"]) {
    for (auto& [key, value] : loader.entries(scalars, "'scalar_state'")) {
      check_new_name(loader, key, names, "a scalar state", NameUse::ScalarState);
      spec.scalar_states.push_back(load_scalar_state(loader, key, value, spec));
    }
  }
  if (YAML::Node functions = root["matrix_functions"]) {
    load_matrix_functions(loader, functions, spec.matrix_functions);
    for (const MatrixFunctionSpec& f : spec.matrix_functions) {
      if (is_reserved_name(f.name) || is_reduction_name(f.name))
        throw SpecError(f.loc, "matrix function '" + f.name + "' has the name of a function of the language",
                        "name it after what it does, e.g. 'orthogonalise'");
      if (auto taken = names.find(f.name); taken != names.end())
        throw SpecError(f.loc,
                        "matrix function '" + f.name + "' has the name of a hyperparameter, state or scalar state",
                        "first declared at line " + std::to_string(taken->second.line));
    }
  }
  if (YAML::Node per_step = root["per_step"]) parse_block(loader, per_step, spec.per_step, "per_step");
  parse_block(loader, root["update"], spec.update, "update");
  if (YAML::Node storage = root["storage"]) load_storage(loader, storage, spec);  // may name matrix values
  if (YAML::Node programs = root["programs"]) load_programs(loader, programs, spec);
  check_launcher_names(spec);
  warn_of_float_range(spec.update, spec);  // per_step computes in double
  return spec;
}

}  // namespace

bool is_reserved_name(const std::string& name) {
  if (name == "param" || name == "grad" || name == "step" || name == "numel" || name == "rows" || name == "cols" ||
      name == "factored" || name == "true" || name == "false")
    return true;
  return find_builtin(name) != nullptr;
}

const Hyperparameter* Spec::find_hyperparameter(const std::string& n) const {
  for (const auto& h : hyperparameters)
    if (h.name == n) return &h;
  return nullptr;
}

int Spec::state_index(const std::string& n) const {
  for (size_t i = 0; i < states.size(); ++i)
    if (states[i].name == n) return static_cast<int>(i);
  return -1;
}

std::vector<std::string> Spec::state_names() const {
  std::vector<std::string> names;
  for (const auto& s : states) names.push_back(s.name);
  return names;
}

namespace {

/// Each variable `block` assigns a matrix function's result to, with the lines of those statements.
void collect_matrix_values(const Block& block, const Spec& spec,
                           std::vector<std::pair<std::string, std::vector<int>>>& assigned) {
  for (const BlockItem& item : block.items) {
    if (item.body) collect_matrix_values(*item.body, spec, assigned);
    if (!item.statement) continue;
    const Syntax& value = *item.statement->value;
    const std::string& target = item.statement->target;
    if (value.kind != Syntax::Kind::Call || !spec.find_matrix_function(value.text) || spec.state_index(target) >= 0)
      continue;
    auto it = std::find_if(assigned.begin(), assigned.end(), [&](const auto& a) { return a.first == target; });
    if (it == assigned.end()) it = assigned.insert(assigned.end(), {target, {}});
    it->second.push_back(item.loc.line);
  }
}

}  // namespace

const MatrixFunctionSpec* Spec::find_matrix_function(const std::string& n) const {
  for (const auto& f : matrix_functions)
    if (f.name == n) return &f;
  return find_builtin_matrix_function(n);
}

std::vector<MatrixFunctionSpec> load_matrix_functions_text(const std::string& path, const std::string& text) {
  auto file = std::make_shared<const SourceFile>(SourceFile{path, text});
  Loader loader(file);
  const YAML::Node root = parse_yaml(loader, file);
  loader.entries(root, path, {"matrix_functions"});
  std::vector<MatrixFunctionSpec> functions;
  load_matrix_functions(loader, root["matrix_functions"], functions);
  return functions;
}

std::vector<std::string> Spec::matrix_value_names() const {
  std::vector<std::pair<std::string, std::vector<int>>> assigned;
  collect_matrix_values(update, *this, assigned);
  std::vector<std::string> names;
  for (const auto& a : assigned) names.push_back(a.first);
  return names;
}

std::string Spec::storage_problem(const Storage& storage, const std::string& written) const {
  // The kernels name each matrix value a statement makes (o, o_1, ...) and a storage only the
  // variable: a dtype for a variable assigned two results would keep only the first in it.
  std::vector<std::pair<std::string, std::vector<int>>> assigned;
  collect_matrix_values(update, *this, assigned);
  for (const auto& [name, lines] : assigned)
    if (lines.size() > 1 && storage.matrix_dtype(name) != DType::BF16)
      return "storage '" + written + "' keeps matrix value '" + name + "' in " + to_string(storage.matrix_dtype(name)) +
             ", but lines " + std::to_string(lines[0]) + " and " + std::to_string(lines[1]) +
             " both assign it a matrix function's result, and a storage names one of them";
  for (const ElementState& s : states)
    if (s.shape != StateShape::Elements && is_blockwise(storage.state_dtype(s.name)))
      return "storage '" + written + "' keeps state '" + s.name + "' (shape: " + written_shape(s.shape) + ") in " +
             to_string(storage.state_dtype(s.name)) +
             ", but 8-bit blockwise storage is for states of a value per element";
  return "";
}

std::vector<const Hyperparameter*> Spec::flags() const {
  std::vector<const Hyperparameter*> result;
  for (const auto& h : hyperparameters)
    if (h.specialize) result.push_back(&h);
  return result;
}

std::string Spec::written_shape(StateShape shape) const {
  return block_elements > 0 && shape == StateShape::Rows ? "blocks" : to_string(shape);
}

std::string Spec::variant_name(const std::map<std::string, bool>& flags) const {
  std::string result = name;
  for (const Hyperparameter* flag : this->flags())
    if (flags.at(flag->name)) result += "_" + flag->name;
  return result;
}

Spec load_spec_text(const std::string& path, const std::string& text) {
  auto file = std::make_shared<SourceFile>();
  file->path = path;
  file->text = text;
  return load(file);
}

Spec load_spec(const std::string& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error))
    throw SpecError(SourceLoc{std::make_shared<SourceFile>(SourceFile{path, ""}), 0, 0},
                    "this is a directory, not a spec file", "pass the spec files in it, e.g. " + path + "/*.yaml");
  // A regular file of a spec's size: a FIFO blocked here for good, /dev/zero was read until memory
  // ran out.
  std::string why;
  std::optional<std::string> text = read_regular_file(path, kMaxSpecBytes, &why);
  if (!text) {
    const std::string open = "cannot open the file: ";
    throw SpecError(SourceLoc{std::make_shared<SourceFile>(SourceFile{path, ""}), 0, 0},
                    why.rfind(open, 0) == 0 ? "cannot open spec file: " + why.substr(open.size())
                                            : "cannot read spec file: " + why);
  }
  return load_spec_text(path, *text);
}

}  // namespace optgen
