// Specs loaded at run time (optgen/spec_at_run_time.h): errors as `optgen check` prints them, the
// same OptimizerInfo as the generated launcher's for every built-in spec, and on a GPU the same
// steps, bit for bit, as the launchers built from the same spec.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>

#include "adabelief.h"
#include "adabelief_reference.h"
#include "optgen/c_api.h"
#include "optgen/spec_at_run_time.h"
#include "optimizer_harness.h"
#include "scoped_resources.h"

using namespace optgen_test;
namespace fs = std::filesystem;

namespace {

const fs::path kSourceDir = OPTGEN_SOURCE_DIR;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  REQUIRE(out);
}

/// What load_spec_at_run_time throws for `path` as a SpecLoadError, or "(no error)".
std::string load_error(const std::string& path) {
  try {
    optgen::load_spec_at_run_time(path);
  } catch (const optgen::SpecLoadError& e) {
    return e.what();
  }
  return "(no error)";
}

std::string text(const char* s) { return s ? s : "(null)"; }

/// specs/<name>.yaml in the source tree.
std::string builtin_spec(const std::string& name) { return (kSourceDir / "specs" / (name + ".yaml")).string(); }

// ---- One OptimizerInfo against another, field by field (CHECKs, so every difference shows). ----

/// The same matrix values: names, stages, arguments and programs, instruction by instruction.
void check_same_matrix_values(const optgen::VariantInfo& a, const optgen::VariantInfo& b) {
  INFO("variant " << a.name);
  REQUIRE(a.num_matrix_values == b.num_matrix_values);
  for (int m = 0; m < a.num_matrix_values; ++m) {
    const optgen::MatrixValueInfo &x = a.matrix_values[m], &y = b.matrix_values[m];
    CHECK(text(x.name) == text(y.name));
    CHECK(x.stage == y.stage);
    REQUIRE(x.num_arguments == y.num_arguments);
    for (int i = 0; i < x.num_arguments; ++i) {
      CHECK(x.arguments[i].hyperparameter == y.arguments[i].hyperparameter);
      CHECK(x.arguments[i].value == y.arguments[i].value);
    }
    const optgen::MatrixProgram &p = *x.program, &q = *y.program;
    CHECK(text(p.name) == text(q.name));
    CHECK(p.transpose_tall == q.transpose_tall);
    CHECK(p.result == q.result);
    REQUIRE(p.num_arguments == q.num_arguments);
    for (int i = 0; i < p.num_arguments; ++i) CHECK(text(p.parameters[i]) == text(q.parameters[i]));
    REQUIRE(p.num_variables == q.num_variables);
    for (int i = 0; i < p.num_variables; ++i) {
      CHECK(text(p.variables[i].name) == text(q.variables[i].name));
      CHECK(p.variables[i].rows == q.variables[i].rows);
      CHECK(p.variables[i].cols == q.variables[i].cols);
    }
    REQUIRE(p.size == q.size);
    for (int i = 0; i < p.size; ++i) {
      const optgen::MatrixInstruction &s = p.code[i], &t = q.code[i];
      INFO("instruction " << i);
      CHECK(std::tie(s.op, s.target, s.a, s.b, s.c, s.transpose_a, s.transpose_b) ==
            std::tie(t.op, t.target, t.a, t.b, t.c, t.transpose_a, t.transpose_b));
      CHECK(std::tie(s.alpha.factor, s.alpha.argument, s.beta.factor, s.beta.argument) ==
            std::tie(t.alpha.factor, t.alpha.argument, t.beta.factor, t.beta.argument));
    }
  }
}

