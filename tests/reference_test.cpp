// The generated CPU references against trajectories recorded from torch.optim
// (tests/record_trajectories.py, data in tests/data), from torch's clip_grad_norm_ and a step
// (tests/record_clipping.py, tests/data/clipping) and from transcriptions of published optimizers
// torch lacks (tests/record_published.py and tests/record_lamb.py, tests/data/published): within
// 1e-10 relative in double, 1e-5 in float, for every case. Adafactor (rows and columns) against the
// trajectories in tests/data/factored.

#include <catch2/catch.hpp>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "builtin_references.h"

namespace fs = std::filesystem;
using optgen::reference::Optimizer;

namespace {

using Values = std::vector<double>;

Values to_values(const YAML::Node& list) {
  Values out;
  for (const auto& x : list) out.push_back(x.as<double>());
  return out;
}

double value_of(const YAML::Node& node, optgen::ValueType type) {
  if (type == optgen::ValueType::Bool) return node.as<bool>() ? 1 : 0;
  return node.as<double>();
}

/// ‖a − b‖∞ / max(‖b‖∞, floor) (absolute when both are zero).
double relative_error(const Values& a, const Values& b, double floor = 0) {
  double diff = 0, scale = floor;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::fabs(a[i] - b[i]));
    scale = std::max(scale, std::fabs(b[i]));
  }
  if (std::isnan(diff)) return INFINITY;
  return scale > 0 ? diff / scale : diff;
}

struct Group {
  std::vector<double> h;
  std::vector<double> scalar_state;
  std::vector<int> tensors;
};

