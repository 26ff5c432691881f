// Matrix functions as programs (optgen/matrix_program.h): the statements of `matrix_functions:`
// compiled into instructions, their errors located; on the GPU, muon's newton_schulz (a built-in
// written in the spec language) against the iteration on the CPU in bf16 and in f32, and a spec's
// own matrix functions (tests/specs/matrix_code.yaml: every instruction; tests/specs/matrix_chain.yaml:
// one of another's result, and a norm of one) against their CPU references.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "check.h"
#include "gpu.h"
#include "matrix_chain.h"
#include "matrix_chain_reference.h"
#include "matrix_code.h"
#include "matrix_code_reference.h"
#include "matrix_program_run.h"
#include "optgen/cublas.h"
#include "optimizer_harness.h"

using namespace optgen_test;

namespace {

/// A spec whose update calls `call` of a matrix function written as `function`.
std::string spec_with(const std::string& function, const std::string& call) {
  return "optimizer: M\nsummary: s\nhyperparameters:\n  lr: {type: float, default: 0.02}\n"
         "  n: {type: int, default: 2}\nmatrix_functions:\n" +
         function + "update:\n  - o = " + call + "\n  - param = param - lr * o\n";
}

/// A function `f(x, n)` of the statements `body` (each a line of `do:`) returning `result`.
std::string function_of(const std::string& body, const std::string& result = "x") {
  return "  f:\n    parameters: [x, n]\n    do:\n" + body + "    result: " + result + "\n";
}

/// max |a - b| / max |b|.
template <typename A, typename B>
double relative(const std::vector<A>& a, const std::vector<B>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

/// torch.optim.Muon's iteration on one m x n matrix X (m <= n) on the CPU in T, `round` applied
/// to every product's result (bf16 rounding, or none): `steps` times X = a X + (b G + c G G) X.
template <typename T, typename Round>
std::vector<T> newton_schulz_cpu(std::vector<T> x, int m, int n, int steps, Round round) {
  const T a = T(3.4445), b = T(-4.775), c = T(2.0315);
  std::vector<T> g(static_cast<size_t>(m) * m), u(g.size()), next(x.size());
  for (int step = 0; step < steps; ++step) {
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < m; ++j) {
        T s = 0;
        for (int k = 0; k < n; ++k) s += x[i * n + k] * x[j * n + k];
        g[i * m + j] = round(s);
      }
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < m; ++j) {
        T s = 0;
        for (int k = 0; k < m; ++k) s += g[i * m + k] * g[k * m + j];
        u[i * m + j] = round(b * g[i * m + j] + c * s);
      }
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        T s = 0;
        for (int k = 0; k < m; ++k) s += u[i * m + k] * x[k * n + j];
        next[i * n + j] = round(a * x[i * n + j] + s);
      }
    std::swap(x, next);
  }
  return x;
}

struct Shape {
  int count, rows, cols;
};