void check_same_tables(const optgen::OptimizerInfo& a, const optgen::OptimizerInfo& b) {
  CHECK(a.abi_version == b.abi_version);
  CHECK(text(a.generator) == text(b.generator));
  CHECK(text(a.name) == text(b.name));
  CHECK(text(a.spec) == text(b.spec));
  REQUIRE(a.num_hyperparameters == b.num_hyperparameters);
  for (int i = 0; i < a.num_hyperparameters; ++i) {
    const auto &x = a.hyperparameters[i], &y = b.hyperparameters[i];
    INFO("hyperparameter " << i);
    CHECK(text(x.name) == text(y.name));
    CHECK(x.type == y.type);
    CHECK(x.default_value == y.default_value);
    CHECK(x.specialized == y.specialized);
    CHECK(x.derived == y.derived);
    CHECK(x.per_optimizer == y.per_optimizer);
  }
  auto check_states = [](const optgen::reference::StateInfo* x, int nx, const optgen::reference::StateInfo* y, int ny) {
    REQUIRE(nx == ny);
    for (int i = 0; i < nx; ++i) {
      INFO("state " << i);
      CHECK(text(x[i].name) == text(y[i].name));
      CHECK(x[i].init.value == y[i].init.value);
      CHECK(x[i].init.hyperparameter == y[i].init.hyperparameter);
      CHECK(x[i].init.param == y[i].init.param);
      CHECK(x[i].shape == y[i].shape);
      CHECK(x[i].per_optimizer == y[i].per_optimizer);
    }
  };
  check_states(a.states, a.num_states, b.states, b.num_states);
  check_states(a.scalar_states, a.num_scalar_states, b.scalar_states, b.num_scalar_states);
  REQUIRE(a.num_flags == b.num_flags);
  for (int i = 0; i < a.num_flags; ++i) CHECK(a.flags[i] == b.flags[i]);
  REQUIRE(a.num_variants == b.num_variants);
  for (int v = 0; v < a.num_variants; ++v) check_same_matrix_values(a.variants[v], b.variants[v]);
}

void check_same_kernels(const optgen::OptimizerInfo& a, const optgen::OptimizerInfo& b) {
  REQUIRE(a.num_variants == b.num_variants);
  for (int i = 0; i < a.num_variants; ++i) {
    const auto &x = a.variants[i], &y = b.variants[i];
    INFO("variant " << text(x.name));
    CHECK(text(x.name) == text(y.name));
    REQUIRE(x.num_states == y.num_states);
    for (int s = 0; s < x.num_states; ++s) CHECK(x.states[s] == y.states[s]);
    CHECK(x.group_values_size == y.group_values_size);
    CHECK(text(x.group_kernel) == text(y.group_kernel));
    REQUIRE(x.num_stages == y.num_stages);
    for (int s = 0; s < x.num_stages; ++s) CHECK(x.stage_kinds[s] == y.stage_kinds[s]);
    REQUIRE(x.num_reductions == y.num_reductions);
    for (int r = 0; r < x.num_reductions; ++r) {
      CHECK(text(x.reductions[r].name) == text(y.reductions[r].name));
      CHECK(x.reductions[r].is_max == y.reductions[r].is_max);
      CHECK(x.reductions[r].stage == y.reductions[r].stage);
      CHECK(x.reductions[r].scope == y.reductions[r].scope);
      CHECK(x.reductions[r].scope_index == y.reductions[r].scope_index);
      CHECK(x.reductions[r].across_rows == y.reductions[r].across_rows);
    }
    REQUIRE((x.stage_blocks == nullptr) == (y.stage_blocks == nullptr));
    for (int s = 0; x.stage_blocks && s < x.num_stages; ++s) CHECK(x.stage_blocks[s] == y.stage_blocks[s]);
    REQUIRE((x.shard_stage_blocks == nullptr) == (y.shard_stage_blocks == nullptr));
    for (int s = 0; x.shard_stage_blocks && s < x.num_stages; ++s)
      CHECK(x.shard_stage_blocks[s] == y.shard_stage_blocks[s]);
    REQUIRE((x.state_presence == nullptr) == (y.state_presence == nullptr));
    for (int s = 0; x.state_presence && s < x.num_states; ++s) CHECK(x.state_presence[s] == y.state_presence[s]);
  }
  REQUIRE(a.num_kernels == b.num_kernels);
  for (int k = 0; k < a.num_kernels; ++k) {
    const auto &x = a.kernels[k], &y = b.kernels[k];
    INFO("kernel " << k);
    CHECK(x.variant == y.variant);
    CHECK(x.param == y.param);
    CHECK(x.param_write == y.param_write);
    CHECK(x.chunk_size == y.chunk_size);
    for (int s = 0; s < a.num_states; ++s) CHECK(x.state_dtypes[s] == y.state_dtypes[s]);
    for (int s = 0; s < a.variants[x.variant].num_stages; ++s) CHECK(text(x.stages[s]) == text(y.stages[s]));
    REQUIRE((x.programs == nullptr) == (y.programs == nullptr));
    for (int p = 0; x.programs && p < a.num_programs; ++p) CHECK(text(x.programs[p]) == text(y.programs[p]));
    REQUIRE((x.shard_stages == nullptr) == (y.shard_stages == nullptr));
    for (int s = 0; x.shard_stages && s < a.variants[x.variant].num_stages; ++s)
      CHECK(text(x.shard_stages[s]) == text(y.shard_stages[s]));
    CHECK(text(x.long_row_update) == text(y.long_row_update));
  }
  REQUIRE(a.num_programs == b.num_programs);
  for (int p = 0; p < a.num_programs; ++p) CHECK(text(a.programs[p]) == text(b.programs[p]));
  CHECK(text(a.images->name) == text(b.images->name));
  CHECK(text(a.images->source) == text(b.images->source));
  REQUIRE(a.images->num_options == b.images->num_options);
  for (int i = 0; i < a.images->num_options; ++i) CHECK(text(a.images->options[i]) == text(b.images->options[i]));
  CHECK(a.block_size == b.block_size);
  CHECK(a.elements_per_thread == b.elements_per_thread);
  CHECK(a.chunk_size == b.chunk_size);
}

