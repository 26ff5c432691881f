// Storage (optgen/storage.h): the text form and its errors, the engine's choice of kernel set and its
// errors, and on the GPU the two ways a bf16 param is written besides rounding to nearest:
// stochastic rounding (the stream of optgen/random.h, bit for bit; unbiased) and an fp32 master copy
// (the f32 trajectory, bit for bit). tests/specs/plain_sgd.yaml's update, param - lr * grad, is the
// same float bits on the CPU and the GPU, so what is compared is the storage alone. 8-bit blockwise
// states: the text form, the layout, and on the GPU codes and absmax bit for bit.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>

#include "builtin_launchers.h"
#include "optgen/blockwise8.h"
#include "optgen/driver.h"
#include "optgen/random.h"
#include "optgen/storage.h"
#include "optimizer_harness.h"
#include "plain_sgd.h"

using namespace optgen_test;

namespace {

optgen::Storage parsed(const std::string& text) {
  std::string error;
  auto storage = optgen::parse_storage(text, &error);
  INFO(text << ": " << error);
  REQUIRE(storage);
  return *storage;
}

std::string error_of_text(const std::string& text) {
  std::string error;
  return optgen::parse_storage(text, &error) ? "(no error)" : error;
}

optgen::StorageOptions options(optgen::ParamWrite write, std::uint64_t seed = 0) {
  optgen::StorageOptions storage;
  storage.param_write = write;
  storage.seed = seed;
  return storage;
}

}  // namespace

TEST_CASE("storage: the text form reads and prints every option", "[storage]") {
  const optgen::Storage master = parsed("bf16+master");
  CHECK(master.param == DType::BF16);
  CHECK(master.param_write == optgen::ParamWrite::Master);
  CHECK(master.states == DType::F32);
  CHECK(master.name() == "bf16_master_f32");
  CHECK(master.text() == "bf16+master");

  const optgen::Storage mixed = parsed("bf16+sr:bf16:exp_avg_sq=f32");
  CHECK(mixed.param_write == optgen::ParamWrite::Stochastic);
  CHECK(mixed.states == DType::BF16);
  CHECK(mixed.state_dtype("exp_avg_sq") == DType::F32);
  CHECK(mixed.state_dtype("exp_avg") == DType::BF16);
  CHECK(mixed.name() == "bf16_sr_bf16_exp_avg_sq_f32");
  CHECK(mixed.text() == "bf16+sr:bf16:exp_avg_sq=f32");
  CHECK(parsed(mixed.text()) == mixed);

  CHECK(parsed("f32:f16").name() == "f32_f16");
  CHECK(parsed("f16").name() == "f16_f32");
  // A state's own dtype may come without the states' default, which stays f32.
  CHECK(parsed("bf16:exp_avg=bf16").text() == "bf16:f32:exp_avg=bf16");

  // bitsandbytes' 8-bit AdamW: the signed map for exp_avg, the unsigned one for exp_avg_sq.
  const optgen::Storage eight = parsed("f32:q8:exp_avg_sq=uq8");
  CHECK(eight.state_dtype("exp_avg") == DType::Q8);
  CHECK(eight.state_dtype("exp_avg_sq") == DType::UQ8);
  CHECK(eight.name() == "f32_q8_exp_avg_sq_uq8");
  CHECK(parsed(eight.text()) == eight);
}

TEST_CASE("storage: 8-bit states are codes and block absmax, f32 under 4096 elements", "[storage]") {
  CHECK(optgen::is_blockwise(DType::Q8));
  CHECK(optgen::is_blockwise(DType::UQ8));
  CHECK_FALSE(optgen::is_blockwise(DType::BF16));
  CHECK(optgen::stored_dtype(DType::Q8, 4095) == DType::F32);  // bitsandbytes' min_8bit_size
  CHECK(optgen::stored_dtype(DType::Q8, 4096) == DType::Q8);
  CHECK(optgen::stored_dtype(DType::BF16, 3) == DType::BF16);
  // 4097 codes padded to 4112 bytes, then 17 blocks' absmax.
  CHECK(optgen::storage_bytes(DType::UQ8, 4097) == 4112 + 17 * 4);
  CHECK(optgen::storage_bytes(DType::F32, 4095) == 4095 * 4);
  // The host's quantisation, as the tests compare kernels with it: a block's largest positive value
  // is exact, its most negative one (-absmax) is the signed map's lowest code (kSignedMap[0] is
  // -0.99296874: bitsandbytes' signed map has no -1); a zero stays zero; the tensor's last,
  // shorter block has its own absmax.
  std::vector<float> values(300, 0.0f);
  values[7] = -0.5f;
  values[100] = 0.25f;
  values[299] = 3.0f;
  const std::vector<float> q8 = requantized(DType::Q8, values);
  CHECK(q8[7] == optgen::blockwise8::kSignedMap[0] * 0.5f);
  CHECK(q8[0] == 0.0f);
  CHECK(q8[299] == 3.0f);
  CHECK(std::fabs(q8[100] - 0.25f) <= 0.5f / 64);
  std::vector<float> squares(300, 0.0f);
  squares[5] = 4.0f;
  squares[6] = 1e-3f;
  const std::vector<float> uq8 = requantized(DType::UQ8, squares);
  CHECK(uq8[5] == 4.0f);
  CHECK(std::fabs(uq8[6] - 1e-3f) <= 1e-3f * 0.1f);
}

