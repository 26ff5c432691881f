// Rows, columns and matrices on the runtime's side (the kernels are the CUDA emitter's): the tables
// the generator prints for a variant with shapes (specs/adafactor.yaml), the engine's refusal
// of a tensor without a shape, the sizes and presence of states, a plan's ShapeTable layout and
// grids (runtime/src/shape_layout.h), and the C ABI's view of them, with no GPU; on a GPU, the
// allocation, presence and checkpoints of states of rows and columns.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "emit_cuda.h"
#include "emit_launcher.h"
#include "optgen/c_api.h"
#include "optgen/kernel_abi.h"
#include "optimizer_harness.h"
#include "optimizer_tables.h"
#include "pipeline.h"
#include "shape_layout.h"
#include "shapes.h"

using namespace optgen_test;
using optgen::StatePresence;
namespace abi = optgen::kernel_abi;

namespace {

constexpr unsigned bit(abi::BlockKind kind) { return 1u << kind; }

/// specs/adafactor.yaml's variants, compiled.
std::vector<optgen::Program> adafactor_variants(optgen::Spec& spec) {
  spec = optgen::load_spec(std::string(OPTGEN_SOURCE_DIR) + "/specs/adafactor.yaml");
  return optgen::compile_spec(spec, {});
}

/// The variant without clipping of the spec at `path` (under the source tree), compiled; its spec
/// is kept for the program to point into.
optgen::Program first_variant(const std::string& path) {
  static std::vector<std::unique_ptr<optgen::Spec>> specs;
  specs.push_back(std::make_unique<optgen::Spec>(optgen::load_spec(std::string(OPTGEN_SOURCE_DIR) + path)));
  return optgen::compile_spec(*specs.back(), {}).front();
}

const optgen::VariantRow& row_named(const optgen::KernelTables& tables, const std::string& name) {
  for (const auto& v : tables.variants)
    if (v.name == name) return v;
  FAIL("no variant " << name);
  throw;
}

/// Adam's launcher as if its variants had matrix, row or column code (stage_blocks), and its
/// second and third states existed for factored tensors only and for the others only: enough for
/// everything the engine decides before it touches the driver.
struct ShapedAdam {
  optgen::OptimizerInfo info = launcher("adam");
  std::vector<optgen::VariantInfo> variants{info.variants, info.variants + info.num_variants};
  std::vector<std::vector<unsigned>> masks;
  std::vector<std::vector<StatePresence>> presence;

  ShapedAdam() {
    for (auto& v : variants) {
      masks.emplace_back(static_cast<std::size_t>(v.num_stages), 0u);
      masks.back().front() |= v.num_stages > 1 ? bit(abi::kRowLines) : 0u;
      std::vector<StatePresence> p(static_cast<std::size_t>(v.num_states), StatePresence::Always);
      if (v.num_states > 1) p[1] = StatePresence::Factored;
      if (v.num_states > 2) p[2] = StatePresence::NotFactored;
      presence.push_back(p);
    }
    for (std::size_t i = 0; i < variants.size(); ++i) {
      variants[i].stage_blocks = masks[i].data();
      variants[i].state_presence = presence[i].data();
    }
    info.variants = variants.data();
  }
};

}  // namespace

// ---- The tables: generator/optimizer_tables.h, and what the launcher prints of them ----

TEST_CASE("adafactor's variant tables carry its stage blocks, reduction scopes and state presence", "[shapes]") {
  optgen::Spec spec;
  const std::vector<optgen::Program> variants = adafactor_variants(spec);
  const optgen::KernelTables tables = optgen::kernel_tables(variants, {optgen::Storage{}}, optgen::KernelTuning{});
  const optgen::VariantRow& v = row_named(tables, "adafactor");
  INFO("variant " << v.name);

  // Stage 1: norm(param) over chunks, row and column means of g * g (whose lines store the new
  // row_var and col_var); stage 2 mean(row_var) per matrix; stage 3 norm(u) over chunks; then the
  // update, which launches one block per chunk and reads no state itself: no snapshot.
  using optgen::StageKind;
  REQUIRE(v.stage_kinds ==
          std::vector<StageKind>{StageKind::Reduce, StageKind::Reduce, StageKind::Reduce, StageKind::Update});
  REQUIRE(v.stage_blocks.size() == 4);
  CHECK(v.stage_blocks[0] == (bit(abi::kChunkRuns) | bit(abi::kRowLines) | bit(abi::kColumnSegments)));
  CHECK(v.stage_blocks[1] == bit(abi::kMatrixRowLines));
  CHECK(v.stage_blocks[2] == bit(abi::kChunkRuns));
  CHECK(v.stage_blocks[3] == 0u);
  // max(mean(row_var), eps1) per matrix; row_var_next per row, row_var's new value in its slot
  // (`factored ? row_var_next : row_var`, and only factored tensors have row_var); the same per
  // column.
  CHECK(v.stored_matrix_values == 1);
  CHECK(v.stored_row_values == 1);
  CHECK(v.stored_col_values == 1);

  // Each scope numbers its own reductions from 0, in the order of r; tensor and group
  // reductions keep r.
  std::map<optgen::Domain, int> next;
  for (std::size_t r = 0; r < v.reductions.size(); ++r) {
    const optgen::ReductionRow& reduction = v.reductions[r];
    INFO("reduction " << reduction.name);
    const bool by_r = reduction.scope == optgen::Domain::Tensor || reduction.scope == optgen::Domain::Group;
    CHECK(reduction.scope_index == (by_r ? static_cast<int>(r) : next[reduction.scope]++));
  }
  CHECK(next[optgen::Domain::Row] >= 1);
  CHECK(next[optgen::Domain::Column] >= 1);
  CHECK(next[optgen::Domain::Matrix] >= 1);

  // row_var and col_var exist for factored tensors, variance for the others (in operand order).
  REQUIRE(v.state_presence.size() == v.states.size());
  for (std::size_t j = 0; j < v.states.size(); ++j) {
    const std::string name = spec.states[static_cast<std::size_t>(v.states[j])].name;
    INFO("state " << name);
    CHECK(v.state_presence[j] ==
          (name == "variance" ? optgen::StatePresence::NotFactored : optgen::StatePresence::Factored));
  }
}

TEST_CASE("values are stored by the lines that finish their results, and the snapshot taken only where read",
          "[shapes]") {
  auto describe = [](const optgen::Program& p) {
    std::vector<std::string> list;
    for (const optgen::StoredValue& v : optgen::stored_values(p))
      list.push_back(std::string(optgen::to_string(v.level)) + " " + v.name +
                     (v.shared      ? " (new state, shared)"
                      : v.new_state ? " (new state)"
                                    : "") +
                     ": stage " + std::to_string(v.stage) + ", kind " + std::to_string(v.kind) + ", slot " +
                     std::to_string(v.slot));
    return list;
  };
  using Strings = std::vector<std::string>;

  const optgen::Program adafactor = first_variant("/specs/adafactor.yaml");
  // A new state takes the slot of the value it equals for the tensors that have it (factored ones).
  CHECK(describe(adafactor) == Strings{"matrix max_sum_row_var_next_over_rows_eps1: stage 2, kind 3, slot 0",
                                       "row row_var_next: stage 1, kind 1, slot 0",
                                       "row row_var (new state, shared): stage 1, kind 1, slot 0",
                                       "column col_var_next: stage 1, kind 2, slot 0",
                                       "column col_var (new state, shared): stage 1, kind 2, slot 0"});
  CHECK_FALSE(optgen::update_reads_shaped_states(adafactor));
  // Code of a later stage loads what an earlier one stored; the stage that stores it computes it.
  CHECK(optgen::loaded_value(optgen::stored_values(adafactor), "row_var_next", optgen::Domain::Row, 2) != nullptr);
  CHECK(optgen::loaded_value(optgen::stored_values(adafactor), "row_var_next", optgen::Domain::Row, 1) == nullptr);
  CHECK(optgen::loaded_value(optgen::stored_values(adafactor), "row_var_next", optgen::Domain::Row, 0) == nullptr);

  const optgen::Program adam_mini = first_variant("/specs/adam_mini.yaml");
  CHECK(describe(adam_mini) ==
        Strings{"row vmean_next: stage 1, kind 1, slot 0", "row vmean (new state, shared): stage 1, kind 1, slot 0"});
  CHECK_FALSE(optgen::update_reads_shaped_states(adam_mini));

  // r's new value reads a row mean and a tensor norm of the same stage: no one line finishes both,
  // so the Update stage computes it, from the snapshot of r; c's are stored.
  const optgen::Program row_inline = first_variant("/tests/specs/row_inline.yaml");
  CHECK(describe(row_inline) ==
        Strings{"column one_plus_c_next: stage 1, kind 2, slot 0", "column c (new state): stage 1, kind 2, slot 1"});
  CHECK(optgen::update_reads_shaped_states(row_inline));
  CHECK(optgen::stage_blocks(row_inline, row_inline.stages.front()) ==
        (bit(abi::kChunkRuns) | bit(abi::kRowLines) | bit(abi::kColumnSegments) | bit(abi::kSnapshot)));

  // A level stores 32 values at most (a kernel's masks of slots): the 33rd and 34th row values are
  // not stored, and the Update stage computes them where it reads them.
  const optgen::Program many = first_variant("/tests/specs/many_row_values.yaml");
  REQUIRE(many.values[optgen::Domain::Row].size() >= 34);
  const std::vector<optgen::StoredValue> stored = optgen::stored_values(many);
  CHECK(stored.size() == static_cast<std::size_t>(optgen::kMaxStoredValues));
  CHECK(stored.back().slot == optgen::kMaxStoredValues - 1);
  CHECK(optgen::loaded_value(stored, many.values[optgen::Domain::Row].back().name, optgen::Domain::Row, 2) == nullptr);
}

