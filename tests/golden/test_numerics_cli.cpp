// `compress` and `ppl` on degenerate inputs and under resource failures (issue 5, items 3 and 5), end
// to end on stories260K: a NaN in one weight of a modified copy, fewer calibration tokens than
// features (with and without damping), a write failing midway and its recovery by --resume, the
// output path forms, and the peak resident memory in the text and JSON outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "test_support.hpp"

namespace latentllm {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string q(const fs::path& p) { return "'" + p.string() + "'"; }
std::string cli() { return test::cli_path().string(); }
fs::path model() { return test::shared_path("models/stories260K/hf"); }
fs::path stories() { return test::shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt"); }
std::string calib(int nsamples = 4, int seqlen = 64) {
  return fmt::format(" --calib text --calib-data {} --nsamples {} --seqlen {}", q(stories()), nsamples, seqlen);
}
std::string ppl_cmd(const fs::path& m) {
  return cli() + " ppl --model " + q(m) + " --dataset text --data " + q(stories()) + " --seqlen 128 --max-windows 4";
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The JSON document on stdout (after the log lines).
json json_of(const std::string& out) {
  const auto pos = out.find("\n{");
  return json::parse(pos == std::string::npos ? out : out.substr(pos + 1));
}

// A copy of stories260K with float element `index` of tensor `name` set to `value`.
fs::path poisoned_copy(const std::string& name, std::size_t index, float value) {
  const fs::path dir = test::make_temp_dir("poisoned") / "hf";
  fs::copy(model(), dir, fs::copy_options::recursive);
  std::string bytes = read(dir / "model.safetensors");
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const json header = json::parse(bytes.substr(8, n));
  EXPECT_EQ(header.at(name).at("dtype"), "F32");
  const std::size_t at = 8 + n + header.at(name).at("data_offsets")[0].get<std::size_t>() + 4 * index;
  std::memcpy(bytes.data() + at, &value, 4);
  std::ofstream(dir / "model.safetensors", std::ios::binary | std::ios::trunc) << bytes;
  return dir;
}

TEST(NumericsCli, NanInOneWeightIsOneErrorNamingIt) {
  const fs::path bad = poisoned_copy("model.layers.1.mlp.up_proj.weight", 5, std::nanf(""));
  const fs::path out = test::make_temp_dir("nan-out") / "out";
  const std::string expected =
      "latentllm: error: model.layers.1.mlp.up_proj.weight: non-finite value at [0, 5] (expected finite, got nan)\n";
  std::string o;
  EXPECT_EQ(test::run_command(cli() + " compress --model " + q(bad) + calib() + " --out " + q(out), o), 1);
  EXPECT_TRUE(o.ends_with(expected)) << o;
  EXPECT_EQ(o.find("calibration:"), std::string::npos) << "fails before any work\n" << o;
  EXPECT_FALSE(fs::exists(out));
  // ppl loads the model the same way.
  EXPECT_EQ(test::run_command(ppl_cmd(bad) + " --json", o), 1);
  EXPECT_TRUE(o.ends_with(expected)) << o;
}

TEST(NumericsCli, FewerTokensThanFeaturesGivesAModelAndRecordsIt) {
  const fs::path tmp = test::make_temp_dir("few-tokens");
  std::string o;
  // 1 window of 8 tokens; the model has 64 and 172 input features. Damped (the default): a model, and
  // the note in the log and in config.json (with the note that joint up-down was skipped: 8 < 12 x 172).
  ASSERT_EQ(test::run_command(cli() + " compress --model " + q(model()) + " --ratio 0.3" + calib(1, 8) + " --out " +
                                  q(tmp / "damped") + " --json",
                              o),
            0)
      << o;
  const std::string note =
      "calibration: 8 calibration tokens for 35 of 35 modules with more input features (up to 172 in "
      "model.layers.0.mlp.down_proj): their input covariances are singular; the damping λ = 0.0001·mean(diag C) "
      "(--lambda) keeps the pre-conditioners invertible";
  EXPECT_NE(o.find("numerics [few-tokens]: " + note), std::string::npos) << o;
  const json report = json_of(o);
  ASSERT_EQ(report.at("notes").size(), 2u) << report.at("notes").dump();
  const json latent = json::parse(read(tmp / "damped" / "config.json")).at("latent");
  ASSERT_EQ(latent.at("notes").size(), 2u);
  EXPECT_EQ(latent.at("notes")[0].at("kind"), "joint-skipped");
  EXPECT_EQ(latent.at("joint"), "qk");  // as run
  EXPECT_EQ(latent.at("notes")[1], (json{{"module", "calibration"}, {"kind", "few-tokens"},
                                          {"detail", note.substr(std::string("calibration: ").size())}}));
  ASSERT_EQ(test::run_command(ppl_cmd(tmp / "damped") + " --json 2>/dev/null", o), 0) << o;
  EXPECT_TRUE(std::isfinite(json_of(o).at("ppl").get<double>()));

  // Undamped (--lambda 0): the null space is dropped from the pre-conditioners and the ranks that do
  // not exist are given up; every module says so, and the checkpoint still runs.
  ASSERT_EQ(test::run_command(cli() + " compress --model " + q(model()) + " --method asvd-rootcov --junction block-identity --lambda 0 --ratio 0.3" +
                                  calib(1, 8) + " --out " + q(tmp / "undamped") + " --json 2>/dev/null",
                              o),
            0)
      << o;
  const json notes = json::parse(read(tmp / "undamped" / "config.json")).at("latent").at("notes");
  std::map<std::string, int> kinds;
  for (const auto& n : notes) ++kinds[n.at("kind").get<std::string>()];
  EXPECT_EQ(kinds["few-tokens"], 1);
  EXPECT_EQ(kinds["pinv-drop"], 35) << notes.dump(1);
  EXPECT_EQ(kinds["rank-reduced"], 35) << notes.dump(1);  // rank ≤ 8 tokens everywhere
  const json mods = json::parse(read(tmp / "undamped" / "config.json")).at("latent").at("modules");
  for (const auto& [name, m] : mods.items()) EXPECT_LE(m.at("rank").get<int>(), 8) << name;
  ASSERT_EQ(test::run_command(ppl_cmd(tmp / "undamped") + " --json 2>/dev/null", o), 0) << o;
  EXPECT_TRUE(std::isfinite(json_of(o).at("ppl").get<double>()));
}

TEST(ResourcesCli, AFailedWriteLeavesNoOutputAndResumeFinishesIt) {
  const fs::path tmp = test::make_temp_dir("efbig");
  const fs::path out = tmp / "out";
  std::string o;
  // RLIMIT_FSIZE stops writes even for root: 256 KiB holds each layer's progress, not the checkpoint.
  const std::string run = cli() + " compress --model " + q(model()) + calib() + " --dtype f32 --out " + q(out);
  EXPECT_EQ(test::run_command("bash -c \"trap '' XFSZ; ulimit -f 256; exec " + run + "\"", o), 1);
  EXPECT_NE(o.find("/model.safetensors: write failed (File too large)"), std::string::npos) << o;
  EXPECT_FALSE(fs::exists(out));
  for (const auto& e : fs::directory_iterator(tmp)) {
    EXPECT_EQ(e.path().filename().string().find(".partial-"), std::string::npos) << e.path();
  }
  ASSERT_TRUE(fs::exists(tmp / "out.resume" / "progress.json")) << "the finished layers are kept";
  // With room again, --resume only writes the checkpoint.
  ASSERT_EQ(test::run_command(run + " --resume", o), 0) << o;
  EXPECT_NE(o.find("resume: layers 0..4 restored"), std::string::npos) << o;
  EXPECT_EQ(o.find("layer 1/5 done"), std::string::npos) << o;
  EXPECT_TRUE(fs::exists(out / "model.safetensors"));
  EXPECT_FALSE(fs::exists(tmp / "out.resume"));
}

TEST(ResourcesCli, PeakMemoryInTextAndJsonAndOutputPathForms) {
  const fs::path tmp = test::make_temp_dir("peak");
  std::string o;
  // "dir/" is the directory "dir"; its progress goes to "dir.resume", beside it.
  ASSERT_EQ(test::run_command(cli() + " compress --model " + q(model()) + calib() + " --out " + q(tmp / "a") + "/", o), 0)
      << o;
  EXPECT_NE(o.find("peak memory: "), std::string::npos) << o;
  EXPECT_NE(o.find(" MiB\n"), std::string::npos) << o;
  EXPECT_TRUE(fs::exists(tmp / "a" / "model.safetensors"));
  EXPECT_FALSE(fs::exists(tmp / "a" / ".resume"));
  // --force swaps in the new checkpoint.
  std::ofstream(tmp / "a" / "marker") << "old";
  ASSERT_EQ(test::run_command(cli() + " compress --model " + q(model()) + calib() + " --force --json --out " +
                                  q(tmp / "a") + " 2>/dev/null",
                              o),
            0)
      << o;
  EXPECT_GT(json_of(o).at("peak_rss_bytes").get<std::int64_t>(), 1 << 20);
  EXPECT_FALSE(fs::exists(tmp / "a" / "marker"));
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(tmp)) left.push_back(e.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"a"});

  ASSERT_EQ(test::run_command(ppl_cmd(tmp / "a") + " 2>/dev/null", o), 0) << o;
  EXPECT_NE(o.find("peak memory  "), std::string::npos) << o;
  ASSERT_EQ(test::run_command(ppl_cmd(tmp / "a") + " --json 2>/dev/null", o), 0) << o;
  const json j = json_of(o);
  EXPECT_GT(j.at("peak_rss_bytes").get<std::int64_t>(), 1 << 20);
  EXPECT_GT(j.at("peak_rss_bytes").get<double>(), 0.0);
  EXPECT_FALSE(j.contains("peak_rss_mib"));  // one unit across commands: bytes
}

}  // namespace
}  // namespace latentllm