TEST_CASE("storage: malformed text names the problem", "[storage]") {
  CHECK(error_of_text("bf8") == "unknown parameter storage 'bf8': expected f32, bf16 or f16");
  CHECK(error_of_text("f32+master") ==
        "'f32+master': f32 params are their own master copy; +master is for bf16 and f16 params");
  CHECK(error_of_text("f32+sr") ==
        "'f32+sr': f32 params are not rounded, stochastically or otherwise; +sr is for bf16 params");
  CHECK(error_of_text("f16+sr") == "'f16+sr': stochastic rounding is for bf16 params");
  CHECK_THAT(error_of_text("bf16+fp8"), Catch::Contains("unknown parameter option '+fp8'"));
  CHECK_THAT(error_of_text("bf16+master+sr"), Catch::Contains("more than one '+'"));
  CHECK_THAT(error_of_text("bf16:f64"), Catch::Contains("unknown state storage 'f64'"));
  CHECK_THAT(error_of_text("bf16:exp_avg=f32:bf16"), Catch::Contains("must come first after PARAM"));
  CHECK_THAT(error_of_text("bf16:bf16:exp_avg=q4"), Catch::Contains("unknown storage 'q4' of state 'exp_avg'"));
  CHECK(error_of_text("q8") ==
        "unknown parameter storage 'q8': expected f32, bf16 or f16 (q8 is 8-bit blockwise, "
        "for states)");
  CHECK_THAT(error_of_text("bf16:bf16:exp_avg=f32:exp_avg=bf16"),
             Catch::Contains("state 'exp_avg' is given a dtype twice"));
  CHECK_THAT(error_of_text("bf16:bf16:=f32"), Catch::Contains("expected STATE=DTYPE"));
}

TEST_CASE("storage: canonical storage orders states as declared and drops the default's", "[storage]") {
  std::string error;
  const std::vector<std::string> states = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  auto a =
      optgen::canonical_storage(parsed("bf16:bf16:max_exp_avg_sq=f32:exp_avg=bf16:exp_avg_sq=f32"), states, {}, &error);
  REQUIRE(a);
  CHECK(a->text() == "bf16:bf16:exp_avg_sq=f32:max_exp_avg_sq=f32");
  auto b = optgen::canonical_storage(parsed("bf16:bf16:exp_avg_sq=f32:max_exp_avg_sq=f32"), states, {}, &error);
  REQUIRE(b);
  CHECK(*a == *b);
  CHECK_FALSE(optgen::canonical_storage(parsed("bf16:bf16:momentum=f32"), states, {}, &error));
  CHECK(error ==
        "storage 'bf16:bf16:momentum=f32' names state 'momentum', which the spec does not declare (it declares "
        "exp_avg, exp_avg_sq, max_exp_avg_sq)");
}

TEST_CASE("storage: a matrix value is bf16 unless named, f32 when it is, after the states", "[storage]") {
  std::string error;
  const std::vector<std::string> states = {"momentum_buffer"}, values = {"o"};
  auto f32 = optgen::canonical_storage(parsed("bf16:o=f32:momentum_buffer=bf16"), states, values, &error);
  REQUIRE(f32);
  CHECK(f32->text() == "bf16:f32:momentum_buffer=bf16:o=f32");
  CHECK(f32->name() == "bf16_f32_momentum_buffer_bf16_o_f32");
  CHECK(f32->matrix_dtype("o") == DType::F32);
  auto plain = optgen::canonical_storage(parsed("f32:o=bf16"), states, values, &error);
  REQUIRE(plain);
  CHECK(plain->text() == "f32");  // bf16 is a matrix value's default
  CHECK(plain->matrix_dtype("o") == DType::BF16);
  CHECK(optgen::Storage{}.matrix_dtype("o") == DType::BF16);  // not the states' f32
  CHECK_FALSE(optgen::canonical_storage(parsed("f32:o=q8"), states, values, &error));
  CHECK_THAT(error, Catch::Contains("keeps matrix value 'o' in q8: a matrix value is bf16"));
  CHECK_FALSE(optgen::canonical_storage(parsed("f32:x=f32"), states, values, &error));
  CHECK_THAT(error, Catch::Contains("names state 'x', which the spec does not declare (it declares "
                                    "momentum_buffer; its matrix values: o)"));
}

