// `latentllm export --format hf` (format::export_checkpoint): a latent checkpoint becomes the dense Hugging
// Face model of its source architecture. Checked on TinyStories-656K (Llama, no biases) compressed with
// block identity (latentllm) and with J = I (asvd-rootcov), opt-tiny (biases everywhere, updated by the
// compressor) and llava-shapes-tiny (the language model factored under its layout prefix): the source's
// tensor names, order and shapes; weights equal to B·A; perplexity and ScienceQA accuracy equal to the
// latent checkpoint's; config.json without `latent`; and the error rows of docs/ERRORS.md "Export".
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "errors_doc.hpp"
#include "latentllm/checkpoint.hpp"
#include "latentllm/export.hpp"
#include "latentllm/io.hpp"
#include "latentllm/model.hpp"
#include "model/weight_table.hpp"
#include "quant/pack.hpp"
#include "test_support.hpp"

namespace latentllm::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string q(const fs::path& p) { return "'" + p.string() + "'"; }
json read_json(const fs::path& p) { return json::parse(std::ifstream(p)); }
std::string stories() { return shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt").string(); }

std::string run_ok(const std::string& args) {
  std::string log;
  EXPECT_EQ(run_command(cli_path().string() + " " + args + " 2>&1", log), 0) << args << "\n" << log;
  return log;
}

// `model` compressed by `method` (stored as `dtype`), once per combination.
fs::path latent(const std::string& model, const std::string& method, const std::string& dtype = "f32") {
  static std::map<std::string, fs::path> made;
  const std::string key = model + "|" + method + "|" + dtype;
  if (const auto it = made.find(key); it != made.end()) return it->second;
  const fs::path out = make_temp_dir("export-latent") / "latent";
  run_ok("compress --model " + q(shared_path("models/" + model)) + " --method " + method + " --ratio 0.3 --calib text " +
         "--calib-data " + q(stories()) + " --nsamples 4 --seqlen 64 --dtype " + dtype + " -q --out " + q(out));
  return made[key] = out;
}

// The export of `latent_dir` (extra: more options), once per combination.
fs::path exported(const fs::path& latent_dir, const std::string& extra = "") {
  static std::map<std::string, fs::path> made;
  const std::string key = latent_dir.string() + "|" + extra;
  if (const auto it = made.find(key); it != made.end()) return it->second;
  const fs::path out = make_temp_dir("export-hf") / "hf";
  run_ok("export --model " + q(latent_dir) + " --out " + q(out) + " --format hf -q " + extra);
  return made[key] = out;
}

// (name, shape, dtype) of every tensor in file order.
std::vector<std::tuple<std::string, std::vector<std::int64_t>, DType>> layout(const fs::path& dir) {
  const io::SafetensorsFile f(dir / "model.safetensors");
  std::vector<std::tuple<std::string, std::vector<std::int64_t>, DType>> out;
  for (const auto& t : f.tensors()) out.emplace_back(t.name, t.shape, t.dtype);
  return out;
}

double mean_nll(const fs::path& dir) {
  const std::string log = run_ok("ppl --model " + q(dir) + " --dataset tinystories-valid --data " + q(stories()) +
                                 " --seqlen 128 --max-windows 8 --json -q");
  return json::parse(log.substr(log.find('{'))).at("mean_nll").get<double>();
}

// Every tensor of the export in the source's order and shape, in `dtype`.
void expect_source_layout(const fs::path& source, const fs::path& out, DType dtype) {
  const auto src = layout(source), dst = layout(out);
  ASSERT_EQ(src.size(), dst.size());
  for (std::size_t i = 0; i < src.size(); ++i) {
    EXPECT_EQ(std::get<0>(src[i]), std::get<0>(dst[i])) << "tensor " << i;
    EXPECT_EQ(std::get<1>(src[i]), std::get<1>(dst[i])) << std::get<0>(src[i]);
    EXPECT_EQ(std::get<2>(dst[i]), dtype) << std::get<0>(src[i]);
  }
}

// The export's dense weights are the latent modules' B·A (Linear::dense_weight, float) up to float
// rounding, and its biases the latent's updated ones exactly; returns the number of modules compared.
int expect_weights_multiplied_back(const fs::path& latent_dir, const fs::path& out) {
  const auto lat = model::Model::load(latent_dir);
  const auto hf = model::Model::load(out);
  int factored = 0;
  for (int i = 0; i < lat->num_layers(); ++i) {
    for (std::size_t k = 0; k < lat->layer(i).linears.size(); ++k) {
      const model::Linear& a = lat->layer(i).linears[k];
      const model::Linear& b = hf->layer(i).linears[k];
      EXPECT_FALSE(b.factored()) << b.name;
      const MatrixF w = a.dense_weight();  // [out, in]
      const float scale = w.cwiseAbs().maxCoeff();
      EXPECT_LE((w - b.weight.f32()).cwiseAbs().maxCoeff(), 1e-5f * scale) << a.name;
      EXPECT_EQ(a.bias.size(), b.bias.size()) << a.name;
      if (a.bias.size() > 0) {
        EXPECT_EQ(a.bias, b.bias) << a.name;
      }
      factored += a.factored();
    }
  }
  return factored;
}

TEST(ExportHf, BlockIdentityLlamaKeepsTheSourceLayoutAndWeights) {
  const fs::path lat = latent("TinyStories-656K", "latentllm");
  const fs::path out = exported(lat);
  expect_source_layout(shared_path("models/TinyStories-656K"), out, DType::F32);
  ASSERT_TRUE(read_json(lat / "config.json").at("latent").at("junction") == "block-identity");
  EXPECT_EQ(expect_weights_multiplied_back(lat, out), 14);
}

TEST(ExportHf, IdentityJunctionLlamaKeepsTheSourceLayoutAndWeights) {
  const fs::path lat = latent("TinyStories-656K", "asvd-rootcov");
  const fs::path out = exported(lat);
  expect_source_layout(shared_path("models/TinyStories-656K"), out, DType::F32);
  EXPECT_EQ(expect_weights_multiplied_back(lat, out), 14);
}

TEST(ExportHf, OptKeepsItsUpdatedBiasesAndItsOrder) {
  // opt-tiny stores F16; the latent and the export are f32 here, the order is bias before weight.
  const fs::path lat = latent("opt-tiny", "latentllm");
  const fs::path out = exported(lat);
  expect_source_layout(shared_path("models/opt-tiny"), out, DType::F32);
  EXPECT_GT(expect_weights_multiplied_back(lat, out), 0);
}

// f32 latent -> f32 export: the same model up to the float rounding of B·A; agreed to 1e-5 relative.
TEST(ExportHf, PerplexityEqualsTheLatentCheckpoints) {
  for (const char* method : {"latentllm", "asvd-rootcov"}) {
    const fs::path lat = latent("TinyStories-656K", method);
    const double a = mean_nll(lat), b = mean_nll(exported(lat));
    EXPECT_NEAR(b, a, 1e-5 * a) << method;
    RecordProperty(std::string("rel_diff_f32_") + method, fmt::format("{:.3g}", std::abs(b - a) / a));
  }
}

// f16 latent -> f16 export (the default: the latent's storage type): W = B·A rounded once more to f16,
// a relative error of at most 2^-11 per weight, unbiased, so the NLL agrees to 1e-4 relative.
TEST(ExportHf, F16ExportOfAnF16Latent) {
  const fs::path lat = latent("TinyStories-656K", "latentllm", "f16");
  const fs::path out = exported(lat);
  expect_source_layout(shared_path("models/TinyStories-656K"), out, DType::F16);
  EXPECT_EQ(read_json(out / "config.json").at("torch_dtype"), "float16");
  const double a = mean_nll(lat), b = mean_nll(out);
  EXPECT_NEAR(b, a, 1e-4 * a);
  RecordProperty("rel_diff_f16", fmt::format("{:.3g}", std::abs(b - a) / a));
  // --dtype overrides: an f32 export of the f16 latent multiplies the f16 factors without rounding W.
  const fs::path wide = exported(lat, "--dtype f32");
  expect_source_layout(shared_path("models/TinyStories-656K"), wide, DType::F32);
  EXPECT_EQ(read_json(wide / "config.json").at("torch_dtype"), "float32");
  EXPECT_NEAR(mean_nll(wide), a, 1e-5 * a);
}

TEST(ExportHf, ConfigIsTheSourcesWithoutLatentAndFilesAreCopied) {
  const fs::path lat = latent("TinyStories-656K", "latentllm");
  const fs::path out = exported(lat);
  // The source's config.json: its architectures and model_type back, no latent section.
  json want = read_json(shared_path("models/TinyStories-656K") / "config.json");
  want["torch_dtype"] = "float32";
  if (want.contains("dtype")) want["dtype"] = "float32";
  EXPECT_EQ(read_json(out / "config.json"), want);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"}) {
    ASSERT_TRUE(fs::exists(out / f)) << f;
    EXPECT_EQ(read_bytes(out / f), read_bytes(shared_path("models/TinyStories-656K") / f)) << f;
  }
  // The export is marked as ours, so --force may replace it (and nothing else of the user's).
  EXPECT_EQ(io::SafetensorsFile(out / "model.safetensors").metadata().at("latentllm_export"), "hf");
  // One line says what was exported (stdout and stderr together).
  const std::string log = run_ok("export --model " + q(lat) + " --out " + q(out) + " --force");
  std::size_t lines = 0;
  for (auto i = log.find("exported"); i != std::string::npos; i = log.find("exported", i + 1)) ++lines;
  EXPECT_EQ(lines, 1u) << log;
  EXPECT_NE(log.find("exported " + lat.string() + " as hf to " + out.string() + ": "), std::string::npos) << log;
  EXPECT_EQ(layout(out), layout(exported(lat)));
}

