// Every built-in spec's kernels (each variant's Update stage for every storage type optgen offers,
// and its group kernel) compile with NVRTC for sm_80 and sm_90 with no register spills and no
// stack frame (ptxas's own report). Needs no GPU.
#include <catch2/catch.hpp>

#include <filesystem>

#include "emit_cuda.h"
#include "emit_images.h"
#include "optgen/nvrtc.h"
#include "pipeline.h"

namespace {

std::vector<std::string> builtin_specs() {
  std::vector<std::string> specs;
  for (const auto& entry : std::filesystem::directory_iterator(OPTGEN_SOURCE_DIR "/specs"))
    if (entry.path().extension() == ".yaml") specs.push_back(entry.path().string());
  std::sort(specs.begin(), specs.end());
  return specs;
}

}  // namespace

TEST_CASE("every built-in spec's kernels compile with NVRTC for sm_80 and sm_90 without spills", "[nvrtc]") {
  std::string why;
  REQUIRE(optgen::nvrtc::available(&why));
  const std::vector<optgen::Storage> every_storage = {{optgen::StorageType::F32, optgen::StorageType::F32},
                                                      {optgen::StorageType::BF16, optgen::StorageType::F32},
                                                      {optgen::StorageType::F16, optgen::StorageType::F32},
                                                      {optgen::StorageType::BF16, optgen::StorageType::BF16},
                                                      {optgen::StorageType::F32, optgen::StorageType::BF16}};
  int kernels = 0;
  for (const auto& path : builtin_specs()) {
    optgen::Spec spec = optgen::load_spec(path);
    auto variants = optgen::compile_spec(spec);
    const std::string source = optgen::emit_cuda(spec, variants, every_storage, optgen::KernelTuning());
    for (int arch : {80, 90}) {
      auto options = optgen::kernel_compile_options();
      options.push_back("-Xptxas=-v");
      auto compiled = optgen::nvrtc::compile(source, spec.name + "_kernels.cu", options, arch);
      auto report = optgen::nvrtc::parse_ptxas_report(compiled.log);
      INFO(spec.name << " for sm_" << arch << ":\n" << compiled.log);
      // One kernel per stage of each variant and storage type, and one group kernel per variant.
      int expected = 0;
      for (const auto& v : variants) expected += static_cast<int>(v.stages.size() * every_storage.size() + 1);
      CHECK(report.kernels == expected);
      CHECK(report.spill_store_bytes == 0);
      CHECK(report.spill_load_bytes == 0);
      CHECK(report.max_stack_frame_bytes == 0);
      kernels += report.kernels;
    }
  }
  CHECK(kernels >= 2 * 18 * ((5 + 1) + (2 * 5 + 1)));  // the 18 variants of the 12 torch.optim specs, clipped or not
}
