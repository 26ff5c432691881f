// Maxima and norms over rows and columns (row_max, col_max, row_norm, col_norm): the CPU reference
// of SM3-II (tests/specs/sm3.yaml) against its statements written out by hand, and on a GPU the
// kernels of it and of tests/specs/row_norms.yaml (all four reductions, maxima of values of either
// sign) and of tests/specs/many_row_values.yaml (more row values than a level stores) against the
// reference: wide, tall, one-row and one-column matrices, batches of them, a 1x1 convolution's
// weight, a vector, and gradient clipping.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>

#include "many_row_values.h"
#include "many_row_values_reference.h"
#include "optimizer_harness.h"
#include "row_norms.h"
#include "row_norms_reference.h"
#include "sm3.h"
#include "sm3_reference.h"

using namespace optgen_test;

namespace {

// sm3.yaml's hyperparameters in declaration order.
enum { kLr, kMomentum, kEps };

/// One tensor of sm3.yaml on the host: B matrices of R x C, or a vector (R = 0).
struct HostSm3 {
  std::size_t batch, rows, cols;
  std::vector<double> param, grad, buf, acc, row_acc, col_acc;

  std::size_t numel() const { return param.size(); }
  bool factored() const { return rows > 0; }
};

/// One step of SM3-II as sm3.yaml's statements read: nu = min(row, col) + g² per element, each
/// row's and column's accumulator the maximum of nu over it; Adagrad's sum for a vector.
void step_by_hand(HostSm3& t, const std::vector<double>& h) {
  std::vector<double> v(t.numel());
  if (t.factored()) {
    std::vector<double> rows(t.batch * t.rows, -INFINITY), cols(t.batch * t.cols, -INFINITY);
    for (std::size_t i = 0; i < t.numel(); ++i) {
      const std::size_t b = i / (t.rows * t.cols), p = b * t.rows + i / t.cols % t.rows, q = b * t.cols + i % t.cols;
      v[i] = std::min(t.row_acc[p], t.col_acc[q]) + t.grad[i] * t.grad[i];
      rows[p] = std::max(rows[p], v[i]);
      cols[q] = std::max(cols[q], v[i]);
    }
    t.row_acc = rows, t.col_acc = cols;
  } else {
    for (std::size_t i = 0; i < t.numel(); ++i) v[i] = t.acc[i] += t.grad[i] * t.grad[i];
  }
  for (std::size_t i = 0; i < t.numel(); ++i) {
    t.buf[i] = h[kMomentum] * t.buf[i] + (1 - h[kMomentum]) * t.grad[i] / std::sqrt(v[i] + h[kEps]);
    t.param[i] -= h[kLr] * t.buf[i];
  }
}

using Shapes = std::vector<std::vector<std::int64_t>>;

/// Every shape the GPU tests bind: wide, tall, one row, one column, a batch, a 1x1 convolution's
/// weight (its matrices of one element), a vector.
const Shapes kShapes = {{300, 70}, {70, 300}, {1, 257}, {257, 1}, {5, 3, 3}, {6, 4, 1, 1}, {40}};

/// Groups of one optimizer on the GPU, each checked against the reference after every step.
Comparison run_on_gpu(const optgen::OptimizerInfo& info, const optgen::reference::Optimizer& ref) {
  std::mt19937 rng(41);
  optgen::FusedOptimizer opt(info, optgen::default_hyperparameters(info));
  std::vector<std::unique_ptr<DeviceGroup>> groups;
  std::vector<std::vector<double>> scalar_states;
  for (const double clip : {0.0, 0.5}) {
    std::vector<double> h = optgen::default_hyperparameters(info);
    for (int i = 0; i < info.num_hyperparameters; ++i)
      if (info.hyperparameters[i].name == std::string("max_grad_norm")) h[static_cast<std::size_t>(i)] = clip;
    groups.push_back(std::make_unique<DeviceGroup>(DType::F32, TensorShapes{kShapes},
                                                   std::vector<bool>(kShapes.size(), false), rng));
    opt.add_param_group(groups.back()->tensors, h);
    scalar_states.push_back(initial_scalar_state(info, opt.hyperparameters(groups.size() - 1)));
  }
  Comparison result;
  for (std::int64_t step = 1; step <= 3; ++step) {
    std::vector<StateSnapshot> states;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      groups[g]->new_gradients(rng);
      states.push_back(snapshot_states(opt, ref, g, *groups[g]));
    }
    opt.step();
    synchronize();
    for (std::size_t g = 0; g < groups.size(); ++g)
      check_group(opt, ref, g, *groups[g], states[g], scalar_states[g], step, result);
  }
  return result;
}

}  // namespace