TEST_CASE("element code loads each stored value it reads through Position, and finds no index it does not read",
          "[shapes]") {
  // The roots of stage `order`'s chunk runs (a Reduce stage), or of the Update stage's element code.
  auto roots = [](const optgen::Program& p, int order) {
    std::vector<optgen::Expr> list;
    if (order > static_cast<int>(p.stages.size()) - 1) {
      for (const auto& o : p.element_outputs)
        if (o.level == optgen::Domain::Element) list.push_back(o.value);
    } else {
      for (const auto& r : p.reductions)
        if (r.stage == order && optgen::block_kind(r) == abi::kChunkRuns) list.push_back(r.operand);
    }
    return list;
  };
  auto slots = [&](const optgen::Program& p, int order) {
    const optgen::LoadedSlots s = optgen::loaded_slots(p, roots(p, order), order);
    return std::vector<unsigned>{s.row, s.col, s.matrix};
  };
  using Masks = std::vector<unsigned>;

  // Adafactor: stage 1's chunk runs (the parameter's norm) read nothing of rows or columns; stage 3
  // (the update's norm) and the Update stage load row_var_next, col_var_next and the matrix mean
  // (slot 0 of each). The new states (slot 1) are not among them: store_states loads those as
  // stored, for the elements that store them.
  const optgen::Program adafactor = first_variant("/specs/adafactor.yaml");
  REQUIRE(adafactor.stages.size() == 4);
  CHECK_FALSE(optgen::reads_position(adafactor, roots(adafactor, 1), 1));
  CHECK(slots(adafactor, 1) == Masks{0, 0, 0});
  CHECK(optgen::reads_position(adafactor, roots(adafactor, 3), 3));
  CHECK(slots(adafactor, 3) == Masks{1, 1, 1});
  CHECK(slots(adafactor, 4) == Masks{1, 1, 1});

  const optgen::Program adam_mini = first_variant("/specs/adam_mini.yaml");
  CHECK(slots(adam_mini, static_cast<int>(adam_mini.stages.size())) == Masks{1, 0, 0});

  // row_inline's r is computed per element from the snapshot (no slot), c's value is loaded.
  const optgen::Program row_inline = first_variant("/tests/specs/row_inline.yaml");
  const int update = static_cast<int>(row_inline.stages.size());
  CHECK(optgen::reads_position(row_inline, roots(row_inline, update), update));
  CHECK(slots(row_inline, update) == Masks{0, 1, 0});
}

TEST_CASE("a variant without rows or columns has no stage blocks and no state presence", "[shapes]") {
  const optgen::Spec spec = optgen::load_spec(std::string(OPTGEN_SOURCE_DIR) + "/specs/lamb.yaml");
  const optgen::KernelTables tables =
      optgen::kernel_tables(optgen::compile_spec(spec), {optgen::Storage{}}, optgen::KernelTuning{});
  for (const auto& v : tables.variants) {
    INFO("variant " << v.name);
    CHECK(v.stage_blocks.empty());
    CHECK(v.state_presence.empty());
    for (std::size_t r = 0; r < v.reductions.size(); ++r) CHECK(v.reductions[r].scope_index == static_cast<int>(r));
  }
}

TEST_CASE("the launcher prints stage blocks and state presence only for variants that have them", "[shapes]") {
  optgen::Spec spec;
  const std::vector<optgen::Program> variants = adafactor_variants(spec);
  const std::string source = optgen::emit_launcher_source(spec, variants, {optgen::Storage{}}, optgen::KernelTuning{});
  CHECK_THAT(source, Catch::Contains("const unsigned kStageBlocks[] = {1u << kernel_abi::kChunkRuns | 1u << "
                                     "kernel_abi::kRowLines | 1u << kernel_abi::kColumnSegments, "));
  CHECK_THAT(source, Catch::Contains("const StatePresence kStatePresence[] = {StatePresence::Factored, "
                                     "StatePresence::Factored, StatePresence::NotFactored};"));
  // Its step on shards: the first stage takes the snapshot too; no matrix values before it.
  CHECK_THAT(source, Catch::Contains("const unsigned kShardStageBlocks[] = {1u << kernel_abi::kChunkRuns | 1u << "
                                     "kernel_abi::kRowLines | 1u << kernel_abi::kColumnSegments | 1u << "
                                     "kernel_abi::kSnapshot, "));
  // Its code for tensors whose matrices are one element (unit_matrices.h): the row's last field.
  CHECK_THAT(source, Catch::Contains("variants::adafactor::kStageBlocks, variants::adafactor::kStatePresence, {1, 1, "
                                     "1}, nullptr, 0, variants::adafactor::kShardStageBlocks, true},"));
  // Across rows, across columns: a row's sum is over its columns, a column's over its rows, and
  // the matrix mean of row values over the rows.
  CHECK_THAT(source, Catch::Contains(", Domain::Row, 0, false, true},"));
  CHECK_THAT(source, Catch::Contains(", Domain::Column, 0, true, false},"));
  CHECK_THAT(source, Catch::Contains(", Domain::Matrix, 0, true, false},"));
  // Deterministic: the same text twice.
  CHECK(source == optgen::emit_launcher_source(spec, variants, {optgen::Storage{}}, optgen::KernelTuning{}));

  const optgen::Spec adam = optgen::load_spec(std::string(OPTGEN_SOURCE_DIR) + "/specs/adam.yaml");
  const std::string plain =
      optgen::emit_launcher_source(adam, optgen::compile_spec(adam), {optgen::Storage{}}, optgen::KernelTuning{});
  CHECK_THAT(plain, Catch::Contains("variants::adam::kReductions, 0, -1, nullptr, nullptr, {0, 0, 0}},"));
  CHECK_THAT(plain, !Catch::Contains("kStageBlocks") && !Catch::Contains("kStatePresence"));
}

TEST_CASE("LAMB's launcher describes its reductions by scope and has no shapes", "[shapes]") {
  const optgen::OptimizerInfo& lamb = launcher("lamb");
  for (int v = 0; v < lamb.num_variants; ++v) {
    const optgen::VariantInfo& variant = lamb.variants[v];
    CHECK(variant.stage_blocks == nullptr);
    CHECK(variant.state_presence == nullptr);
    for (int r = 0; r < variant.num_reductions; ++r) {
      const optgen::ReductionSlot& slot = variant.reductions[r];
      CHECK((slot.scope == optgen::Domain::Group || slot.scope == optgen::Domain::Tensor));
      CHECK(slot.scope_index == r);
    }
  }
}

