#include "optgen/storage.h"

#include <algorithm>

namespace optgen {

const char* to_string(ParamWrite write) {
  switch (write) {
    case ParamWrite::Nearest: return "nearest";
    case ParamWrite::Master: return "master";
    case ParamWrite::Stochastic: return "stochastic";
  }
  return "unknown param write";
}

DType Storage::state_dtype(const std::string& name) const {
  for (const auto& [state, dtype] : state_dtypes)
    if (state == name) return dtype;
  return states;
}

DType Storage::matrix_dtype(const std::string& name) const {
  for (const auto& [value, dtype] : state_dtypes)
    if (value == name) return dtype;
  return DType::BF16;
}

namespace {

const char* param_suffix(ParamWrite write) {
  switch (write) {
    case ParamWrite::Nearest: return "";
    case ParamWrite::Master: return "master";
    case ParamWrite::Stochastic: return "sr";
  }
  return "?";
}

std::optional<DType> parse_dtype(const std::string& text) {
  for (DType t : {DType::F32, DType::BF16, DType::F16})
    if (text == to_string(t)) return t;
  return std::nullopt;
}

/// A state's dtype: a parameter's, or 8-bit blockwise.
std::optional<DType> parse_state_dtype(const std::string& text) {
  for (DType t : {DType::Q8, DType::UQ8})
    if (text == to_string(t)) return t;
  return parse_dtype(text);
}

const char* const kStateDtypes = "f32, bf16, f16, q8 or uq8";

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::size_t begin = 0;
  for (;;) {
    const std::size_t end = text.find(separator, begin);
    parts.push_back(text.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    if (end == std::string::npos) return parts;
    begin = end + 1;
  }
}

}  // namespace

std::string Storage::name() const {
  std::string name = to_string(param);
  if (param_write != ParamWrite::Nearest) name += std::string("_") + param_suffix(param_write);
  name += std::string("_") + to_string(states);
  for (const auto& [state, dtype] : state_dtypes) name += "_" + state + "_" + to_string(dtype);
  return name;
}

std::string Storage::text() const {
  std::string text = to_string(param);
  if (param_write != ParamWrite::Nearest) text += std::string("+") + param_suffix(param_write);
  if (states != DType::F32 || !state_dtypes.empty()) text += std::string(":") + to_string(states);
  for (const auto& [state, dtype] : state_dtypes) text += ":" + state + "=" + to_string(dtype);
  return text;
}

bool Storage::operator==(const Storage& other) const {
  return param == other.param && param_write == other.param_write && states == other.states &&
         state_dtypes == other.state_dtypes;
}

std::optional<Storage> parse_storage(const std::string& text, std::string* error) {
  const std::vector<std::string> items = split(text, ':');
  const std::vector<std::string> param = split(items[0], '+');
  Storage storage;
  if (auto dtype = parse_dtype(param[0])) {
    storage.param = *dtype;
  } else {
    *error = "unknown parameter storage '" + param[0] + "': expected f32, bf16 or f16" +
             (parse_state_dtype(param[0]) ? " (" + param[0] + " is 8-bit blockwise, for states)" : "");
    return std::nullopt;
  }
  if (param.size() > 2) {
    *error = "'" + items[0] + "' has more than one '+': expected PARAM, PARAM+master or PARAM+sr";
    return std::nullopt;
  }
  if (param.size() == 2) {
    if (param[1] == "master") {
      storage.param_write = ParamWrite::Master;
    } else if (param[1] == "sr") {
      storage.param_write = ParamWrite::Stochastic;
    } else {
      *error = "unknown parameter option '+" + param[1] +
               "': expected +master (an fp32 master copy) or +sr (stochastic rounding)";
      return std::nullopt;
    }
    const bool master = storage.param_write == ParamWrite::Master;
    if (storage.param == DType::F32) {
      *error = "'" + items[0] + "': f32 params " +
               (master ? "are their own master copy" : "are not rounded, stochastically or otherwise") + "; +" +
               param[1] + " is for bf16" + (master ? " and f16" : "") + " params";
      return std::nullopt;
    }
    if (!master && storage.param != DType::BF16) {
      *error = "'" + items[0] + "': stochastic rounding is for bf16 params";
      return std::nullopt;
    }
  }
  for (std::size_t i = 1; i < items.size(); ++i) {
    const std::vector<std::string> pair = split(items[i], '=');
    if (pair.size() == 1) {  // STATES
      auto dtype = parse_state_dtype(items[i]);
      if (!dtype) {
        *error = "unknown state storage '" + items[i] + "': expected " + kStateDtypes + ", or STATE=DTYPE";
        return std::nullopt;
      }
      if (i != 1) {
        *error = "the states' dtype '" + items[i] + "' must come first after PARAM: PARAM:STATES:STATE=DTYPE";
        return std::nullopt;
      }
      storage.states = *dtype;
      continue;
    }
    if (pair.size() != 2 || pair[0].empty()) {
      *error = "'" + items[i] + "': expected STATE=DTYPE, e.g. exp_avg_sq=f32";
      return std::nullopt;
    }
    auto dtype = parse_state_dtype(pair[1]);
    if (!dtype) {
      *error = "unknown storage '" + pair[1] + "' of state '" + pair[0] + "': expected " + kStateDtypes;
      return std::nullopt;
    }
    const auto same = [&](const auto& entry) { return entry.first == pair[0]; };
    if (std::any_of(storage.state_dtypes.begin(), storage.state_dtypes.end(), same)) {
      *error = "state '" + pair[0] + "' is given a dtype twice";
      return std::nullopt;
    }
    storage.state_dtypes.emplace_back(pair[0], *dtype);
  }
  return storage;
}

std::optional<Storage> canonical_storage(const Storage& storage, const std::vector<std::string>& states,
                                         const std::vector<std::string>& matrix_values, std::string* error,
                                         const std::string& written) {
  const auto has = [](const std::vector<std::string>& names, const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  const std::string text = written.empty() ? storage.text() : written;
  for (const auto& [name, dtype] : storage.state_dtypes) {
    if (has(matrix_values, name)) {
      if (dtype != DType::BF16 && dtype != DType::F32) {
        *error = "storage '" + text + "' keeps matrix value '" + name + "' in " + to_string(dtype) +
                 ": a matrix value is bf16 (the default: bf16 products that accumulate in fp32, as torch's) or f32";
        return std::nullopt;
      }
      continue;
    }
    if (has(states, name)) continue;
    std::string declared;
    for (const std::string& s : states) declared += (declared.empty() ? "" : ", ") + s;
    std::string values;
    for (const std::string& v : matrix_values) values += (values.empty() ? "" : ", ") + v;
    *error = "storage '" + text + "' names state '" + name + "', which the spec does not declare" +
             (declared.empty() ? " (it declares none" : " (it declares " + declared) +
             (values.empty() ? ")" : "; its matrix values: " + values + ")");
    return std::nullopt;
  }
  Storage canonical = storage;
  canonical.state_dtypes.clear();
  for (const std::string& s : states)
    if (storage.state_dtype(s) != storage.states) canonical.state_dtypes.emplace_back(s, storage.state_dtype(s));
  for (const std::string& v : matrix_values)
    if (storage.matrix_dtype(v) != DType::BF16) canonical.state_dtypes.emplace_back(v, storage.matrix_dtype(v));
  return canonical;
}

std::string repeated_storage(const std::string& written, const std::string& earlier) {
  if (written == earlier) return written + " is listed twice";
  return written + " is " + earlier + " again, listed before it (a state of the states' dtype changes nothing)";
}

std::string storage_clash(const std::vector<Storage>& earlier, const std::vector<std::string>& earlier_written,
                          const Storage& storage, const std::string& written) {
  for (std::size_t i = 0; i < earlier.size(); ++i) {
    if (earlier[i] == storage) return repeated_storage(written, earlier_written[i]);
    if (earlier[i].name() == storage.name())
      return "storage '" + written + "' and '" + earlier_written[i] + "' would both name the kernels <variant>_" +
             storage.name() + ": their state names run together";
  }
  return "";
}

std::vector<Storage> default_storage() {
  Storage bf16;
  bf16.param = DType::BF16;
  return {Storage{}, bf16};
}

std::vector<Storage> storage_to_generate(const std::vector<Storage>& requested,
                                         const std::vector<Storage>& spec_storage) {
  if (!requested.empty()) return requested;
  if (!spec_storage.empty()) return spec_storage;
  return default_storage();
}

}  // namespace optgen