/// Hyperparameter vectors that reach every flag and derived flag: the defaults; each number at 0,
/// a positive and a negative value and infinity; every combination of the bools.
std::vector<std::vector<double>> hyperparameter_vectors(const optgen::OptimizerInfo& info) {
  const std::vector<double> defaults = optgen::default_hyperparameters(info);
  std::vector<std::vector<double>> vectors = {defaults};
  std::vector<int> bools;
  for (int i = 0; i < info.num_hyperparameters; ++i) {
    const auto& h = info.hyperparameters[i];
    if (h.derived) continue;
    if (h.type == optgen::ValueType::Bool) {
      bools.push_back(i);
      continue;
    }
    for (double value : {0.0, 0.25, -0.25, 3.0, double(INFINITY), -double(INFINITY)}) {
      vectors.push_back(defaults);
      vectors.back()[i] = value;
    }
  }
  for (unsigned bits = 0; bits < (1u << bools.size()); ++bits) {
    vectors.push_back(defaults);
    for (size_t b = 0; b < bools.size(); ++b) vectors.back()[bools[b]] = (bits >> b) & 1;
  }
  return vectors;
}

/// `h` with its derived flags filled in by `info`.
std::vector<double> derived(const optgen::OptimizerInfo& info, std::vector<double> h) {
  optgen::derive_flags(info, h.data());
  return h;
}

/// The name of the variant `h` selects (derived flags filled in first).
std::string variant_of(const optgen::OptimizerInfo& info, const std::vector<double>& h) {
  return info.variants[optgen::select_variant(info, derived(info, h).data())].name;
}

}  // namespace

// ---- Without a GPU. ----

TEST_CASE("a spec loaded at run time describes its optimizer as the generated launcher does", "[spec_at_run_time]") {
  int specs = 0;
  for (const auto& [name, launcher_info] : optgen::builtin_launchers()) {
    INFO("spec " << name);
    const optgen::RuntimeSpec spec = optgen::load_spec_at_run_time(builtin_spec(name));
    check_same_tables(spec.info(), *launcher_info);
    check_same_kernels(spec.info(), *launcher_info);
    CHECK(spec.defaults() == optgen::default_hyperparameters(*launcher_info));
    CHECK(spec.info().images->num_images == 0);  // source only: NVRTC compiles it at prepare()
    CHECK(spec.kernel_source() == read_file(kSourceDir / "generated" / (std::string(name) + "_kernels.cu")));
    ++specs;
  }
  CHECK(specs >= 15);  // the eleven that match torch.optim, Lion, LAMB, Adan and AdEMAMix, at least
}