TEST_CASE("storage: the engine refuses options its params or kernels cannot have", "[storage]") {
  const auto& info = optgen::PlainSGD::info();
  optgen::Tensor t = fake_tensor();
  optgen::FusedOptimizer master(info, optgen::default_hyperparameters(info), options(optgen::ParamWrite::Master));
  CHECK_THAT(error_of([&] { master.add_param_group({t}, optgen::FusedOptimizer::Overrides{}); }),
             Catch::Contains("created with an fp32 master copy of the params, but this group's params are f32"));
  optgen::FusedOptimizer sr(info, optgen::default_hyperparameters(info), options(optgen::ParamWrite::Stochastic));
  optgen::Tensor half = t;
  half.dtype = DType::F16;
  CHECK_THAT(error_of([&] { sr.add_param_group({half}, optgen::FusedOptimizer::Overrides{}); }),
             Catch::Contains("stochastic rounding of the params, which is for bf16 params; this group's are f16"));

  const auto& sgd = launcher("sgd");
  optgen::FusedOptimizer sgd_master(sgd, optgen::default_hyperparameters(sgd), options(optgen::ParamWrite::Master));
  optgen::Tensor bf16 = t;
  bf16.dtype = DType::BF16;
  CHECK_THAT(error_of([&] { sgd_master.add_param_group({bf16}, optgen::FusedOptimizer::Overrides{}); }),
             Catch::Contains("no kernel for variant sgd with storage bf16+master was generated (its kernels: f32, "
                             "bf16)") &&
                 Catch::Contains("add \"bf16+master\" to the spec's 'storage:' list"));

  const auto& adam = launcher("adam");
  optgen::StorageOptions f16_moment;
  f16_moment.state_dtypes = {{"exp_avg", DType::F16}};
  optgen::FusedOptimizer adam_f16(adam, optgen::default_hyperparameters(adam), f16_moment);
  CHECK_THAT(error_of([&] { adam_f16.add_param_group({t}, optgen::FusedOptimizer::Overrides{}); }),
             Catch::Contains("with storage f32:f32:exp_avg=f16 was generated"));
  CHECK(adam_f16.state_dtype("exp_avg") == DType::F16);
  CHECK(adam_f16.state_dtype("exp_avg_sq") == DType::F32);

  optgen::StorageOptions eight;
  eight.states = DType::Q8;
  eight.state_dtypes = {{"exp_avg_sq", DType::UQ8}};
  optgen::FusedOptimizer adam_8bit(adam, optgen::default_hyperparameters(adam), eight);
  CHECK(adam_8bit.state_dtype("exp_avg_sq") == DType::UQ8);
  CHECK_THAT(
      error_of([&] { adam_8bit.set_chunk_size(4096 + 64); }),
      Catch::Contains("chunk size 4160 is not a multiple of 256") && Catch::Contains("whole blocks of 256 elements"));
  adam_8bit.set_chunk_size(4096 + 256);
}

// ---- On a GPU. ----

