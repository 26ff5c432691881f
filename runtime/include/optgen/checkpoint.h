#pragma once
/// Optimizer checkpoints, kept in host memory and stored as safetensors files: an 8-byte
/// little-endian header length, a JSON header naming each tensor's dtype, shape and byte range,
/// then the raw little-endian bytes. Any safetensors reader opens them (Python:
/// `safetensors.safe_open(path, "np")`, or `json.loads` on the header).
///
/// What an optimizer writes (FusedOptimizer::checkpoint, format "optgen.optimizer", version 2):
///   __metadata__ (strings only, as safetensors requires):
///     format "optgen.optimizer", format_version "2", optgen (the version that wrote it),
///     optimizer (e.g. "AdamW"), spec (e.g. "adamw"), and the spec's names, comma-separated:
///     hyperparameters, states, scalar_states; state_dtypes (each state's, comma-separated, e.g.
///     "bf16,f32"); param_write ("nearest", "master" or "stochastic"); groups (a count)
///   group.<g>.hyperparameters        F64 [hyperparameters]: declaration order, bools as 0/1
///   group.<g>.step                   I64 []: steps taken
///   group.<g>.scalar_state           F64 [scalar states] (only when the spec has scalar state)
///   group.<g>.tensor.<t>.<state>     F32, BF16 or F16 [numel]: each state buffer the group's variant
///                                    has for the tensor, in its dtype and of its own size
///                                    (FusedOptimizer::state: [B * R] for a state of rows, [B * C] of
///                                    columns); none for a state that does not exist for the tensor
///                                    (VariantInfo::state_presence)
///   group.<g>.master.<t>             F32 [numel]: the param's fp32 master copy (param_write "master")

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace optgen {

/// A tensor of a checkpoint: raw little-endian bytes in a safetensors dtype ("F64", "F32", "BF16",
/// "F16", "I64").
struct CheckpointTensor {
  std::string name;
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::vector<unsigned char> data;
};

struct Checkpoint {
  std::map<std::string, std::string> metadata;  ///< safetensors' __metadata__
  std::vector<CheckpointTensor> tensors;        ///< in the order they are written

  /// The tensor named `name`, or null.
  const CheckpointTensor* find(const std::string& name) const;
};

/// Bytes per element of a safetensors dtype optgen writes; 0 for any other.
std::size_t dtype_size(const std::string& dtype);

/// Writes `checkpoint` as a safetensors file: to `path`.tmp, then renamed over `path`, so a crash
/// never leaves a half-written file under the name. Throws optgen::Error naming the file.
void write_safetensors(const std::string& path, const Checkpoint& checkpoint);

/// Reads and checks a safetensors file (header length, JSON, dtypes, shapes, byte ranges that
/// cover the data exactly). Throws optgen::Error naming the file and what is wrong with it.
Checkpoint read_safetensors(const std::string& path);

}  // namespace optgen