/// Runs muon's newton_schulz (its matrix value 'o', through FusedOptimizer::apply_matrix_function,
/// as a step does) on `s.count` random matrices of the kernel set's dtype for it, and checks each
/// against the iteration on the CPU (each matrix seen as X: itself, or its transpose when tall):
/// bf16 products against the CPU's rounded to bf16 and the exact one; f32 against the exact one.
void check_newton_schulz(int kernel_index, const std::vector<Shape>& shapes, int steps) {
  const auto& info = launcher("muon");
  const optgen::KernelInfo& kernel = info.kernels[kernel_index];
  const DType dtype = optgen::matrix_dtype(kernel, 0);
  std::vector<double> h = hyperparameters_for(info, kernel.variant);
  for (int i = 0; i < info.num_hyperparameters; ++i)
    if (std::string(info.hyperparameters[i].name) == "ns_steps") h[static_cast<std::size_t>(i)] = steps;
  std::mt19937 rng(33);
  DeviceGroup group(kernel.param, TensorShapes{{{8, 4}}}, {false}, rng);
  optgen::FusedOptimizer opt(info, h, storage_of(info, kernel));
  opt.add_param_group(group.tensors, h);
  opt.prepare();
  const std::vector<double> arguments = {static_cast<double>(steps), 3.4445, -4.775, 2.0315, 1e-7};
  std::normal_distribution<float> normal;
  for (const Shape& s : shapes) {
    INFO(s.count << " matrices of " << s.rows << " x " << s.cols << ", " << optgen::to_string(dtype));
    const size_t size = static_cast<size_t>(s.rows) * s.cols;
    std::vector<float> x(size * s.count);
    for (auto& v : x) v = round_to(dtype, normal(rng));
    DeviceMemory on_device(x.size() * optgen::size_of(dtype)),
        scratch(opt.matrix_function_scratch_bytes(0, 0, s.count, s.rows, s.cols, dtype));
    // The function with no steps: each matrix divided by its norm, as the iteration starts from it
    // (the CPU's own division may round an element the other way, which the steps would amplify).
    auto run = [&](const std::vector<double>& args) {
      upload(dtype, on_device.at(0), x);
      opt.apply_matrix_function(0, 0, args.data(), on_device.get(), scratch.get(), s.count, s.rows, s.cols, nullptr);
      synchronize();
      return download(dtype, on_device.at(0), x.size());
    };
    std::vector<double> normalise = arguments;
    normalise[0] = 0;
    const std::vector<float> normalised = run(normalise);
    const std::vector<float> gpu = run(arguments);
    const bool tall = s.rows > s.cols;
    const int m = std::min(s.rows, s.cols), n = std::max(s.rows, s.cols);
    for (int b = 0; b < s.count; ++b) {
      INFO("matrix " << b);
      double norm = 0;
      for (size_t i = 0; i < size; ++i) norm += std::pow(static_cast<double>(x[b * size + i]), 2);
      std::vector<float> in(size), out(size), divided(size);
      for (int r = 0; r < s.rows; ++r)
        for (int c = 0; c < s.cols; ++c) {
          const size_t at = tall ? static_cast<size_t>(c) * s.rows + r : static_cast<size_t>(r) * s.cols + c;
          divided[at] = round_to(dtype, static_cast<float>(x[b * size + r * s.cols + c] / std::sqrt(norm)));
          in[at] = normalised[b * size + r * s.cols + c];
          out[at] = gpu[b * size + r * s.cols + c];
        }
      // The GPU's division is the CPU's within a rounding of the dtype.
      CHECK(relative(in, divided) <= (dtype == DType::F32 ? 1e-6 : 1e-2));
      const auto exact =
          newton_schulz_cpu<double>(std::vector<double>(in.begin(), in.end()), m, n, steps, [](double v) { return v; });
      if (dtype == DType::F32) {
        // f32 products (no TF32) summed in another order than the CPU's: float rounding, carried
        // through the steps, far inside bf16's 6e-2.
        CHECK(relative(out, exact) <= 1e-4);
        continue;
      }
      const auto bf16 = newton_schulz_cpu<float>(in, m, n, steps, [](float v) { return round_to(DType::BF16, v); });
      // The GPU sums each product in another order than the CPU, and a bf16 rounding that goes
      // the other way is 2^-8 of the value; five steps carry it on.
      CHECK(relative(out, bf16) <= 3e-2);
      CHECK(relative(out, exact) <= 6e-2);
    }
  }
}

}  // namespace

TEST_CASE("newton_schulz is a program of the spec language: a norm, then three products a step", "[launcher]") {
  const optgen::MatrixProgram& p = *launcher("muon").variants[0].matrix_values[0].program;
  CHECK(std::string(p.name) == "newton_schulz");
  CHECK(p.transpose_tall);
  CHECK(p.num_arguments == 5);
  REQUIRE(p.size == 6);
  CHECK(p.code[0].op == optgen::MatrixOp::Normalize);
  CHECK(p.code[2].op == optgen::MatrixOp::Repeat);
  CHECK(p.code[2].target == 3);
  CHECK(p.code[2].alpha.argument == 0);  // steps
  for (int i = 3; i < 6; ++i) CHECK(p.code[i].op == optgen::MatrixOp::Product);
  // u = c G G + b G: one product that adds G.
  CHECK(p.code[4].alpha.argument == 3);
  CHECK(p.code[4].beta.argument == 2);
  CHECK(p.code[4].c == p.code[4].a);
}