TEST_CASE("derived flags and variants at run time are the launcher's and the reference's", "[spec_at_run_time]") {
  for (const auto& [name, launcher_info] : optgen::builtin_launchers()) {
    INFO("spec " << name);
    const optgen::RuntimeSpec spec = optgen::load_spec_at_run_time(builtin_spec(name));
    const auto& ref = reference_of(name);
    for (const std::vector<double>& h : hyperparameter_vectors(*launcher_info)) {
      const std::vector<double> at_run_time = derived(spec.info(), h);
      const std::vector<double> generated = derived(*launcher_info, h);
      std::vector<double> by_reference = h;
      ref.derive_flags(by_reference.data());
      CHECK(at_run_time == generated);
      CHECK(at_run_time == by_reference);
      const int variant = optgen::select_variant(spec.info(), at_run_time.data());
      CHECK(variant == optgen::select_variant(*launcher_info, generated.data()));
      CHECK(variant == ref.select_variant(by_reference.data()));
    }
  }
}

TEST_CASE("sgd's and rmsprop's derived flags are evaluated from the spec at run time", "[spec_at_run_time]") {
  const optgen::RuntimeSpec sgd = optgen::load_spec_at_run_time(builtin_spec("sgd"));
  // lr, momentum, dampening, weight_decay, nesterov, maximize, use_momentum (derived: momentum != 0),
  // then the clipping's max_grad_norm and clip_grad_norm (derived: max_grad_norm > 0)
  CHECK(derived(sgd.info(), {0.1, 0.0, 0, 0, 0, 0, 1, 0, 1}) == std::vector<double>{0.1, 0.0, 0, 0, 0, 0, 0, 0, 0});
  CHECK(derived(sgd.info(), {0.1, 0.9, 0, 0, 1, 0, 0, 1, 0}) == std::vector<double>{0.1, 0.9, 0, 0, 1, 0, 1, 1, 1});
  CHECK(derived(sgd.info(), {0.1, -0.5, 0, 0, 0, 0, 0, 0, 0}) == std::vector<double>{0.1, -0.5, 0, 0, 0, 0, 1, 0, 0});
  CHECK(variant_of(sgd.info(), {0.1, 0.9, 0, 0, 0, 0, 0, 0, 0}) == "sgd_use_momentum");
  CHECK(variant_of(sgd.info(), {0.1, 0.0, 0, 0, 0, 0, 0, 0, 0}) == "sgd");
  CHECK(variant_of(sgd.info(), {0.1, 0.0, 0, 0, 0, 0, 0, 0.5, 0}) == "sgd_clip_grad_norm");

  const optgen::RuntimeSpec rmsprop = optgen::load_spec_at_run_time(builtin_spec("rmsprop"));
  // lr, alpha, eps, weight_decay, momentum, centered, maximize, use_momentum (derived: momentum > 0),
  // max_grad_norm, clip_grad_norm
  CHECK(variant_of(rmsprop.info(), {0.01, 0.99, 1e-8, 0, 0.0, 0, 0, 0, 0, 0}) == "rmsprop");
  CHECK(variant_of(rmsprop.info(), {0.01, 0.99, 1e-8, 0, -0.5, 0, 0, 1, 0, 0}) == "rmsprop");  // momentum > 0
  CHECK(variant_of(rmsprop.info(), {0.01, 0.99, 1e-8, 0, 0.5, 0, 0, 0, 0, 0}) == "rmsprop_use_momentum");
  CHECK(variant_of(rmsprop.info(), {0.01, 0.99, 1e-8, 0, 0.5, 1, 0, 0, 0, 0}) == "rmsprop_centered_use_momentum");
  CHECK(variant_of(rmsprop.info(), {0.01, 0.99, 1e-8, 0, 0.0, 1, 0, 0, 0, 0}) == "rmsprop_centered");
  CHECK(variant_of(rmsprop.info(), {0.01, 0.99, 1e-8, 0, 0.0, 1, 0, 0, 2.0, 0}) == "rmsprop_centered_clip_grad_norm");
}