TEST_CASE("a spec that reduces over rows, columns or matrices has a step on shards, which stores no values",
          "[shapes]") {
  optgen::Spec spec;
  const std::vector<optgen::Program> variants = adafactor_variants(spec);
  for (const optgen::Program& p : variants) {
    INFO("variant " << p.variant);
    REQUIRE(p.shard_step);
    CHECK(p.shard_step->for_shards);
    CHECK(p.shard_step->stages.size() == p.stages.size());
    CHECK(!optgen::stored_values(p).empty());
    CHECK(optgen::stored_values(*p.shard_step).empty());
  }
  CHECK(!first_variant("/specs/lamb.yaml").shard_step);  // tensors and groups only: the same step

  // Its Update stage computes row_var's and col_var's new values itself, from the states: the
  // first stage takes the snapshot. Its kernels are named after it.
  const optgen::KernelTables tables = optgen::kernel_tables(variants, {optgen::Storage{}}, optgen::KernelTuning{});
  const optgen::VariantRow& v = row_named(tables, "adafactor");
  REQUIRE(v.shard_stage_blocks.size() == v.stage_blocks.size());
  CHECK(v.shard_stage_blocks[0] == (v.stage_blocks[0] | bit(abi::kSnapshot)));
  for (std::size_t s = 1; s < v.stage_blocks.size(); ++s) CHECK(v.shard_stage_blocks[s] == v.stage_blocks[s]);
  const optgen::KernelRow& k = *tables.kernels_of(0).front();
  REQUIRE(k.shard_stages.size() == k.stages.size());
  CHECK(k.shard_stages.front() == "adafactor_shards_f32_f32_reduce1");

  // Sums over rows are each rank's part where rows are split: a column's, and a matrix's of row
  // values (mean(row_var)); a row's is whole, and so is a norm's part of the tensor's (the hook sums
  // tensor results anyway).
  for (const optgen::ReductionRow& r : v.reductions) {
    INFO("reduction " << r.name);
    CHECK(r.across_rows == (r.scope == optgen::Domain::Column || r.scope == optgen::Domain::Matrix));
  }
}

TEST_CASE("a variant with rows and columns has element code for tensors whose matrices are one element", "[shapes]") {
  optgen::Spec spec;
  const std::vector<optgen::Program> variants = adafactor_variants(spec);
  for (const optgen::Program& p : variants) {
    INFO("variant " << p.variant);
    REQUIRE(p.unit_matrices);
    const optgen::Program& unit = *p.unit_matrices;
    CHECK(!optgen::uses_shapes(unit));  // element code: no row, column or matrix value, no `factored`
    CHECK(unit.states == p.states);     // the same operands
    REQUIRE(unit.stages.size() == p.stages.size());
    // Every reduction keeps its index (its result's slot); those over tensors and groups their stage,
    // those over rows, columns and matrices none (their operands are read where their results were).
    REQUIRE(unit.reductions.size() == p.reductions.size());
    for (std::size_t r = 0; r < p.reductions.size(); ++r) {
      const bool shaped = optgen::result_level(p.reductions[r].scope) != optgen::Domain::Tensor;
      CHECK(unit.reductions[r].stage == (shaped ? -1 : p.reductions[r].stage));
    }
    // row_var and col_var are element states there, stored by its Update stage; variance, which
    // factored tensors lack, is neither read nor written.
    std::vector<std::string> outputs;
    for (const optgen::Output& o : unit.element_outputs) {
      CHECK(o.level == optgen::Domain::Element);
      outputs.push_back(o.name);
    }
    CHECK(outputs == std::vector<std::string>{"param", "row_var", "col_var"});
    optgen::for_each_node(
        unit, [](const optgen::Expr& e) { CHECK(!(e->kind == optgen::NodeKind::Var && e->name == "variance")); });
    // Its kernels take it where chunk runs read rows or columns: the norm of the update, not the
    // norm of the parameter (the same code for every tensor), nor the stage of matrix lines only;
    // and its Update stage is a kernel of its own.
    const std::string cuda = optgen::emit_cuda(spec, {p}, {optgen::Storage{}}, optgen::KernelTuning{});
    const std::string reduce3 = p.stages.size() == 4 ? "Reduce3" : "Reduce4";  // after clipping's stage
    CHECK(cuda.find("typedef unit::Reduce1 Unit;") == std::string::npos);
    CHECK(cuda.find("typedef unit::Reduce2 Unit;") == std::string::npos);
    CHECK(cuda.find("typedef unit::" + reduce3 + " Unit;") != std::string::npos);
    CHECK(cuda.find("optgen::update_stage<variants::" + p.variant + "::unit::Update,") != std::string::npos);
    CHECK(optgen::unit_update_name(p, optgen::Storage{}) == p.variant + "_f32_f32_update_unit_matrices");
  }
  const optgen::KernelTables tables = optgen::kernel_tables(variants, {optgen::Storage{}}, optgen::KernelTuning{});
  CHECK(row_named(tables, "adafactor").unit_matrices);
  // None where there are no rows or columns, nor where a matrix function runs on every matrix.
  CHECK(!first_variant("/specs/lamb.yaml").unit_matrices);
  CHECK(!first_variant("/specs/muon.yaml").unit_matrices);
  CHECK(first_variant("/specs/adam_mini.yaml").unit_matrices);
}

TEST_CASE("a reduction hook switches a spec with a step on shards to it", "[shapes]") {
  const optgen::OptimizerInfo& adafactor = launcher("adafactor");
  for (int v = 0; v < adafactor.num_variants; ++v) {
    INFO("variant " << adafactor.variants[v].name);
    CHECK(adafactor.variants[v].shard_stage_blocks != nullptr);
  }
  for (int k = 0; k < adafactor.num_kernels; ++k) CHECK(adafactor.kernels[k].shard_stages != nullptr);
  optgen::FusedOptimizer opt(adafactor, optgen::default_hyperparameters(adafactor));
  auto hook = [](const optgen::ReductionResults&) {};
  CHECK(error_of([&] { opt.set_reduction_hook(hook); }) == "(no error)");
  CHECK(error_of([&] { opt.set_reduction_hook({}); }) == "(no error)");
  const optgen::OptimizerInfo& lamb = launcher("lamb");
  CHECK(lamb.variants[0].shard_stage_blocks == nullptr);
  CHECK(lamb.kernels[0].shard_stages == nullptr);
}

TEST_CASE("f32 kernel sets of code that reads rows and columns have an Update stage of long rows", "[shapes]") {
  // Adafactor's and Adam-mini's Update stages read each element's row and column: their sets of
  // f32 params and states have one in vectors of eight, named after the stage.
  for (const char* name : {"adafactor", "adam_mini"}) {
    const optgen::OptimizerInfo& info = launcher(name);
    int with = 0;
    for (int k = 0; k < info.num_kernels; ++k) {
      const optgen::KernelInfo& kernel = info.kernels[k];
      INFO(kernel.stages[0]);
      bool f32 = kernel.param == DType::F32 && kernel.param_write == optgen::ParamWrite::Nearest;
      for (int j = 0; j < info.variants[kernel.variant].num_states; ++j)
        f32 = f32 && kernel.state_dtypes[info.variants[kernel.variant].states[j]] == DType::F32;
      REQUIRE((kernel.long_row_update != nullptr) == f32);
      if (!f32) continue;
      ++with;
      const std::string update = kernel.stages[info.variants[kernel.variant].num_stages - 1];
      CHECK(std::string(kernel.long_row_update) == update + "_long_rows");
    }
    CHECK(with == info.num_variants);  // each variant's f32 set
  }
  // Muon's Update stage reads no element's row or column; Adam's has none.
  for (const char* name : {"muon", "adam"}) {
    const optgen::OptimizerInfo& info = launcher(name);
    for (int k = 0; k < info.num_kernels; ++k) CHECK(info.kernels[k].long_row_update == nullptr);
  }
}

TEST_CASE("a plan takes the Update stage of long rows where at most an eighth of its elements are in short rows",
          "[shapes]") {
  using optgen::tensor_dims;
  static_assert(optgen::kLongRowColumns == 32);
  // gpt2's: matrices of 768 columns and more, vectors.
  CHECK(optgen::long_rows({tensor_dims({768, 2304}, 768 * 2304), tensor_dims({2304}, 2304), tensor_dims({768}, 768)}));
  // A small CNN's: 1x1 convolutions (rows of one value) as many elements as its classifier's.
  CHECK(!optgen::long_rows({tensor_dims({1280, 960, 1, 1}, 1280 * 960), tensor_dims({1000, 1280}, 1000 * 1280)}));
  // An eighth exactly: 56 elements in rows of one column, 392 in a vector.
  CHECK(optgen::long_rows({tensor_dims({56, 1}, 56), tensor_dims({392}, 392)}));
  CHECK(!optgen::long_rows({tensor_dims({57, 1}, 57), tensor_dims({392}, 392)}));
  // A vector is one row: short under 32 elements; rows of 31 columns are short, of 32 long.
  CHECK(!optgen::long_rows({tensor_dims({31}, 31)}));
  CHECK(!optgen::long_rows({tensor_dims({3, 31}, 93)}));
  CHECK(optgen::long_rows({tensor_dims({8, 32}, 256), tensor_dims({31}, 31)}));
  CHECK(optgen::long_rows({}));
}

