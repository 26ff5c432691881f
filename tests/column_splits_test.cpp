// Matrices split into matrices of consecutive columns (optgen::Tensor::column_splits), for a spec's
// matrix function: the binding's checks without a GPU, and on the GPU a tensor with splits stepped
// as its splits bound as tensors of their own, bit for bit (the same buckets, the same products).
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "check.h"
#include "optgen/spec_at_run_time.h"
#include "optimizer_harness.h"
#include "scoped_resources.h"

using namespace optgen_test;

namespace {

/// A matrix tensor's bound shape as (batch, rows, cols).
struct Split {
  std::int64_t batch, rows, cols, splits;
  std::int64_t width() const { return cols / splits; }
};

/// The bytes of a tensor of `s` (elements of `size` bytes) as its batch x splits matrices of
/// rows x width, each consecutive, in that order.
std::vector<std::vector<unsigned char>> pieces_of(const std::vector<unsigned char>& whole, const Split& s,
                                                  std::size_t size) {
  std::vector<std::vector<unsigned char>> pieces;
  const std::size_t row = static_cast<std::size_t>(s.width()) * size;
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t p = 0; p < s.splits; ++p) {
      pieces.emplace_back(static_cast<std::size_t>(s.rows) * row);
      for (std::int64_t r = 0; r < s.rows; ++r)
        std::memcpy(pieces.back().data() + static_cast<std::size_t>(r) * row,
                    whole.data() + static_cast<std::size_t>(((b * s.rows + r) * s.splits + p) * s.width()) * size, row);
    }
  return pieces;
}

/// The bytes of `whole`'s params and grads (DeviceGroup::device_bytes of a group of tensors `splits`)
/// as those of a group of their pieces, in order.
std::vector<std::vector<unsigned char>> as_pieces(const std::vector<std::vector<unsigned char>>& whole,
                                                  const std::vector<Split>& splits, std::size_t size) {
  std::vector<std::vector<unsigned char>> bytes;
  for (std::size_t t = 0; t < splits.size(); ++t) {
    const auto params = pieces_of(whole[2 * t], splits[t], size), grads = pieces_of(whole[2 * t + 1], splits[t], size);
    for (std::size_t i = 0; i < params.size(); ++i) {
      bytes.push_back(params[i]);
      bytes.push_back(grads[i]);
    }
  }
  return bytes;
}

}  // namespace

TEST_CASE("column splits are checked where tensors are bound, naming the tensor and the spec", "[launcher]") {
  const auto& muon = launcher("muon");
  auto error = [&](const optgen::OptimizerInfo& info, std::vector<std::int64_t> shape, int splits,
                   std::int64_t whole_numel = 0) {
    optgen::Tensor t = fake_tensor(1);
    t.numel = 1;
    for (std::int64_t d : shape) t.numel *= d;
    t.shape = shape;
    t.column_splits = splits;
    t.whole_numel = whole_numel;
    const std::vector<double> hi = optgen::default_hyperparameters(info);
    optgen::FusedOptimizer opt(info, hi);
    return error_of([&] { opt.add_param_group({t}, hi); });
  };
  CHECK_THAT(error(muon, {4, 6}, 0), Catch::Contains("tensor 0 of the group has column_splits 0") &&
                                         Catch::Contains("give 1 (whole matrices) or more"));
  CHECK_THAT(error(muon, {24}, 2), Catch::Contains("has column_splits 2 but is bound with 1 dimensions") &&
                                       Catch::Contains("shape of two or more dimensions"));
  CHECK_THAT(error(muon, {4, 6}, 4), Catch::Contains("has column_splits 4, which does not divide its 6 columns"));
  CHECK_THAT(error(muon, {4, 6}, 2, 48), Catch::Contains("is a shard of a larger tensor"));
  CHECK_THAT(error(launcher("adamw"), {4, 6}, 2),
             Catch::Contains("has column_splits 2, but variant") && Catch::Contains("has no matrix values"));
  CHECK_THAT(error(launcher("adafactor"), {4, 6}, 2),
             Catch::Contains("has column_splits 2, but variant adafactor of Adafactor has no matrix values"));
  // A spec with a matrix function that also reduces over rows: its rows would be the whole matrix's.
  TemporaryDirectory dir;
  const std::string path = dir.path() + "/rows.yaml";
  std::ofstream(path) << "optimizer: MuonRows\nsummary: s\nhyperparameters:\n  lr: {type: float, default: 0.02}\n"
                         "update:\n  - o = newton_schulz(grad, 5, 3.4445, -4.775, 2.0315, 1.0e-7)\n"
                         "  - \"param = param - lr * o / (factored ? sqrt(row_mean(grad * grad)) + 1 : 1)\"\n";
  const optgen::RuntimeSpec rows = optgen::load_spec_at_run_time(path);
  CHECK_THAT(error(rows.info(), {4, 6}, 2), Catch::Contains("has column_splits 2, but variant") &&
                                                Catch::Contains("reduces over rows, columns or matrices"));
}