TEST_CASE("a bad spec loaded at run time throws the message optgen check prints", "[spec_at_run_time]") {
  TemporaryDirectory dir;
  const std::string path = dir.path() + "/use_lr.yaml";
  write_file(path,
             "optimizer: Bad\n"
             "summary: a spec with one mistake\n"
             "hyperparameters:\n"
             "  lr: {type: float, default: 0.1}\n"
             "  use_lr: {type: bool, derived: lr > 0}\n"
             "update:\n"
             "  - param = param - lr * grad\n");
  CHECK(load_error(path) == path +
                                ":5:33: error: 'derived' needs 'specialize: true': a derived value selects a kernel "
                                "variant\n"
                                "  use_lr: {type: bool, derived: lr > 0}\n"
                                "                                ^\n");

  // Every bad spec of tests/bad_specs, with its exact message (the path as given, then the text
  // `optgen check` prints after the file name).
  const fs::path bad_specs = kSourceDir / "tests" / "bad_specs";
  int count = 0;
  for (const auto& entry : fs::directory_iterator(bad_specs)) {
    if (entry.path().extension() != ".yaml") continue;
    INFO("spec: " << entry.path().filename().string());
    fs::path expected = entry.path();
    expected.replace_extension(".expected");
    CHECK(load_error(entry.path().string()) == (bad_specs / "").string() + read_file(expected));
    ++count;
  }
  CHECK(count >= 30);
}

TEST_CASE("a spec file that cannot be read is a clear error", "[spec_at_run_time]") {
  TemporaryDirectory dir;
  const std::string missing = dir.path() + "/missing.yaml";
  CHECK(load_error(missing) == missing + ": error: cannot open spec file: No such file or directory\n");
  CHECK(load_error(dir.path()) ==
        dir.path() + ": error: this is a directory, not a spec file\nnote: pass the spec files in it, e.g. " +
            dir.path() + "/*.yaml\n");
}

TEST_CASE("SpecOptions::storage chooses the kernels of a spec loaded at run time", "[spec_at_run_time]") {
  const std::string adamw = builtin_spec("adamw");
  optgen::SpecOptions options;
  options.storage = {"bf16:bf16"};
  const optgen::RuntimeSpec spec = optgen::load_spec_at_run_time(adamw, options);
  REQUIRE(spec.info().num_kernels == 4);  // every variant (amsgrad, clipping), in bf16 with bf16 states
  CHECK(std::string(spec.info().kernels[0].stages[0]) == "adamw_bf16_bf16_update");
  CHECK(std::string(spec.info().kernels[1].stages[0]) == "adamw_amsgrad_bf16_bf16_update");
  CHECK(spec.kernel_source().find("adamw_f32_f32_update") == std::string::npos);

  options.storage = {"f32", "f64"};
  CHECK_THAT(error_of([&] { optgen::load_spec_at_run_time(adamw, options); }),
             Catch::Contains("optgen::load_spec_at_run_time(" + adamw +
                             ") failed: SpecOptions::storage: unknown parameter storage 'f64'"));
  options.storage = {"f32", "f32:f32"};
  CHECK_THAT(error_of([&] { optgen::load_spec_at_run_time(adamw, options); }),
             Catch::Contains("SpecOptions::storage: f32:f32 is f32 again, listed before it"));
  // Equal only once canonical (a state given the states' dtype): the same kernels twice.
  options.storage = {"f32", "f32:f32:exp_avg=f32"};
  CHECK_THAT(error_of([&] { optgen::load_spec_at_run_time(adamw, options); }),
             Catch::Contains("SpecOptions::storage: f32:f32:exp_avg=f32 is f32 again, listed before it"));
}

TEST_CASE("an engine on a spec loaded at run time checks what it is given as a launcher's does", "[spec_at_run_time]") {
  optgen::RuntimeSpec loaded = optgen::load_spec_at_run_time(builtin_spec("adamw"));
  const optgen::OptimizerInfo* info = &loaded.info();
  const optgen::RuntimeSpec spec = std::move(loaded);
  CHECK(&spec.info() == info);  // a move keeps what optimizers point at

  optgen::FusedOptimizer opt(spec.info(), spec.defaults());
  opt.set("lr", 0.5);
  CHECK_THAT(error_of([&] {
               opt.add_param_group({fake_tensor()}, {{"amsgrad", 2}});
             }),
             Catch::Contains("AdamW::add_param_group failed: amsgrad is a bool; got 2"));
  CHECK_THAT(error_of([&] { opt.set("beta3", 0.5); }), Catch::Contains("AdamW has no hyperparameter 'beta3'"));
  const optgen::RuntimeSpec sgd = optgen::load_spec_at_run_time(builtin_spec("sgd"));
  optgen::FusedOptimizer sgd_opt(sgd.info(), sgd.defaults());
  CHECK_THAT(error_of([&] { sgd_opt.set("use_momentum", 1); }),
             Catch::Contains("use_momentum is derived from other hyperparameters"));
}

