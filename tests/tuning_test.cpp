// The launch-parameter table (optgen/tuning.h): reading it, choosing an entry, its errors (no GPU
// needed); and, on a GPU, an optimizer taking its chunk size from the table OPTGEN_TUNING names.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>

#include <nlohmann/json.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include "optgen/tuning.h"
#include "optimizer_harness.h"

using namespace optgen_test;

namespace {

const char* const kTable = R"({
  "device": "NVIDIA Test GPU",
  "measured": "by hand",
  "kernels": {
    "adam_f32_f32_update": [{"elements": 100000000, "chunk_size": 8192}, {"elements": 1000000, "chunk_size": 2048}],
    "sgd_f32_update": [{"elements": 5000, "chunk_size": 64}]
  }
})";

/// A file in the temporary directory, removed at the end of the scope.
class TempFile {
 public:
  TempFile(const std::string& name, const std::string& text)
      : path_(std::filesystem::temp_directory_path() / (name + "." + std::to_string(getpid()) + ".json")) {
    std::ofstream(path_) << text;
  }
  ~TempFile() { std::filesystem::remove(path_); }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

/// Sets OPTGEN_TUNING for a scope, then restores what it was.
class TuningVariable {
 public:
  explicit TuningVariable(const std::string& value) {
    if (const char* old = std::getenv("OPTGEN_TUNING")) old_ = old;
    setenv("OPTGEN_TUNING", value.c_str(), 1);
  }
  ~TuningVariable() {
    if (old_)
      setenv("OPTGEN_TUNING", old_->c_str(), 1);
    else
      unsetenv("OPTGEN_TUNING");
  }

 private:
  std::optional<std::string> old_;
};

std::string parse_error(const std::string& text) {
  return error_of([&] { optgen::Tuning::parse(text, "t.json"); });
}

}  // namespace

TEST_CASE("tuning: a plan takes the entry of the size nearest its own, by ratio", "[tuning]") {
  const optgen::Tuning t = optgen::Tuning::parse(kTable, "table");
  CHECK(t.device() == "NVIDIA Test GPU");
  CHECK(t.chunk_size("adam_f32_f32_update", 1) == 2048);
  CHECK(t.chunk_size("adam_f32_f32_update", 5000000) == 2048);   // 5x above one, 20x below the other
  CHECK(t.chunk_size("adam_f32_f32_update", 30000000) == 8192);  // 30x above, 3.3x below
  CHECK(t.chunk_size("adam_f32_f32_update", 10000000) == 8192);  // a tie: the larger
  CHECK(t.chunk_size("adam_f32_f32_update", 1LL << 40) == 8192);
  CHECK(t.chunk_size("sgd_f32_update", 123) == 64);
  CHECK(t.chunk_size("adamw_f32_f32_update", 5000000) == 0);  // not in the table
  // Written and read again, the same table.
  const optgen::Tuning again = optgen::Tuning::parse(t.to_json("again"), "again");
  CHECK(again.device() == t.device());
  REQUIRE(again.kernels().size() == 2);
  const auto& entries = again.kernels().at("adam_f32_f32_update");
  REQUIRE(entries.size() == 2);
  CHECK(entries[0].elements == 1000000);
  CHECK(entries[0].chunk_size == 2048);
  CHECK(entries[1].elements == 100000000);
  CHECK(entries[1].chunk_size == 8192);
}

TEST_CASE("tuning: an entry may give a launch shape, which writes back with it", "[tuning]") {
  const optgen::Tuning t = optgen::Tuning::parse(
      R"({"device": "x", "kernels": {"k": [{"elements": 1000, "chunk_size": 2048, "block_size": 128,
          "elements_per_thread": 16}, {"elements": 1000000, "chunk_size": 4096}]}})",
      "t.json");
  const optgen::Tuning::Entry* small = t.find("k", 900);
  REQUIRE(small != nullptr);
  CHECK(small->chunk_size == 2048);
  CHECK(small->block_size == 128);
  CHECK(small->elements_per_thread == 16);
  const optgen::Tuning::Entry* large = t.find("k", 2000000);
  REQUIRE(large != nullptr);
  CHECK(large->block_size == 0);  // not measured: the generator's shape
  CHECK(large->elements_per_thread == 0);
  CHECK(t.find("other", 1000) == nullptr);
  const std::string text = t.to_json("by hand");
  CHECK_THAT(text, Catch::Contains(
                       R"({"elements": 1000, "chunk_size": 2048, "block_size": 128, "elements_per_thread": 16})") &&
                       Catch::Contains(R"({"elements": 1000000, "chunk_size": 4096})"));
  CHECK(optgen::Tuning::parse(text, "again").to_json("by hand") == text);
}