TEST_CASE("a matrix split into columns steps as its splits bound as matrices of their own, bit for bit", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const auto& info = launcher("muon");
  // A 64 x 96 matrix in thirds (a Conv1D's fused QKV), two 24 x 40 matrices in quarters (units of 4
  // and 8 bytes), a 1 x 9 in thirds (1 x 3: one block each), a 5 x 6 halved, and a whole 64 x 32 that
  // shares a bucket with the thirds.
  const std::vector<Split> splits{{1, 64, 96, 3}, {2, 24, 40, 4}, {1, 1, 9, 3}, {1, 5, 6, 2}, {1, 64, 32, 1}};
  TensorShapes whole_shapes, piece_shapes;
  for (const Split& s : splits) {
    whole_shapes.list.push_back(s.batch == 1 ? std::vector<std::int64_t>{s.rows, s.cols}
                                             : std::vector<std::int64_t>{s.batch, s.rows, s.cols});
    for (std::int64_t i = 0; i < s.batch * s.splits; ++i) piece_shapes.list.push_back({s.rows, s.width()});
  }
  for (int k = 0; k < info.num_kernels; ++k) {
    const optgen::KernelInfo& kernel = info.kernels[k];
    INFO("kernel set " << kernel.stages[0]);
    std::vector<double> h = hyperparameters_for(info, kernel.variant);
    h[hyperparameter_index(info, "lr")] = 0.02;
    std::mt19937 rng(static_cast<unsigned>(k) + 3);
    DeviceGroup whole(kernel.param, whole_shapes, std::vector<bool>(splits.size(), false), rng);
    DeviceGroup pieces(kernel.param, piece_shapes, std::vector<bool>(piece_shapes.list.size(), false), rng);
    for (std::size_t t = 0; t < splits.size(); ++t) whole.tensors[t].column_splits = static_cast<int>(splits[t].splits);
    const std::size_t size = optgen::size_of(kernel.param);
    pieces.set_device_bytes(as_pieces(whole.device_bytes(), splits, size));
    const auto before = pieces.device_bytes();
    optgen::FusedOptimizer split(info, h, storage_of(info, kernel)), apart(info, h, storage_of(info, kernel));
    split.add_param_group(whole.tensors, h);
    apart.add_param_group(pieces.tensors, h);
    for (int step = 0; step < 3; ++step) {
      whole.new_gradients(rng);
      pieces.set_device_bytes(as_pieces(whole.device_bytes(), splits, size));
      split.step();
      apart.step();
      synchronize();
      const auto expected = pieces.device_bytes();
      const auto got = as_pieces(whole.device_bytes(), splits, size);
      REQUIRE(got.size() == expected.size());
      for (std::size_t i = 0; i < got.size(); i += 2) {
        INFO("step " << step + 1 << ", piece " << i / 2);
        REQUIRE(got[i] == expected[i]);
        if (step == 0) CHECK(got[i] != before[i]);  // stepped: every piece's params moved
      }
    }
  }
}