TEST_CASE("storage: stochastic rounding writes the stream's bits, tensor by tensor and step by step", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const auto& info = optgen::PlainSGD::info();
  std::mt19937 rng(5);
  // Aligned tensors take the eight-element stores; misaligned ones, and tails, the scalar path.
  const std::vector<std::int64_t> sizes = {1, 7, 4099, 70001};
  DeviceGroup group(DType::BF16, sizes, {false, true, false, true}, rng);
  std::vector<double> h = optgen::default_hyperparameters(info);
  h[0] = 0.001;  // lr: updates well below a bf16 ulp, which only stochastic rounding keeps
  const std::uint64_t seed = 0x0123456789abcdefull;
  optgen::FusedOptimizer opt(info, h, options(optgen::ParamWrite::Stochastic, seed));
  opt.add_param_group(group.tensors, h);
  std::size_t changed = 0, total = 0;
  for (std::int64_t step = 1; step <= 3; ++step) {
    group.new_gradients(rng);
    opt.step();
    synchronize();
    for (std::size_t t = 0; t < sizes.size(); ++t) {
      std::vector<std::uint16_t> bits(static_cast<std::size_t>(sizes[t]));
      optgen::driver::check(optgen::driver::api().cuMemcpyDtoH(
                                bits.data(), reinterpret_cast<CUdeviceptr>(group.tensors[t].param), bits.size() * 2),
                            "cuMemcpyDtoH");
      std::size_t mismatches = 0;
      for (std::size_t i = 0; i < bits.size(); ++i) {
        const float lr = static_cast<float>(h[0]);
        const float exact = group.params[t][i] - lr * group.grads[t][i];
        const unsigned random =
            optgen::random::random_bits16(seed, static_cast<int>(t), step, static_cast<long long>(i));
        const std::uint16_t expected = optgen::random::stochastic_round_bf16(exact, random);
        if (bits[i] != expected && mismatches++ == 0)
          UNSCOPED_INFO("tensor " << t << " element " << i << " at step " << step << ": gpu " << bits[i] << ", stream "
                                  << expected);
        changed += optgen::bf16_to_float(bits[i]) != group.params[t][i];
        group.params[t][i] = optgen::bf16_to_float(bits[i]);
        ++total;
      }
      CHECK(mismatches == 0);
    }
  }
  // Round to nearest would keep nearly every param; stochastic rounding moves about lr |g| / ulp of them.
  CHECK(changed > total / 1000);
}

TEST_CASE("storage: stochastic rounding is unbiased on the GPU", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const auto& info = optgen::PlainSGD::info();
  const std::int64_t n = 1 << 20;
  std::mt19937 rng(9);
  DeviceGroup group(DType::BF16, {n}, {false}, rng);
  // Every param 1, every grad -0.3 ulp (2^-7 * 0.3): the exact result 1 + 0.3 ulp, which round to
  // nearest keeps at 1 (a bias of -0.3 ulp); stochastic rounding gives 1 + ulp 30% of the time.
  const float ulp = 1.0f / 128.0f;
  std::vector<float> ones(static_cast<std::size_t>(n), 1.0f), grads(static_cast<std::size_t>(n), -0.3f * ulp);
  std::vector<double> h = optgen::default_hyperparameters(info);  // lr 1
  for (auto write : {optgen::ParamWrite::Stochastic, optgen::ParamWrite::Nearest}) {
    upload(DType::BF16, group.tensors[0].param, ones);
    // The gradient in bf16 is exactly -0.3 ulp rounded: what the update subtracts.
    upload(DType::BF16, const_cast<void*>(group.tensors[0].grad), grads);
    const float g = round_to(DType::BF16, -0.3f * ulp);
    optgen::FusedOptimizer opt(info, h, options(write, 42));
    opt.add_param_group(group.tensors, h);
    opt.step();
    synchronize();
    const std::vector<float> after = download(DType::BF16, group.tensors[0].param, static_cast<std::size_t>(n));
    double mean = 0;
    for (float x : after) mean += x;
    mean /= static_cast<double>(n);
    const double exact = 1.0 - static_cast<double>(g);
    // Each result is 1 or 1 + ulp: a standard deviation of at most ulp / 2 / sqrt(n) for the mean,
    // ulp / 2048 here; six of them.
    const double tolerance = 6 * ulp / 2 / std::sqrt(static_cast<double>(n));
    INFO((write == optgen::ParamWrite::Stochastic ? "stochastic" : "nearest")
         << ": mean " << mean << ", exact " << exact << ", tolerance " << tolerance);
    if (write == optgen::ParamWrite::Stochastic)
      CHECK(std::fabs(mean - exact) <= tolerance);
    else
      CHECK(std::fabs(mean - exact) > 100 * tolerance);  // the bias stochastic rounding removes
  }
}