TEST_CASE("optgen_create_from_spec reports a bad spec through optgen_last_error", "[spec_at_run_time]") {
  TemporaryDirectory dir;
  const std::string path = dir.path() + "/unknown.yaml";
  write_file(path,
             "optimizer: Bad\n"
             "summary: a spec with one mistake\n"
             "update:\n"
             "  - param = param - lr * grad\n");
  optgen_optimizer* opt = nullptr;
  CHECK(optgen_create_from_spec(path.c_str(), nullptr, nullptr, 0, nullptr, &opt) == -1);
  CHECK(opt == nullptr);
  CHECK(std::string(optgen_last_error()) == load_error(path));
  CHECK_THAT(std::string(optgen_last_error()),
             Catch::StartsWith(path + ":4:21: error: unknown name 'lr'\n  - param = param - lr * grad\n"));

  const std::string missing = dir.path() + "/missing.yaml";
  CHECK(optgen_create_from_spec(missing.c_str(), nullptr, nullptr, 0, nullptr, &opt) == -1);
  CHECK(std::string(optgen_last_error()) == missing + ": error: cannot open spec file: No such file or directory\n");
  CHECK(optgen_create_from_spec(nullptr, nullptr, nullptr, 0, nullptr, &opt) == -1);
  CHECK(std::string(optgen_last_error()) == "optgen_create_from_spec failed: path or out is NULL");
}

TEST_CASE("a spec loaded at run time keeps the warnings optgen check prints", "[spec_at_run_time]") {
  const std::string path = (kSourceDir / "tests" / "specs" / "literals_and_text.yaml").string();
  const optgen::RuntimeSpec spec = optgen::load_spec_at_run_time(path);
  REQUIRE(spec.warnings().size() == 2);
  CHECK_THAT(spec.warnings()[0], Catch::StartsWith(path + ":12:16: warning: '1e39' is beyond float range"));
  optgen_optimizer* opt = nullptr;
  REQUIRE(optgen_create_from_spec(path.c_str(), nullptr, nullptr, 0, nullptr, &opt) == 0);
  CHECK(std::string(optgen_warnings(opt)) == spec.warnings()[0] + spec.warnings()[1]);
  optgen_destroy(opt);
  REQUIRE(optgen_adamw_create(nullptr, nullptr, 0, nullptr, &opt) == 0);
  CHECK(std::string(optgen_warnings(opt)).empty());  // a launcher's build printed them
  optgen_destroy(opt);
  CHECK(optgen_warnings(nullptr) == nullptr);
}