namespace {

/// Adafactor's first variant as a plan that steps shards sees it (build_plan): the blocks of its
/// step on shards, no stored values.
optgen::VariantInfo adafactor_on_shards() {
  optgen::VariantInfo variant = launcher("adafactor").variants[0];
  variant.stage_blocks = variant.shard_stage_blocks;
  variant.stored_values = {};
  return variant;
}

}  // namespace

TEST_CASE("the runs of results each rank holds a part of: sums over the rows of split matrices", "[shapes]") {
  const optgen::OptimizerInfo& info = launcher("adafactor");
  optgen::VariantInfo variant = adafactor_on_shards();
  // Rows 3 of a 7x9 matrix, a vector, rows 2 and 5 of 2x4 and 5x4 matrices (whole, but bound as
  // shards), a shard of a batch of two 4x3 matrices (whole matrices), no rows of a 6x2 matrix.
  const std::vector<optgen::TensorDims> dims = {
      optgen::tensor_dims({3, 9}, 27, 63), optgen::tensor_dims({11}, 11),          optgen::tensor_dims({2, 4}, 8, 8),
      optgen::tensor_dims({5, 4}, 20, 20), optgen::tensor_dims({2, 4, 3}, 24, 48), optgen::tensor_dims({0, 2}, 0, 12)};
  const optgen::ShapeLayout l = optgen::shape_layout(info, variant, dims, 128, abi::kFewestLineValues);
  // Columns: 9, 11, 4, 4, 6, 2 from 0; matrices: 1, 1, 1, 1, 2, 1 from 0.
  REQUIRE(l.col_offset == std::vector<long long>{0, 9, 20, 24, 28, 34});
  REQUIRE(l.matrix_offset == std::vector<long long>{0, 1, 2, 3, 4, 6});
  CHECK((l.num_cols == 36 && l.num_matrices == 7));
  auto runs = [](const std::vector<optgen::ResultRun>& list) {
    std::vector<std::pair<long long, long long>> pairs;
    for (const optgen::ResultRun& r : list) pairs.emplace_back(r.first, r.count);
    return pairs;
  };
  using Pairs = std::vector<std::pair<long long, long long>>;
  int stage_of_columns = 0, stage_of_matrices = 0;
  for (int r = 0; r < variant.num_reductions; ++r) {
    if (variant.reductions[r].scope == optgen::Domain::Column) stage_of_columns = variant.reductions[r].stage;
    if (variant.reductions[r].scope == optgen::Domain::Matrix) stage_of_matrices = variant.reductions[r].stage;
  }
  REQUIRE((stage_of_columns == 1 && stage_of_matrices == 2));
  const optgen::PartialRuns first = optgen::partial_runs(variant, 1, l, dims);
  CHECK(runs(first.cols) == Pairs{{0, 9}, {20, 8}, {34, 2}});  // neighbours merged; the batch's are whole
  CHECK(first.matrices.empty());
  const optgen::PartialRuns second = optgen::partial_runs(variant, 2, l, dims);
  CHECK(second.cols.empty());
  CHECK(runs(second.matrices) == Pairs{{0, 1}, {2, 2}, {6, 1}});
  CHECK(optgen::partial_runs(variant, 3, l, dims).cols.empty());
}

TEST_CASE("the runs of results each rank holds a part of: sums over the columns of matrices cut along them",
          "[shapes]") {
  const optgen::OptimizerInfo& info = launcher("adafactor");
  optgen::VariantInfo variant = adafactor_on_shards();
  // Columns 4 of a 3x12 matrix, none of a 2x5 one (cut along their columns), a whole 5x4 matrix.
  const std::vector<optgen::TensorDims> dims = {optgen::tensor_dims({3, 4}, 12, 36, 1),
                                                optgen::tensor_dims({2, 0}, 0, 10, 1), optgen::tensor_dims({5, 4}, 20)};
  CHECK((dims[0].split_cols && !dims[0].split_rows && dims[0].batch == 1));
  CHECK((dims[0].whole_cols == 12 && dims[0].whole_rows == 3));
  CHECK((dims[1].split_cols && dims[1].batch == 1 && dims[1].cols == 0 && dims[1].whole_cols == 5));
  CHECK((!dims[2].split_cols && dims[2].whole_cols == 4));
  const optgen::ShapeLayout l = optgen::shape_layout(info, variant, dims, 128, abi::kFewestLineValues);
  CHECK(l.whole_cols == std::vector<long long>{12, 5, 4});
  REQUIRE(l.row_offset == std::vector<long long>{0, 3, 5});
  CHECK(l.blocks(abi::kRowLines) >= 2);  // the shard of no columns still sums (nothing into) its rows
  auto runs = [](const std::vector<optgen::ResultRun>& list) {
    std::vector<std::pair<long long, long long>> pairs;
    for (const optgen::ResultRun& r : list) pairs.emplace_back(r.first, r.count);
    return pairs;
  };
  using Pairs = std::vector<std::pair<long long, long long>>;
  int stage_of_rows = 0;
  for (int r = 0; r < variant.num_reductions; ++r) {
    const optgen::ReductionSlot& slot = variant.reductions[r];
    if (slot.scope == optgen::Domain::Row) stage_of_rows = slot.stage;
    // A row's sum is over columns; a column's over rows; Adafactor's matrix mean is of row values.
    CHECK(slot.across_cols == (slot.scope == optgen::Domain::Row));
    CHECK(slot.across_rows == (slot.scope == optgen::Domain::Column || slot.scope == optgen::Domain::Matrix));
  }
  REQUIRE(stage_of_rows == 1);
  const optgen::PartialRuns first = optgen::partial_runs(variant, 1, l, dims);
  CHECK(runs(first.rows) == Pairs{{0, 5}});  // the two cut matrices' rows, merged; the whole one's are whole
  CHECK((first.cols.empty() && first.matrices.empty()));
  const optgen::PartialRuns second = optgen::partial_runs(variant, 2, l, dims);
  CHECK((second.rows.empty() && second.matrices.empty()));
}

TEST_CASE("a maximum over rows or columns that shards hold parts of is refused, not added up across ranks",
          "[shapes]") {
  // Adafactor's row sums made a row maximum (row_max): a shard cut along its columns holds a part
  // of each row, which the hooks would add to the other ranks' parts.
  const optgen::OptimizerInfo& info = launcher("adafactor");
  optgen::VariantInfo variant = adafactor_on_shards();
  std::vector<optgen::ReductionSlot> slots(variant.reductions, variant.reductions + variant.num_reductions);
  for (optgen::ReductionSlot& slot : slots)
    if (slot.scope == optgen::Domain::Row) slot.is_max = true;
  variant.reductions = slots.data();
  const std::vector<optgen::TensorDims> cut = {optgen::tensor_dims({3, 4}, 12, 36, 1)};
  const optgen::ShapeLayout l = optgen::shape_layout(info, variant, cut, 128, abi::kFewestLineValues);
  CHECK_THAT(error_of([&] { optgen::partial_runs(variant, 1, l, cut); }),
             Catch::Contains("is a maximum across the columns of each matrix, and tensor 0 of the plan is a shard"));
  // Whole, the same tensor has no parts to combine.
  const std::vector<optgen::TensorDims> whole = {optgen::tensor_dims({3, 12}, 36)};
  const optgen::ShapeLayout w = optgen::shape_layout(info, variant, whole, 128, abi::kFewestLineValues);
  CHECK(optgen::partial_runs(variant, 1, w, whole).rows.empty());
}

TEST_CASE("adam_mini has a step on shards: its row sums are a rank's part where shards cut its rows' columns",
          "[shapes]") {
  const optgen::OptimizerInfo& info = launcher("adam_mini");
  for (int v = 0; v < info.num_variants; ++v) {
    INFO("variant " << info.variants[v].name);
    CHECK(info.variants[v].shard_stage_blocks != nullptr);
    for (int r = 0; r < info.variants[v].num_reductions; ++r) {  // its row sums; clipping's group norm is neither
      const optgen::ReductionSlot& slot = info.variants[v].reductions[r];
      CHECK(slot.across_cols == (slot.scope == optgen::Domain::Row));
      CHECK(!slot.across_rows);
    }
  }
}

// ---- The engine: shapes, state sizes and presence ----