/// Runs one recorded case in precision T; returns the worst relative error over all steps.
template <typename T>
double run_case(const Optimizer& opt, const YAML::Node& c, int steps, std::string* worst_where) {
  std::vector<Group> groups;
  for (const auto& g : c["groups"]) {
    Group group;
    for (int i = 0; i < opt.num_hyperparameters; ++i) {
      const auto& info = opt.hyperparameters[i];
      double v = info.default_value;
      if (!info.derived) {
        YAML::Node given = g["hyperparameters"][info.name];
        INFO("hyperparameter " << info.name);
        // The recorder writes every hyperparameter the optimizer has, but not the clipping's
        // (torch's clipping is a separate function; tests/clipping_test.cpp covers it).
        REQUIRE((given || std::string(info.name) == "max_grad_norm"));
        if (given) v = value_of(given, info.type);
      }
      group.h.push_back(v);
    }
    opt.derive_flags(group.h.data());
    for (int i = 0; i < opt.num_scalar_states; ++i) {
      const auto& init = opt.scalar_states[i].init;
      group.scalar_state.push_back(init.hyperparameter >= 0 ? group.h[init.hyperparameter] : init.value);
    }
    for (const auto& t : g["tensors"]) group.tensors.push_back(t.as<int>());
    groups.push_back(group);
  }

  const YAML::Node params0 = c["params0"];
  const size_t count = params0.size();
  std::vector<std::vector<T>> params(count), grads(count);
  std::vector<std::vector<std::vector<T>>> states(count, std::vector<std::vector<T>>(opt.num_states));
  std::vector<std::vector<T*>> state_pointers(count, std::vector<T*>(opt.num_states, nullptr));
  // A tensor of two or more dimensions is factored over its last two (rows, cols); 0: not factored.
  std::vector<std::size_t> rows(count, 0), cols(count, 0);
  for (size_t t = 0; t < count; ++t) {
    const std::vector<std::size_t> shape = c["shapes"][t].as<std::vector<std::size_t>>();
    if (shape.size() >= 2) rows[t] = shape[shape.size() - 2], cols[t] = shape[shape.size() - 1];
  }
  for (const auto& group : groups) {
    for (int t : group.tensors) {
      Values p = to_values(params0[t]);
      params[t].assign(p.begin(), p.end());
      for (int s = 0; s < opt.num_states; ++s) {
        const bool present = opt.state_present_in ? opt.state_present_in(group.h.data(), s, rows[t] != 0)
                                                  : opt.state_present(group.h.data(), s);
        if (!present) continue;
        const auto& init = opt.states[s].init;
        std::size_t size = p.size();
        if (opt.states[s].shape == optgen::StateShape::Rows) size = p.size() / cols[t];
        if (opt.states[s].shape == optgen::StateShape::Cols) size = p.size() / rows[t];
        states[t][s].assign(size, T(init.hyperparameter >= 0 ? group.h[init.hyperparameter] : init.value));
        state_pointers[t][s] = states[t][s].data();
      }
    }
  }

  // A case's "programs": [[step, name], ...] run the spec's programs (opt.programs) after step
  // `step` (0: before the first), in order, on every group.
  auto run_programs = [&](int after_step) {
    for (const auto& call : c["programs"]) {
      if (call[0].as<int>() != after_step) continue;
      const std::string name = call[1].as<std::string>();
      int program = 0;
      while (program < opt.num_programs && name != opt.programs[program]) ++program;
      INFO("program " << name);
      REQUIRE(program < opt.num_programs);
      for (auto& group : groups) {
        std::vector<optgen::reference::Tensor<T>> tensors;
        for (int t : group.tensors)
          tensors.push_back({params[t].size(), params[t].data(), nullptr, state_pointers[t].data(), rows[t], cols[t]});
        if constexpr (std::is_same_v<T, float>)
          opt.run_float(program, group.h.data(), group.scalar_state.data(), after_step, tensors.data(), tensors.size());
        else
          opt.run_double(program, group.h.data(), group.scalar_state.data(), after_step, tensors.data(),
                         tensors.size());
      }
    }
  };
  double worst = 0;
  std::map<std::string, double> state_scale;  // by state and tensor: the largest magnitude recorded so far
  run_programs(0);
  for (int step = 1; step <= steps; ++step) {
    for (size_t t = 0; t < count; ++t) {
      Values g = to_values(c["grads"][step - 1][t]);
      grads[t].assign(g.begin(), g.end());
    }
    std::vector<std::vector<optgen::reference::Tensor<T>>> tensors(groups.size());
    std::vector<optgen::reference::GroupStep<T>> group_steps;
    for (size_t g = 0; g < groups.size(); ++g) {
      for (int t : groups[g].tensors)
        tensors[g].push_back(
            {params[t].size(), params[t].data(), grads[t].data(), state_pointers[t].data(), rows[t], cols[t]});
      group_steps.push_back(
          {groups[g].h.data(), groups[g].scalar_state.data(), step, tensors[g].data(), tensors[g].size()});
    }
    optgen::reference::step_groups<T>(opt, group_steps.data(), group_steps.size(), T(1));
    run_programs(step);
    auto compare = [&](const std::vector<T>& ours, const Values& theirs, const std::string& what, double floor = 0) {
      double e = relative_error(Values(ours.begin(), ours.end()), theirs, floor);
      if (e > worst || std::isnan(e)) {
        worst = e;
        *worst_where = what + " after step " + std::to_string(step);
      }
    };
    for (size_t t = 0; t < count; ++t)
      compare(params[t], to_values(c["params"][step - 1][t]), "param " + std::to_string(t));
    if (YAML::Node recorded = c["state"]) {
      for (const auto& entry : recorded) {
        std::string name = entry.first.as<std::string>();
        int s = 0;
        while (s < opt.num_states && name != opt.states[s].name) ++s;
        REQUIRE(s < opt.num_states);
        for (size_t t = 0; t < count; ++t) {
          // A state is measured against the largest magnitude it has had so far in the run: a moving
          // average that cancels to near zero (Adan's exp_avg of a one-element tensor) has lost its
          // digits to the cancellation, in the recording as much as in the reference.
          const Values theirs = to_values(entry.second[step - 1][t]);
          // A state a tensor does not have is recorded as [] (Adafactor's row_var of a vector).
          REQUIRE(theirs.size() == states[t][s].size());
          if (theirs.empty()) continue;
          double& scale = state_scale[name + " " + std::to_string(t)];
          for (double x : theirs) scale = std::max(scale, std::fabs(x));
          compare(states[t][s], theirs, "state " + name + " " + std::to_string(t), scale);
        }
      }
    }
  }
  return worst;
}

