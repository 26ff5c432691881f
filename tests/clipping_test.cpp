// Global-norm clipping (generator/clipping.h): every spec's max_grad_norm. On the GPU against
// trajectories recorded from torch (tests/record_clipping.py: clip_grad_norm_ per group, then the
// step; data in tests/data/clipping): parameters and the published norm, eagerly, in a CUDA graph
// and under AMP's grad_scale; the norm of a step AMP skips; misuse of grad_norm(). On the CPU, the
// reference's handling of non-finite gradients, which is torch's.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "capture.h"
#include "optimizer_harness.h"

using namespace optgen_test;
using nlohmann::json;

namespace {

json load(const std::string& spec) {
  std::ifstream in(std::string(OPTGEN_SOURCE_DIR) + "/tests/data/clipping/" + spec + ".json");
  REQUIRE(in);
  return json::parse(in);
}

/// How a recorded case is stepped on the GPU.
enum class Mode { Eager, Graph, Amp };

/// Runs one recorded case on the GPU in f32; returns the worst relative error of the parameters
/// and of the published norms.
std::pair<double, double> run_recorded(const std::string& spec, const json& c, Mode mode) {
  const auto& info = launcher(spec);
  const size_t count = c["params0"].size();
  std::vector<std::unique_ptr<DeviceMemory>> params, grads;
  for (size_t t = 0; t < count; ++t) {
    std::vector<float> p = c["params0"][t].get<std::vector<float>>();
    params.push_back(std::make_unique<DeviceMemory>(p.size() * sizeof(float)));
    params.back()->upload(p);
    grads.push_back(std::make_unique<DeviceMemory>(p.size() * sizeof(float)));
  }
  optgen::FusedOptimizer opt(info, optgen::default_hyperparameters(info));
  std::vector<bool> clips;
  for (const auto& group : c["groups"]) {
    std::vector<optgen::Tensor> tensors;
    for (int t : group["tensors"]) {
      optgen::Tensor tensor;
      tensor.param = params[static_cast<size_t>(t)]->at(0);
      tensor.grad = grads[static_cast<size_t>(t)]->at(0);
      tensor.numel = static_cast<std::int64_t>(c["params0"][static_cast<size_t>(t)].size());
      tensors.push_back(tensor);
    }
    opt.add_param_group(tensors, recorded_hyperparameters(info, group));
    clips.push_back(group["hyperparameters"]["max_grad_norm"].get<double>() > 0);
  }
  Capture capture;
  opt.prepare(capture.stream());
  // AMP: the gradients carry a factor of 1024 (exact in float), which the step divides out.
  const float scale = mode == Mode::Amp ? 1024.0f : 1.0f;
  DeviceMemory amp(2 * sizeof(float));
  amp.upload(std::vector<float>{scale, 0.0f});
  const optgen::AmpInputs inputs{mode == Mode::Amp ? reinterpret_cast<const float*>(amp.at(0)) : nullptr,
                                 mode == Mode::Amp ? reinterpret_cast<const float*>(amp.at(sizeof(float))) : nullptr};
  if (mode == Mode::Graph) {
    capture.begin();
    opt.step(capture.stream(), inputs);
    capture.end();
  }
  double worst_param = 0, worst_norm = 0;
  const size_t steps = c["grads"].size();
  for (size_t step = 0; step < steps; ++step) {
    for (size_t t = 0; t < count; ++t) {
      std::vector<float> g = c["grads"][step][t].get<std::vector<float>>();
      for (float& x : g) x *= scale;
      grads[t]->upload(g);
    }
    synchronize();  // the copies from pageable memory may still be in flight, and the stream does not wait
    if (mode == Mode::Graph)
      capture.replay();
    else
      opt.step(capture.stream(), inputs);
    capture.synchronize();
    for (size_t t = 0; t < count; ++t) {
      const auto expected = c["params"][step][t].get<std::vector<float>>();
      worst_param =
          std::max(worst_param, relative_error(download(DType::F32, params[t]->at(0), expected.size()), expected));
    }
    for (size_t g = 0; g < clips.size(); ++g) {
      if (!clips[g]) continue;
      const float norm = download(DType::F32, opt.grad_norm(g), 1)[0];
      const double expected = c["grad_norms"][step][g].get<double>();
      worst_norm = std::max(worst_norm, std::fabs(norm - expected) / expected);
    }
  }
  return {worst_param, worst_norm};
}

}  // namespace

