// optgen under AMP against torch's fused Adam, AdamW and SGD, stepped as torch.amp.GradScaler steps
// them (grad_scale changing between steps, two steps skipped by found_inf): trajectories recorded
// on a GPU by tests/record_amp_trajectories.py into tests/data/amp. The CPU reference replays them
// in CI; on a GPU the kernels replay them with grad_scale and found_inf in device memory.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "optimizer_harness.h"

using namespace optgen_test;

namespace {

using Values = std::vector<double>;

/// ‖a − b‖∞ / ‖b‖∞ (absolute when b is all zeros).
double relative_error(const std::vector<float>& a, const Values& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::fabs(a[i] - b[i]));
    scale = std::max(scale, std::fabs(b[i]));
  }
  if (std::isnan(diff)) return INFINITY;
  return scale > 0 ? diff / scale : diff;
}

struct AmpCase {
  std::string spec, name;
  std::vector<double> h;
  std::vector<std::vector<float>> params0;
  std::vector<std::vector<std::vector<float>>> grads;  ///< [step][tensor]
  std::vector<float> grad_scale, found_inf;            ///< [step]
  std::vector<std::vector<Values>> params;             ///< [step][tensor]
};

std::vector<float> floats(const nlohmann::json& list) {
  std::vector<float> out;
  for (const auto& x : list) out.push_back(x.is_number() ? x.get<float>() : INFINITY);  // json has no inf: null
  return out;
}

std::vector<AmpCase> load_cases() {
  std::vector<AmpCase> cases;
  for (const char* spec : {"adam", "adamw", "sgd"}) {
    std::ifstream in(std::string(OPTGEN_SOURCE_DIR) + "/tests/data/amp/" + spec + ".json");
    REQUIRE(in);
    // Python's json writes inf as Infinity, which JSON does not have: read it as null first.
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (size_t at = text.find("Infinity"); at != std::string::npos; at = text.find("Infinity", at))
      text.replace(at, 8, "null");
    const auto doc = nlohmann::json::parse(text);
    const auto& info = launcher(spec);
    for (const auto& c : doc["cases"]) {
      AmpCase a;
      a.spec = spec;
      a.name = c["name"];
      a.h = recorded_hyperparameters(info, c["groups"][0]);
      for (const auto& p : c["params0"]) a.params0.push_back(floats(p));
      for (const auto& step : c["grads"]) {
        a.grads.emplace_back();
        for (const auto& g : step) a.grads.back().push_back(floats(g));
      }
      a.grad_scale = floats(c["grad_scale"]);
      a.found_inf = floats(c["found_inf"]);
      for (const auto& step : c["params"]) {
        a.params.emplace_back();
        for (const auto& p : step) a.params.back().push_back(p.get<Values>());
      }
      cases.push_back(std::move(a));
    }
  }
  return cases;
}

}  // namespace

TEST_CASE("the CPU reference under AMP follows torch's fused Adam, AdamW and SGD", "[reference][torch]") {
  const auto cases = load_cases();
  CHECK(cases.size() == 7);
  double worst = 0;
  for (const auto& c : cases) {
    INFO(c.spec << ": " << c.name);
    const auto& ref = reference_of(c.spec);
    std::vector<double> h = c.h, scalar_state = initial_scalar_state(launcher(c.spec), c.h);
    std::vector<std::vector<float>> params = c.params0;
    std::vector<std::vector<std::vector<float>>> states(params.size(), std::vector<std::vector<float>>(ref.num_states));
    std::vector<std::vector<float*>> pointers(params.size(), std::vector<float*>(ref.num_states, nullptr));
    for (size_t t = 0; t < params.size(); ++t)
      for (int s = 0; s < ref.num_states; ++s)
        if (ref.state_present(h.data(), s)) {
          states[t][s].assign(params[t].size(), 0.0f);
          pointers[t][s] = states[t][s].data();
        }
    std::int64_t step = 0;
    for (size_t k = 0; k < c.grads.size(); ++k) {
      if (c.found_inf[k] == 0) {  // a nonzero found_inf skips the whole step, its count included
        std::vector<optgen::reference::Tensor<float>> tensors;
        for (size_t t = 0; t < params.size(); ++t)
          tensors.push_back({params[t].size(), params[t].data(), c.grads[k][t].data(), pointers[t].data()});
        ref.step_float(h.data(), scalar_state.data(), ++step, tensors.data(), tensors.size(), c.grad_scale[k], nullptr);
      }
      for (size_t t = 0; t < params.size(); ++t) {
        const double error = relative_error(params[t], c.params[k][t]);
        INFO("tensor " << t << " after call " << k + 1);
        CHECK(error <= 1e-5);
        worst = std::max(worst, error);
      }
    }
  }
  WARN("torch fused under AMP, 7 cases: worst relative error of the float reference " << worst);
}

TEST_CASE("the kernels under AMP follow torch's fused Adam, AdamW and SGD", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  DeviceMemory scalars(2 * sizeof(float));
  const auto* grad_scale = reinterpret_cast<const float*>(scalars.get());
  const auto* found_inf = grad_scale + 1;
  double worst = 0;
  for (const auto& c : load_cases()) {
    DYNAMIC_SECTION(c.spec << ": " << c.name) {
      const auto& info = launcher(c.spec);
      std::vector<std::unique_ptr<DeviceMemory>> memory;
      std::vector<optgen::Tensor> tensors;
      for (const auto& p : c.params0) {
        memory.push_back(std::make_unique<DeviceMemory>(p.size() * 4));
        memory.push_back(std::make_unique<DeviceMemory>(p.size() * 4));
        memory[memory.size() - 2]->upload(p);
        tensors.push_back(
            {memory[memory.size() - 2]->at(0), memory.back()->at(0), static_cast<std::int64_t>(p.size()), DType::F32});
      }
      optgen::FusedOptimizer opt(info, c.h);
      opt.add_param_group(tensors, c.h);
      for (size_t k = 0; k < c.grads.size(); ++k) {
        for (size_t t = 0; t < tensors.size(); ++t) memory[2 * t + 1]->upload(c.grads[k][t]);
        scalars.upload(std::vector<float>{c.grad_scale[k], c.found_inf[k]});
        opt.step(nullptr, {grad_scale, found_inf});
        synchronize();
        for (size_t t = 0; t < tensors.size(); ++t) {
          const double error = relative_error(memory[2 * t]->download<float>(c.params0[t].size()), c.params[k][t]);
          INFO("tensor " << t << " after call " << k + 1);
          CHECK(error <= 1e-5);
          worst = std::max(worst, error);
        }
      }
      CHECK(opt.step_count(0) == 4);  // six calls, two skipped
    }
  }
  WARN("torch fused under AMP: worst relative error of the kernels " << worst);
}