const Optimizer* find_optimizer(const std::string& spec) {
  for (const auto& [name, opt] : optgen::reference::builtin_optimizers())
    if (spec == name) return opt;
  return nullptr;
}

std::vector<fs::path> trajectory_files(const std::string& dir = "") {
  std::vector<fs::path> files;
  const fs::path where = fs::path(OPTGEN_SOURCE_DIR) / "tests" / "data" / dir;
  if (!fs::exists(where)) return files;
  for (const auto& e : fs::directory_iterator(where))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

struct FileResult {
  std::string spec;
  int cases = 0;
  double worst_double = 0, worst_float = 0;
};

/// Runs every case of every recorded file through run_case, in double and in float, and checks each
/// within 1e-10 relative in double and 1e-5 in float (more where the case's float32_deviation
/// says its algorithm amplifies rounding).
std::vector<FileResult> run_files(const std::vector<fs::path>& files) {
  std::vector<FileResult> results;
  for (const auto& file : files) {
    const YAML::Node data = YAML::LoadFile(file.string());
    FileResult result;
    result.spec = data["spec"].as<std::string>();
    std::string origin;
    if (data["source"]) origin += " (" + data["source"].as<std::string>() + ")";
    if (data["torch_version"]) origin += " (torch " + data["torch_version"].as<std::string>() + ")";
    INFO("spec " << result.spec << origin);
    const Optimizer* opt = find_optimizer(result.spec);
    REQUIRE(opt != nullptr);
    const int steps = data["steps"].as<int>();
    CHECK(steps >= 10);
    for (const auto& c : data["cases"]) {
      INFO("case " << c["name"].as<std::string>());
      std::string where_double, where_float;
      const double error_double = run_case<double>(*opt, c, steps, &where_double);
      const double error_float = run_case<float>(*opt, c, steps, &where_float);
      // A published file records how far its own transcription strays in float32 (float32_deviation,
      // tests/record_published.py): how much the algorithm amplifies rounding. Prodigy's D reads
      // p0 - param, which float32 resolves poorly, and strays by up to 4e-2 there. The float
      // reference may stray twice as far, never less than 1e-5; the double reference, whose sums
      // round in another order, twice as far scaled to double's rounding (2^-29 of float's), never
      // less than 1e-10.
      const double deviation = c["float32_deviation"] ? c["float32_deviation"].as<double>() : 0.0;
      const double float_limit = std::max(1e-5, 2 * deviation);
      const double double_limit = std::max(1e-10, 2 * deviation * std::ldexp(1.0, -29));
      INFO("double: " << error_double << " at " << where_double << " (limit " << double_limit
                      << "); float: " << error_float << " at " << where_float << " (limit " << float_limit << ")");
      CHECK(error_double <= double_limit);
      CHECK(error_float <= float_limit);
      result.worst_double = std::max(result.worst_double, error_double);
      result.worst_float = std::max(result.worst_float, error_float);
      ++result.cases;
    }
    results.push_back(result);
  }
  return results;
}

FileResult total(const std::vector<FileResult>& results) {
  FileResult all;
  for (const auto& r : results) {
    all.cases += r.cases;
    all.worst_double = std::max(all.worst_double, r.worst_double);
    all.worst_float = std::max(all.worst_float, r.worst_float);
  }
  return all;
}

/// A recorded file's defaults (torch's, or a published class's) against the spec's.
void check_defaults(const Optimizer& opt, const std::string& spec, const YAML::Node& defaults) {
  for (const auto& entry : defaults) {
    const std::string name = entry.first.as<std::string>();
    INFO(spec << "." << name);
    int i = 0;
    while (i < opt.num_hyperparameters && name != opt.hyperparameters[i].name) ++i;
    REQUIRE(i < opt.num_hyperparameters);
    CHECK(opt.hyperparameters[i].default_value == value_of(entry.second, opt.hyperparameters[i].type));
  }
}

}  // namespace

