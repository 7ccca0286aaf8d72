#include "support.hpp"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <system_error>

namespace latentllm::fuzz {

namespace fs = std::filesystem;

std::vector<std::string_view> split_input(const std::uint8_t* data, std::size_t size, std::size_t n) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < n) {
    const std::size_t at = rest.find(kSplit);
    if (at == std::string_view::npos) break;
    parts.push_back(rest.substr(0, at));
    rest.remove_prefix(at + kSplit.size());
  }
  parts.push_back(rest);
  parts.resize(n);
  return parts;
}

namespace {

struct ScratchDir {
  fs::path path;
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::error_code ec;
    const fs::path base = tmp != nullptr && *tmp != '\0' ? fs::path(tmp)
                          : fs::is_directory("/dev/shm", ec)  ? fs::path("/dev/shm")
                                                              : fs::temp_directory_path();
    path = base / ("latentllm-fuzz-" + std::to_string(::getpid()));
    fs::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

const fs::path& scratch_dir() {
  static const ScratchDir dir;
  return dir.path;
}

}  // namespace

fs::path write_scratch(const std::string& name, std::string_view content) {
  const fs::path p = scratch_dir() / name;
  fs::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(content.data(), static_cast<std::streamsize>(content.size()));
  if (!f) std::abort();  // the harness itself failed: not a finding about the library
  return p;
}

bool verbose() {
  static const bool on = std::getenv("LATENTLLM_FUZZ_VERBOSE") != nullptr;
  return on;
}

void remove_scratch(const std::string& name) {
  std::error_code ec;
  fs::remove(scratch_dir() / name, ec);
}

}  // namespace latentllm::fuzz
