// What the ONNX export tests share (test_export_onnx.cpp, test_onnx_runtime.cpp): the latent fixtures
// compressed once per process, their exports, and whether the ONNX encoder module and ONNX Runtime
// (tests/ort: node + onnxruntime-node, installed by scripts/setup) are here.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include "format/onnx_module.hpp"
#include "test_support.hpp"

namespace latentllm::test {

inline std::string shq(const std::filesystem::path& p) { return "'" + p.string() + "'"; }

inline std::string run_cli_ok(const std::string& args) {
  std::string log;
  EXPECT_EQ(run_command(cli_path().string() + " " + args + " 2>&1", log), 0) << args << "\n" << log;
  return log;
}

inline std::string tinystories_text() {
  return shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt").string();
}

// `model` (a ../shared fixture) compressed by latentllm at ratio 0.3 with a small calibration, once.
inline std::filesystem::path latent_fixture(const std::string& model, const std::string& dtype = "f32") {
  static std::map<std::string, std::filesystem::path> made;
  const std::string key = model + "|" + dtype;
  if (const auto it = made.find(key); it != made.end()) return it->second;
  const std::filesystem::path out = make_temp_dir("onnx-latent") / "latent";
  run_cli_ok("compress --model " + shq(shared_path("models/" + model)) + " --method latentllm --ratio 0.3 " +
             "--calib text --calib-data " + shq(tinystories_text()) + " --nsamples 4 --seqlen 64 --dtype " + dtype +
             " -q --out " + shq(out));
  return made[key] = out;
}

// Compress options of the 4-bit fixtures (quantized_fixture).
inline const std::string kQuantLatent = "--method latentllm --ratio 0.3 --bits 4 --group 32";
inline const std::string kQuantLatentMinMax = kQuantLatent + " --quantizer rtn";
inline const std::string kQuantLatentMinMax8 = "--method latentllm --ratio 0.3 --bits 8 --group 32 --quantizer rtn";
inline const std::string kQuantOptTiny = "--method latentllm --ratio 0.3 --bits 4 --group 16";
inline const std::string kQuantGptq = "--method gptq --bits 4 --group 32";
inline const std::string kLatent16 = "--method latentllm --ratio 0.3";

// `model` (a ../shared/models path) compressed with `method` (compress options, e.g. kQuantLatent) on the
// fixtures' calibration into an f16 checkpoint, once per combination.
inline std::filesystem::path quantized_fixture(const std::string& model, const std::string& method) {
  static std::map<std::string, std::filesystem::path> made;
  const std::string key = model + "|" + method;
  if (const auto it = made.find(key); it != made.end()) return it->second;
  const std::filesystem::path out = make_temp_dir("onnx-quant") / "latent";
  run_cli_ok("compress --model " + shq(shared_path("models/" + model)) + " " + method + " --calib text --calib-data " +
             shq(tinystories_text()) + " --nsamples 4 --seqlen 64 --dtype f16 -q --out " + shq(out));
  return made[key] = out;
}

// The ONNX export of `latent_dir` (extra: more options), once per combination.
inline std::filesystem::path onnx_export(const std::filesystem::path& latent_dir, const std::string& extra = "") {
  static std::map<std::string, std::filesystem::path> made;
  const std::string key = latent_dir.string() + "|" + extra;
  if (const auto it = made.find(key); it != made.end()) return it->second;
  const std::filesystem::path out = make_temp_dir("onnx-export") / "onnx";
  run_cli_ok("export --model " + shq(latent_dir) + " --out " + shq(out) + " --format onnx -q " + extra);
  return made[key] = out;
}

// The encoder module is built when libonnx-dev and libprotobuf-dev were installed at configure time.
inline bool onnx_module_built() { return std::filesystem::exists(format::onnx_module_path()); }

#define LATENTLLM_REQUIRE_ONNX_MODULE()                                                                      \
  if (!::latentllm::test::onnx_module_built())                                                               \
  GTEST_SKIP() << "no ONNX encoder module (" << ::latentllm::format::onnx_module_path()                      \
               << "): this build found no libonnx-dev / libprotobuf-dev; run scripts/setup and rebuild"

}  // namespace latentllm::test
