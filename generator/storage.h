#pragma once
/// Storage types: how a kernel variant keeps parameters and gradients (f32, bf16 or f16) and its
/// state buffers (f32 or bf16) in memory. Math is float whatever the storage.

#include <optional>
#include <string>
#include <vector>

namespace optgen {

enum class StorageType { F32, BF16, F16 };

const char* to_string(StorageType type);  ///< "f32", "bf16", "f16"
const char* cuda_type(StorageType type);  ///< the kernel's type: "float", "optgen::bf16", "optgen::f16"
const char* enum_name(StorageType type);  ///< the runtime's enumerator: "F32", "BF16", "F16"

struct Storage {
  StorageType param = StorageType::F32;  ///< parameters and gradients
  StorageType state = StorageType::F32;  ///< state buffers

  /// "bf16_f32": params and grads in bf16, states in f32; part of kernel names.
  std::string name() const;
  bool operator==(const Storage& other) const { return param == other.param && state == other.state; }
};

/// Reads "PARAM" or "PARAM:STATE" (PARAM: f32, bf16, f16; STATE: f32, bf16; default f32);
/// nullopt when malformed, with the reason in `error`.
std::optional<Storage> parse_storage(const std::string& text, std::string* error);

/// What a spec generates unless it or the build says otherwise: f32, and bf16 params with f32 states.
std::vector<Storage> default_storage();

/// The storage types to generate kernels for: those `requested` (optgen emit --storage), else the
/// spec's `storage:` list, else default_storage().
std::vector<Storage> storage_to_generate(const std::vector<Storage>& requested,
                                         const std::vector<Storage>& spec_storage);

}  // namespace optgen