TEST_CASE("CPU reference matches torch.optim trajectories", "[reference][torch]") {
  const auto files = trajectory_files();
  REQUIRE(files.size() == 11);  // every built-in spec that torch.optim has
  const FileResult all = total(run_files(files));
  CHECK(all.cases >= 60);
  WARN(all.cases << " torch trajectories: worst relative error " << all.worst_double << " in double, "
                 << all.worst_float << " in float");
}

TEST_CASE("CPU reference matches torch's clip_grad_norm_ followed by the step", "[reference][torch]") {
  // tests/record_clipping.py: every spec's max_grad_norm (generator/clipping.h) against torch.
  const auto files = trajectory_files("clipping");
  REQUIRE(files.size() == 3);  // adam, adamw, sgd
  CHECK(total(run_files(files)).cases == 9);
}

TEST_CASE("CPU reference matches published implementations", "[reference]") {
  // tests/data/published: optimizers torch lacks, against transcriptions of their authors' code:
  // adam_mini, adamw_schedule_free (its programs eval and train between steps), adan, ademamix,
  // cautious_adamw, cautious_lion, dadapt_adam, lars and prodigy (tests/record_published.py), lamb
  // (tests/record_lamb.py); and muon, torch.optim.Muon transcribed with its Newton-Schulz in float64
  // (torch's runs in bf16, which the reference's exact iteration does not).
  const auto files = trajectory_files("published");
  REQUIRE(files.size() == 11);
  const auto results = run_files(files);
  for (const auto& r : results)
    WARN(r.spec << ": " << r.cases << " published trajectories, worst relative error " << r.worst_double
                << " in double, " << r.worst_float << " in float");
  CHECK(total(results).cases >= 73);
  for (const auto& file : files) {
    const YAML::Node data = YAML::LoadFile(file.string());
    if (!data["published_defaults"]) continue;  // lamb.json records none
    const std::string spec = data["spec"].as<std::string>();
    check_defaults(*find_optimizer(spec), spec, data["published_defaults"]);
  }
}

TEST_CASE("CPU reference's Newton-Schulz in double stays within float32's reach of torch.optim.Muon's in float32",
          "[reference]") {
  // tests/data/torch_f32/muon.json: torch.optim.Muon itself (torch 2.11, CPU), its iteration in
  // float32 (tests/record_torch_muon_f32.py), on the inputs of tests/data/published/muon.json. The
  // reference runs the iteration in double. The limit is ten times the float32 transcription's own
  // distance from float64 on the same cases (float32_deviation there, at most 4.3e-7): torch sums
  // its products in another order than numpy, and each step of the iteration may multiply a
  // rounding error by up to 3.4.
  const auto files = trajectory_files("torch_f32");
  REQUIRE(files.size() == 1);
  const YAML::Node data = YAML::LoadFile(files[0].string());
  REQUIRE(data["spec"].as<std::string>() == "muon");
  const Optimizer* opt = find_optimizer("muon");
  REQUIRE(opt != nullptr);
  const int steps = data["steps"].as<int>();
  CHECK(steps >= 10);
  double worst = 0;
  int cases = 0;
  for (const auto& c : data["cases"]) {
    INFO("case " << c["name"].as<std::string>());
    std::string where;
    const double error = run_case<double>(*opt, c, steps, &where);
    INFO("relative error " << error << " at " << where);
    CHECK(error <= 4.3e-6);
    worst = std::max(worst, error);
    ++cases;
  }
  CHECK(cases == 7);
  WARN(cases << " torch.optim.Muon trajectories in float32: worst relative error of the double reference " << worst);
}

TEST_CASE("spec defaults match torch.optim's defaults", "[reference][torch]") {
  for (const auto& file : trajectory_files()) {
    const YAML::Node data = YAML::LoadFile(file.string());
    const std::string spec = data["spec"].as<std::string>();
    const Optimizer* opt = find_optimizer(spec);
    REQUIRE(opt != nullptr);
    check_defaults(*opt, spec, data["torch_defaults"]);
  }
}

