// `latentllm compress --format hf|onnx` (format::export_model): the export written directly from the
// compression is byte for byte the export of the f32 latent checkpoint the same run writes (every file:
// model.safetensors or the ONNX graph with its weights, config.json, the tokenizer files), for
// TinyStories-656K (Llama, block identity), opt-tiny (biases updated by the compressor) and hf of
// llava-shapes-tiny with its vision tower and projector compressed (--components); a lazy
// compression (the writers read its per-layer progress files) gives the bytes of an eager one (the
// model in memory), the ONNX weights in external data included.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>

#include <fmt/format.h>

#include "latentllm/calib.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/export.hpp"
#include "latentllm/io.hpp"
#include "latentllm/model.hpp"
#include "latentllm/tokenizer.hpp"
#include "onnx_support.hpp"

namespace latentllm::test {
namespace {

namespace fs = std::filesystem;

std::string stories() { return shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt").string(); }

// `compress` of `model` into a fresh directory (extra: --format, --dtype, ...).
fs::path compressed(const std::string& model, const std::string& extra) {
  const fs::path out = make_temp_dir("compress-format") / "out";
  run_cli_ok("compress --model " + shq(shared_path("models/" + model)) + " --method latentllm --ratio 0.3 --calib text " +
             "--calib-data " + shq(stories()) + " --nsamples 4 --seqlen 64 -q --out " + shq(out) + " " + extra);
  return out;
}

fs::path exported(const fs::path& latent, const std::string& extra) {
  const fs::path out = make_temp_dir("compress-format-export") / "out";
  run_cli_ok("export --model " + shq(latent) + " --out " + shq(out) + " -q " + extra);
  return out;
}

// Every file of `a` and `b` (relative paths), which must be the same set, has the same bytes; the model
// cards (README.md) record the route (a direct export, or an export of a latent checkpoint) and agree on
// the compression and its source (`cards`: the CLI's outputs; the library writes one only when given a
// provenance).
void expect_same_files(const fs::path& a, const fs::path& b, bool cards = true) {
  std::set<fs::path> fa, fb;
  for (const auto& e : fs::recursive_directory_iterator(a))
    if (e.is_regular_file()) fa.insert(fs::relative(e.path(), a));
  for (const auto& e : fs::recursive_directory_iterator(b))
    if (e.is_regular_file()) fb.insert(fs::relative(e.path(), b));
  EXPECT_EQ(fa, fb);
  EXPECT_GE(fa.size(), 3u);
  for (const auto& f : fa) {
    if (fb.count(f) && f != "README.md") {
      EXPECT_EQ(read_bytes(a / f), read_bytes(b / f)) << f;
    }
  }
  EXPECT_EQ(fa.count("README.md"), cards ? 1u : 0u);
  if (!cards) return;
  const std::string ca = read_bytes(a / "README.md"), cb = read_bytes(b / "README.md");
  for (const std::string& line : {std::string("compressed by latentllm ("), std::string("| source sha256 | `")}) {
    const auto at = ca.find(line);
    ASSERT_NE(at, std::string::npos) << ca;
    const std::string whole = ca.substr(at, ca.find('\n', at) - at);
    EXPECT_NE(cb.find(whole), std::string::npos) << whole << "\n" << cb;
  }
}

TEST(CompressFormat, HfIsTheExportOfTheF32Latent) {
  for (const char* model : {"TinyStories-656K", "opt-tiny"}) {
    SCOPED_TRACE(model);
    const fs::path latent = compressed(model, "--dtype f32");
    for (const char* dtype : {"f32", "bf16"}) {
      const std::string d = std::string("--dtype ") + dtype;
      expect_same_files(compressed(model, "--format hf " + d), exported(latent, "--format hf " + d));
    }
  }
}

// Without --dtype, hf is f16 like the latent checkpoint, but multiplied from the float32 factors: it is
// the f16 export of the f32 latent (an f16 latent's factors are rounded to f16 before the product).
TEST(CompressFormat, HfDefaultIsF16FromTheFloatFactors) {
  const fs::path direct = compressed("TinyStories-656K", "--format hf");
  EXPECT_EQ(io::SafetensorsFile(direct / "model.safetensors").tensors().front().dtype, DType::F16);
  expect_same_files(direct, exported(compressed("TinyStories-656K", "--dtype f32"), "--format hf --dtype f16"));
}

// A LLaVA checkpoint with its vision tower and projector compressed too (--components): hf multiplies
// the towers' factors back as it does the language model's.
TEST(CompressFormat, HfOfALlavaWithCompressedTowersIsTheExportOfTheF32Latent) {
  const std::string args = "--components lm,vision,projector --calib scienceqa --calib-data " +
                           shq(shared_path("data/scienceqa-shapes")) + " --nsamples 8 --dtype f32 ";
  auto run = [&](const std::string& extra) {
    const fs::path out = make_temp_dir("compress-format-llava") / "out";
    run_cli_ok("compress --model " + shq(shared_path("models/llava-shapes-tiny")) + " --ratio 0.3 -q --out " + shq(out) +
               " " + args + extra);
    return out;
  };
  const fs::path latent = run("");
  ASSERT_TRUE(read_bytes(latent / "config.json").find("vision_tower.vision_model.encoder.layers.0.self_attn.q_proj") !=
              std::string::npos);
  const fs::path direct = run("--format hf");
  expect_same_files(direct, exported(latent, "--format hf"));
  EXPECT_EQ(io::SafetensorsFile(direct / "model.safetensors").find("multi_modal_projector.linear_2.A.weight"), nullptr);
}

TEST(CompressFormat, OnnxIsTheExportOfTheF32Latent) {
  LATENTLLM_REQUIRE_ONNX_MODULE();
  for (const char* model : {"TinyStories-656K", "opt-tiny"}) {
    SCOPED_TRACE(model);
    const fs::path latent = compressed(model, "--dtype f32");
    expect_same_files(compressed(model, "--format onnx"), exported(latent, "--format onnx"));
    expect_same_files(compressed(model, "--format onnx --dtype f16 --kv-cache dense"),
                      exported(latent, "--format onnx --dtype f16 --kv-cache dense"));
  }
}

// The library: the same compression of a model in memory (eager) and of a lazy one (its layers
// released once compressed, written from the progress files), exported by format::export_model.
fs::path export_run(const std::string& model, bool lazy, const format::ExportOptions& eo, const fs::path& out) {
  const fs::path dir = shared_path("models/" + model);
  auto m = model::Model::load(dir, {.lazy = lazy});
  calib::CalibOptions co;
  co.source = "text";
  co.data = stories();
  co.nsamples = 4;
  co.seqlen = 64;
  const auto ids = calib::sample_calibration(*io::load_tokenizer(dir), co);
  compress::CompressOptions o;
  o.method = compress::Method::LatentLlm;
  o.ratio = 0.3;
  if (lazy) o.state_dir = out.string() + ".resume";
  compress::compress_model(*m, ids, co.seqlen, o);
  for (int i = 0; lazy && i < m->num_layers(); ++i) EXPECT_FALSE(m->layer_loaded(i)) << "layer " << i;
  format::export_model(*m, o.state_dir, out, eo);
  return out;
}

TEST(CompressFormat, LazyRunExportsTheEagerBytes) {
  const fs::path tmp = make_temp_dir("compress-format-lazy");
  std::vector<std::string> formats = {"hf"};
  if (onnx_module_built()) formats.push_back("onnx");
  int run = 0;
  for (const char* model : {"stories260K/hf", "opt-tiny"}) {
    for (const auto& f : formats) {
      SCOPED_TRACE(fmt::format("{} {}", model, f));
      format::ExportOptions eo;
      eo.format = f;
      eo.onnx_external_data_above = 0;  // onnx: the weights in onnx/model.onnx_data
      const fs::path base = tmp / std::to_string(run++);
      const fs::path eager = export_run(model, false, eo, base / "eager");
      const fs::path lazy = export_run(model, true, eo, base / "lazy");
      if (f == "onnx") {
        EXPECT_TRUE(fs::exists(eager / "onnx" / "model.onnx_data"));
      }
      expect_same_files(lazy, eager, /*cards=*/false);
    }
  }
}

}  // namespace
}  // namespace latentllm::test