TEST_CASE("a variant with rows and columns refuses a tensor bound without a shape", "[shapes]") {
  ShapedAdam shaped;
  optgen::FusedOptimizer opt(shaped.info, optgen::default_hyperparameters(shaped.info));
  optgen::Tensor plain = fake_tensor(8);
  CHECK(
      error_of([&] {
        opt.add_param_group({fake_tensor(8), plain}, optgen::FusedOptimizer::Overrides{});
      }) ==
      "Adam::add_param_group failed: tensor 0 of the group (8 elements) has no shape, and variant adam of Adam "
      "factors tensors of two or more dimensions into rows and columns\n  fix: pass its shape (optgen::Tensor::shape, "
      "optgen_tensor's ndim and shape: the parameter's dimensions, outermost first)");
  // With shapes (and for a tensor of one element, which is a vector either way) the check passes,
  // and binding goes on to the driver: no GPU here, or no device memory behind these pointers.
  optgen::Tensor shaped_tensor = fake_tensor(8);
  shaped_tensor.shape = {2, 4};
  optgen::Tensor scalar = fake_tensor(1);
  const std::string later = error_of([&] {
    opt.add_param_group({shaped_tensor, scalar}, optgen::FusedOptimizer::Overrides{});
  });
  CHECK_THAT(later, !Catch::Contains("has no shape"));
  CHECK(later != "(no error)");

  // A variant without shapes binds a tensor without one as before.
  const auto& adam = launcher("adam");
  optgen::FusedOptimizer unshaped(adam, optgen::default_hyperparameters(adam));
  CHECK_THAT(error_of([&] { unshaped.add_param_group({fake_tensor(8)}, optgen::FusedOptimizer::Overrides{}); }),
             !Catch::Contains("has no shape"));
}

TEST_CASE("a tensor is B matrices of R rows and C columns, its states sized by their shape", "[shapes]") {
  using optgen::StateShape;
  const optgen::TensorDims conv = optgen::tensor_dims({6, 4, 3, 5}, 360);  // (O, I, kh, kw)
  CHECK((conv.factored && conv.batch == 24 && conv.rows == 3 && conv.cols == 5));
  CHECK(optgen::state_numel(StateShape::Elements, conv, 360) == 360);
  CHECK(optgen::state_numel(StateShape::Rows, conv, 360) == 72);
  CHECK(optgen::state_numel(StateShape::Cols, conv, 360) == 120);

  const optgen::TensorDims matrix = optgen::tensor_dims({7, 9}, 63);
  CHECK((matrix.factored && matrix.batch == 1 && matrix.rows == 7 && matrix.cols == 9));

  for (const std::vector<std::int64_t>& shape : {std::vector<std::int64_t>{}, std::vector<std::int64_t>{11}}) {
    const optgen::TensorDims vector = optgen::tensor_dims(shape, 11);
    CHECK((!vector.factored && vector.batch == 1 && vector.rows == 1 && vector.cols == 11));
    CHECK(optgen::state_numel(StateShape::Rows, vector, 11) == 1);
    CHECK(optgen::state_numel(StateShape::Cols, vector, 11) == 11);
  }
  const optgen::TensorDims empty = optgen::tensor_dims({0, 5}, 0);  // factored, no matrices
  CHECK((empty.factored && empty.batch == 0 && empty.rows == 0 && empty.cols == 5));
  CHECK(optgen::state_numel(StateShape::Rows, empty, 0) == 0);
  CHECK(optgen::state_numel(StateShape::Cols, empty, 0) == 0);
  const optgen::TensorDims no_columns = optgen::tensor_dims({4, 0}, 0);
  CHECK((no_columns.batch == 0 && no_columns.total_rows() == 0 && no_columns.total_cols() == 0));

  // A rank's shard is of the first dimension: a matrix's rows, whose whole count the spec's rows
  // reads; a shard of a batch of matrices holds whole ones.
  CHECK(optgen::tensor_dims({7, 9}, 63).whole_rows == 7);
  CHECK(optgen::tensor_dims({3, 9}, 27, 63).whole_rows == 7);
  CHECK(optgen::tensor_dims({0, 9}, 0, 63).whole_rows == 7);  // an empty shard
  const optgen::TensorDims batch_shard = optgen::tensor_dims({2, 4, 3}, 24, 48);
  CHECK((batch_shard.batch == 2 && batch_shard.rows == 4 && batch_shard.whole_rows == 4));
  // A matrix bound as a shard splits its rows, a shard of no rows too: one matrix, all its columns.
  CHECK(!optgen::tensor_dims({7, 9}, 63).split_rows);
  CHECK(optgen::tensor_dims({7, 9}, 63, 63).split_rows);
  const optgen::TensorDims no_rows = optgen::tensor_dims({0, 9}, 0, 63);
  CHECK((no_rows.split_rows && no_rows.batch == 1 && no_rows.total_rows() == 0 && no_rows.total_cols() == 9));
  CHECK(optgen::state_numel(StateShape::Cols, no_rows, 0) == 9);
  CHECK(!batch_shard.split_rows);

  ShapedAdam shaped;
  const optgen::VariantInfo& amsgrad = shaped.variants[1];  // exp_avg, exp_avg_sq, max_exp_avg_sq
  REQUIRE(amsgrad.num_states == 3);
  CHECK((optgen::state_present(amsgrad, 0, true) && optgen::state_present(amsgrad, 0, false)));
  CHECK((optgen::state_present(amsgrad, 1, true) && !optgen::state_present(amsgrad, 1, false)));
  CHECK((!optgen::state_present(amsgrad, 2, true) && optgen::state_present(amsgrad, 2, false)));
  const optgen::VariantInfo& plain = launcher("adam").variants[1];
  CHECK((optgen::state_present(plain, 2, true) && optgen::state_present(plain, 2, false)));
}

TEST_CASE("state_presence says for which tensors each state exists, in C++ and through the C ABI", "[shapes]") {
  ShapedAdam shaped;
  optgen::FusedOptimizer opt(shaped.info, optgen::default_hyperparameters(shaped.info));
  std::vector<double> h = optgen::default_hyperparameters(shaped.info);
  using P = std::optional<StatePresence>;
  CHECK(opt.state_presence(h) == std::vector<P>{StatePresence::Always, StatePresence::Factored, std::nullopt});
  std::size_t amsgrad = 0;
  while (std::string(shaped.info.hyperparameters[amsgrad].name) != "amsgrad") ++amsgrad;
  h[amsgrad] = 1;
  CHECK(opt.state_presence(h) ==
        std::vector<P>{StatePresence::Always, StatePresence::Factored, StatePresence::NotFactored});

  optgen_optimizer* c = nullptr;
  REQUIRE(optgen::create_for_c(shaped.info, optgen::default_hyperparameters(shaped.info), nullptr, nullptr, 0, nullptr,
                               &c) == 0);
  std::vector<int32_t> presence(3, -1);
  REQUIRE(optgen_state_presence(c, h.data(), h.size(), presence.data()) == 0);
  CHECK(presence == std::vector<int32_t>{OPTGEN_STATE_ALWAYS, OPTGEN_STATE_FACTORED, OPTGEN_STATE_NOT_FACTORED});
  h[amsgrad] = 0;
  REQUIRE(optgen_state_presence(c, h.data(), h.size(), presence.data()) == 0);
  CHECK(presence == std::vector<int32_t>{OPTGEN_STATE_ALWAYS, OPTGEN_STATE_FACTORED, OPTGEN_STATE_ABSENT});
  CHECK(optgen_state_presence(c, h.data(), 2, presence.data()) == -1);
  CHECK_THAT(std::string(optgen_last_error()), Catch::Contains("expected"));
  CHECK(optgen_state_presence(c, h.data(), h.size(), nullptr) == -1);
  optgen_destroy(c);

  // Without presence, every state a variant has exists for every tensor.
  REQUIRE(optgen_adam_create(nullptr, nullptr, 0, nullptr, &c) == 0);
  REQUIRE(optgen_state_presence(c, h.data(), h.size(), presence.data()) == 0);
  CHECK(presence == std::vector<int32_t>{OPTGEN_STATE_ALWAYS, OPTGEN_STATE_ALWAYS, OPTGEN_STATE_ABSENT});
  optgen_state_info s{};
  REQUIRE(optgen_describe_state(c, 0, &s) == 0);
  CHECK(s.shape == OPTGEN_STATE_ELEMENTS);
  optgen_destroy(c);
}

// ---- A plan's ShapeTable and grids ----

