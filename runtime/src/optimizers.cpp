#include "optgen/optimizers.h"

#include <set>

#include "optgen/error.h"

namespace optgen {

namespace {

constexpr const char* kFormat = "optgen.optimizers";
constexpr const char* kFormatVersion = "1";

std::string prefix(std::size_t i) { return "optimizer." + std::to_string(i) + "."; }

/// The keys of `from` that start with `head`, without it.
template <typename Map>
Map under(const Map& from, const std::string& head) {
  Map part;
  for (auto it = from.lower_bound(head); it != from.end() && it->first.compare(0, head.size(), head) == 0; ++it)
    part.emplace(it->first.substr(head.size()), it->second);
  return part;
}

}  // namespace

Optimizers::Optimizers(std::vector<FusedOptimizer*> members) : members_(std::move(members)) {
  std::set<const FusedOptimizer*> seen;
  for (std::size_t i = 0; i < members_.size(); ++i) {
    if (!members_[i])
      throw Error("optgen::Optimizers", "member " + std::to_string(i) + " is null", "pass an optimizer for each");
    if (!seen.insert(members_[i]).second)
      throw Error("optgen::Optimizers", "member " + std::to_string(i) + " is given twice",
                  "give each optimizer once: a second would step its groups twice");
  }
}

void Optimizers::prepare(CUstream stream) {
  for (FusedOptimizer* m : members_) m->prepare(stream);
}

void Optimizers::step(CUstream stream) {
  for (FusedOptimizer* m : members_) m->step(stream);
}

void Optimizers::step(CUstream stream, const AmpInputs& amp) {
  for (FusedOptimizer* m : members_) m->step(stream, amp);
}

int Optimizers::launches_last_step() const {
  int launches = 0;
  for (const FusedOptimizer* m : members_) launches += m->launches_last_step();
  return launches;
}

Checkpoint Optimizers::checkpoint() const {
  Checkpoint c;
  c.metadata = {{"format", kFormat}, {"format_version", kFormatVersion}, {"optimizers", std::to_string(size())}};
  for (std::size_t i = 0; i < size(); ++i) {
    Checkpoint member = members_[i]->checkpoint();
    for (auto& [key, value] : member.metadata) c.metadata.emplace(prefix(i) + key, std::move(value));
    for (CheckpointTensor& t : member.tensors) {
      t.name = prefix(i) + t.name;
      c.tensors.push_back(std::move(t));
    }
  }
  return c;
}

void Optimizers::restore(const Checkpoint& c) {
  const std::string call = "optgen::Optimizers::restore";
  auto meta = [&](const std::string& key) {
    auto it = c.metadata.find(key);
    return it == c.metadata.end() ? std::string() : it->second;
  };
  if (meta("format") != kFormat)
    throw Error(call, "the checkpoint's format is '" + meta("format") + "', not '" + kFormat + "'",
                meta("format") == "optgen.optimizer" ? "it is one optimizer's: restore it into that optimizer"
                                                     : "pass a checkpoint written by Optimizers::save()");
  if (meta("format_version") != kFormatVersion)
    throw Error(call, "the checkpoint has format version " + meta("format_version") + "; this optgen reads version " +
                          kFormatVersion);
  if (meta("optimizers") != std::to_string(size()))
    throw Error(call, "the checkpoint holds " + meta("optimizers") + " optimizers, this set " + std::to_string(size()),
                "restore it into a set of the optimizers it was saved from, in their order");
  std::vector<Checkpoint> parts(size());
  for (std::size_t i = 0; i < size(); ++i) {
    parts[i].metadata = under(c.metadata, prefix(i));
    const std::string theirs = parts[i].metadata.count("spec") ? parts[i].metadata.at("spec") : "?";
    if (theirs != members_[i]->info().spec)
      throw Error(
          call,
          "member " + std::to_string(i) + " is " + members_[i]->info().spec + " but the checkpoint's is " + theirs,
          "restore it into a set of the optimizers it was saved from, in their order");
    for (const CheckpointTensor& t : c.tensors)
      if (t.name.compare(0, prefix(i).size(), prefix(i)) == 0) {
        parts[i].tensors.push_back(t);
        parts[i].tensors.back().name = t.name.substr(prefix(i).size());
      }
  }
  // Each member checks everything before it changes anything; a later one's refusal puts back
  // the earlier ones.
  std::vector<Checkpoint> before;
  for (std::size_t i = 0; i < size(); ++i) {
    before.push_back(members_[i]->checkpoint());
    try {
      members_[i]->restore(parts[i]);
    } catch (const Error& e) {
      for (std::size_t j = 0; j < i; ++j) members_[j]->restore(before[j]);
      throw Error(call, "member " + std::to_string(i) + " (" + members_[i]->info().spec + "): " + e.error(), e.fix());
    }
  }
}

void Optimizers::save(const std::string& path) const { write_safetensors(path, checkpoint()); }

void Optimizers::load(const std::string& path) { restore(read_safetensors(path)); }

}  // namespace optgen
