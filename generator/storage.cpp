#include "storage.h"

namespace optgen {

const char* to_string(StorageType type) {
  switch (type) {
    case StorageType::F32: return "f32";
    case StorageType::BF16: return "bf16";
    case StorageType::F16: return "f16";
  }
  return "?";
}

const char* cuda_type(StorageType type) {
  switch (type) {
    case StorageType::F32: return "float";
    case StorageType::BF16: return "optgen::bf16";
    case StorageType::F16: return "optgen::f16";
  }
  return "?";
}

const char* enum_name(StorageType type) {
  switch (type) {
    case StorageType::F32: return "F32";
    case StorageType::BF16: return "BF16";
    case StorageType::F16: return "F16";
  }
  return "?";
}

std::string Storage::name() const { return std::string(to_string(param)) + "_" + to_string(state); }

namespace {
std::optional<StorageType> parse_dtype(const std::string& text) {
  for (StorageType t : {StorageType::F32, StorageType::BF16, StorageType::F16})
    if (text == to_string(t)) return t;
  return std::nullopt;
}
}  // namespace

std::optional<Storage> parse_storage(const std::string& text, std::string* error) {
  size_t colon = text.find(':');
  auto param = parse_dtype(text.substr(0, colon));
  if (!param) {
    *error = "unknown parameter storage '" + text.substr(0, colon) + "': expected f32, bf16 or f16";
    return std::nullopt;
  }
  Storage storage{*param, StorageType::F32};
  if (colon != std::string::npos) {
    auto state = parse_dtype(text.substr(colon + 1));
    if (!state || *state == StorageType::F16) {
      *error = "unknown state storage '" + text.substr(colon + 1) + "': expected f32 or bf16";
      return std::nullopt;
    }
    storage.state = *state;
  }
  return storage;
}

std::vector<Storage> default_storage() {
  return {{StorageType::F32, StorageType::F32}, {StorageType::BF16, StorageType::F32}};
}

std::vector<Storage> storage_to_generate(const std::vector<Storage>& requested,
                                         const std::vector<Storage>& spec_storage) {
  if (!requested.empty()) return requested;
  if (!spec_storage.empty()) return spec_storage;
  return default_storage();
}

}  // namespace optgen
