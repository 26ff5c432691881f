// Every built-in spec's kernels (each variant's Update stage for every storage type optgen offers,
// and its group kernel) compile with NVRTC for sm_75, sm_80 and sm_90 with no register spills and no
// stack frame (ptxas's own report); for sm_75 the bf16 kernel sets compile empty. Needs no GPU. The compilations run on
// a thread per core (NVRTC compiles separate programs concurrently); Catch2's checks run on the test's thread
// afterwards.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <thread>

#include "emit_cuda.h"
#include "emit_images.h"
#include "optgen/kernel_images.h"
#include "optgen/nvrtc.h"
#include "pipeline.h"

namespace {

std::vector<std::string> builtin_specs() {
  std::vector<std::string> specs;
  for (const auto& entry : std::filesystem::directory_iterator(OPTGEN_SOURCE_DIR "/specs"))
    if (entry.path().extension() == ".yaml") specs.push_back(entry.path().string());
  std::sort(specs.begin(), specs.end());
  return specs;
}

// One spec's kernels for one architecture: what the test checks of the compilation.
struct Compilation {
  std::size_t source;  ///< index of the spec's source
  std::string spec;
  int arch = 0;
  int expected_kernels = 0;
  std::string log;
  std::string error;  ///< what compile() threw: a compile error's whole log
  optgen::nvrtc::SpillReport report;
};

}  // namespace

TEST_CASE("every built-in spec's kernels compile with NVRTC for sm_75, sm_80 and sm_90 without spills", "[nvrtc]") {
  std::string why;
  REQUIRE(optgen::nvrtc::available(&why));
  // Every codec in every role: each params' dtype, a master copy, stochastic rounding, each states'
  // dtype, and a state of its own dtype (the spec's first, where it has one); 8-bit states (signed
  // and unsigned maps) for every state of an element-wise spec, and in a spec of rows and columns
  // the 8-bit storage its own list gives (adam_mini's; Adafactor's step on shards spills 24 bytes at
  // sm_75 with clipping and 8-bit f32 states, which it does not offer). Not here: 8-bit
  // states with a master copy or stochastic rounding, which spill in adan's Update stage (four
  // states, eight elements a lane, and the param written twice).
  const std::vector<std::string> every_storage_text = {
      "f32", "bf16", "f16", "bf16:bf16", "f32:bf16", "f32:f16", "bf16+master", "f16+master:bf16", "bf16+sr:bf16"};
  const std::vector<std::string> blockwise_storage_text = {"f32:q8", "bf16:uq8"};
  std::vector<std::string> sources;
  std::vector<Compilation> compilations;
  for (const auto& path : builtin_specs()) {
    optgen::Spec spec = optgen::load_spec(path);
    auto variants = optgen::compile_spec(spec);
    // A spec with a matrix value (muon) has no 8-bit states (check_blockwise_states).
    const bool shaped = std::any_of(variants.begin(), variants.end(), [](const optgen::Program& v) {
      return optgen::uses_shapes(v) || !v.matrix_values.empty();
    });
    std::vector<optgen::Storage> every_storage;
    std::vector<std::string> texts = every_storage_text;
    if (!spec.states.empty()) texts.push_back("bf16:bf16:" + spec.states[0].name + "=f32");
    if (!shaped) texts.insert(texts.end(), blockwise_storage_text.begin(), blockwise_storage_text.end());
    for (std::size_t i = 0; shaped && i < spec.storage.size(); ++i)
      if (std::any_of(spec.states.begin(), spec.states.end(),
                      [&](const auto& state) { return optgen::is_blockwise(spec.storage[i].state_dtype(state.name)); }))
        texts.push_back(spec.storage_written[i]);
    for (const std::string& text : texts) {
      std::string error;
      auto parsed = optgen::parse_storage(text, &error);
      REQUIRE(parsed);
      auto canonical = optgen::canonical_storage(*parsed, spec.state_names(), spec.matrix_value_names(), &error);
      REQUIRE(canonical);
      REQUIRE(spec.storage_problem(*canonical, text).empty());
      every_storage.push_back(*canonical);
    }
    // One kernel per stage and program of each variant and storage type, per stage of its step on
    // shards, the Update stage of long rows where the set has one and that of tensors whose matrices
    // are one element where the variant has code for them; one group kernel per variant.
    int expected = 0;
    for (const auto& v : variants) {
      const std::size_t shards = v.shard_step ? v.shard_step->stages.size() : 0;
      expected += static_cast<int>((v.stages.size() + v.programs.size() + shards) * every_storage.size() + 1);
      for (const auto& s : every_storage) {
        expected += optgen::long_row_update_name(v, s).empty() ? 0 : 1;
        expected += optgen::unit_update_name(v, s).empty() ? 0 : 1;
      }
    }
    sources.push_back(optgen::emit_cuda(spec, variants, every_storage, optgen::KernelTuning()));
    // A spec with a matrix value adds the nine kernels of its programs (device/matrices.cuh: the
    // norms' two, the sums' and the whole program's in one block, bf16's and f32's, and the move of
    // tensors with column splits), from sm_80 on.
    const bool matrices = std::any_of(variants.begin(), variants.end(),
                                      [](const optgen::Program& v) { return !v.matrix_values.empty(); });
    for (int arch : {75, 80, 90})
      compilations.push_back(
          {sources.size() - 1, spec.name, arch, expected + (matrices && arch >= 80 ? 9 : 0), {}, {}, {}});
  }

  // The largest sources first, so that no long compilation starts last.
  std::vector<size_t> order(compilations.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return sources[compilations[a].source].size() > sources[compilations[b].source].size();
  });
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t k = next++; k < order.size(); k = next++) {
      Compilation& c = compilations[order[k]];
      auto options = optgen::kernel_compile_options();
      options.push_back("-Xptxas=-v");
      try {
        auto compiled = optgen::compile_kernels(sources[c.source], c.spec + "_kernels.cu", options, c.arch);
        c.log = compiled.log;
        c.report = optgen::nvrtc::parse_ptxas_report(compiled.log);
      } catch (const std::exception& e) {
        c.error = e.what();
      }
    }
  };
  std::vector<std::thread> threads(std::max(1u, std::thread::hardware_concurrency()));
  for (auto& t : threads) t = std::thread(work);
  for (auto& t : threads) t.join();

  int kernels = 0;
  for (const Compilation& c : compilations) {
    INFO(c.spec << " for sm_" << c.arch << ":\n" << c.log << c.error);
    CHECK(c.error.empty());
    CHECK(c.report.kernels == c.expected_kernels);
    CHECK(c.report.spill_store_bytes == 0);
    CHECK(c.report.spill_load_bytes == 0);
    CHECK(c.report.max_stack_frame_bytes == 0);
    kernels += c.report.kernels;
  }
  CHECK(kernels >= 3 * 18 * ((5 + 1) + (2 * 5 + 1)));  // the 18 variants of the 12 torch.optim specs, clipped or not
}

