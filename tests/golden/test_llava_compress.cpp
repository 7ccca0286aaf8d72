// Compressing a LLaVA checkpoint's language model (docs/LMM.md, "Compression"): the latent checkpoint
// keeps the LLaVA layout (the vision tower and the projector byte for byte, the language model's
// factors under its stored prefix) and loads back as a LLaVA model whose forward runs on the factors.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "latentllm/io.hpp"
#include "latentllm/model.hpp"
#include "latentllm/multimodal.hpp"
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
  EXPECT_EQ(cfg.at("architectures")[0], "LlavaForConditionalGeneration");
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
  const double acc = json::parse(out.substr(out.find('{'))).at("accuracy").at("avg").get<double>();
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
    EXPECT_TRUE(run.at("accuracy").contains("G7-12")) << run.at("method");
  }
  std::ifstream t4(dir / "table4.md");
  const std::string table((std::istreambuf_iterator<char>(t4)), std::istreambuf_iterator<char>());
  EXPECT_NE(table.find("| 30% | latentllm |"), std::string::npos) << table;
  EXPECT_NE(table.find("| NAT | SOC | LAN | TXT | IMG | NO | G1-6 | G7-12 | Avg |"), std::string::npos) << table;
  EXPECT_TRUE(fs::exists(dir / "radar_30.gp"));
}

}  // namespace
}  // namespace latentllm::test