TEST_CASE("a thread takes several short lines, up to 32 values, so that a block of them does a block's work",
          "[shapes]") {
  // 1x1 conv weights have rows and columns of one value; a block of 128 of them spent its time
  // finding its tensor (ghostnet_100's Adafactor: 61,775 blocks in its first Reduce stage).
  CHECK(abi::short_lines(0) == 32);  // an empty line counts as one value
  CHECK(abi::short_lines(1) == 32);
  CHECK(abi::short_lines(3) == 8);
  CHECK(abi::short_lines(9) == 2);
  CHECK(abi::short_lines(16) == 2);
  CHECK(abi::short_lines(17) == 1);
  CHECK(abi::short_lines(1000) == 1);
  CHECK(abi::lines_per_block(1, 128, 32) == 4096);
  CHECK(abi::lines_per_block(3, 128, 32) == 1024);
  CHECK(abi::lines_per_block(768, 128, 32) == 4);    // 32 lanes a row of 768 (24 values each), one round
  CHECK(abi::lines_per_block(768, 128, 128) == 16);  // 8 lanes of 96 values
  CHECK(abi::lines_per_block(3, 128, 128) == 1024);  // short lines: one lane, whatever a lane may take
  CHECK(abi::line_blocks(100000, 1, 128, 32) == 25);
  CHECK(abi::column_blocks(100000, 1, 128) == 25);
  CHECK(abi::column_blocks(100000, 300, 128) == 782 * 2);  // segments: tiles of 128, one round
}

TEST_CASE("a plan's ShapeTable numbers rows, columns and matrices and counts each kind's blocks", "[shapes]") {
  using optgen::StateShape;
  // Adafactor's states and reductions as a launcher of it will describe them: a row, a column and
  // a matrix reduction besides two over tensors.
  const optgen::reference::StateInfo states[] = {{"row_var", {0, -1, false}, StateShape::Rows},
                                                 {"col_var", {0, -1, false}, StateShape::Cols},
                                                 {"variance", {0, -1, false}, StateShape::Elements}};
  const int variant_states[] = {0, 1, 2};
  const StatePresence presence[] = {StatePresence::Factored, StatePresence::Factored, StatePresence::NotFactored};
  using optgen::Domain;
  const optgen::ReductionSlot reductions[] = {
      {"norm_param", false, 1, Domain::Tensor, 0},   {"row_mean", false, 1, Domain::Row, 0},
      {"col_mean", false, 1, Domain::Column, 0},     {"row_var_new", false, 2, Domain::Row, 1},
      {"mean_row_var", false, 2, Domain::Matrix, 0}, {"norm_u", false, 3, Domain::Tensor, 5}};
  const unsigned masks[] = {
      bit(abi::kChunkRuns) | bit(abi::kRowLines) | bit(abi::kColumnSegments) | bit(abi::kSnapshot),
      bit(abi::kRowLines) | bit(abi::kMatrixRowLines), bit(abi::kChunkRuns), 0};
  using optgen::StageKind;
  const StageKind stage_kinds[] = {StageKind::Reduce, StageKind::Reduce, StageKind::Reduce, StageKind::Update};
  optgen::VariantInfo variant{"adafactor", variant_states, 3,       8, "adafactor_group", stage_kinds, 4, reductions, 6,
                              -1,          masks,          presence};
  optgen::OptimizerInfo info{};
  info.states = states;
  info.num_states = 3;

  // A tall matrix (300 rows: two column segments), a conv weight, a vector, an empty matrix.
  const std::vector<optgen::TensorDims> dims = {optgen::tensor_dims({300, 1000}, 300000),
                                                optgen::tensor_dims({6, 4, 3, 5}, 360), optgen::tensor_dims({}, 5000),
                                                optgen::tensor_dims({0, 7}, 0)};
  const optgen::ShapeLayout l = optgen::shape_layout(info, variant, dims, 256, 32);
  CHECK(l.line_values == 32);
  REQUIRE(l.num_tensors == 4);
  CHECK(l.rows == std::vector<long long>{300, 3, 1, 0});
  CHECK(l.cols == std::vector<long long>{1000, 5, 5000, 7});
  CHECK(l.factored == std::vector<unsigned char>{1, 1, 0, 1});
  CHECK(l.row_offset == std::vector<long long>{0, 300, 372, 373});
  CHECK(l.col_offset == std::vector<long long>{0, 1000, 1120, 6120});
  CHECK(l.matrix_offset == std::vector<long long>{0, 1, 25, 26});
  CHECK((l.num_rows == 373 && l.num_cols == 6120 && l.num_matrices == 26));
  CHECK((l.num_row_reductions == 2 && l.num_col_reductions == 1 && l.num_matrix_reductions == 1));
  CHECK((l.num_row_states == 1 && l.num_col_states == 1));

  // Each kind's blocks by kernel_abi.h's formulas, in tensor order, kChunkRuns' all 0.
  REQUIRE(l.block_offset.size() == static_cast<std::size_t>(abi::kNumBlockKinds) * 5);
  auto offsets = [&](abi::BlockKind kind) {
    return std::vector<long long>(l.block_offset.begin() + kind * 5, l.block_offset.begin() + kind * 5 + 5);
  };
  CHECK(offsets(abi::kChunkRuns) == std::vector<long long>(5, 0));
  const long long rows[] = {abi::line_blocks(300, 1000, 256, 32), abi::line_blocks(72, 5, 256, 32),
                            abi::line_blocks(1, 5000, 256, 32), 0};
  CHECK(rows[0] == 38);  // 1000 columns: 32 lanes a row (at most 32 values each), 8 rows a block
  CHECK(rows[1] == 1);   // 5 columns: 1 lane a row, 4 rows a lane, 1024 rows a block
  CHECK(offsets(abi::kRowLines) == std::vector<long long>{0, rows[0], rows[0] + rows[1], rows[0] + rows[1] + rows[2],
                                                          rows[0] + rows[1] + rows[2]});
  CHECK(abi::column_blocks(1000, 300, 256) == 8);  // 4 tiles of 256 columns, 2 segments each
  // A column of one row is short: a thread takes 32 of them, a block 8192 (the vector's 5000).
  CHECK(abi::column_blocks(5000, 1, 256) == 1);
  CHECK(offsets(abi::kColumnSegments) == std::vector<long long>{0, 8, 9, 10, 10});
  CHECK(offsets(abi::kMatrixRowLines) ==
        std::vector<long long>{0, 1, 1 + abi::line_blocks(24, 3, 256, 32), 2 + abi::line_blocks(1, 1, 256, 32), 3});
  CHECK(offsets(abi::kMatrixColumnLines) == std::vector<long long>{0, 1, 2, 3, 3});
  // Snapshots only where a row or column state exists: not the vector (variance is its state).
  CHECK(offsets(abi::kSnapshot) == std::vector<long long>{0, 4, 4 + abi::snapshot_blocks(72, 120, 256), 5, 5});
  CHECK(l.blocks(abi::kRowLines) == rows[0] + rows[1] + rows[2]);

  // Column partials and arrivals for the tall matrix only (in units of num_col_reductions floats).
  CHECK(l.col_partial_offset == std::vector<long long>{0, 2000, 2000, 2000});
  CHECK(l.col_partial_units == 2 * 1000);
  CHECK(l.col_tile_offset == std::vector<long long>{0, 4, 4, 4});
  CHECK(l.col_tiles == 4);

  // Grids: the kinds of each Reduce stage, chunk runs counted as the caller says.
  CHECK(optgen::stage_grid(masks[0], 100, l) ==
        100 + l.blocks(abi::kRowLines) + l.blocks(abi::kColumnSegments) + l.blocks(abi::kSnapshot));
  CHECK(optgen::stage_grid(masks[1], 100, l) == l.blocks(abi::kRowLines) + l.blocks(abi::kMatrixRowLines));
  CHECK(optgen::stage_grid(masks[2], 100, l) == 100);
  CHECK(optgen::stage_grid(bit(abi::kColumnSegments), 100, optgen::shape_layout(info, variant, {dims[3]}, 256, 32)) ==
        0);
}

TEST_CASE("a spec of blocks views a tensor of whole blocks as its blocks, any other as a vector", "[shapes]") {
  const optgen::TensorDims whole = optgen::block_dims(384, 128);
  CHECK((whole.factored && whole.batch == 1 && whole.rows == 3 && whole.cols == 128));
  CHECK(optgen::state_numel(optgen::StateShape::Rows, whole, 384) == 3);  // one value per block
  for (std::int64_t numel : {0, 7, 129, 1000}) {
    INFO("numel " << numel);
    const optgen::TensorDims d = optgen::block_dims(numel, 128);
    CHECK((!d.factored && d.rows == 1 && d.cols == numel));
  }
  CHECK(optgen::reference::block_rows(384, 128) == 3);
  CHECK(optgen::reference::block_rows(1000, 128) == 0);
}