TEST_CASE("tuning: the tables in tuning/ read, and write back as they are", "[tuning]") {
  int tables = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(OPTGEN_SOURCE_DIR) + "/tuning")) {
    if (entry.path().extension() != ".json") continue;
    ++tables;
    INFO(entry.path());
    const optgen::Tuning t = optgen::Tuning::load(entry.path().string());
    CHECK(!t.empty());
    std::ifstream in(entry.path());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string measured = nlohmann::json::parse(text).at("measured").get<std::string>();
    CHECK(t.to_json(measured) == text);
  }
  CHECK(tables > 0);
}

TEST_CASE("tuning: a bad table is an error that names the file and the problem", "[tuning]") {
  const std::string bad_json = parse_error("{\"device\": \"x\",\n \"kernels\": {,}}");
  CHECK_THAT(bad_json, Catch::Contains("optgen::Tuning::load(t.json)") && Catch::Contains("not JSON") &&
                           Catch::Contains("line 2, column") && Catch::Contains("optgen_bench --tune"));
  CHECK_THAT(parse_error("[1, 2]"), Catch::Contains("the table is not a JSON object"));
  CHECK_THAT(parse_error(R"({"kernels": {}})"), Catch::Contains("the table has no \"device\""));
  CHECK_THAT(parse_error(R"({"device": 3, "kernels": {}})"), Catch::Contains("\"device\" is not of the right type"));
  CHECK_THAT(parse_error(R"({"device": "x", "kernels": {"k": []}})"),
             Catch::Contains("kernel set k has no list of measurements"));
  CHECK_THAT(parse_error(R"({"device": "x", "kernels": {"k": [{"elements": 10}]}})"),
             Catch::Contains("kernel set k has no \"chunk_size\""));
  CHECK_THAT(parse_error(R"({"device": "x", "kernels": {"k": [{"elements": 10, "chunk_size": 2048.5}]}})"),
             Catch::Contains("kernel set k's \"chunk_size\" is not an integer"));
  CHECK_THAT(parse_error(R"({"device": "x", "kernels": {"k": [{"elements": 10, "chunk_size": 100}]}})"),
             Catch::Contains("kernel set k: chunk size 100 is not a multiple of 64 up to 2^30"));
  CHECK_THAT(parse_error(R"({"device": "x", "kernels": {"k": [{"elements": 0, "chunk_size": 128}]}})"),
             Catch::Contains("kernel set k: elements 0 is not positive"));
  CHECK_THAT(
      parse_error(R"({"device": "x", "kernels": {"k": [{"elements": 1, "chunk_size": 128, "block_size": 128}]}})"),
      Catch::Contains("kernel set k: a measurement gives \"block_size\" or \"elements_per_thread\" without "
                      "the other"));
  CHECK_THAT(parse_error(R"({"device": "x", "kernels": {"k": [{"elements": 1, "chunk_size": 128, "block_size": 96,
             "elements_per_thread": 8}]}})"),
             Catch::Contains("kernel set k: block size 96 is not a power of two from 32 to 1024"));
  CHECK_THAT(parse_error(R"({"device": "x", "kernels": {"k": [{"elements": 1, "chunk_size": 128, "block_size": 4096,
             "elements_per_thread": 8}]}})"),
             Catch::Contains("kernel set k: block size 4096 is not a power of two from 32 to 1024"));
  CHECK_THAT(parse_error(R"({"device": "x", "kernels": {"k": [{"elements": 1, "chunk_size": 128, "block_size": 64,
             "elements_per_thread": 128}]}})"),
             Catch::Contains("kernel set k: elements per thread 128 is not a power of two up to 64"));
  CHECK_THAT(parse_error(R"({"device": "x", "kernels": {"k": [{"elements": 1, "chunk_size": 128, "block_size": "64",
             "elements_per_thread": 8}]}})"),
             Catch::Contains("kernel set k's \"block_size\" is not an integer"));
  CHECK_THAT(
      error_of([] { optgen::Tuning::load("/nonexistent/table.json"); }),
      Catch::Contains("optgen::Tuning::load(/nonexistent/table.json)") && Catch::Contains("cannot open the file"));
  // Which of two measurements of one size applied depended on their order.
  CHECK_THAT(parse_error(R"({"device": "x", "kernels": {"k": [{"elements": 10, "chunk_size": 128},
             {"elements": 10, "chunk_size": 256}]}})"),
             Catch::Contains("kernel set k has two measurements of 10 elements"));
}

