// Checkpoints: safetensors files written and read back, and every malformed file a clear error (no
// GPU needed); a checkpoint refused by an optimizer of another spec; and on a GPU, N steps, save,
// load into a fresh optimizer, M more steps equal N + M uninterrupted steps bit for bit.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "optimizer_harness.h"

using namespace optgen_test;
namespace fs = std::filesystem;

namespace {

/// A file path in a fresh directory, removed with it.
class ScratchFile {
 public:
  explicit ScratchFile(const std::string& name)
      : dir_(fs::temp_directory_path() / ("optgen_checkpoint_test_" + std::to_string(::getpid()))), path_(dir_ / name) {
    fs::create_directories(dir_);
  }
  ~ScratchFile() { fs::remove_all(dir_); }
  std::string path() const { return path_.string(); }

 private:
  fs::path dir_, path_;
};

std::vector<unsigned char> bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<unsigned char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

/// A header of `json` followed by `data`, as a safetensors file would hold them.
std::vector<unsigned char> file_with_header(const std::string& json, std::size_t data_bytes) {
  // Reserved and appended, not vector(8) then insert: GCC 12 at -O3 (Release) sees a memcpy past
  // the 8 bytes in the insert's reallocation and fails -Werror=array-bounds.
  std::vector<unsigned char> bytes;
  bytes.reserve(8 + json.size() + data_bytes);
  for (int i = 0; i < 8; ++i)
    bytes.push_back(static_cast<unsigned char>(static_cast<std::uint64_t>(json.size()) >> (8 * i)));
  bytes.insert(bytes.end(), json.begin(), json.end());
  bytes.resize(bytes.size() + data_bytes, 0x5a);
  return bytes;
}

template <typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const optgen::Error& e) {
    return e.what();
  }
  return "(no error)";
}

optgen::Checkpoint sample() {
  optgen::Checkpoint c;
  c.metadata = {{"format", "optgen.optimizer"}, {"note", "a string"}};
  auto add = [&](const std::string& name, const char* dtype, std::vector<std::int64_t> shape, std::size_t bytes) {
    std::vector<unsigned char> data(bytes);
    for (std::size_t i = 0; i < bytes; ++i) data[i] = static_cast<unsigned char>(i * 7 + name.size());
    c.tensors.push_back({name, dtype, std::move(shape), std::move(data)});
  };
  add("group.0.hyperparameters", "F64", {3}, 24);
  add("group.0.step", "I64", {}, 8);
  add("group.0.tensor.0.exp_avg", "F32", {5}, 20);
  add("group.0.tensor.1.exp_avg", "BF16", {3}, 6);
  add("group.0.tensor.2.exp_avg", "F32", {0}, 0);
  return c;
}

}  // namespace

TEST_CASE("a checkpoint is written as safetensors and read back as it was", "[checkpoint]") {
  ScratchFile file("sample.safetensors");
  const optgen::Checkpoint written = sample();
  optgen::write_safetensors(file.path(), written);
  const auto bytes = bytes_of(file.path());
  // The layout of the format: a little-endian header length, JSON, the data 8-byte aligned.
  std::uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = header << 8 | bytes[i];
  CHECK(header % 8 == 0);
  CHECK(bytes.size() == 8 + header + 24 + 8 + 20 + 6);
  const auto json = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(header));
  CHECK(json["__metadata__"]["format"] == "optgen.optimizer");
  CHECK(json["group.0.step"]["shape"] == nlohmann::json::array());
  CHECK(json["group.0.tensor.1.exp_avg"]["dtype"] == "BF16");
  CHECK(json["group.0.tensor.0.exp_avg"]["data_offsets"] == nlohmann::json::array({32, 52}));

  const optgen::Checkpoint read = optgen::read_safetensors(file.path());
  CHECK(read.metadata == written.metadata);
  REQUIRE(read.tensors.size() == written.tensors.size());
  for (const auto& t : written.tensors) {
    const optgen::CheckpointTensor* r = read.find(t.name);
    REQUIRE(r != nullptr);
    CHECK(r->dtype == t.dtype);
    CHECK(r->shape == t.shape);
    CHECK(r->data == t.data);
  }
  CHECK_FALSE(fs::exists(file.path() + ".tmp"));
}

