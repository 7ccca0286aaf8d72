// compress --target params|bytes: --ratio counts the whole model's parameters or weight-file bytes, turned
// into the linear modules' ratio that removes as much; the output's sizes show it.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "test_support.hpp"

namespace latentllm {
namespace {

nlohmann::json compress_json(const std::string& args, const std::string& tag) {
  const auto dir = test::make_temp_dir(tag);
  const std::string cmd = "(" + test::cli_path().string() + " compress --model " +
                          test::shared_path("models/stories260K/hf").string() + " --out " + (dir / "out").string() +
                          " --calib text --calib-data " +
                          test::shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt").string() +
                          " --nsamples 4 --seqlen 64 --method asvd-rootcov --json " + args + " > " +
                          (dir / "r.json").string() + ")";
  std::string text;
  EXPECT_EQ(test::run_command(cmd, text), 0) << text;
  std::ifstream in(dir / "r.json");
  return nlohmann::json::parse(in);
}

double removed(const nlohmann::json& j, const char* key) {
  const double before = j.at("model_size").at("before").at(key), after = j.at("model_size").at("after").at(key);
  return 1.0 - after / before;
}

TEST(CompressTarget, ParamsRemovesTheRatioOfTheWholeModel) {
  const auto j = compress_json("--target params --ratio 0.1", "target-params");
  // At least the ratio (ranks are rounded to keep the budget), and not much more.
  EXPECT_GE(removed(j, "model_params"), 0.1 - 1e-4);
  EXPECT_LE(removed(j, "model_params"), 0.12);
  EXPECT_EQ(j.at("options").at("target"), (nlohmann::json{{"kind", "params"}, {"ratio", 0.1}}));
  EXPECT_GT(j.at("options").at("ratio").get<double>(), 0.1);  // the linear modules' share is larger
}

TEST(CompressTarget, BytesCountTheOutputsStorageType) {
  // An F32 source written as F32: bytes shrink as parameters do.
  const auto j = compress_json("--target bytes --ratio 0.1 --dtype f32", "target-bytes");
  EXPECT_GE(removed(j, "bytes"), 0.1 - 1e-3);
  EXPECT_LE(removed(j, "bytes"), 0.12);
  EXPECT_EQ(j.at("options").at("target").at("kind"), "bytes");
}

}  // namespace
}  // namespace latentllm