TEST_CASE("CPU reference with rows and columns matches torch.optim.Adafactor trajectories", "[reference][torch]") {
  // tests/data/factored/adafactor.json, recorded on a machine with torch by
  //   python3 tests/record_trajectories.py --out tests/data/factored --only adafactor
  // (1-D to 4-D tensors). The directory holds only specs whose rows and columns have a CPU reference
  // but no kernels yet; $OPTGEN_FACTORED_DATA names another directory (the numpy stand-in,
  // tests/record_adafactor_numpy.py).
  const char* other = std::getenv("OPTGEN_FACTORED_DATA");
  std::vector<fs::path> files;
  if (other)
    for (const auto& e : fs::directory_iterator(other))
      if (e.path().extension() == ".json") files.push_back(e.path());
  if (!other) files = trajectory_files("factored");
  if (files.empty()) {
    WARN("no recorded Adafactor trajectories (tests/data/factored): the hand-checked step below is all");
    return;
  }
  const FileResult all = total(run_files(files));
  CHECK(all.cases >= 9);
  WARN(all.cases << " Adafactor trajectories: worst relative error " << all.worst_double << " in double, "
                 << all.worst_float << " in float");
}

TEST_CASE("CPU reference with rows and columns: one Adafactor step of a 2 x 3 matrix and a vector", "[reference]") {
  // Numbers from tests/record_adafactor_numpy.py's transcription of torch's
  // _single_tensor_adafactor (step 1: row_var, col_var and variance take the means of g * g whole).
  const Optimizer& opt = optgen::reference::adafactor::optimizer();
  std::vector<double> h;
  for (int i = 0; i < opt.num_hyperparameters; ++i) h.push_back(opt.hyperparameters[i].default_value);
  h[0] = 0.5;  // lr: rho_t = min(lr, 1 / sqrt(step)) = 0.5
  h[5] = 0.1;  // weight_decay
  opt.derive_flags(h.data());
  std::vector<double> matrix = {0.5, -1.0, 2.0, 1.5, 0.25, -0.75}, vector = {1.0, -2.0};
  const std::vector<double> matrix_grad = {0.1, -0.2, 0.3, 0.4, -0.5, 0.6}, vector_grad = {0.5, 1.0};
  std::vector<double> row_var(2, 0.0), col_var(3, 0.0), variance(2, 0.0);
  double* matrix_states[] = {row_var.data(), col_var.data(), nullptr};
  double* vector_states[] = {nullptr, nullptr, variance.data()};
  CHECK(opt.state_present_in(h.data(), 0, true));
  CHECK_FALSE(opt.state_present_in(h.data(), 0, false));
  CHECK(opt.state_present_in(h.data(), 2, false));
  CHECK_FALSE(opt.state_present_in(h.data(), 2, true));
  const optgen::reference::Tensor<double> tensors[] = {
      {6, matrix.data(), matrix_grad.data(), matrix_states, 2, 3},
      {2, vector.data(), vector_grad.data(), vector_states},
  };
  double scalar_state[1] = {0};
  opt.step_double(h.data(), scalar_state, 1, tensors, 2, 1.0, nullptr);
  const std::vector<double> want_matrix = {0.1152189527493363, -0.3990734033080916, 1.2365965279962225,
                                           0.811355383959894,  0.8247897253703667,  -1.2782523818560179},
                            want_vector = {0.15943058495790519, -2.690569415042095};
  const std::vector<double> want_row_var = {0.04666666666666667, 0.25666666666666665},
                            want_col_var = {0.08500000000000003, 0.14500000000000005, 0.225};
  const std::vector<double> want_variance = {0.25, 1.0};
  auto check = [](const std::vector<double>& got, const std::vector<double>& want, const char* what) {
    INFO(what);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-12));
  };
  check(matrix, want_matrix, "matrix");
  check(vector, want_vector, "vector");
  check(row_var, want_row_var, "row_var");
  check(col_var, want_col_var, "col_var");
  check(variance, want_variance, "variance");
}