TEST_CASE("newton_schulz's scratch is one more X, G and U, then the norms' partial sums", "[launcher]") {
  const optgen::MatrixProgram& p = *launcher("muon").variants[0].matrix_values[0].program;
  // 3 wide 64 x 192 bf16 matrices: X (73728 bytes), G and U (24576 each), one partial sum a matrix.
  CHECK(optgen::matrix_program_scratch_bytes(p, 3, 64, 192, DType::BF16) == 73728 + 2 * 24576 + 3 * 8);
  // 4 tall 50 x 17, seen as 17 x 50: X 6800 bytes (6912 on 256), G and U 2312 (2560).
  CHECK(optgen::matrix_program_scratch_bytes(p, 4, 50, 17, DType::BF16) == 6912 + 2 * 2560 + 4 * 8);
  CHECK(optgen::matrix_program_scratch_bytes(p, 4, 50, 17, DType::F32) == 13824 + 2 * 4864 + 4 * 8);
  CHECK(optgen::matrix_program_scratch_bytes(p, 0, 50, 17, DType::BF16) == 0);
  const double steps[] = {2.5, 3.4445, -4.775, 2.0315, 1e-7};
  CHECK_THAT(optgen::matrix_program_problem(p, steps, {"ns_steps"}),
             Catch::Contains("newton_schulz's steps (ns_steps) is 2.5") && Catch::Contains("from 0 to 1000"));
}

TEST_CASE("newton_schulz in a block: four buffers of two shapes serve matrices of every shape", "[launcher]") {
  const optgen::MatrixProgram& p = *launcher("muon").variants[0].matrix_values[0].program;
  for (const double steps : {5.0, 4.0}) {
    INFO(steps << " steps");
    const double args[] = {steps, 3.4445, -4.775, 2.0315, 1e-7};
    const optgen::UnrolledProgram unrolled(p, args, DType::BF16);
    const optgen::kernel_abi::MatrixInBlock& b = unrolled.in_block();
    CHECK(b.num_steps == 1 + 3 * static_cast<int>(steps));
    CHECK(b.num_runs == 0);
    // X (R x C, the argument, normalised in place), G and U (R x R), the next X (R x C): each step's
    // X in the other X buffer from the one it reads.
    REQUIRE(b.num_buffers == 4);
    const int rows[] = {0, 0, 0, 0}, cols[] = {1, 0, 0, 1};
    for (int i = 0; i < 4; ++i) {
      CHECK(b.buffer_rows[i] == rows[i]);
      CHECK(b.buffer_cols[i] == cols[i]);
    }
    CHECK(b.argument == 0);
    CHECK(b.result == (steps == 5 ? 3 : 0));
    CHECK(b.steps[1].op == optgen::kernel_abi::kProductStep);
    CHECK((b.steps[1].out == 1 && b.steps[1].a == 0 && b.steps[1].b == 0 && b.steps[1].c == -1));
    CHECK((b.steps[3].out == 3 && b.steps[3].a == 2 && b.steps[3].b == 0 && b.steps[3].c == 0));
    // 50 x 17, seen as 17 x 50: rows padded to 32, a row of 50 to 64 + 8 elements, of 17 to 32 + 8.
    CHECK(unrolled.in_block_bytes(50, 17) == 2 * (2 * 32 * 72 + 2 * 32 * 40));
    CHECK(unrolled.in_block_bytes(1, 9) == 2 * (2 * 16 * 24 + 2 * 16 * 24));
    CHECK(unrolled.in_block_bytes(64, 64) > 0);
    CHECK(unrolled.in_block_bytes(65, 66) == 0);  // a view of more than kMatrixInBlockRows rows
    CHECK(optgen::UnrolledProgram(p, args, DType::F32).in_block_bytes(50, 17) == 2 * unrolled.in_block_bytes(50, 17));
  }
  // 1 + 3 * 14 steps: more than a block holds.
  const double args[] = {14, 3.4445, -4.775, 2.0315, 1e-7};
  CHECK(optgen::UnrolledProgram(p, args, DType::BF16).in_block_bytes(16, 16) == 0);
}