TEST_CASE("storage: an fp32 master copy follows the f32 trajectory bit for bit", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  for (const char* spec : {"adamw", "plain_sgd"}) {
    for (DType param : {DType::BF16, DType::F16}) {
      DYNAMIC_SECTION(spec << " with " << optgen::to_string(param) << " params") {
        const optgen::OptimizerInfo& info = std::string(spec) == "adamw" ? launcher("adamw") : optgen::PlainSGD::info();
        const std::vector<std::int64_t> sizes = {3, 4097, 30001};
        const std::vector<bool> misaligned = {false, true, false};
        std::mt19937 rng(17), same(17);
        // The same values: low-precision params (exact in f32) and gradients, on both sides.
        DeviceGroup low(param, sizes, misaligned, rng), full(DType::F32, sizes, misaligned, same);
        for (std::size_t t = 0; t < sizes.size(); ++t) upload(DType::F32, full.tensors[t].param, low.params[t]);
        std::vector<double> h = optgen::default_hyperparameters(info);
        h[0] = 0.01;
        optgen::FusedOptimizer master(info, h, options(optgen::ParamWrite::Master));
        optgen::FusedOptimizer reference(info, h);
        master.add_param_group(low.tensors, h);
        reference.add_param_group(full.tensors, h);
        for (int step = 1; step <= 4; ++step) {
          std::mt19937 g(step);
          low.new_gradients(g);
          for (std::size_t t = 0; t < sizes.size(); ++t)
            upload(DType::F32, const_cast<void*>(full.tensors[t].grad), low.grads[t]);
          master.step();
          reference.step();
        }
        synchronize();
        for (std::size_t t = 0; t < sizes.size(); ++t) {
          const auto n = static_cast<std::size_t>(sizes[t]);
          const std::vector<float> f32 = download(DType::F32, full.tensors[t].param, n);
          const std::vector<float> copy = download(DType::F32, master.master_weights(0, t).data, n);
          const std::vector<float> low_params = download(param, low.tensors[t].param, n);
          CHECK(std::memcmp(f32.data(), copy.data(), n * sizeof(float)) == 0);
          std::size_t rounded = 0;
          for (std::size_t i = 0; i < n; ++i) rounded += low_params[i] == round_to(param, f32[i]);
          CHECK(rounded == n);
        }
      }
    }
  }
}

TEST_CASE("storage: 8-bit states match bitsandbytes' quantisation of the reference, bit for bit", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  // AdamW's update has the same float bits on the CPU and the GPU (no FMA contraction), so every
  // state the kernel quantises is the reference's value, and its codes and block absmax must be
  // those blockwise8.h computes: check_group's worst error is 0 (it compares with the reference
  // quantised on the host). Tensors: under 4096 elements (f32 states), exactly one block's
  // multiple, a last block of one element (misaligned: element by element), and many blocks.
  const auto& info = launcher("adamw");
  const std::vector<std::int64_t> sizes = {3, 4096, 4097, 30001};
  const std::vector<bool> misaligned = {false, false, true, false};
  for (DType param : {DType::F32, DType::BF16}) {
    DYNAMIC_SECTION(optgen::to_string(param) << " params") {
      std::mt19937 rng(99);
      DeviceGroup group(param, sizes, misaligned, rng);
      std::vector<double> h = optgen::default_hyperparameters(info);
      optgen::StorageOptions eight;
      eight.states = DType::Q8;
      eight.state_dtypes = {{"exp_avg_sq", DType::UQ8}};
      optgen::FusedOptimizer opt(info, h, eight);
      opt.add_param_group(group.tensors, h);
      CHECK(opt.state("exp_avg", 0, 0).dtype == DType::F32);
      CHECK(opt.state("exp_avg", 0, 1).dtype == DType::Q8);
      CHECK(opt.state("exp_avg_sq", 0, 3).dtype == DType::UQ8);
      const Comparison result = compare_steps(opt, reference_of("adamw"), group, 4, rng);
      INFO("worst relative error " << result.worst << " in " << result.where);
      CHECK(result.worst == 0);
    }
  }
}

TEST_CASE("storage: below sm_80, prepare refuses a bf16 group in one line naming both capabilities", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  std::mt19937 rng(10);
  DeviceGroup bf16(DType::BF16, {1000}, {false}, rng);
  optgen::driver::simulate_compute_capability_for_testing(75);
  optgen::AdamW adamw;
  adamw.add_param_group(bf16.tensors);
  CHECK_THROWS_WITH(
      adamw.engine().prepare(nullptr),
      Catch::Contains("param group 0 steps with kernel set adamw_bf16_f32_update, whose bf16 values need a "
                      "GPU of compute capability 8.0 or newer; this one is 7.5") &&
          Catch::Contains("keep the group's params and states in f32 or f16 on this GPU"));
  optgen::driver::simulate_compute_capability_for_testing(0);
  // The device's own capability again: the same optimizer prepares and steps.
  adamw.step();
  synchronize();
  CHECK(adamw.step_count(0) == 1);
}