TEST_CASE("tuning: a table is read only from a regular file of a table's size", "[tuning]") {
  // A FIFO blocked for good, a device was read until memory ran out.
  const std::string fifo =
      (std::filesystem::temp_directory_path() / ("optgen_tuning_fifo." + std::to_string(getpid()))).string();
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THAT(error_of([&] { optgen::Tuning::load(fifo); }), Catch::Contains("optgen::Tuning::load(" + fifo + ")") &&
                                                                Catch::Contains("this is a FIFO, not a regular file"));
  std::filesystem::remove(fifo);
  CHECK_THAT(error_of([] { optgen::Tuning::load("/dev/zero"); }),
             Catch::Contains("this is a device, not a regular file"));
  CHECK_THAT(error_of([] { optgen::Tuning::load(OPTGEN_SOURCE_DIR); }),
             Catch::Contains("this is a directory, not a regular file"));
}

TEST_CASE("tuning: a table naming a kernel set its optimizer does not have is an error", "[tuning]") {
  const auto& adamw = launcher("adamw");
  // tuning.h once documented this name; the set is adamw_f32_q8_exp_avg_sq_uq8_update.
  const optgen::Tuning wrong = optgen::Tuning::parse(
      R"({"device": "x", "kernels": {"adamw_f32_q8_uq8_update": [{"elements": 10, "chunk_size": 256}]}})", "t.json");
  CHECK_THAT(error_of([&] { wrong.check_kernel_names(adamw); }),
             Catch::Contains("optgen::Tuning(t.json)") &&
                 Catch::Contains("kernel set adamw_f32_q8_uq8_update is not one of AdamW's") &&
                 Catch::Contains("adamw_f32_q8_exp_avg_sq_uq8_update"));
  // Other optimizers' sets, and AdamW's own, are no concern of AdamW's.
  const optgen::Tuning right = optgen::Tuning::parse(
      R"({"device": "x", "kernels": {"adamw_f32_q8_exp_avg_sq_uq8_update": [{"elements": 10, "chunk_size": 256}],
          "adam_f32_f32_update": [{"elements": 10, "chunk_size": 256}]}})",
      "t.json");
  CHECK_NOTHROW(right.check_kernel_names(adamw));
  CHECK_NOTHROW(optgen::Tuning::parse(kTable, "table").check_kernel_names(adamw));
}

TEST_CASE("tuning: OPTGEN_TUNING names tables, and the one for the device is used", "[tuning]") {
  const TempFile a("optgen_tuning_a", R"({"device": "GPU A", "kernels": {"k": [{"elements": 1, "chunk_size": 128}]}})");
  const TempFile b("optgen_tuning_b", R"({"device": "GPU B", "kernels": {"k": [{"elements": 1, "chunk_size": 256}]}})");
  {
    const TuningVariable variable(a.path() + ":" + b.path());
    CHECK(optgen::Tuning::from_environment("GPU B").chunk_size("k", 1) == 256);
    CHECK(optgen::Tuning::from_environment("GPU A").chunk_size("k", 1) == 128);
    CHECK(optgen::Tuning::from_environment("GPU C").empty());
  }
  {
    const TuningVariable variable(a.path() + ":/nonexistent/table.json");
    CHECK_THAT(error_of([] { optgen::Tuning::from_environment("GPU C"); }),
               Catch::Contains("/nonexistent/table.json") && Catch::Contains("cannot open the file"));
  }
  unsetenv("OPTGEN_TUNING");
  CHECK(optgen::Tuning::from_environment("GPU A").empty());
}