TEST_CASE("optgen_create_from_spec makes an optimizer with the spec's defaults and the overrides",
          "[spec_at_run_time]") {
  const std::string adamw = builtin_spec("adamw");
  const char* names[] = {"lr", "amsgrad"};
  const double values[] = {0.25, 1};
  optgen_optimizer* opt = nullptr;
  optgen_storage bf16{OPTGEN_BF16, 0, nullptr, nullptr, OPTGEN_PARAM_NEAREST, 0};
  REQUIRE(optgen_create_from_spec(adamw.c_str(), names, values, 2, &bf16, &opt) == 0);
  CHECK(std::string(optgen_last_error()).empty());
  size_t groups = 7;
  CHECK(optgen_num_groups(opt, &groups) == 0);
  CHECK(groups == 0);
  CHECK(optgen_set(opt, "beta3", 0.5, -1) == -1);
  CHECK_THAT(std::string(optgen_last_error()), Catch::Contains("AdamW has no hyperparameter 'beta3'"));
  optgen_destroy(opt);

  const char* unknown[] = {"beta3"};
  CHECK(optgen_create_from_spec(adamw.c_str(), unknown, values, 1, nullptr, &opt) == -1);
  CHECK_THAT(std::string(optgen_last_error()), Catch::Contains("AdamW has no hyperparameter 'beta3'"));
  optgen_storage bad_dtype{7, 0, nullptr, nullptr, OPTGEN_PARAM_NEAREST, 0};
  CHECK(optgen_create_from_spec(adamw.c_str(), nullptr, nullptr, 0, &bad_dtype, &opt) == -1);
  CHECK(std::string(optgen_last_error()) ==
        "optgen_create_from_spec failed: unknown dtype 7\n  fix: use OPTGEN_F32, OPTGEN_BF16, OPTGEN_F16, OPTGEN_Q8 or "
        "OPTGEN_UQ8");
  const char* state[] = {"exp_avg"};
  const int32_t dtype[] = {OPTGEN_BF16};
  optgen_storage bad_write{OPTGEN_F32, 1, state, dtype, 3, 0};
  CHECK(optgen_create_from_spec(adamw.c_str(), nullptr, nullptr, 0, &bad_write, &opt) == -1);
  CHECK_THAT(std::string(optgen_last_error()), Catch::Contains("unknown param_write 3"));
  CHECK(optgen_create_from_spec(adamw.c_str(), nullptr, values, 1, nullptr, &opt) == -1);
  CHECK_THAT(std::string(optgen_last_error()),
             Catch::Contains("optgen_create_from_spec failed: names or values is NULL"));
}

// ---- On a GPU. ----

namespace {

/// Two optimizers, one on a launcher's tables and one on a spec loaded at run time, with copies
/// of the same tensors: after every step their params and states must be the same bytes, and the
/// run-time one must match the CPU reference as closely as every launcher does.
void check_steps_like_the_launcher(const optgen::OptimizerInfo& launcher_info, const optgen::RuntimeSpec& spec,
                                   const optgen::reference::Optimizer& ref) {
  for (int k = 0; k < launcher_info.num_kernels; ++k) {
    const optgen::KernelInfo& kernel = launcher_info.kernels[k];
    DYNAMIC_SECTION(kernel.stages[0]) {
      const std::vector<double> h = hyperparameters_for(launcher_info, kernel.variant);
      const std::vector<std::int64_t> sizes = {1, 17, 4097, 100003};
      const std::vector<bool> misaligned = {false, true, false, true};
      std::mt19937 rng_generated(99), rng_at_run_time(99);
      DeviceGroup generated_group(kernel.param, sizes, misaligned, rng_generated);
      DeviceGroup group(kernel.param, sizes, misaligned, rng_at_run_time);
      optgen::FusedOptimizer generated(launcher_info, h, storage_of(launcher_info, kernel));
      optgen::FusedOptimizer at_run_time(spec.info(), spec.defaults(), storage_of(launcher_info, kernel));
      generated.add_param_group(generated_group.tensors, h);
      at_run_time.add_param_group(group.tensors, h);
      auto scalar_state = initial_scalar_state(spec.info(), at_run_time.hyperparameters(0));
      Comparison result;
      for (std::int64_t step = 1; step <= 4; ++step) {
        generated_group.new_gradients(rng_generated);
        group.new_gradients(rng_at_run_time);
        StateSnapshot states = snapshot_states(at_run_time, ref, 0, group);
        generated.step();
        at_run_time.step();
        synchronize();
        CHECK(at_run_time.launches_last_step() == spec.info().variants[kernel.variant].num_stages);
        CHECK(group.device_bytes() == generated_group.device_bytes());
        CHECK(state_bytes(at_run_time) == state_bytes(generated));
        check_group(at_run_time, ref, 0, group, states, scalar_state, step, result);
      }
      CHECK(at_run_time.step_count(0) == generated.step_count(0));
      for (int s = 0; s < spec.info().num_scalar_states; ++s) {
        const char* name = spec.info().scalar_states[s].name;
        CHECK(at_run_time.scalar_state(name, 0) == generated.scalar_state(name, 0));
      }
      INFO("worst relative error against the reference " << result.worst << " in " << result.where);
      CHECK(result.worst <= tolerance(launcher_info, kernel));
    }
  }
}

}  // namespace

