// Several optimizers as one (optgen::Optimizers, optgen_optimizers_*): its checkpoint's layout and
// every refusal without a GPU; on a GPU, Muon for matrices and AdamW for the rest stepped as one
// step exactly as each stepped on its own, their launches together, and a checkpoint of both that
// resumes bit for bit, or, when a member's part does not fit, changes nothing.
#include <catch2/catch.hpp>

#include <filesystem>
#include <random>

#include <unistd.h>

#include "optgen/c_api.h"
#include "optgen/optimizers.h"
#include "optimizer_harness.h"

using namespace optgen_test;
namespace fs = std::filesystem;

namespace {

optgen::FusedOptimizer make(const std::string& spec) {
  const auto& info = launcher(spec);
  return optgen::FusedOptimizer(info, optgen::default_hyperparameters(info));
}

std::string scratch_path(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("optgen_optimizers_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}

}  // namespace

TEST_CASE("a set's checkpoint holds each member's under its index, and a set of other members refuses it",
          "[checkpoint]") {
  // No param group: nothing touches device memory.
  optgen::FusedOptimizer muon = make("muon"), adamw = make("adamw");
  const optgen::Optimizers set({&muon, &adamw});
  const optgen::Checkpoint c = set.checkpoint();
  CHECK(c.metadata.at("format") == "optgen.optimizers");
  CHECK(c.metadata.at("format_version") == "1");
  CHECK(c.metadata.at("optimizers") == "2");
  CHECK(c.metadata.at("optimizer.0.spec") == "muon");
  CHECK(c.metadata.at("optimizer.1.spec") == "adamw");
  CHECK(c.metadata.at("optimizer.1.format") == "optgen.optimizer");
  CHECK_NOTHROW(optgen::Optimizers({&muon, &adamw}).restore(c));

  CHECK(error_of([&] {
          optgen::Optimizers({&adamw, &muon}).restore(c);
        }) ==
        "optgen::Optimizers::restore failed: member 0 is adamw but the checkpoint's is muon\n  fix: restore it into a "
        "set of the optimizers it was saved from, in their order");
  CHECK_THAT(error_of([&] { optgen::Optimizers({&muon}).restore(c); }),
             Catch::Contains("the checkpoint holds 2 optimizers, this set 1"));
  CHECK_THAT(error_of([&] { optgen::Optimizers({&muon}).restore(muon.checkpoint()); }),
             Catch::Contains("the checkpoint's format is 'optgen.optimizer', not 'optgen.optimizers'") &&
                 Catch::Contains("it is one optimizer's: restore it into that optimizer"));
  optgen::Checkpoint newer = c;
  newer.metadata["format_version"] = "2";
  CHECK_THAT(error_of([&] {
               optgen::Optimizers({&muon, &adamw}).restore(newer);
             }),
             Catch::Contains("the checkpoint has format version 2; this optgen reads version 1"));
  // A member's own checks, named by the set: a tensor the member has no place for.
  optgen::Checkpoint extra = c;
  extra.tensors.push_back({"optimizer.1.group.0.step", "I64", {}, std::vector<unsigned char>(8)});
  CHECK_THAT(error_of([&] {
               optgen::Optimizers({&muon, &adamw}).restore(extra);
             }),
             Catch::StartsWith("optgen::Optimizers::restore failed: member 1 (adamw): the checkpoint does not fit"));

  CHECK_THAT(error_of([&] { optgen::Optimizers({&muon, nullptr}); }), Catch::Contains("member 1 is null"));
  CHECK_THAT(error_of([&] { optgen::Optimizers({&muon, &adamw, &muon}); }), Catch::Contains("member 2 is given twice"));
}

TEST_CASE("the C ABI makes a set of optimizers and refuses a null one", "[launcher]") {
  optgen_optimizer* adamw = nullptr;
  REQUIRE(optgen_adamw_create(nullptr, nullptr, 0, nullptr, &adamw) == 0);
  optgen_optimizer* members[2] = {adamw, nullptr};
  optgen_optimizers* set = nullptr;
  CHECK(optgen_optimizers_create(members, 2, &set) == -1);
  CHECK_THAT(optgen_last_error(), Catch::Contains("member 1 is null"));
  CHECK(set == nullptr);
  CHECK(optgen_optimizers_create(members, 1, nullptr) == -1);
  CHECK_THAT(optgen_last_error(), Catch::Contains("out is NULL"));
  REQUIRE(optgen_optimizers_create(members, 1, &set) == 0);
  // No param group and no step yet: nothing launched, and a checkpoint needs no device memory.
  int launches = -1;
  CHECK(optgen_optimizers_launches_last_step(set, &launches) == 0);
  CHECK(launches == 0);
  const std::string path = scratch_path("c.safetensors");
  CHECK(optgen_optimizers_save(set, path.c_str()) == 0);
  CHECK(optgen_optimizers_load(set, path.c_str()) == 0);
  CHECK(optgen_optimizers_load(set, (path + ".missing").c_str()) == -1);
  CHECK_THAT(optgen_last_error(), Catch::Contains(".missing"));
  optgen_optimizers_destroy(set);
  optgen_destroy(adamw);
  fs::remove_all(fs::path(path).parent_path());
}

TEST_CASE("Muon for matrices and AdamW for the rest step as one set as each alone, and resume from one checkpoint",
          "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const auto& muon = launcher("muon");
  const auto& adamw = launcher("adamw");
  const std::vector<double> hm = optgen::default_hyperparameters(muon), ha = optgen::default_hyperparameters(adamw);
  const TensorShapes matrices{{{64, 32}, {16, 48}, {64, 32}}};
  const std::vector<std::int64_t> rest = {5, 4097};
  std::mt19937 r1(5), r2(5);
  DeviceGroup alone_m(DType::F32, matrices, {false, false, false}, r1),
      set_m(DType::F32, matrices, {false, false, false}, r2);
  DeviceGroup alone_a(DType::F32, rest, {false, true}, r1), set_a(DType::F32, rest, {false, true}, r2);
  optgen::FusedOptimizer m1(muon, hm), a1(adamw, ha);
  m1.add_param_group(alone_m.tensors, hm);
  a1.add_param_group(alone_a.tensors, ha);
  auto members = [&] {
    auto m = std::make_unique<optgen::FusedOptimizer>(muon, hm);
    auto a = std::make_unique<optgen::FusedOptimizer>(adamw, ha);
    m->add_param_group(set_m.tensors, hm);
    a->add_param_group(set_a.tensors, ha);
    return std::pair{std::move(m), std::move(a)};
  };
  auto [m2, a2] = members();
  auto set = std::make_unique<optgen::Optimizers>(std::vector<optgen::FusedOptimizer*>{m2.get(), a2.get()});
  const std::string path = scratch_path("set.safetensors");
  constexpr int N = 3, M = 2;
  for (int step = 1; step <= N + M; ++step) {
    std::mt19937 g1(step), g2(step);
    alone_m.new_gradients(g1);
    alone_a.new_gradients(g1);
    set_m.new_gradients(g2);
    set_a.new_gradients(g2);
    m1.step();
    a1.step();
    set->step();
    CHECK(set->launches_last_step() == m1.launches_last_step() + a1.launches_last_step());
    if (step == N) {  // one checkpoint of both, into fresh members of fresh states
      set->save(path);
      std::tie(m2, a2) = members();
      set = std::make_unique<optgen::Optimizers>(std::vector<optgen::FusedOptimizer*>{m2.get(), a2.get()});
      set->load(path);
      CHECK((m2->step_count(0) == N && a2->step_count(0) == N));
    }
  }
  synchronize();
  CHECK(set_m.device_bytes() == alone_m.device_bytes());
  CHECK(set_a.device_bytes() == alone_a.device_bytes());
  CHECK(state_bytes(*m2) == state_bytes(m1));
  CHECK(state_bytes(*a2) == state_bytes(a1));

  // A checkpoint whose AdamW part does not fit (one tensor, not two) changes neither member: Muon,
  // restored first to the older state saved, is put back.
  set->save(path);
  std::mt19937 g(99);
  set_m.new_gradients(g);
  set_a.new_gradients(g);
  set->step();
  synchronize();
  optgen::FusedOptimizer other_a(adamw, ha);
  other_a.add_param_group({set_a.tensors[0]}, ha);
  optgen::Optimizers mismatched({m2.get(), &other_a});
  const auto muon_before = state_bytes(*m2);
  CHECK_THAT(error_of([&] { mismatched.load(path); }),
             Catch::StartsWith("optgen::Optimizers::restore failed: member 1 (adamw): "));
  CHECK(state_bytes(*m2) == muon_before);
  CHECK(m2->step_count(0) == N + M + 1);
  fs::remove_all(fs::path(path).parent_path());
}