TEST_CASE("a matrix value chosen under a 'when', named as the value it replaces, compiles with NVRTC", "[nvrtc]") {
  std::string why;
  REQUIRE(optgen::nvrtc::available(&why));
  // u reads the matrix value's operand u (v_[2]) and is then the choice between it and grad: the
  // choice is u_1, where both were declared `const float u`.
  const optgen::Spec spec = optgen::load_spec_text("chosen_matrix_value.yaml", R"(optimizer: ChosenMatrixValue
summary: a matrix function's result under a guard
hyperparameters:
  lr: {type: float, default: 0.01}
  orthogonalise: {type: bool, default: true}
update:
  - u = grad
  - when: factored
    do:
      - u = newton_schulz(grad, 5, 3.4445, -4.775, 2.0315, 1e-7)
  - when: "!orthogonalise"
    do:
      - u = grad
  - param = param - lr * u
)");
  const auto variants = optgen::compile_spec(spec);
  const std::string source = optgen::emit_cuda(spec, variants, {optgen::Storage{}}, optgen::KernelTuning());
  CHECK(source.find("const float u_1 = factored ? u : grad;") != std::string::npos);
  std::string error;
  try {
    optgen::nvrtc::compile(source, "chosen_matrix_value_kernels.cu", optgen::kernel_compile_options(), 90);
  } catch (const std::exception& e) {
    error = e.what();
  }
  CHECK(error == "");
}