TEST_CASE("a spec's own matrix functions compile, and their misuse is a located error", "[errors]") {
  const std::string ok =
      function_of("      - repeat: n\n        do:\n          - x = 1.5 * x - 0.5 * x @ transpose(x) @ x\n");
  CHECK(optgen::test::spec_error("m.yaml", spec_with(ok, "f(grad, n)")) == "");
  struct Case {
    std::string function, call, message;
  };
  const std::vector<Case> cases = {
      {function_of("      - x = x @ x\n"), "f(grad, n)",
       "'x @ x' multiplies a R x C matrix by a R x C one in matrix function 'f': the left's columns must be"},
      {function_of("      - x = x * x\n"), "f(grad, n)", "'*' of two matrices in matrix function 'f': write '@'"},
      {function_of("      - x = x + 1\n"), "f(grad, n)", "'+' of a matrix and a number"},
      {function_of("      - g = x @ transpose(x)\n", "g"), "f(grad, n)",
       "returns 'g', which is R x R: a matrix function returns a matrix of its argument's shape"},
      {function_of("      - x = x @ transpose(x)\n"), "f(grad, n)", "'x' is R x C, assigned a R x R matrix"},
      {function_of("      - x = sqrt(x)\n"), "f(grad, n)", "'sqrt' is not a function of matrix code"},
      {function_of("      - x = x / frobenius_norm(x)\n"), "f(grad, n)", "frobenius_norm is used only to divide"},
      {function_of("      - y = x\n      - x = x / max(frobenius_norm(y), 1)\n"), "f(grad, n)",
       "a matrix is divided by its own norm"},
      {function_of("      - x = lr * x\n"), "f(grad, n)", "unknown name 'lr' in matrix function 'f'"},
      {function_of("      - x = n * n * x\n"), "f(grad, n)", "multiplies two parameters"},
      {function_of("      - repeat: 2.5\n        do:\n          - x = x @ transpose(x) @ x\n"), "f(grad, n)",
       "a repeat's count is a whole number from 0 to 1000"},
      {function_of("      - n = x\n"), "f(grad, n)", "'n' is a number the call gives"},
      {function_of("      - repeat: n\n        do:\n          - y = 2 * x\n          - x = y\n", "y"), "f(grad, n)",
       "returns 'y', which none of its statements assigns (a repeat assigns it first, and may run no times"},
      {function_of("      - repeat: n\n        do:\n          - y = 2 * x\n      - x = y\n"), "f(grad, n)",
       "unknown name 'y' in matrix function 'f'"},
      {function_of("      - y = x @ transpose(x)\n", "z"), "f(grad, n)", "returns 'z', which none of its"},
      {ok, "f(grad)", "'f' takes 2 arguments, given 1"},
      {ok, "f(grad, 1.5)", "argument 'n' of 'f' counts iterations"},
      {ok, "f(grad, lr)", "argument 'n' of 'f' counts iterations"},
  };
  for (const Case& c : cases) {
    INFO(c.function << c.call);
    const std::string error = optgen::test::spec_error("m.yaml", spec_with(c.function, c.call));
    CHECK_THAT(error, Catch::Contains(c.message) && Catch::Contains("m.yaml:"));
  }
  // A function no step calls is checked all the same; its name is its own.
  CHECK_THAT(optgen::test::spec_error("m.yaml", spec_with(function_of("      - x = x @ x\n"), "grad")),
             Catch::Contains("'x @ x' multiplies a R x C matrix by a R x C one"));
  CHECK_THAT(optgen::test::spec_error(
                 "m.yaml", spec_with("  lr:\n    parameters: [x]\n    do: [y = x]\n    result: x\n", "grad")),
             Catch::Contains("matrix function 'lr' has the name of a hyperparameter"));
  CHECK_THAT(optgen::test::spec_error(
                 "m.yaml", spec_with("  sqrt:\n    parameters: [x]\n    do: [y = x]\n    result: x\n", "grad")),
             Catch::Contains("matrix function 'sqrt' has the name of a function of the language"));
  // A product outside matrix code.
  CHECK_THAT(optgen::test::spec_error("m.yaml", spec_with(ok, "f(grad, n) + grad @ grad")),
             Catch::Contains("'@' multiplies matrices, and only the statements of a matrix function have matrices"));
}

