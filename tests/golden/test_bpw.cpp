// One budget in bytes (compress --bpw, docs/QUANT.md) on stories260K through the CLI: the checkpoint
// within the budget, each module stored at the rank and bits the plan chose (a full-rank module as one
// quantized dense matrix), compress --json and inspect --json counting the same bytes and parameters, and a run
// stopped after two layers and resumed writing the same bytes as one that was not.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include <nlohmann/json.hpp>

#include "latentllm/files.hpp"
#include "test_support.hpp"

namespace latentllm::test {
namespace {

namespace fs = std::filesystem;

std::string q(const fs::path& p) { return "'" + p.string() + "'"; }

std::string compress_cmd(const fs::path& out) {
  return cli_path().string() + " compress --model " + q(shared_path("models/stories260K/hf")) +
         " --calib text --calib-data " +
         q(shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt")) +
         " --nsamples 8 --seqlen 64 --bpw 4 --group 32 --out " + q(out);
}

nlohmann::json json_of(const std::string& cmd) {
  std::string out;
  EXPECT_EQ(run_command(cmd, out), 0) << cmd;  // stderr's progress lines come first, then the JSON
  const auto first = out.front() == '{' ? 0 : out.find("\n{") + 1;
  return nlohmann::json::parse(out.substr(first, out.rfind('}') + 1 - first));
}

TEST(BitsPerWeight, TheCheckpointKeepsThePlanWithinTheBudget) {
  const fs::path root = make_temp_dir("bpw");
  const nlohmann::json c = json_of(compress_cmd(root / "whole") + " --json");
  const double bpw = c.at("compressed_modules").at("bits_per_weight");
  EXPECT_LE(bpw, 4.0);
  EXPECT_GT(bpw, 3.5);  // the budget is used, not left idle
  EXPECT_EQ(c.at("options").at("bpw"), 4.0);

  const nlohmann::json i = json_of(cli_path().string() + " inspect --json --model " + q(root / "whole"));
  EXPECT_EQ(i.at("compressed_modules"), c.at("compressed_modules"));
  // The whole model's parameters count the weights a quantized matrix encodes, not its code bytes: the
  // checkpoint's size (from the safetensors headers) is the loaded model's count.
  EXPECT_EQ(c.at("model_size").at("after").at("model_params"), i.at("model_params"));
  std::map<std::string, nlohmann::json> stored;
  for (const auto& e : i.at("latent_modules")) stored[e.at("module")] = e;
  std::map<int, int> by_bits;
  for (const auto& p : c.at("plan").at("modules")) {
    const std::string name = p.at("name");
    const int bits = p.at("bits");
    const std::int64_t rank = p.at("rank");
    const std::int64_t full = std::min(p.at("out").get<std::int64_t>(), p.at("in").get<std::int64_t>());
    ++by_bits[bits];
    SCOPED_TRACE(name);
    ASSERT_TRUE(stored.count(name));
    const nlohmann::json& e = stored[name];
    if (bits == 16) {
      EXPECT_FALSE(e.contains("bits"));
      EXPECT_EQ(e.at("rank"), rank);
    } else {
      EXPECT_EQ(e.at("bits"), bits);
      EXPECT_EQ(e.at("group"), 32);
      EXPECT_EQ(e.at("rank"), rank == full ? 0 : rank);  // full rank: one dense quantized matrix
    }
  }
  EXPECT_GE(by_bits.size(), 2u) << "one bit width for every module: nothing was allocated";

  // Stopped after two layers and resumed: the plan (with its bits) comes back from the progress directory.
  std::string log;
  ASSERT_EQ(run_command(compress_cmd(root / "split") + " --stop-after-layers 2 2>&1", log), 0) << log;
  ASSERT_EQ(run_command(compress_cmd(root / "split") + " --resume 2>&1", log), 0) << log;
  EXPECT_NE(log.find("restored"), std::string::npos) << log;
  EXPECT_EQ(core::read_file(root / "split" / "model.safetensors"), core::read_file(root / "whole" / "model.safetensors"));

  // The checkpoint runs.
  const nlohmann::json p = json_of(cli_path().string() + " ppl --json --max-windows 2 --seqlen 64 --dataset text --model " +
                                   q(root / "whole") + " --data " +
                                   q(shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt")));
  EXPECT_TRUE(std::isfinite(p.at("ppl").get<double>()));
}

}  // namespace
}  // namespace latentllm::test