TEST_CASE("clipping on the GPU follows torch's clip_grad_norm_ then step: eager, in a graph, under AMP",
          "[gpu][torch]") {
  OPTGEN_REQUIRE_GPU();
  int cases = 0;
  for (const char* spec : {"adam", "adamw", "sgd"}) {
    const json data = load(spec);
    for (const auto& c : data["cases"]) {
      for (Mode mode : {Mode::Eager, Mode::Graph, Mode::Amp}) {
        INFO(spec << " case " << c["name"].get<std::string>() << ", mode " << static_cast<int>(mode));
        const auto [param_error, norm_error] = run_recorded(spec, c, mode);
        CHECK(param_error <= 1e-5);
        CHECK(norm_error <= 1e-6);
        ++cases;
      }
    }
  }
  CHECK(cases == 3 * 3 * 3);
}

TEST_CASE("clipping publishes the norm of a step AMP skips, and grad_norm() refuses what has no norm", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const auto& info = launcher("adamw");
  std::mt19937 rng(1);
  DeviceGroup clipped(DType::F32, {1000, 3}, {false, true}, rng), plain(DType::F32, {10}, {false}, rng);
  optgen::FusedOptimizer opt(info, optgen::default_hyperparameters(info));
  opt.add_param_group(clipped.tensors, optgen::FusedOptimizer::Overrides{{"max_grad_norm", 1.0}});
  opt.add_param_group(plain.tensors, optgen::FusedOptimizer::Overrides{});
  CHECK_THROWS_WITH(opt.grad_norm(0), Catch::Contains("not prepared"));
  opt.prepare();
  CHECK_THROWS_WITH(opt.grad_norm(1), Catch::Contains("group 1 does not clip its gradients"));
  CHECK_THROWS_WITH(opt.grad_norm(2), Catch::Contains("group"));
  CHECK(std::isnan(download(DType::F32, opt.grad_norm(0), 1)[0]));  // no step yet

  // A skipped step: nothing changes but the norm, which is the norm of the (unscaled) gradients.
  DeviceMemory amp(2 * sizeof(float));
  amp.upload(std::vector<float>{2.0f, 1.0f});  // grad_scale 2, found_inf
  const auto before = clipped.device_bytes();
  opt.step(nullptr, {reinterpret_cast<const float*>(amp.at(0)), reinterpret_cast<const float*>(amp.at(4))});
  synchronize();
  CHECK(clipped.device_bytes() == before);
  double sum = 0;
  for (const auto& g : clipped.grads)
    for (float x : g) sum += static_cast<double>(x) * x;
  CHECK(download(DType::F32, opt.grad_norm(0), 1)[0] == Approx(std::sqrt(sum) / 2).epsilon(1e-6));
  CHECK(opt.step_count(0) == 0);
}

TEST_CASE("the reference clips non-finite gradients as torch does: an inf norm zeroes, NaN spreads", "[reference]") {
  const auto& ref = reference_of("sgd");
  const auto& info = launcher("sgd");
  std::vector<double> h = optgen::default_hyperparameters(info);
  for (int i = 0; i < info.num_hyperparameters; ++i) {
    if (std::string(info.hyperparameters[i].name) == "lr") h[static_cast<size_t>(i)] = 1.0;
    if (std::string(info.hyperparameters[i].name) == "max_grad_norm") h[static_cast<size_t>(i)] = 1.0;
  }
  ref.derive_flags(h.data());
  double scalar_state[1] = {0};
  auto step = [&](std::vector<double> grad) {
    std::vector<double> param = {1.0, 2.0, 3.0};
    optgen::reference::Tensor<double> t{param.size(), param.data(), grad.data(), nullptr};
    ref.step_double(h.data(), scalar_state, 1, &t, 1, 1.0, nullptr);
    return param;
  };
  // torch: clip_coef = 1 / (inf + 1e-6) = 0; finite gradients become 0, an infinite one NaN.
  const auto inf = step({std::numeric_limits<double>::infinity(), 1.0, -2.0});
  CHECK(std::isnan(inf[0]));
  CHECK(inf[1] == 2.0);
  CHECK(inf[2] == 3.0);
  // A NaN norm makes a NaN coefficient (clamp keeps NaN): every element becomes NaN.
  const auto nan = step({std::numeric_limits<double>::quiet_NaN(), 1.0, -2.0});
  for (double x : nan) CHECK(std::isnan(x));
  // Below the limit the coefficient clamps to 1: an exact SGD step.
  const auto small = step({0.1, 0.2, -0.2});
  CHECK(small[0] == Approx(0.9).epsilon(1e-15));
  CHECK(small[1] == Approx(1.8).epsilon(1e-15));
  CHECK(small[2] == Approx(3.2).epsilon(1e-15));
}