TEST_CASE("adamw.yaml loaded at run time steps bit for bit as the built-in AdamW", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  // One cache for every section (Catch2 runs the test case again for each), so that NVRTC compiles
  // the spec's kernels once: with a cache for each run it compiled them once a section, 44 times,
  // about a minute each on the H200's host.
  static TemporaryDirectory cache;
  ScopedEnvironment cache_dir("OPTGEN_CACHE_DIR", cache.path().c_str());
  const optgen::RuntimeSpec spec = optgen::load_spec_at_run_time(builtin_spec("adamw"));
  check_steps_like_the_launcher(launcher("adamw"), spec, reference_of("adamw"));

  SECTION("compiled by NVRTC at the first prepare(), then found in the cache") {
    TemporaryDirectory fresh;
    ScopedEnvironment fresh_cache_dir("OPTGEN_CACHE_DIR", fresh.path().c_str());
    std::mt19937 rng(5);
    DeviceGroup group(DType::F32, {1000}, {false}, rng);
    auto origin_of_a_new_optimizer = [&] {
      optgen::FusedOptimizer opt(spec.info(), spec.defaults());
      opt.add_param_group(group.tensors, optgen::FusedOptimizer::Overrides{});
      opt.prepare();
      return opt.module_origin();
    };
    CHECK(origin_of_a_new_optimizer() == optgen::ModuleOrigin::CompiledNow);
    CHECK(origin_of_a_new_optimizer() == optgen::ModuleOrigin::CacheHit);
  }
}

TEST_CASE("through the C ABI, a spec loaded at run time steps as the built-in's optgen_adamw_create", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  TemporaryDirectory cache;
  ScopedEnvironment cache_dir("OPTGEN_CACHE_DIR", cache.path().c_str());
  const std::string adamw = builtin_spec("adamw");
  const char* names[] = {"lr", "weight_decay"};
  const double values[] = {0.01, 0.1};
  optgen_optimizer* generated = nullptr;
  optgen_optimizer* at_run_time = nullptr;
  REQUIRE(optgen_adamw_create(names, values, 2, nullptr, &generated) == 0);
  REQUIRE(optgen_create_from_spec(adamw.c_str(), names, values, 2, nullptr, &at_run_time) == 0);
  std::mt19937 rng_generated(3), rng_at_run_time(3);
  DeviceGroup generated_group(DType::F32, {4096, 33}, {false, true}, rng_generated);
  DeviceGroup group(DType::F32, {4096, 33}, {false, true}, rng_at_run_time);
  auto add = [](optgen_optimizer* opt, const DeviceGroup& g) {
    std::vector<optgen_tensor> tensors;
    for (const optgen::Tensor& t : g.tensors)
      tensors.push_back({t.param, t.grad, t.numel, -1, OPTGEN_F32, OPTGEN_F32, nullptr, 0, nullptr, 0, 0, 1});
    REQUIRE(optgen_add_param_group(opt, tensors.data(), tensors.size(), nullptr, nullptr, 0, nullptr) == 0);
  };
  add(generated, generated_group);
  add(at_run_time, group);
  for (int step = 1; step <= 3; ++step) {
    generated_group.new_gradients(rng_generated);
    group.new_gradients(rng_at_run_time);
    REQUIRE(optgen_step(generated, nullptr) == 0);
    REQUIRE(optgen_step(at_run_time, nullptr) == 0);
    synchronize();
    CHECK(group.device_bytes() == generated_group.device_bytes());
  }
  int64_t steps = 0;
  CHECK(optgen_step_count(at_run_time, 0, &steps) == 0);
  CHECK(steps == 3);
  optgen_destroy(at_run_time);  // the handle owned the loaded spec
  optgen_destroy(generated);
}

TEST_CASE("examples/adabelief.yaml loaded at run time steps bit for bit as its generated launcher", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  static TemporaryDirectory cache;  // one for every section, as above
  ScopedEnvironment cache_dir("OPTGEN_CACHE_DIR", cache.path().c_str());
  const optgen::RuntimeSpec spec = optgen::load_spec_at_run_time((kSourceDir / "examples/adabelief.yaml").string());
  check_steps_like_the_launcher(optgen::AdaBelief::info(), spec, optgen::reference::adabelief::optimizer());
}