// A latent checkpoint declares latentllm's architecture, so that transformers refuses it (naming the
// conversion) instead of initialising the factored modules at random; latentllm reads it, and the
// older checkpoints that kept the source's keys, as the source model.
TEST(LatentIdentity, StockLoadersRefuseItLatentllmReadsNewAndOld) {
  const fs::path lat = latent("TinyStories-656K", "latentllm");
  const json cfg = read_json(lat / "config.json");
  const json src = read_json(shared_path("models/TinyStories-656K") / "config.json");
  EXPECT_EQ(cfg.at("architectures"), json::array({"LatentLlmForCausalLM"}));
  EXPECT_NE(cfg.at("model_type").get<std::string>().find("latentllm export"), std::string::npos);
  EXPECT_EQ(cfg.at("latent").at("source_architectures"), src.at("architectures"));
  EXPECT_EQ(cfg.at("latent").at("source_model_type"), src.at("model_type"));
  const auto m = model::Model::load(lat);
  EXPECT_EQ(m->config().architecture, src.at("architectures")[0]);
  // An older latent checkpoint: the source's keys in place, no latent.source_*.
  const fs::path old = make_temp_dir("latent-old") / "m";
  fs::create_directories(old);
  for (const auto& e : fs::directory_iterator(lat)) fs::copy_file(e.path(), old / e.path().filename());
  json older = cfg;
  older["architectures"] = src.at("architectures");
  older["model_type"] = src.at("model_type");
  older["latent"].erase("source_architectures");
  older["latent"].erase("source_model_type");
  fs::remove(old / "config.json");
  std::ofstream(old / "config.json") << older.dump(2);
  EXPECT_EQ(model::Model::load(old)->config().architecture, src.at("architectures")[0]);
  EXPECT_EQ(mean_nll(old), mean_nll(lat));
  // Both export to the source's identity.
  for (const fs::path& d : {lat, old}) {
    const json hf = read_json(exported(d) / "config.json");
    EXPECT_EQ(hf.at("architectures"), src.at("architectures")) << d;
    EXPECT_EQ(hf.at("model_type"), src.at("model_type")) << d;
  }
}

