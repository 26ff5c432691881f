// The launch-parameter table (optgen/tuning.h): JSON through nlohmann-json.
#include "optgen/tuning.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "optgen/error.h"
#include "optgen/files.h"
#include "optgen/kernel_abi.h"
#include "optgen/optimizer.h"

namespace optgen {

namespace {

/// Far above any table optgen_bench writes (a few KB).
constexpr std::uint64_t kMaxTableBytes = 64 << 20;

const char* const kFix = "write the table again with optgen_bench --tune (bench/README.md, \"Tuning for a GPU\")";

[[noreturn]] void bad(const std::string& origin, const std::string& what) {
  throw Error("optgen::Tuning::load(" + origin + ")", what, kFix);
}

/// A member of `object` of JSON type `type`, or an error naming it.
const nlohmann::json& member(const nlohmann::json& object, const char* key, nlohmann::json::value_t type,
                             const std::string& where, const std::string& origin) {
  const auto it = object.find(key);
  if (it == object.end()) bad(origin, where + " has no \"" + key + "\"");
  const bool number = type == nlohmann::json::value_t::number_integer;
  if (number ? !it->is_number_integer() : it->type() != type)
    bad(origin, where + "'s \"" + key + "\" is not " + (number ? "an integer" : "of the right type"));
  return *it;
}

}  // namespace

std::string tuning_name(const OptimizerInfo& info, const KernelInfo& kernel) {
  return kernel.stages[update_stage(info.variants[kernel.variant])];
}

Tuning Tuning::parse(const std::string& text, const std::string& origin) {
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    bad(origin, std::string("not JSON: ") + e.what());
  }
  if (!root.is_object()) bad(origin, "the table is not a JSON object");
  Tuning tuning(member(root, "device", nlohmann::json::value_t::string, "the table", origin).get<std::string>());
  const nlohmann::json& kernels = member(root, "kernels", nlohmann::json::value_t::object, "the table", origin);
  for (const auto& [kernel, list] : kernels.items()) {
    const std::string where = "kernel set " + kernel;
    if (!list.is_array() || list.empty()) bad(origin, where + " has no list of measurements");
    std::vector<Entry> entries;
    for (const nlohmann::json& m : list) {
      if (!m.is_object()) bad(origin, where + " has a measurement that is not an object");
      Entry e{member(m, "elements", nlohmann::json::value_t::number_integer, where, origin).get<long long>(),
              member(m, "chunk_size", nlohmann::json::value_t::number_integer, where, origin).get<long long>()};
      if (e.elements <= 0) bad(origin, where + ": elements " + std::to_string(e.elements) + " is not positive");
      if (e.chunk_size < 64 || e.chunk_size % 64 != 0 || e.chunk_size > (1LL << 30))
        bad(origin, where + ": chunk size " + std::to_string(e.chunk_size) + " is not a multiple of 64 up to 2^30");
      if (m.contains("block_size") != m.contains("elements_per_thread"))
        bad(origin, where + ": a measurement gives \"block_size\" or \"elements_per_thread\" without the other");
      if (m.contains("block_size")) {
        const long long threads =
            member(m, "block_size", nlohmann::json::value_t::number_integer, where, origin).get<long long>();
        const long long in_flight =
            member(m, "elements_per_thread", nlohmann::json::value_t::number_integer, where, origin).get<long long>();
        if (threads < 32 || threads > 1024 || !kernel_abi::valid_block_size(static_cast<int>(threads)))
          bad(origin, where + ": block size " + std::to_string(threads) + " is not a power of two from 32 to 1024");
        if (in_flight < 1 || in_flight > 64 || !kernel_abi::valid_elements_per_thread(static_cast<int>(in_flight)))
          bad(origin, where + ": elements per thread " + std::to_string(in_flight) + " is not a power of two up to 64");
        e.block_size = static_cast<int>(threads);
        e.elements_per_thread = static_cast<int>(in_flight);
      }
      for (const Entry& other : entries)
        if (other.elements == e.elements)
          bad(origin, where + " has two measurements of " + std::to_string(e.elements) +
                          " elements: which one applies would depend on their order");
      entries.push_back(e);
    }
    tuning.set(kernel, std::move(entries));
  }
  tuning.origin_ = origin;
  return tuning;
}