TEST_CASE("a truncated or malformed checkpoint file is a clear error", "[checkpoint]") {
  ScratchFile file("bad.safetensors");
  optgen::write_safetensors(file.path(), sample());
  const auto good = bytes_of(file.path());
  auto error_reading = [&](const std::vector<unsigned char>& bytes) {
    write_bytes(file.path(), bytes);
    return message_of([&] { optgen::read_safetensors(file.path()); });
  };
  const std::string where = "read_safetensors(" + file.path() + ") failed: ";

  CHECK_THAT(
      error_reading({good.begin(), good.end() - 3}),
      Catch::StartsWith(
          where +
          "tensor 'group.0.tensor.1.exp_avg' ends at byte 58 of the data, but the file holds 55: it is truncated"));
  std::vector<unsigned char> longer = good;
  longer.push_back(0);
  CHECK_THAT(error_reading(longer),
             Catch::StartsWith(where + "its tensors cover 58 bytes of data but the file holds 59"));
  CHECK_THAT(error_reading({good.begin(), good.begin() + 40}),
             Catch::StartsWith(where + "its header is ") && Catch::Contains("bytes long but the file ends after 32"));
  CHECK_THAT(error_reading({good.begin(), good.begin() + 5}),
             Catch::StartsWith(where + "it has 5 bytes, fewer than the 8 of the header length"));
  CHECK_THAT(error_reading(file_with_header("{\"a\": [1, 2", 0)), Catch::StartsWith(where + "its header is not JSON"));
  CHECK_THAT(error_reading(file_with_header("[1, 2]", 0)),
             Catch::StartsWith(where + "its header is not a JSON object"));
  CHECK_THAT(error_reading(file_with_header(R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", 4)),
             Catch::StartsWith(where + "tensor 'x' has 4 bytes, which does not match its shape and dtype"));
  CHECK_THAT(error_reading(file_with_header(R"({"x": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 4]}})", 4)),
             Catch::StartsWith(where + "tensor 'x' has dtype 'Q7', which optgen does not read"));
  CHECK_THAT(error_reading(file_with_header(R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8)),
             Catch::StartsWith(where + "its tensors leave a gap or overlap at byte 0 of the data"));
  CHECK_THAT(error_reading(file_with_header(R"({"x": {"dtype": "F32", "shape": [1]}})", 4)),
             Catch::StartsWith(where + "tensor 'x' lacks its dtype, shape or data_offsets"));
  CHECK_THAT(error_reading(file_with_header(R"({"__metadata__": {"a": 1}})", 0)),
             Catch::StartsWith(where + "__metadata__ entry 'a' is not a string"));
  std::vector<unsigned char> huge(8, 0xff);
  CHECK_THAT(error_reading(huge),
             Catch::StartsWith(where + "its header length") && Catch::Contains("is beyond any real header"));
  // Shapes whose byte counts overflow 64 bits, or do not fit in an int64 at all.
  CHECK_THAT(error_reading(file_with_header(
                 R"({"x": {"dtype": "F64", "shape": [2305843009213693952], "data_offsets": [0, 0]}})", 0)),
             Catch::StartsWith(where + "tensor 'x' has 0 bytes, which does not match its shape and dtype"));
  CHECK_THAT(error_reading(file_with_header(
                 R"({"x": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})", 0)),
             Catch::StartsWith(where + "tensor 'x' has 0 bytes, which does not match its shape and dtype"));
  CHECK_THAT(error_reading(file_with_header(
                 R"({"x": {"dtype": "F32", "shape": [18446744073709551615], "data_offsets": [0, 0]}})", 0)),
             Catch::StartsWith(where + "tensor 'x': its shape holds something other than sizes"));
  fs::remove(file.path());
  CHECK_THAT(message_of([&] { optgen::read_safetensors(file.path()); }), Catch::Contains("cannot open the file"));
}

TEST_CASE("writers of one checkpoint path never mix their files, and a failed save leaves nothing", "[checkpoint]") {
  // Every writer used <path>.tmp: two saving at once truncated each other's, and one's rename failed.
  ScratchFile file("shared.safetensors");
  optgen::Checkpoint small = sample(), large = sample();
  large.metadata["padding"] = std::string(1 << 20, 'x');
  const auto small_bytes = [&] {
    optgen::write_safetensors(file.path(), small);
    return bytes_of(file.path());
  }();
  const auto large_bytes = [&] {
    optgen::write_safetensors(file.path(), large);
    return bytes_of(file.path());
  }();
  std::vector<pid_t> writers;
  for (int w = 0; w < 4; ++w) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {  // a process of its own, as every rank of a job is
      int status = 0;
      try {
        for (int i = 0; i < 20; ++i) optgen::write_safetensors(file.path(), w % 2 ? large : small);
      } catch (...) {
        status = 1;
      }
      _exit(status);
    }
    writers.push_back(pid);
  }
  for (int i = 0; i < 40; ++i) {
    const auto now = bytes_of(file.path());
    CHECK((now == small_bytes || now == large_bytes));
  }
  for (pid_t pid : writers) {
    int status = -1;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }
  const auto last = bytes_of(file.path());
  CHECK((last == small_bytes || last == large_bytes));
  for (const auto& entry : fs::directory_iterator(fs::path(file.path()).parent_path()))
    CHECK(entry.path().filename() == "shared.safetensors");  // no temporary left behind

  // A save that cannot write leaves no temporary and the old file as it was.
  const std::string missing = fs::path(file.path()).parent_path().string() + "/no/such/dir/x.safetensors";
  CHECK_THAT(message_of([&] { optgen::write_safetensors(missing, small); }), Catch::Contains("cannot create"));
  fs::create_directory(fs::path(file.path()).parent_path() / "target");
  CHECK_THAT(
      message_of([&] { optgen::write_safetensors((fs::path(file.path()).parent_path() / "target").string(), small); }),
      Catch::Contains("cannot rename"));
  for (const auto& entry : fs::directory_iterator(fs::path(file.path()).parent_path()))
    CHECK((entry.path().filename() == "shared.safetensors" || entry.path().filename() == "target"));
}

TEST_CASE("a checkpoint is read only from a regular file", "[checkpoint]") {
  // A directory gave basic_filebuf's message; a FIFO waited for a writer.
  ScratchFile file("fifo.safetensors");
  CHECK_THAT(message_of([&] { optgen::read_safetensors(fs::path(file.path()).parent_path().string()); }),
             Catch::Contains("this is a directory, not a regular file"));
  REQUIRE(mkfifo(file.path().c_str(), 0600) == 0);
  CHECK_THAT(message_of([&] { optgen::read_safetensors(file.path()); }),
             Catch::Contains("this is a FIFO, not a regular file"));
}

TEST_CASE("an optimizer's checkpoint names its spec, and another spec's optimizer refuses it", "[checkpoint]") {
  // With no param group, saving and restoring touch no device memory: this runs without a GPU.
  ScratchFile file("adam.safetensors");
  const auto& adam_info = launcher("adam");
  optgen::FusedOptimizer adam(adam_info, optgen::default_hyperparameters(adam_info));
  adam.save(file.path());
  const optgen::Checkpoint c = optgen::read_safetensors(file.path());
  CHECK(c.metadata.at("format") == "optgen.optimizer");
  CHECK(c.metadata.at("format_version") == "2");
  CHECK(c.metadata.at("state_dtypes") == "f32,f32,f32");
  CHECK(c.metadata.at("param_write") == "nearest");
  CHECK(c.metadata.at("optimizer") == "Adam");
  CHECK(c.metadata.at("spec") == "adam");
  CHECK(c.metadata.at("hyperparameters") ==
        "lr,beta1,beta2,eps,weight_decay,amsgrad,maximize,max_grad_norm,clip_grad_norm");
  CHECK(c.metadata.at("states") == "exp_avg,exp_avg_sq,max_exp_avg_sq");
  CHECK(c.metadata.at("optgen") == "optgen " OPTGEN_VERSION);
  CHECK_NOTHROW(optgen::FusedOptimizer(adam_info, optgen::default_hyperparameters(adam_info)).load(file.path()));

  const auto& adamw_info = launcher("adamw");
  optgen::FusedOptimizer adamw(adamw_info, optgen::default_hyperparameters(adamw_info));
  CHECK_THAT(
      message_of([&] { adamw.load(file.path()); }),
      Catch::StartsWith("AdamW::restore failed: the checkpoint is of Adam (spec adam), not of AdamW (spec adamw)"));

  optgen::Checkpoint renamed = c;
  renamed.metadata["hyperparameters"] = "lr,beta1,beta2,eps,weight_decay,amsgrad";
  CHECK_THAT(
      message_of([&] { optgen::check_checkpoint_spec(renamed, adam_info); }),
      Catch::Contains(
          "the checkpoint is of another spec: its hyperparameters are 'lr,beta1,beta2,eps,weight_decay,amsgrad', "
          "this optimizer's 'lr,beta1,beta2,eps,weight_decay,amsgrad,maximize,max_grad_norm,clip_grad_norm'"));
  optgen::Checkpoint newer = c;
  newer.metadata["format_version"] = "3";
  CHECK_THAT(message_of([&] { optgen::check_checkpoint_spec(newer, adam_info); }),
             Catch::Contains("the checkpoint has format version 3; this optgen reads version 2"));
  optgen::Checkpoint foreign;
  foreign.metadata["format"] = "pt";
  CHECK_THAT(message_of([&] { optgen::check_checkpoint_spec(foreign, adam_info); }),
             Catch::Contains("the checkpoint's format is 'pt', not 'optgen.optimizer'"));
  CHECK_THAT(message_of([&] { optgen::check_checkpoint_spec(optgen::Checkpoint{}, adam_info); }),
             Catch::Contains("the checkpoint's metadata has no 'format'"));
  optgen::Checkpoint extra = c;
  extra.tensors.push_back({"group.0.step", "I64", {}, std::vector<unsigned char>(8)});
  CHECK_THAT(message_of([&] { adam.restore(extra); }),
             Catch::Contains("the checkpoint does not fit this optimizer: it has a tensor 'group.0.step' this "
                             "optimizer has no place for"));
}

TEST_CASE("N steps, save, load into a fresh optimizer, M more steps: N + M uninterrupted steps, bit for bit", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  ScratchFile file("resume.safetensors");
  const std::vector<std::int64_t> sizes = {5, 4097, 30001};
  const std::vector<bool> misaligned = {false, true, false};
  // Every kernel set: each storage (state dtypes, master copies, stochastic rounding) round-trips.
  for (const auto& [name, info] : optgen::builtin_launchers()) {
    for (int k = 0; k < info->num_kernels; ++k) {
      const optgen::KernelInfo& kernel = info->kernels[k];
      const int v = kernel.variant;
      const optgen::StorageOptions storage = storage_of(*info, kernel);
      DYNAMIC_SECTION(kernel.stages[0]) {
        std::vector<double> h = hyperparameters_for(*info, v);
        for (int i = 0; i < info->num_hyperparameters; ++i)
          if (std::string(info->hyperparameters[i].name) == "t0") h[i] = 2;  // ASGD: averaging within the run
        std::mt19937 rng(31), same(31);
        DeviceGroup through(kernel.param, shapes_for(*info, sizes), misaligned, rng),
            resumed(kernel.param, shapes_for(*info, sizes), misaligned, same);
        optgen::FusedOptimizer uninterrupted(*info, h, storage);
        uninterrupted.add_param_group(through.tensors, h);
        auto first = std::make_unique<optgen::FusedOptimizer>(*info, h, storage);
        first->add_param_group(resumed.tensors, h);
        constexpr int N = 4, M = 3;
        for (int step = 1; step <= N + M; ++step) {
          std::mt19937 g1(step), g2(step);
          through.new_gradients(g1);
          resumed.new_gradients(g2);
          uninterrupted.step();
          if (step <= N) first->step();
          if (step == N) {
            first->set("lr", h[0] * 0.5);  // a schedule's change, saved with the rest
            uninterrupted.set("lr", h[0] * 0.5);
            first->save(file.path());
            first.reset();
            first = std::make_unique<optgen::FusedOptimizer>(*info, hyperparameters_for(*info, v), storage);
            first->add_param_group(resumed.tensors,
                                   hyperparameters_for(*info, v));  // fresh states, other hyperparameters
            if (k % 2 == 1) first->prepare();                       // restored in place, into prepared tables, too
            first->load(file.path());
            CHECK(first->step_count(0) == N);
            CHECK(first->get("lr", 0) == h[0] * 0.5);
          }
          if (step > N) first->step();
        }
        synchronize();
        CHECK(resumed.device_bytes() == through.device_bytes());
        CHECK(state_bytes(*first) == state_bytes(uninterrupted));
        for (std::size_t t = 0; t < sizes.size(); ++t)
          CHECK(master_bytes(*first, 0, t) == master_bytes(uninterrupted, 0, t));
        CHECK(first->step_count(0) == N + M);
        for (int s = 0; s < info->num_scalar_states; ++s)
          CHECK(first->scalar_state(info->scalar_states[s].name, 0) ==
                uninterrupted.scalar_state(info->scalar_states[s].name, 0));
      }
    }
  }
}

TEST_CASE("a checkpoint that does not fit the groups is refused before anything changes", "[gpu]") {
  OPTGEN_REQUIRE_GPU();
  ScratchFile file("groups.safetensors");
  std::mt19937 rng(3);
  DeviceGroup group(DType::F32, {100, 200}, {false, false}, rng);
  optgen::Adam adam;
  adam.add_param_group(group.tensors);
  adam.step();
  adam.save(file.path());

  DeviceGroup other(DType::F32, {100, 201}, {false, false}, rng);
  optgen::Adam different_size;
  different_size.add_param_group(other.tensors);
  different_size.set_lr(0.5);
  different_size.step();
  synchronize();
  const auto states_before = state_bytes(different_size.engine());
  CHECK_THAT(message_of([&] { different_size.load(file.path()); }),
             Catch::Contains("Adam::restore failed: the checkpoint does not fit this optimizer: tensor "
                             "'group.0.tensor.1.exp_avg' has shape [200], not [201]"));
  CHECK(different_size.step_count(0) == 1);
  CHECK(state_bytes(different_size.engine()) == states_before);
  CHECK(different_size.options(0).lr == 0.5);

  optgen::Checkpoint short_tensor = optgen::read_safetensors(file.path());
  for (auto& t : short_tensor.tensors)
    if (t.name == "group.0.hyperparameters") t.data.resize(8);
  optgen::Adam adam2;
  adam2.add_param_group(group.tensors);
  CHECK_THAT(message_of([&] { adam2.engine().restore(short_tensor); }),
             Catch::Contains("tensor 'group.0.hyperparameters' holds 8 bytes, not the 72 its shape and dtype need"));

  optgen::Adam::Options amsgrad;
  amsgrad.amsgrad = true;
  optgen::Adam other_variant(amsgrad);
  other_variant.add_param_group(group.tensors);
  CHECK_THAT(message_of([&] { other_variant.load(file.path()); }),
             Catch::Contains("param group 0 was saved as variant adam but was added here as adam_amsgrad"));

  optgen::StorageOptions bf16;
  bf16.states = DType::BF16;
  optgen::Adam bf16_states(optgen::Adam::Options(), bf16);
  bf16_states.add_param_group(group.tensors);
  CHECK_THAT(message_of([&] { bf16_states.load(file.path()); }),
             Catch::Contains("its states (exp_avg,exp_avg_sq,max_exp_avg_sq) are stored in f32,f32,f32, this "
                             "optimizer's in bf16,bf16,bf16"));

  optgen::Adam two_groups;
  two_groups.add_param_group(group.tensors);
  two_groups.add_param_group(other.tensors);
  CHECK_THAT(message_of([&] { two_groups.load(file.path()); }),
             Catch::Contains("it holds 1 param groups, this optimizer 2"));
}