TEST(ExportHf, LlavaExportsToTheDenseLlavaLayoutWithTheSameAccuracy) {
  const fs::path source = shared_path("models/llava-shapes-tiny");
  const fs::path lat = latent("llava-shapes-tiny", "latentllm");
  const fs::path out = exported(lat);
  expect_source_layout(source, out, DType::F32);
  const json cfg = read_json(out / "config.json");
  EXPECT_FALSE(cfg.contains("latent"));
  EXPECT_EQ(cfg.at("architectures")[0], "LlavaForConditionalGeneration");
  for (const char* f : {"preprocessor_config.json", "processor_config.json"})
    EXPECT_EQ(read_bytes(out / f), read_bytes(source / f)) << f;
  // The vision tower and the projector untouched: float32 in, float32 out, the same values.
  const io::SafetensorsFile src(source / "model.safetensors"), dst(out / "model.safetensors");
  int untouched = 0;
  for (const auto& t : src.tensors()) {
    if (t.name.starts_with("language_model.")) continue;
    EXPECT_EQ(dst.find(t.name)->to_f32(), t.to_f32()) << t.name;
    ++untouched;
  }
  EXPECT_GT(untouched, 0);
  auto eval = [](const fs::path& dir) {
    const std::string log = run_ok("eval --model " + q(dir) + " --task scienceqa --protocol loglik --max-problems 50 "
                                   "--data " + q(shared_path("data/scienceqa-shapes")) + " --json -q");
    return json::parse(log.substr(log.find('{')));
  };
  const json a = eval(lat), b = eval(out);
  EXPECT_EQ(a.at("accuracy_percent"), b.at("accuracy_percent"));
  EXPECT_EQ(a.at("predictions"), b.at("predictions"));
}

