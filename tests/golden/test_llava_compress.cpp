// Compressing a LLaVA checkpoint's language model (docs/LMM.md, "Compression"): the latent checkpoint
// keeps the LLaVA layout (the vision tower and the projector byte for byte, the language model's
// factors under its stored prefix) and loads back as a LLaVA model whose forward runs on the factors.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "latentllm/error.hpp"
#include "latentllm/io.hpp"
#include "latentllm/model.hpp"
#include "latentllm/multimodal.hpp"
#include "model/vision.hpp"
#include "test_support.hpp"

namespace latentllm::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string q(const fs::path& p) { return "'" + p.string() + "'"; }
fs::path fixture() { return shared_path("models/llava-shapes-tiny"); }

// The llava-shapes-tiny language model compressed with text calibration (TinyStories), once.
const fs::path& latent_llava() {
  static const fs::path out = [] {
    const fs::path dir = make_temp_dir("llava-latent") / "out";
    std::string log;
    const std::string cmd = cli_path().string() + " compress --model " + q(fixture()) + " --method latentllm --ratio 0.3 " +
                            "--calib text --calib-data " +
                            q(shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt")) +
                            " --nsamples 16 --seqlen 128 --dtype f32 -q --out " + q(dir) + " 2>&1";
    EXPECT_EQ(run_command(cmd, log), 0) << log;
    return dir;
  }();
  return out;
}

TEST(LlavaCompress, KeepsTheLayoutAndTheVisionTowerAndLoadsBack) {
  const fs::path out = latent_llava();
  const auto cfg = json::parse(std::ifstream(out / "config.json"));
  // latentllm's identity for stock loaders; the source's kept (and its text_config as it was).
  EXPECT_EQ(cfg.at("architectures")[0], "LatentLlmForConditionalGeneration");
  EXPECT_EQ(cfg.at("latent").at("source_architectures")[0], "LlavaForConditionalGeneration");
  EXPECT_EQ(cfg.at("latent").at("source_model_type"), "llava");
  EXPECT_EQ(cfg.at("text_config"), json::parse(std::ifstream(fixture() / "config.json")).at("text_config"));
  ASSERT_TRUE(cfg.contains("latent"));
  // The latent section names the language model's modules as the model asks for them ...
  EXPECT_TRUE(cfg.at("latent").at("modules").contains("model.layers.0.self_attn.q_proj"));
  // ... and the tensors keep the checkpoint's stored names: factors under the language model's prefix,
  // the vision tower and the projector unchanged (float32 in, float32 out: the same bytes).
  const io::SafetensorsFile src(fixture() / "model.safetensors");
  const io::SafetensorsFile dst(out / "model.safetensors");
  EXPECT_NE(dst.find("language_model.model.layers.0.self_attn.q_proj.B.weight"), nullptr);
  EXPECT_EQ(dst.find("language_model.model.layers.0.self_attn.q_proj.weight"), nullptr);
  int copied = 0;
  for (const auto& t : src.tensors()) {
    if (!t.name.starts_with("vision_tower.") && !t.name.starts_with("multi_modal_projector.")) continue;
    const TensorView* o = dst.find(t.name);
    ASSERT_NE(o, nullptr) << t.name;
    EXPECT_EQ(o->to_f32(), t.to_f32()) << t.name;
    ++copied;
  }
  EXPECT_GT(copied, 0);

  // It loads back as LLaVA with a factored language model, and runs.
  const model::LlavaModel m = model::LlavaModel::load(out);
  EXPECT_TRUE(m.language_model().layer(0).linear(model::Role::Q).factored());
  const model::LlavaModel dense = model::LlavaModel::load(fixture());
  const std::int64_t n_feat = dense.config().features_per_image();
  std::vector<std::int32_t> ids = {1, 30, 40};
  ids.insert(ids.end(), static_cast<std::size_t>(n_feat), static_cast<std::int32_t>(dense.config().image_token_index));
  ids.push_back(50);
  const std::vector<float> pixels(static_cast<std::size_t>(3 * 64 * 64), 0.25f);
  MatrixF a, b;  // [T, V]
  m.forward(ids, pixels, 1, a);
  dense.forward(ids, pixels, 1, b);
  ASSERT_EQ(a.rows(), b.rows());
  EXPECT_TRUE(a.allFinite());
  // Compressed, not identical; but the same image features (the vision tower was not touched).
  EXPECT_GT((a - b).cwiseAbs().maxCoeff(), 0.0f);
  MatrixF fa, fb;
  m.image_features(pixels, 1, fa);
  dense.image_features(pixels, 1, fb);
  EXPECT_EQ(fa, fb);
}

TEST(LlavaCompress, InspectCountsTheLatentLanguageModel) {
  std::string out;
  ASSERT_EQ(run_command(cli_path().string() + " inspect --json --model " + q(latent_llava()), out), 0) << out;
  const auto j = json::parse(out.substr(out.find('{')));
  const auto dense_params = json::parse([&] {
    std::string o;
    run_command(cli_path().string() + " inspect --json --model " + q(fixture()), o);
    return o.substr(o.find('{'));
  }());
  EXPECT_LT(j.at("model_params").get<std::int64_t>(), dense_params.at("model_params").get<std::int64_t>());
}

// The paper's LMM protocol: calibration on ScienceQA train problems, each prompt with its image one
// sequence of its own length; the compressed model keeps at least the paper's retained fraction of dense
// accuracy on val (LatentLLM keeps 65.76 / 70.03 = 94 % at 10 % and 91 % at 20 % in its Table 4).
TEST(LlavaCompress, ScienceQaCalibrationKeepsThePapersShareOfAccuracy) {
  const fs::path dir = make_temp_dir("llava-sqa") / "out";
  std::string log;
  const std::string data = q(shared_path("data/scienceqa-shapes"));
  ASSERT_EQ(run_command(cli_path().string() + " compress --model " + q(fixture()) + " --method latentllm --ratio 0.2 " +
                            "--calib scienceqa --calib-data " + data + " --dtype f32 --out " + q(dir) + " 2>&1", log),
            0) << log;
  EXPECT_NE(log.find("calibration: 64 ScienceQA train problems"), std::string::npos) << log;
  const auto cfg = json::parse(std::ifstream(dir / "config.json")).at("latent");
  EXPECT_EQ(cfg.at("calibration").at("source"), "scienceqa");
  std::string out;
  ASSERT_EQ(run_command(cli_path().string() + " eval --task scienceqa --protocol loglik --json -q --model " + q(dir) +
                            " --data " + data, out), 0) << out;
  const double acc = json::parse(out.substr(out.find('{'))).at("accuracy_percent").at("AVG").get<double>();
  const double dense = json::parse(std::ifstream(fixture() / "REFERENCE.json")).at("val").at("dense_accuracy").at("all");
  EXPECT_GE(acc, 0.91 * dense) << acc;
  EXPECT_LT(acc, dense + 5) << acc;
  // The same seed draws the same problems: a second run writes the same factors.
  const fs::path again = dir.parent_path() / "again";
  ASSERT_EQ(run_command(cli_path().string() + " compress --model " + q(fixture()) + " --method latentllm --ratio 0.2 " +
                            "--calib scienceqa --calib-data " + data + " --dtype f32 -q --out " + q(again) + " 2>&1", log),
            0) << log;
  EXPECT_EQ(read_bytes(dir / "model.safetensors"), read_bytes(again / "model.safetensors"));
}

// The vision tower's layers as the compressor sees them (model::vision_layers): the same forward, bit for
// bit, windows of one image's P positions only, and the layers handed back afterwards.
TEST(VisionLayers, RunTheTowersForwardAndGiveTheLayersBack) {
  model::LlavaModel m = model::LlavaModel::load(fixture());
  model::VisionModel& v = m.vision_tower();
  const int n_layers = v.num_layers();
  const int P = static_cast<int>(m.config().vision.num_positions());
  std::vector<float> pixels(static_cast<std::size_t>(2 * 3 * 64 * 64));
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<float>((i * 37) % 101) / 50.0f - 1.0f;
  MatrixF h0, a, b;  // [2·P, d_v]
  v.embed(pixels, 2, h0);
  a = h0;
  for (int i = 0; i < n_layers; ++i) v.layer_forward(i, a);
  {
    const auto layers = model::vision_layers(v, fixture());
    ASSERT_EQ(layers->num_layers(), n_layers);
    EXPECT_EQ(v.num_layers(), 0);  // moved out while the view lives
    EXPECT_EQ(layers->attention().num_heads, 4);
    EXPECT_FALSE(layers->attention().rope);
    EXPECT_EQ(layers->mlp().act, model::Activation::QuickGelu);
    EXPECT_EQ(layers->layer(0).linear(model::Role::Q).name, "vision_tower.vision_model.encoder.layers.0.self_attn.q_proj");
    b = h0;
    for (int i = 0; i < n_layers; ++i) layers->layer_forward(i, b, P);
    MatrixF c = h0;
    expect_error<Error>([&] { layers->layer_forward(0, c, 2 * P); },
                        {"vision layer 0 over windows of 34 positions (expected one image of 17 positions per window"});
    expect_error<Error>([&] {
      MatrixF e;
      layers->embed(std::vector<std::int32_t>(17, 0), 17, e);
    }, {"embed of a vision tower's layers"});
  }
  EXPECT_EQ(a, b);
  ASSERT_EQ(v.num_layers(), n_layers);  // back
  MatrixF again = h0;
  for (int i = 0; i < n_layers; ++i) v.layer_forward(i, again);
  EXPECT_EQ(again, a);
}

// compress --components lm,vision,projector: the vision tower's encoder layers up to the feature layer and
// the projector factored too (docs/LMM.md, "Compression"), ranks allocated across all three, the
// checkpoint loading back with every factor, and the accuracy kept.
TEST(LlavaCompress, ComponentsCompressTheVisionTowerAndProjector) {
  const fs::path dir = make_temp_dir("llava-comp") / "out";
  const std::string data = q(shared_path("data/scienceqa-shapes"));
  std::string out;
  ASSERT_EQ(run_command(cli_path().string() + " compress --model " + q(fixture()) + " --ratio 0.3 --components " +
                            "lm,vision,projector --calib scienceqa --calib-data " + data + " --dtype f32 --json -q " +
                            "--out " + q(dir), out), 0) << out;
  const auto j = json::parse(out.substr(out.find('{')));
  EXPECT_EQ(j.at("options").at("components"), "lm,vision,projector");
  // The towers' dense weights: 3 encoder layers (feature layer -2 of 4) of 4·64² + 2·64·256, and the
  // projector's 64·128 + 128·128; global ranks keep the uniform total over all of them.
  const auto towers = j.at("components").at("towers");
  EXPECT_EQ(towers.at("dense_params").get<std::int64_t>(), 3 * (4 * 64 * 64 + 2 * 64 * 256) + 64 * 128 + 128 * 128);
  EXPECT_LT(towers.at("params").get<std::int64_t>(), towers.at("dense_params").get<std::int64_t>());
  const auto total = j.at("components").at("language").at("dense_params").get<std::int64_t>() +
                     towers.at("dense_params").get<std::int64_t>();
  EXPECT_LE(static_cast<double>(j.at("params").get<std::int64_t>()), 0.7 * static_cast<double>(total) + 1);

  const auto cfg = json::parse(std::ifstream(dir / "config.json")).at("latent");
  const auto& mods = cfg.at("modules");
  EXPECT_TRUE(mods.contains("vision_tower.vision_model.encoder.layers.0.self_attn.q_proj"));
  EXPECT_TRUE(mods.contains("vision_tower.vision_model.encoder.layers.2.mlp.fc2"));
  EXPECT_TRUE(mods.contains("multi_modal_projector.linear_2"));
  EXPECT_TRUE(mods.contains("model.layers.1.mlp.down_proj"));
  // Layer 3 never runs (its output is not a feature): neither compressed nor changed, like post_layernorm.
  EXPECT_FALSE(mods.contains("vision_tower.vision_model.encoder.layers.3.self_attn.q_proj"));
  const io::SafetensorsFile src(fixture() / "model.safetensors");
  const io::SafetensorsFile dst(dir / "model.safetensors");
  for (const std::string name : {"vision_tower.vision_model.encoder.layers.3.mlp.fc1.weight",
                                 "vision_tower.vision_model.post_layernorm.weight",
                                 "vision_tower.vision_model.embeddings.patch_embedding.weight"}) {
    ASSERT_NE(dst.find(name), nullptr) << name;
    EXPECT_EQ(dst.find(name)->to_f32(), src.find(name)->to_f32()) << name;
  }
  EXPECT_EQ(dst.find("vision_tower.vision_model.encoder.layers.0.self_attn.q_proj.weight"), nullptr);
  EXPECT_NE(dst.find("multi_modal_projector.linear_1.A.weight"), nullptr);

  // Loads back with factored towers: image features close to the dense ones, not equal.
  const model::LlavaModel m = model::LlavaModel::load(dir);
  const model::LlavaModel dense = model::LlavaModel::load(fixture());
  const std::vector<float> pixels(static_cast<std::size_t>(3 * 64 * 64), 0.25f);
  MatrixF fa, fb;  // [n_feat, d]
  m.image_features(pixels, 1, fa);
  dense.image_features(pixels, 1, fb);
  const double rel = (fa - fb).norm() / fb.norm();
  EXPECT_GT(rel, 0.0);
  EXPECT_LT(rel, 0.5);
  // export --format hf multiplies the towers' factors back too: a plain LLaVA with the same features.
  const fs::path hf = dir.parent_path() / "hf";
  std::string exp;
  ASSERT_EQ(run_command(cli_path().string() + " export --format hf --dtype f32 -q --model " + q(dir) + " --out " + q(hf),
                        exp), 0) << exp;
  const auto hf_cfg = json::parse(std::ifstream(hf / "config.json"));
  EXPECT_FALSE(hf_cfg.contains("latent"));
  const model::LlavaModel plain = model::LlavaModel::load(hf);
  EXPECT_FALSE(plain.vision_tower().layer(0).linear(model::Role::Q).factored());
  MatrixF fh;  // [n_feat, d]
  plain.image_features(pixels, 1, fh);
  EXPECT_LT((fh - fa).cwiseAbs().maxCoeff(), 1e-4f);
  // inspect lists the towers' factored modules.
  std::string ins;
  ASSERT_EQ(run_command(cli_path().string() + " inspect --json --model " + q(dir), ins), 0) << ins;
  const auto latent = json::parse(ins.substr(ins.find('{'))).at("latent_modules");
  EXPECT_EQ(latent.size(), mods.size());

  // The paper's retained share of dense accuracy at 30 % (86 %), with the towers compressed as well.
  std::string ev;
  ASSERT_EQ(run_command(cli_path().string() + " eval --task scienceqa --protocol loglik --json -q --model " + q(dir) +
                            " --data " + data, ev), 0) << ev;
  const double acc = json::parse(ev.substr(ev.find('{'))).at("accuracy_percent").at("AVG").get<double>();
  const double dense_acc = json::parse(std::ifstream(fixture() / "REFERENCE.json")).at("val").at("dense_accuracy").at("all");
  EXPECT_GE(acc, 0.86 * dense_acc) << acc;
}

// A run with the towers, killed after the language model's first layer (--stop-after-layers) and resumed,
// writes the bytes of an uninterrupted run: the towers are compressed again the same way, and the
// progress is told apart by the dense features the compressed ones follow from.
TEST(LlavaCompress, ComponentsResumeToTheSameBytes) {
  const fs::path root = make_temp_dir("llava-comp-resume");
  const std::string base = cli_path().string() + " compress --model " + q(fixture()) + " --ratio 0.3 --components " +
                           "lm,vision,projector --calib scienceqa --nsamples 24 --calib-data " +
                           q(shared_path("data/scienceqa-shapes")) + " --dtype f32 -q --out ";
  std::string log;
  ASSERT_EQ(run_command(base + q(root / "whole") + " 2>&1", log), 0) << log;
  // The summary names the parts in words, not as the option's list.
  EXPECT_NE(log.find("of which the language model "), std::string::npos) << log;
  EXPECT_NE(log.find(", the vision tower and projector "), std::string::npos) << log;
  EXPECT_EQ(log.find("lm,vision,projector"), std::string::npos) << log;
  ASSERT_EQ(run_command(base + q(root / "split") + " --stop-after-layers 1 2>&1", log), 0) << log;
  EXPECT_FALSE(fs::exists(root / "split" / "config.json"));
  // Another set of parts is another run: its progress is refused, not mixed in.
  ASSERT_NE(run_command(cli_path().string() + " compress --model " + q(fixture()) + " --ratio 0.3 --components " +
                            "lm,vision --calib scienceqa --nsamples 24 --calib-data " +
                            q(shared_path("data/scienceqa-shapes")) + " --dtype f32 -q --resume --out " +
                            q(root / "split") + " 2>&1", log), 0);
  EXPECT_NE(log.find("resume state of a different run"), std::string::npos) << log;
  ASSERT_EQ(run_command(base + q(root / "split") + " --resume 2>&1", log), 0) << log;
  EXPECT_EQ(read_bytes(root / "whole" / "model.safetensors"), read_bytes(root / "split" / "model.safetensors"));
}

// sweep on an LMM: every method at every ratio scored on ScienceQA val, the paper's Table 4 layout and
// its radar figure per ratio, with the per-problem predictions in results.json.
TEST(LlavaCompress, SweepWritesTable4AndRadarFigures) {
  const fs::path dir = make_temp_dir("llava-sweep") / "grid";
  const std::string data = q(shared_path("data/scienceqa-shapes"));
  std::string out;
  ASSERT_EQ(run_command(cli_path().string() + " sweep --model " + q(fixture()) + " --methods plain-svd,latentllm " +
                            "--ratios 0.3 --calib scienceqa --nsamples 16 --calib-data " + data + " --scienceqa " + data +
                            " --protocol loglik --max-problems 60 -q --out " + q(dir), out), 0) << out;
  const auto j = json::parse(std::ifstream(dir / "results.json"));
  ASSERT_EQ(j.at("runs").size(), 3u);  // dense + 2 methods
  for (const auto& run : j.at("runs")) {
    EXPECT_EQ(run.at("predictions").size(), 60u) << run.at("method");
    EXPECT_TRUE(run.at("accuracy_percent").contains("G7-12")) << run.at("method");
  }
  std::ifstream t4(dir / "table4.md");
  const std::string table((std::istreambuf_iterator<char>(t4)), std::istreambuf_iterator<char>());
  EXPECT_NE(table.find("| 30% | latentllm |"), std::string::npos) << table;
  EXPECT_NE(table.find("| NAT | SOC | LAN | TXT | IMG | NO | G1-6 | G7-12 | Avg |"), std::string::npos) << table;
  EXPECT_TRUE(fs::exists(dir / "radar_30.gp"));
  // stdout: Table 4 with its accuracy columns, and exactly the files written (no perplexity plots here).
  EXPECT_NE(out.find("| NAT | SOC | LAN | TXT | IMG | NO | G1-6 | G7-12 | Avg |"), std::string::npos) << out;
  EXPECT_NE(out.find("| 30% | latentllm |"), std::string::npos) << out;
  const auto wrote = out.rfind("wrote " + dir.string() + "/{");
  ASSERT_NE(wrote, std::string::npos) << out;
  const std::size_t from = wrote + dir.string().size() + 8;
  const std::string list = out.substr(from, out.find('}', from) - from);
  EXPECT_EQ(list.find("ppl_"), std::string::npos) << list;
  EXPECT_EQ(list.substr(0, 66), "results.csv,results.json,table2.md,table4.md,table3.md,table3.json") << list;
  EXPECT_NE(list.find("radar_30.gp"), std::string::npos) << list;
  std::stringstream names(list);
  for (std::string name; std::getline(names, name, ',');) EXPECT_TRUE(fs::exists(dir / name)) << name;
  // The radar's left margin leaves room for the G1-6 label at nine o'clock.
  EXPECT_NE(read_bytes(dir / "radar_30.gp").find("set lmargin 10\n"), std::string::npos);
}

}  // namespace
}  // namespace latentllm::test
