// A main() for the fuzz target without libFuzzer: runs LLVMFuzzerTestOneInput once on each file
// named, or on each file of each directory named. ctest replays the seed corpus with it, and it
// reproduces a finding with any compiler: `optgen_spec_fuzz_replay crash-<sha1>` aborts as the
// fuzzer did, printing the finding.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE_OR_DIRECTORY...\n", argv[0]);
    return 2;
  }
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    std::error_code error;
    if (fs::is_directory(argv[i], error)) {
      std::vector<fs::path> in_directory;
      for (const auto& entry : fs::directory_iterator(argv[i]))
        if (entry.is_regular_file()) in_directory.push_back(entry.path());
      std::sort(in_directory.begin(), in_directory.end());
      files.insert(files.end(), in_directory.begin(), in_directory.end());
    } else if (fs::is_regular_file(argv[i], error)) {
      files.emplace_back(argv[i]);
    } else {
      std::fprintf(stderr, "%s: no such file or directory\n", argv[i]);
      return 2;
    }
  }
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::fprintf(stderr, "running %s (%zu bytes)\n", file.c_str(), bytes.size());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("%zu inputs replayed, no finding\n", files.size());
  return 0;
}
