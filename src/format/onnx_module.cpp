#include "format/onnx_module.hpp"

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>

#include <fmt/format.h>

#include "latentllm/error.hpp"

namespace latentllm::format {
namespace {

namespace fs = std::filesystem;

constexpr const char* kModuleName = "liblatentllm_onnx.so";
constexpr std::size_t kErrorBytes = 4096;

// The module's C interface (src/format/onnx_encoder/encoder.cpp): 0 on success, else a message in err.
using WriteFn = int (*)(const char* ir_json, const void* const* blobs, const std::uint64_t* sizes, std::uint64_t n,
                        const char* path, char* err, std::uint64_t err_len);
using CheckFn = int (*)(const char* path, int full, char* err, std::uint64_t err_len);
using DescribeFn = int (*)(const char* path, char* out, std::uint64_t out_len, std::uint64_t* needed);

struct Module {
  WriteFn write = nullptr;
  CheckFn check = nullptr;
  DescribeFn describe = nullptr;
};

const Module& module() {
  static Module m;
  static std::string failure;
  static std::once_flag once;
  std::call_once(once, [] {
    const fs::path path = onnx_module_path();
    void* h = dlmopen(LM_ID_NEWLM, path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* e = dlerror();
      failure = e != nullptr ? e : path.string();
      return;
    }
    m.write = reinterpret_cast<WriteFn>(dlsym(h, "latentllm_onnx_write"));
    m.check = reinterpret_cast<CheckFn>(dlsym(h, "latentllm_onnx_check"));
    m.describe = reinterpret_cast<DescribeFn>(dlsym(h, "latentllm_onnx_describe"));
    if (m.write == nullptr || m.check == nullptr || m.describe == nullptr) failure = path.string() + ": not latentllm's ONNX encoder";
  });
  if (!failure.empty()) {
    throw ConfigError(fmt::format("--format onnx: cannot load the ONNX encoder ({}) (expected {}, which latentllm "
                                  "builds when libonnx-dev and libprotobuf-dev are installed at configure time, as "
                                  "scripts/setup does)", failure, kModuleName));
  }
  return m;
}

}  // namespace

fs::path onnx_module_path() {
  if (const char* env = std::getenv("LATENTLLM_ONNX_MODULE"); env != nullptr && *env != '\0') return env;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && fs::exists(exe.parent_path() / kModuleName, ec)) return exe.parent_path() / kModuleName;
#ifdef LATENTLLM_ONNX_MODULE_BUILD_PATH
  if (fs::exists(LATENTLLM_ONNX_MODULE_BUILD_PATH, ec)) return LATENTLLM_ONNX_MODULE_BUILD_PATH;
  return LATENTLLM_ONNX_MODULE_INSTALL_PATH;
#else
  return kModuleName;
#endif
}

void load_onnx_module() { (void)module(); }

void write_onnx_model(const nlohmann::json& ir, const std::vector<std::vector<char>>& blobs, const fs::path& file) {
  const Module& m = module();
  std::vector<const void*> ptrs;
  std::vector<std::uint64_t> sizes;
  for (const auto& b : blobs) {
    ptrs.push_back(b.data());
    sizes.push_back(b.size());
  }
  std::string err(kErrorBytes, '\0');
  if (m.write(ir.dump().c_str(), ptrs.data(), sizes.data(), ptrs.size(), file.c_str(), err.data(), err.size()) != 0) {
    throw IoError(fmt::format("{}: {}", file.string(), err.c_str()));
  }
}

void check_onnx_model(const fs::path& file, bool full) {
  std::string err(kErrorBytes, '\0');
  if (module().check(file.c_str(), full ? 1 : 0, err.data(), err.size()) != 0) {
    throw FormatError(fmt::format("{}: {}", file.string(), err.c_str()));
  }
}

nlohmann::json describe_onnx_model(const fs::path& file) {
  std::string out(1 << 16, '\0');
  std::uint64_t needed = 0;
  int rc = module().describe(file.c_str(), out.data(), out.size(), &needed);
  if (rc == 2) {
    out.assign(needed, '\0');
    rc = module().describe(file.c_str(), out.data(), out.size(), &needed);
  }
  if (rc != 0) throw FormatError(fmt::format("{}: {}", file.string(), out.c_str()));
  return nlohmann::json::parse(out.c_str());
}

}  // namespace latentllm::format