TEST_CASE("a vector longer than one pass of a block has no lines: it has no rows to reduce", "[shapes]") {
  // Adafactor's first stage (row lines, column segments) and second (matrix row lines).
  const optgen::reference::StateInfo states[] = {{"row_var", {0, -1, false}, optgen::StateShape::Rows}};
  const int variant_states[] = {0};
  const StatePresence presence[] = {StatePresence::Factored};
  const optgen::ReductionSlot reductions[] = {{"row_mean", false, 1, optgen::Domain::Row, 0},
                                              {"mean_row_var", false, 2, optgen::Domain::Matrix, 0}};
  const unsigned masks[] = {bit(abi::kRowLines) | bit(abi::kColumnSegments), bit(abi::kMatrixRowLines), 0};
  const optgen::StageKind stage_kinds[] = {optgen::StageKind::Reduce, optgen::StageKind::Reduce,
                                           optgen::StageKind::Update};
  optgen::VariantInfo variant{"v", variant_states, 1, 0, "v_group", stage_kinds, 3, reductions, 2, -1, masks, presence};
  optgen::OptimizerInfo info{};
  info.states = states;
  info.num_states = 1;
  // One pass of a block of 256 threads, 32 values a lane, is 8192 values: a vector of 8192 keeps
  // its lines, one of 8193 (and 38.6M, a block's walk of 15 ms) has none; a matrix keeps them.
  const std::vector<optgen::TensorDims> dims = {optgen::tensor_dims({}, 8192), optgen::tensor_dims({}, 8193),
                                                optgen::tensor_dims({}, 38597376),
                                                optgen::tensor_dims({2, 9000}, 18000)};
  const optgen::ShapeLayout l = optgen::shape_layout(info, variant, dims, 256, 32);
  auto blocks_of = [&](abi::BlockKind kind, std::size_t t) {
    return l.block_offset[kind * 5 + t + 1] - l.block_offset[kind * 5 + t];
  };
  for (abi::BlockKind kind : {abi::kRowLines, abi::kColumnSegments, abi::kMatrixRowLines}) {
    INFO("kind " << kind);
    CHECK(blocks_of(kind, 0) > 0);
    CHECK(blocks_of(kind, 1) == 0);
    CHECK(blocks_of(kind, 2) == 0);
    CHECK(blocks_of(kind, 3) > 0);
  }
  CHECK(l.num_rows == 1 + 1 + 1 + 2);  // their row results keep their slots
}

TEST_CASE("a tensor whose matrices are one element has no lines where the kernels run it as element code", "[shapes]") {
  using optgen::StateShape;
  const optgen::reference::StateInfo states[] = {{"row_var", {0, -1, false}, StateShape::Rows},
                                                 {"col_var", {0, -1, false}, StateShape::Cols}};
  const int variant_states[] = {0, 1};
  const StatePresence presence[] = {StatePresence::Factored, StatePresence::Factored};
  using optgen::Domain;
  const optgen::ReductionSlot reductions[] = {{"row_mean", false, 1, Domain::Row, 0},
                                              {"col_mean", false, 1, Domain::Column, 0},
                                              {"mean_row_var", false, 2, Domain::Matrix, 0}};
  const unsigned masks[] = {bit(abi::kChunkRuns) | bit(abi::kRowLines) | bit(abi::kColumnSegments),
                            bit(abi::kMatrixRowLines), 0};
  using optgen::StageKind;
  const StageKind stage_kinds[] = {StageKind::Reduce, StageKind::Reduce, StageKind::Update};
  optgen::VariantInfo variant{"adafactor", variant_states, 2,       8, "adafactor_group", stage_kinds, 3, reductions, 3,
                              -1,          masks,          presence};
  optgen::OptimizerInfo info{};
  info.states = states;
  info.num_states = 2;
  // A 1x1 conv weight, a conv weight of 3x5 matrices, a 2-D matrix of one element, a batch of them,
  // and a rank's shard of a matrix of one column: a matrix of one element only on this rank.
  const std::vector<optgen::TensorDims> dims = {
      optgen::tensor_dims({16, 8, 1, 1}, 128), optgen::tensor_dims({6, 4, 3, 5}, 360), optgen::tensor_dims({1, 1}, 1),
      optgen::tensor_dims({2, 1, 1}, 2), optgen::tensor_dims({1, 1}, 1, 4, 0)};
  REQUIRE(dims[4].whole_rows == 4);

  auto block_total = [](const optgen::ShapeLayout& l, abi::BlockKind kind) { return l.blocks(kind); };
  const optgen::ShapeLayout lines = optgen::shape_layout(info, variant, dims, 128, 32);
  CHECK(lines.factored == std::vector<unsigned char>{1, 1, 1, 1, 1});
  CHECK((lines.num_rows == 128 + 72 + 1 + 2 + 1 && lines.num_matrices == 128 + 24 + 1 + 2 + 1));

  variant.unit_matrices = true;
  const optgen::ShapeLayout l = optgen::shape_layout(info, variant, dims, 128, 32);
  CHECK(l.factored == std::vector<unsigned char>{abi::kUnitMatrices, 1, abi::kUnitMatrices, abi::kUnitMatrices, 1});
  // The others' rows, columns and matrices only; the first and the third have none before them.
  CHECK(l.row_offset == std::vector<long long>{0, 0, 72, 72, 72});
  CHECK((l.num_rows == 72 + 1 && l.num_cols == 120 + 1 && l.num_matrices == 24 + 1));
  for (abi::BlockKind kind : {abi::kRowLines, abi::kColumnSegments, abi::kMatrixRowLines})
    CHECK(block_total(l, kind) == block_total(optgen::shape_layout(info, variant, {dims[1], dims[4]}, 128, 32), kind));
  CHECK(abi::unit_matrices(1, 1, 1, 1));
  CHECK(!abi::unit_matrices(1, 1, 4, 1));
}

TEST_CASE("column segments reduce the rows of matrices whose rows are whole tiles of columns", "[shapes]") {
  using optgen::StateShape;
  const optgen::reference::StateInfo states[] = {{"row_var", {0, -1, false}, StateShape::Rows},
                                                 {"col_var", {0, -1, false}, StateShape::Cols}};
  const int variant_states[] = {0, 1};
  using optgen::Domain;
  const optgen::ReductionSlot reductions[] = {{"row_mean", false, 1, Domain::Row, 0},
                                              {"col_mean", false, 1, Domain::Column, 0}};
  unsigned masks[] = {bit(abi::kRowLines) | bit(abi::kColumnSegments), 0};
  using optgen::StageKind;
  const StageKind stage_kinds[] = {StageKind::Reduce, StageKind::Update};
  optgen::VariantInfo variant{
      "rows_and_columns", variant_states, 2, 8, "rows_and_columns_group", stage_kinds, 2, reductions, 2, -1, masks};
  optgen::OptimizerInfo info{};
  info.states = states;
  info.num_states = 2;
  CHECK(abi::rows_in_column_segments(300, 512, 128));
  CHECK_FALSE(abi::rows_in_column_segments(300, 500, 128));  // a tile would cross into the next row
  CHECK_FALSE(abi::rows_in_column_segments(16, 512, 128));   // short columns: a thread takes several
  CHECK_FALSE(abi::rows_in_column_segments(300, 512, 256));  // a tile is four warps
  // A shard that holds none of a matrix's rows has no row lines either: the device tells the two
  // apart by this test, not by the missing lines.
  CHECK_FALSE(abi::rows_in_column_segments(0, 512, 128));

  // Three segments of six tiles, a batch of two matrices of two tiles, one of 1000 columns.
  const std::vector<optgen::TensorDims> dims = {optgen::tensor_dims({600, 768}, 600 * 768),
                                                optgen::tensor_dims({2, 40, 256}, 2 * 40 * 256),
                                                optgen::tensor_dims({300, 1000}, 300000)};
  const optgen::ShapeLayout l = optgen::shape_layout(info, variant, dims, 128, 32);
  auto offsets = [&](abi::BlockKind kind) {
    return std::vector<long long>(l.block_offset.begin() + kind * 4, l.block_offset.begin() + kind * 4 + 4);
  };
  const long long tall = abi::line_blocks(300, 1000, 128, 32);
  CHECK(offsets(abi::kRowLines) == std::vector<long long>{0, 0, 0, tall});
  CHECK(offsets(abi::kColumnSegments) == std::vector<long long>{0, 18, 22, 38});
  // Partials of six tiles for each of the 600 rows; two tiles for each of the batch's 80. Arrivals
  // per band: three of the first, one for each matrix of the batch.
  CHECK(l.row_partial_offset == std::vector<long long>{0, 3600, 3760});
  CHECK(l.row_partial_units == 3760);
  CHECK(l.row_band_offset == std::vector<long long>{0, 3, 5});
  CHECK(l.row_bands == 5);

  // A stage of row lines without column segments keeps every tensor's row lines.
  masks[0] = bit(abi::kRowLines);
  const optgen::ShapeLayout rows_only = optgen::shape_layout(info, variant, dims, 128, 32);
  CHECK(rows_only.blocks(abi::kRowLines) ==
        abi::line_blocks(600, 768, 128, 32) + abi::line_blocks(80, 256, 128, 32) + tall);
  CHECK(rows_only.row_partial_units == 0);
  // Nor has a variant with no stage of row lines row partials or bands.
  masks[0] = bit(abi::kColumnSegments);
  const optgen::ShapeLayout columns_only = optgen::shape_layout(info, variant, dims, 128, 32);
  CHECK((columns_only.row_partial_units == 0 && columns_only.row_bands == 0));
}