TEST_CASE("muon's newton_schulz on the GPU follows the iteration on the CPU, in bf16 and in f32", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  if (std::string why; !optgen::cublas::available(&why)) {
    record_skip(Catch::getResultCapture().getCurrentTestName(), "no cuBLAS: " + why);
    return;
  }
  const auto& info = launcher("muon");
  for (int k = 0; k < info.num_kernels; ++k) {
    if (info.kernels[k].variant != 0 || info.kernels[k].param != DType::F32) continue;
    INFO("kernel set " << info.kernels[k].stages[0]);
    // Wide, square, a row, tall (orthogonalised transposed, as torch does), one column; odd and
    // even steps (where the iteration ends decides where its values live).
    for (int steps : {5, 4, 1, 0}) {
      INFO(steps << " steps");
      check_newton_schulz(k, {Shape{3, 64, 192}, Shape{2, 96, 96}, Shape{1, 1, 33}, Shape{4, 50, 17}, Shape{2, 9, 1}},
                          steps);
    }
  }
}

/// Three steps of every kernel set of `info` on matrices of several shapes, against `ref`, each
/// step moving a param by up to lr (0.02) times `max_scale`.
void steps_as_its_reference(const optgen::OptimizerInfo& info, const optgen::reference::Optimizer& ref,
                            double max_scale) {
  if (std::string why; !optgen::cublas::available(&why)) {
    record_skip(Catch::getResultCapture().getCurrentTestName(), "no cuBLAS: " + why);
    return;
  }
  for (int k = 0; k < info.num_kernels; ++k) {
    const optgen::KernelInfo& kernel = info.kernels[k];
    INFO("kernel set " << kernel.stages[0]);
    const std::vector<double> h = optgen::default_hyperparameters(info);
    std::mt19937 rng(static_cast<unsigned>(k) + 11);
    // Wide, tall (a function that transposes tall matrices sees it transposed), square, a batch of
    // three, one row. Small matrices run in one block each; 72 x 90 (a view of more than
    // kMatrixInBlockRows rows) through cuBLAS.
    DeviceGroup group(kernel.param, TensorShapes{{{16, 40}, {48, 12}, {24, 24}, {3, 8, 20}, {1, 30}, {72, 90}}},
                      {false, false, false, false, false, false}, rng);
    optgen::FusedOptimizer opt(info, h, storage_of(info, kernel));
    opt.add_param_group(group.tensors, h);
    std::vector<double> scalar_state = initial_scalar_state(info, h);
    Comparison result;
    for (std::int64_t step = 1; step <= 3; ++step) {
      group.new_gradients(rng);
      StateSnapshot states = snapshot_states(opt, ref, 0, group);
      opt.step();
      synchronize();
      check_group(opt, ref, 0, group, states, scalar_state, step, result);
    }
    INFO("worst relative error " << result.worst << " in " << result.where);
    CHECK(result.worst <= matrix_tolerance(info, kernel, 0.02, max_scale, 3));
  }
}

TEST_CASE("a spec's own matrix functions step as its CPU reference, in every storage", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  // Each step moves a param by lr times entries of up to a few (mix's 3 y - n + y s).
  steps_as_its_reference(optgen::MatrixProgramSGD::info(), optgen::reference::matrix_code::optimizer(), 4.0);
}

TEST_CASE("a matrix function of another's result, and a norm of one, step as the CPU reference", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  // tests/specs/matrix_chain.yaml: u = polar(o + grad) after o = polar(grad), each a stage's
  // stored operand; the step lr * u * (1 + norm(o) / sqrt(numel)), entries of u within about 1.
  steps_as_its_reference(optgen::MatrixChainSGD::info(), optgen::reference::matrix_chain::optimizer(), 4.0);
}