TEST_CASE("the reference keeps SM3's row and column maxima as its statements say", "[reference]") {
  const auto& ref = optgen::reference::sm3::optimizer();
  REQUIRE(ref.num_hyperparameters == 5);  // lr, momentum, eps, then clipping's max_grad_norm and its flag
  std::vector<double> h;
  for (int i = 0; i < ref.num_hyperparameters; ++i) h.push_back(ref.hyperparameters[i].default_value);
  h[kLr] = 0.05;
  ref.derive_flags(h.data());
  std::mt19937 rng(13);
  std::uniform_real_distribution<double> uniform(-1, 1);
  std::vector<HostSm3> expected = {
      {1, 3, 4, {}, {}, {}, {}, {}, {}}, {2, 5, 1, {}, {}, {}, {}, {}, {}}, {1, 0, 0, {}, {}, {}, {}, {}, {}}};
  const std::size_t numels[] = {12, 10, 7};
  for (std::size_t t = 0; t < expected.size(); ++t) {
    HostSm3& x = expected[t];
    x.param.resize(numels[t]);
    for (double& p : x.param) p = uniform(rng);
    x.buf.assign(numels[t], 0.0);
    if (x.factored()) {
      x.row_acc.assign(x.batch * x.rows, 0.0);
      x.col_acc.assign(x.batch * x.cols, 0.0);
    } else {
      x.acc.assign(numels[t], 0.0);
    }
  }
  std::vector<HostSm3> ours = expected;
  for (std::int64_t step = 1; step <= 4; ++step) {
    std::vector<std::vector<double*>> states;
    std::vector<optgen::reference::Tensor<double>> tensors;
    for (std::size_t t = 0; t < ours.size(); ++t) {
      expected[t].grad.resize(numels[t]);
      for (double& g : expected[t].grad) g = uniform(rng);
      ours[t].grad = expected[t].grad;
      HostSm3& x = ours[t];
      // Declaration order: row_acc, col_acc, acc, buf; null where the tensor has no such state.
      states.push_back({x.factored() ? x.row_acc.data() : nullptr, x.factored() ? x.col_acc.data() : nullptr,
                        x.factored() ? nullptr : x.acc.data(), x.buf.data()});
    }
    for (std::size_t t = 0; t < ours.size(); ++t)
      tensors.push_back(
          {numels[t], ours[t].param.data(), ours[t].grad.data(), states[t].data(), ours[t].rows, ours[t].cols});
    ref.step_double(h.data(), nullptr, step, tensors.data(), tensors.size(), 1.0, nullptr);
    for (HostSm3& t : expected) step_by_hand(t, h);
    for (std::size_t t = 0; t < ours.size(); ++t) {
      INFO("step " << step << ", tensor " << t);
      for (std::size_t i = 0; i < numels[t]; ++i) {
        REQUIRE(ours[t].param[i] == Approx(expected[t].param[i]).epsilon(1e-12).margin(1e-14));
        REQUIRE(ours[t].buf[i] == Approx(expected[t].buf[i]).epsilon(1e-12).margin(1e-14));
      }
      for (std::size_t r = 0; r < ours[t].row_acc.size(); ++r)
        REQUIRE(ours[t].row_acc[r] == Approx(expected[t].row_acc[r]).epsilon(1e-12));
      for (std::size_t c = 0; c < ours[t].col_acc.size(); ++c)
        REQUIRE(ours[t].col_acc[c] == Approx(expected[t].col_acc[c]).epsilon(1e-12));
    }
  }
}

TEST_CASE("maxima and norms over rows and columns on the GPU match the CPU reference", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  SECTION("SM3-II: row_max and col_max of values never negative") {
    const Comparison result = run_on_gpu(optgen::SM3::info(), optgen::reference::sm3::optimizer());
    INFO("worst relative error " << result.worst << " in " << result.where);
    CHECK(result.worst <= tolerance(DType::F32, {DType::F32}));
  }
  SECTION("row_norm, row_max, col_norm and col_max of the signed gradient") {
    const Comparison result = run_on_gpu(optgen::RowNorms::info(), optgen::reference::row_norms::optimizer());
    INFO("worst relative error " << result.worst << " in " << result.where);
    CHECK(result.worst <= tolerance(DType::F32, {DType::F32}));
  }
  SECTION("34 values of each row: 32 stored, the last two computed where the Update stage reads them") {
    const Comparison result =
        run_on_gpu(optgen::ManyRowValues::info(), optgen::reference::many_row_values::optimizer());
    INFO("worst relative error " << result.worst << " in " << result.where);
    CHECK(result.worst <= tolerance(DType::F32, {DType::F32}));
  }
}
