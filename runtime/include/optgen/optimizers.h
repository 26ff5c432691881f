#pragma once
/// Optimizers of different specs as one: each param group belongs to one of them (Muon for the
/// hidden matrices and AdamW for embeddings, heads, norms and biases, as KellerJordan/Muon's
/// MuonWithAuxAdam takes them), and one step() steps them all on one stream, each in its own few
/// launches, which do not grow with its groups or tensors. The set refers to its members: they must
/// outlive it. Through the C ABI: optgen_optimizers_create (optgen/c_api.h).
///
/// One checkpoint holds every member's (FusedOptimizer::checkpoint), format "optgen.optimizers"
/// version 1: __metadata__ format, format_version, optgen, optimizers (a count), and each member's
/// metadata under "optimizer.<i>." (e.g. optimizer.0.spec "muon"); each member's tensors under the
/// same prefix (optimizer.1.group.0.step, ...).

#include <cuda.h>

#include <cstddef>
#include <string>
#include <vector>

#include "optgen/checkpoint.h"
#include "optgen/optimizer.h"

namespace optgen {

class Optimizers {
 public:
  /// `members`, stepped in this order; none may be null or appear twice.
  explicit Optimizers(std::vector<FusedOptimizer*> members);

  std::size_t size() const { return members_.size(); }
  FusedOptimizer& operator[](std::size_t i) const { return *members_.at(i); }

  /// Each member's prepare(), step() or AMP step, in order, on `stream`; capturable in one CUDA
  /// graph as each member's is (prepare() before the capture).
  void prepare(CUstream stream = nullptr);
  void step(CUstream stream = nullptr);
  void step(CUstream stream, const AmpInputs& amp);
  /// The launches of the members' last steps, together.
  int launches_last_step() const;

  /// Every member's checkpoint in one (the format above), and back: restore() checks the member
  /// count and each member's spec, restores each in turn, and on a member's refusal puts back the
  /// ones it restored before throwing (optgen::Error, naming the member): nothing changes.
  Checkpoint checkpoint() const;
  void restore(const Checkpoint& checkpoint);
  /// The same through a safetensors file.
  void save(const std::string& path) const;
  void load(const std::string& path);

 private:
  std::vector<FusedOptimizer*> members_;
};

}  // namespace optgen