void Tuning::check_kernel_names(const OptimizerInfo& info) const {
  std::vector<std::string> known;
  for (int k = 0; k < info.num_kernels; ++k) known.push_back(tuning_name(info, info.kernels[k]));
  for (const auto& [kernel, entries] : kernels_) {
    if (std::find(known.begin(), known.end(), kernel) != known.end()) continue;
    bool ours = false;  // a variant of this spec, then a params dtype: adamw_amsgrad_bf16_...
    for (int v = 0; v < info.num_variants && !ours; ++v)
      for (DType param : {DType::F32, DType::BF16, DType::F16})
        ours = ours || kernel.rfind(std::string(info.variants[v].name) + "_" + to_string(param) + "_", 0) == 0;
    if (!ours) continue;
    std::string names;
    for (const std::string& name : known) names += (names.empty() ? "" : ", ") + name;
    throw Error("optgen::Tuning(" + origin_ + ")",
                "kernel set " + kernel + " is not one of " + info.name + "'s, so its entry would do nothing",
                "name one of its kernel sets: " + names);
  }
}

Tuning Tuning::load(const std::string& path) {
  // A regular file of a table's size: a FIFO blocked here for good, a device read without end.
  std::string error;
  std::optional<std::string> text = read_regular_file(path, kMaxTableBytes, &error);
  if (!text) bad(path, error);
  return parse(*text, path);
}

Tuning Tuning::from_environment(const std::string& device) {
  const char* paths = std::getenv("OPTGEN_TUNING");
  if (!paths) return Tuning(device);
  std::stringstream list(paths);
  std::string path;
  while (std::getline(list, path, ':')) {
    if (path.empty()) continue;
    Tuning tuning = load(path);
    if (tuning.device() == device) return tuning;
  }
  return Tuning(device);
}

long long Tuning::chunk_size(const std::string& kernel, long long elements) const {
  const Entry* e = find(kernel, elements);
  return e ? e->chunk_size : 0;
}

const Tuning::Entry* Tuning::find(const std::string& kernel, long long elements) const {
  const auto it = kernels_.find(kernel);
  if (it == kernels_.end()) return nullptr;
  const double x = std::log(static_cast<double>(std::max(elements, 1LL)));
  const Entry* best = nullptr;
  for (const Entry& e : it->second)  // by increasing elements: on a tie the later, larger one wins
    if (!best || std::abs(std::log(static_cast<double>(e.elements)) - x) <=
                     std::abs(std::log(static_cast<double>(best->elements)) - x))
      best = &e;
  return best;
}

void Tuning::set(const std::string& kernel, std::vector<Entry> entries) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.elements < b.elements; });
  kernels_[kernel] = std::move(entries);
}

std::string Tuning::to_json(const std::string& measured) const {
  // One line per measurement, so that a table reads (and diffs) as one.
  std::string text = "{\n  \"device\": " + nlohmann::json(device_).dump() +
                     ",\n  \"measured\": " + nlohmann::json(measured).dump() + ",\n  \"kernels\": {";
  const char* kernel_separator = "\n";
  for (const auto& [kernel, entries] : kernels_) {
    text += kernel_separator + std::string("    ") + nlohmann::json(kernel).dump() + ": [";
    const char* entry_separator = "\n";
    for (const Entry& e : entries) {
      text += entry_separator + std::string("      {\"elements\": ") + std::to_string(e.elements) +
              ", \"chunk_size\": " + std::to_string(e.chunk_size);
      if (e.block_size > 0)
        text += ", \"block_size\": " + std::to_string(e.block_size) +
                ", \"elements_per_thread\": " + std::to_string(e.elements_per_thread);
      text += "}";
      entry_separator = ",\n";
    }
    text += "\n    ]";
    kernel_separator = ",\n";
  }
  return text + "\n  }\n}\n";
}

}  // namespace optgen