// A copy of the f32 latent whose first B weight is 1e5: with block identity that column of W is B's, so
// an f16 export overflows there.
fs::path latent_with_a_huge_factor() {
  const fs::path dir = make_temp_dir("export-huge") / "latent";
  fs::copy(latent("TinyStories-656K", "latentllm"), dir, fs::copy_options::recursive);
  std::string bytes = read_bytes(dir / "model.safetensors");
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const json header = json::parse(bytes.substr(8, n));
  const std::uint64_t begin = header.at("model.layers.0.self_attn.q_proj.B.weight").at("data_offsets")[0];
  const float huge = 1e5f;
  std::memcpy(bytes.data() + 8 + n + begin, &huge, 4);
  std::ofstream(dir / "model.safetensors", std::ios::binary | std::ios::trunc) << bytes;
  return dir;
}

// A copy of the f32 latent with a q_proj bias, which Llama without attention_bias does not have.
fs::path latent_with_an_unswitched_bias() {
  const fs::path dir = make_temp_dir("export-bias") / "latent";
  const fs::path lat = latent("TinyStories-656K", "latentllm");
  fs::copy(lat, dir, fs::copy_options::recursive);
  const io::SafetensorsFile src(lat / "model.safetensors");
  std::vector<std::vector<float>> values;
  values.reserve(src.tensors().size() + 1);
  std::vector<io::TensorToWrite> tensors;
  for (const auto& t : src.tensors()) {
    values.push_back(t.to_f32());
    tensors.push_back({t.name, DType::F32, t.shape, values.back()});
  }
  const std::int64_t out = src.find("model.layers.0.self_attn.q_proj.B.weight")->shape[0];
  values.emplace_back(static_cast<std::size_t>(out), 0.5f);
  tensors.push_back({"model.layers.0.self_attn.q_proj.bias", DType::F32, {out}, values.back()});
  fs::remove(dir / "model.safetensors");
  io::write_safetensors(dir / "model.safetensors", tensors);
  return dir;
}

TEST(ErrorsDoc, Export) {
  const fs::path lat = latent("TinyStories-656K", "latentllm");
  const fs::path tmp = make_temp_dir("export-err");
  const std::string m = " --model " + q(lat);
  fs::create_directories(tmp / "foreign");
  std::ofstream(tmp / "foreign" / "notes.txt") << "mine\n";
  check_section("Export (`latentllm export`, `format::export_checkpoint`)",
                {
                    {"export-dense",
                     {cli("export --model " + q(shared_path("models/TinyStories-656K")) + " --out " + q(tmp / "a")),
                      cli("export --model " + q(shared_path("models/llava-shapes-tiny")) + " --out " + q(tmp / "a"))}},
                    {"export-format", {cli("export" + m + " --format gguf --out " + q(tmp / "b"))}},
                    {"export-dtype", {cli("export" + m + " --dtype f8 --out " + q(tmp / "c"))}},
                    {"export-kv-cache", {cli("export" + m + " --kv-cache dense --out " + q(tmp / "c"))}},
                    {"export-out-model", {cli("export" + m + " --out " + q(lat)), cli("export" + m + " --force --out " + q(lat))}},
                    {"export-out-exists", {cli("export" + m + " --out " + q(exported(lat)))}},
                    {"export-out-foreign", {cli("export" + m + " --force --out " + q(tmp / "foreign"))}},
                    {"export-unused-bias", {cli("export --model " + q(latent_with_an_unswitched_bias()) + " --out " + q(tmp / "e"))}},
                    {"export-tied-head", {lib([&] {
                       // TinyStories-656K stores its tied table only as lm_head.weight.
                       const auto dense = model::Model::load(shared_path("models/TinyStories-656K"));
                       checkpoint::SaveOptions so;
                       so.head = model::quantize_table(dense->head_weight(), {8, 32, quant::Grid::MinMax}, "lm_head");
                       checkpoint::save(*dense, tmp / "tied-head", so);
                       format::ExportOptions eo;
                       eo.format = "hf";
                       (void)format::export_checkpoint(tmp / "tied-head", tmp / "f", eo);
                     })}},
                    {"export-overflow",
                     {cli("export --model " + q(latent_with_a_huge_factor()) + " --dtype f16 --out " + q(tmp / "d"))}},
                });
  EXPECT_FALSE(fs::exists(tmp / "d"));  // nothing left of the failed export
  EXPECT_EQ(read_bytes(tmp / "foreign" / "notes.txt"), "mine\n");
}

}  // namespace
}  // namespace latentllm::test