TEST_CASE("tuning: an optimizer takes its chunk size from the table for its GPU", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  const std::string device = optgen::driver::device_name(optgen::driver::current_device());
  const auto& adam = launcher("adam");
  optgen::StorageOptions eight;
  eight.states = DType::Q8;
  eight.state_dtypes = {{"exp_avg_sq", DType::UQ8}};
  // The kernel sets' names, as the table knows them.
  optgen::FusedOptimizer probe(adam, optgen::default_hyperparameters(adam));
  std::mt19937 rng(3);
  DeviceGroup group(DType::F32, std::vector<std::int64_t>{5000, 300}, {false, false}, rng);
  probe.add_param_group(group.tensors, optgen::FusedOptimizer::Overrides{});
  const std::string f32_set = optgen::tuning_name(adam, probe.kernel_set(0));
  CHECK(f32_set == "adam_f32_f32_update");
  optgen::FusedOptimizer probe8(adam, optgen::default_hyperparameters(adam), eight);
  probe8.add_param_group(group.tensors, optgen::FusedOptimizer::Overrides{});
  const std::string q8_set = optgen::tuning_name(adam, probe8.kernel_set(0));

  const TempFile table(
      "optgen_tuning_gpu",
      R"({"device": ")" + device + R"(", "kernels": {")" + f32_set +
          R"(": [{"elements": 1000, "chunk_size": 1024}, {"elements": 100000000, "chunk_size": 8192}], ")" + q8_set +
          R"(": [{"elements": 1000, "chunk_size": 1088}]}})");
  const TuningVariable variable(table.path());
  optgen::FusedOptimizer opt(adam, optgen::default_hyperparameters(adam));
  opt.add_param_group(group.tensors, optgen::FusedOptimizer::Overrides{});
  CHECK(opt.chunk_size(0) == 1024);  // 5300 elements: nearest 1000
  // Stepped in chunks of 1024 (five of the first tensor), as the reference steps it.
  const Comparison result = compare_steps(opt, reference_of("adam"), group, 2, rng);
  INFO("worst relative error " << result.worst << " in " << result.where);
  CHECK(result.worst <= tolerance(adam, opt.kernel_set(0)));
  opt.set_chunk_size(4096);  // set_chunk_size wins
  CHECK(opt.chunk_size(0) == 4096);

  // A table for another GPU is not this one's.
  const TempFile other("optgen_tuning_other", R"({"device": "not )" + device + R"(", "kernels": {")" + f32_set +
                                                  R"(": [{"elements": 1000, "chunk_size": 64}]}})");
  {
    const TuningVariable other_variable(other.path());
    optgen::FusedOptimizer untuned(adam, optgen::default_hyperparameters(adam));
    untuned.add_param_group(group.tensors, optgen::FusedOptimizer::Overrides{});
    CHECK(untuned.chunk_size(0) == untuned.kernel_set(0).chunk_size);
  }

  // An 8-bit set's chunks hold whole 256-element blocks: a table that says otherwise is an error.
  optgen::FusedOptimizer opt8(adam, optgen::default_hyperparameters(adam), eight);
  opt8.add_param_group(group.tensors, optgen::FusedOptimizer::Overrides{});
  CHECK_THAT(error_of([&] { opt8.prepare(nullptr); }), Catch::Contains("the tuning table for " + device) &&
                                                           Catch::Contains(q8_set) &&
                                                           Catch::Contains("chunks of 1088, not a multiple of 256"));
}
