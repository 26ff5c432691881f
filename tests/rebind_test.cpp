// rebind(): tensors whose params and grads move to other memory (as torch's gradients do after
// zero_grad(set_to_none=True)) step bit for bit as if they had never moved, eagerly and in a CUDA
// graph, which keeps the pointers it was captured with whatever is rebound after it.
#include <catch2/catch.hpp>

#include <random>

#include "capture.h"
#include "optimizer_harness.h"

using namespace optgen_test;

namespace {

const std::vector<std::int64_t> kSizes = {17, 4097, 70001};
const std::vector<bool> kMisaligned = {false, true, false};

/// Copies every gradient of `from` into the gradients of `to` (same sizes).
void copy_grads(const DeviceGroup& from, DeviceGroup& to) {
  for (std::size_t i = 0; i < from.sizes.size(); ++i)
    upload(from.dtype, const_cast<void*>(to.tensors[i].grad),
           download(from.dtype, from.tensors[i].grad, static_cast<std::size_t>(from.sizes[i])));
}

/// Copies every param of `from` into the params of `to`.
void copy_params(const DeviceGroup& from, DeviceGroup& to) {
  for (std::size_t i = 0; i < from.sizes.size(); ++i)
    upload(from.dtype, to.tensors[i].param,
           download(from.dtype, from.tensors[i].param, static_cast<std::size_t>(from.sizes[i])));
}

std::vector<float> params_of(const DeviceGroup& g) {
  std::vector<float> all;
  for (std::size_t i = 0; i < g.sizes.size(); ++i) {
    const std::vector<float> p = download(g.dtype, g.tensors[i].param, static_cast<std::size_t>(g.sizes[i]));
    all.insert(all.end(), p.begin(), p.end());
  }
  return all;
}

/// Binds every tensor of group 0 of `opt` to the params and grads of `g`.
void rebind_all(optgen::FusedOptimizer& opt, const DeviceGroup& g) {
  for (std::size_t i = 0; i < g.sizes.size(); ++i) opt.rebind(0, i, g.tensors[i].param, g.tensors[i].grad);
}

}  // namespace

TEST_CASE("a rebound tensor steps as if it had never moved, eagerly and in a graph", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const optgen::OptimizerInfo& info = launcher("adamw");
  const std::vector<double> h = optgen::default_hyperparameters(info);
  std::mt19937 rng(7), same(7), other(8);
  DeviceGroup moving(DType::F32, kSizes, kMisaligned, rng);
  DeviceGroup fixed(DType::F32, kSizes, kMisaligned, same);  // the same values, never rebound
  optgen::FusedOptimizer a(info, h), b(info, h);
  a.add_param_group(moving.tensors, h);
  b.add_param_group(fixed.tensors, h);
  a.step();
  b.step();

  // Eagerly: params and grads move to `elsewhere`, which holds the params as they are now and new
  // gradients; `fixed` gets the same gradients in place.
  DeviceGroup elsewhere(DType::F32, kSizes, kMisaligned, other);
  synchronize();
  copy_params(moving, elsewhere);
  copy_grads(elsewhere, fixed);
  rebind_all(a, elsewhere);
  a.step();
  b.step();
  synchronize();
  CHECK(params_of(elsewhere) == params_of(fixed));
  CHECK(state_bytes(a) == state_bytes(b));

  // In a graph: rebound to `moving`'s gradient buffers just before the capture, so the captured
  // step uploads a pointer table of the graph's own.
  for (std::size_t i = 0; i < kSizes.size(); ++i) a.rebind(0, i, elsewhere.tensors[i].param, moving.tensors[i].grad);
  Capture capture;
  a.prepare(capture.stream());
  capture.begin();
  a.step(capture.stream());
  capture.end();
  moving.new_gradients(rng);       // what the graph reads
  elsewhere.new_gradients(other);  // what eager steps read after the capture
  rebind_all(a, elsewhere);

  auto step_both = [&](const DeviceGroup& grads_of_a, bool replay) {
    copy_grads(grads_of_a, fixed);
    if (replay)
      capture.replay();
    else
      a.step(capture.stream());
    b.step();
    synchronize();
    CHECK(params_of(elsewhere) == params_of(fixed));
    CHECK(state_bytes(a) == state_bytes(b));
  };
  SECTION("eager step, replay, eager step") {
    step_both(elsewhere, false);
    step_both(moving, true);
    step_both(elsewhere, false);
  }
  SECTION("replay, eager step, replay") {
    step_both(moving, true);
    step_both(elsewhere, false);
    step_both(moving, true);
  }
}

TEST_CASE("rebind() checks what it is given", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const optgen::OptimizerInfo& info = launcher("adamw");
  const std::vector<double> h = optgen::default_hyperparameters(info);
  std::mt19937 rng(9);
  DeviceGroup g(DType::F32, kSizes, kMisaligned, rng);
  optgen::FusedOptimizer opt(info, h);
  opt.add_param_group(g.tensors, h);
  void* param = g.tensors[1].param;
  const void* grad = g.tensors[1].grad;
  CHECK(error_of([&] { opt.rebind(1, 0, param, grad); }) == "AdamW::rebind failed: no param group 1 (there are 1)");
  CHECK(error_of([&] { opt.rebind(0, 3, param, grad); }) == "AdamW::rebind failed: param group 0 has no tensor 3");
  CHECK(error_of([&] { opt.rebind(0, 1, param, nullptr); }) ==
        "AdamW::rebind failed: tensor 1 of the group has a null grad pointer\n  fix: pass the device address of its "
        "data");
  CHECK_THAT(error_of([&] { opt.rebind(0, 1, static_cast<char*>(param) + 2, grad); }),
             Catch::Contains("the param pointer") && Catch::Contains("is not aligned to its 4-byte f32 elements"));
  int host = 0;
  CHECK(error_of([&] { opt.rebind(0, 1, param, &host); }) ==
        "AdamW::rebind failed: tensor 1 of the group: the grad pointer is not device memory\n  fix: allocate it with "
        "cudaMalloc (or torch on a CUDA device)");
}
