#include "test_support.hpp"

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <stdexcept>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "core/sha256.hpp"

namespace latentllm::test {

std::filesystem::path shared_path(const std::string& rel) {
  std::filesystem::path p = std::filesystem::path(LATENTLLM_SHARED_DIR) / rel;
  if (!std::filesystem::exists(p)) throw std::runtime_error("missing ../shared file: " + p.string());
  return p;
}

std::filesystem::path test_data_path(const std::string& rel) {
  return std::filesystem::path(LATENTLLM_TEST_DATA_DIR) / rel;
}

std::filesystem::path cli_path() { return std::filesystem::path(LATENTLLM_CLI_PATH); }

namespace {
std::vector<std::filesystem::path>& temp_dirs() {
  static std::vector<std::filesystem::path> dirs;
  return dirs;
}
void remove_temp_dirs() {
  for (auto& d : temp_dirs()) {
    std::error_code ec;
    std::filesystem::remove_all(d, ec);
  }
}
}  // namespace

std::filesystem::path make_temp_dir(const std::string& tag) {
  // The list is made before the handler is registered, so that it is destroyed after the handler ran
  // (exit runs handlers and static destructors in the reverse order of their registration).
  static std::once_flag once;
  std::call_once(once, [] {
    temp_dirs();
    std::atexit(remove_temp_dirs);
  });
  std::string tmpl = (std::filesystem::temp_directory_path() / ("latentllm-" + tag + "-XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + tmpl);
  temp_dirs().push_back(tmpl);
  return tmpl;
}

int run_command(const std::string& cmd, std::string& output) {
  output.clear();
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) throw std::runtime_error("popen failed: " + cmd);
  std::array<char, 4096> buf{};
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) output.append(buf.data(), n);
  const int status = ::pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string read_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string sha256_hex(const void* data, std::size_t n) {
  core::Sha256 h;  // the library's (provenance hashes)
  h.update(std::string_view(static_cast<const char*>(data), n));
  return h.hex();
}

}  // namespace latentllm::test