TEST_CASE("a plan's lines take more values a lane where its rows make blocks enough to fill the GPU", "[shapes]") {
  // gpt2's hidden matrices (a layer's four, 12 layers) make 7,488 row-line blocks of 128 threads at
  // 128 values a lane: 3.5 waves of an H200's 132 x 16 resident blocks. One layer's 624 at 128 are
  // fewer than two waves, its 2,496 at 32 too: the fewest values a lane, the most blocks.
  std::vector<optgen::TensorDims> gpt2, layer;
  for (int l = 0; l < 12; ++l)
    for (const std::vector<std::int64_t>& shape :
         {std::vector<std::int64_t>{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}})
      gpt2.push_back(optgen::tensor_dims(shape, shape[0] * shape[1]));
  layer.assign(gpt2.begin(), gpt2.begin() + 4);
  const long long h200 = 132 * 16;
  CHECK(optgen::plan_line_values(gpt2, 128, h200) == abi::kMostLineValues);
  CHECK(optgen::plan_line_values(layer, 128, h200) == abi::kFewestLineValues);
  // Halved a step at a time: two waves of 7,000 are more than gpt2's rows make at 128, fewer than at 64.
  CHECK(optgen::plan_line_values(gpt2, 128, 7000) == 64);
  CHECK(optgen::plan_line_values({}, 128, h200) == abi::kFewestLineValues);  // no rows at all
}

// ---- On a GPU: states of rows and columns allocated, absent ones not, and checkpoints of them ----

namespace {

/// Adam's launcher with its second state a state of rows for factored tensors only and its third
/// a state of columns for the others only: the engine allocates, hands out and saves them so,
/// whatever the kernels (which these tests do not launch).
struct RowsAndColumnsAdam : ShapedAdam {
  std::vector<optgen::reference::StateInfo> states{info.states, info.states + info.num_states};

  RowsAndColumnsAdam() {
    states[1].shape = optgen::StateShape::Rows;
    states[2].shape = optgen::StateShape::Cols;
    info.states = states.data();
  }
  std::vector<double> amsgrad() const {
    std::vector<double> h = optgen::default_hyperparameters(info);
    for (int i = 0; i < info.num_hyperparameters; ++i)
      if (std::string(info.hyperparameters[i].name) == "amsgrad") h[static_cast<std::size_t>(i)] = 1;
    return h;
  }
};

}  // namespace

TEST_CASE("states of rows and columns are sized by the tensor's matrices, absent ones null", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  RowsAndColumnsAdam shaped;
  std::mt19937 rng(7);
  DeviceGroup g(DType::F32, {60, 7}, {false, false}, rng);
  g.tensors[0].shape = {3, 4, 5};  // 3 matrices of 4 rows and 5 columns
  g.tensors[1].shape = {7};
  optgen::FusedOptimizer opt(shaped.info, optgen::default_hyperparameters(shaped.info));
  opt.add_param_group(g.tensors, shaped.amsgrad());

  auto numel = [&](const char* state, std::size_t t) { return opt.state(state, 0, t).numel; };
  auto present = [&](const char* state, std::size_t t) { return opt.state(state, 0, t).data != nullptr; };
  CHECK((numel("exp_avg", 0) == 60 && numel("exp_avg_sq", 0) == 12 && numel("max_exp_avg_sq", 0) == 0));
  CHECK((present("exp_avg", 0) && present("exp_avg_sq", 0) && !present("max_exp_avg_sq", 0)));
  CHECK((numel("exp_avg", 1) == 7 && numel("exp_avg_sq", 1) == 0 && numel("max_exp_avg_sq", 1) == 7));
  CHECK((present("exp_avg", 1) && !present("exp_avg_sq", 1) && present("max_exp_avg_sq", 1)));
  CHECK(download(DType::F32, opt.state("exp_avg_sq", 0, 0).data, 12) == std::vector<float>(12, 0.0f));

  // Saved at their own sizes, absent ones not at all; restored in place.
  upload(DType::F32, opt.state("exp_avg_sq", 0, 0).data, std::vector<float>(12, 0.25f));
  const optgen::Checkpoint saved = opt.checkpoint();
  REQUIRE(saved.find("group.0.tensor.0.exp_avg_sq") != nullptr);
  CHECK(saved.find("group.0.tensor.0.exp_avg_sq")->shape == std::vector<std::int64_t>{12});
  CHECK(saved.find("group.0.tensor.0.max_exp_avg_sq") == nullptr);
  CHECK(saved.find("group.0.tensor.1.exp_avg_sq") == nullptr);
  REQUIRE(saved.find("group.0.tensor.1.max_exp_avg_sq") != nullptr);
  CHECK(saved.find("group.0.tensor.1.max_exp_avg_sq")->shape == std::vector<std::int64_t>{7});
  upload(DType::F32, opt.state("exp_avg_sq", 0, 0).data, std::vector<float>(12, 0.0f));
  opt.restore(saved);
  CHECK(download(DType::F32, opt.state("exp_avg_sq", 0, 0).data, 12) == std::vector<float>(12, 0.25f));

  // A checkpoint that disagrees about which states exist is refused, saying which.
  optgen::Checkpoint extra = saved;
  optgen::CheckpointTensor absent = *saved.find("group.0.tensor.1.max_exp_avg_sq");
  absent.name = "group.0.tensor.0.max_exp_avg_sq";
  extra.tensors.push_back(absent);
  CHECK_THAT(error_of([&] { opt.restore(extra); }),
             Catch::Contains("it has a 'max_exp_avg_sq' state for tensor 0 of param group 0 (factored), which has "
                             "none here"));
  optgen::Checkpoint missing = saved;
  missing.tensors.erase(
      std::remove_if(missing.tensors.begin(), missing.tensors.end(),
                     [](const optgen::CheckpointTensor& t) { return t.name == "group.0.tensor.0.exp_avg_sq"; }),
      missing.tensors.end());
  CHECK_THAT(error_of([&] { opt.restore(missing); }),
             Catch::Contains("it has no 'exp_avg_sq' state (tensor 'group.0.tensor.0.exp_avg_sq') for tensor 0 of "
                             "param group 0 (factored)"));

  // prepare() builds the plan's ShapeTable (the kernels are not launched here).
  opt.prepare();
  CHECK(opt.prepared());

  // Caller-owned states: an absent one may be null; a present one of rows must hold B * R values.
  DeviceMemory memory(4096);
  void* const owned[] = {memory.at(0), memory.at(1024), nullptr};
  optgen::Tensor factored = g.tensors[0];
  factored.states = owned;
  optgen::FusedOptimizer callers(shaped.info, optgen::default_hyperparameters(shaped.info));
  callers.add_param_group({factored}, shaped.amsgrad());
  CHECK(callers.state("exp_avg_sq", 0, 0).data == memory.at(1024));
  CHECK(callers.state("max_exp_avg_sq", 0, 0).data == nullptr);
  void* const missing_rows[] = {memory.at(0), nullptr, memory.at(2048)};
  factored.states = missing_rows;
  CHECK_THAT(error_of([&] { callers.add_param_group({factored}, shaped.amsgrad()); }),
             Catch::Contains("the caller's 'exp_avg_sq' buffer is null or misaligned") &&
                 Catch::Contains("pass a device buffer of 12 f32 elements"));
}
