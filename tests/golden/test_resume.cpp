// Interrupt and resume (issue 5, item 4): a `compress` run killed after a layer leaves no checkpoint,
// only its progress; `--resume` continues after the last finished layer and writes a checkpoint
// bit-identical to an uninterrupted run. A state of a different run is refused.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "test_support.hpp"

namespace latentllm {
namespace {

namespace fs = std::filesystem;

std::string q(const fs::path& p) { return "'" + p.string() + "'"; }

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string digest(const fs::path& p) {
  const std::string s = read(p);
  return test::sha256_hex(s.data(), s.size());
}

// latentllm (joint Q-K and up-down) on stories260K, small calibration; `extra` appended.
std::string compress_cmd(const fs::path& out, const std::string& extra) {
  return test::cli_path().string() + " compress --model " + q(test::shared_path("models/stories260K/hf")) +
         " --method latentllm --ratio 0.3 --dtype f32 --calib text --calib-data " +
         q(test::shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt")) +
         " --nsamples 4 --seqlen 64 --out " + q(out) + extra;
}

TEST(Resume, KilledRunResumesToABitIdenticalCheckpoint) {
  const auto tmp = test::make_temp_dir("resume");
  const fs::path full = tmp / "full", cut = tmp / "cut";
  std::string out;
  ASSERT_EQ(test::run_command(compress_cmd(full, ""), out), 0) << out;
  EXPECT_FALSE(fs::exists(full.string() + ".resume")) << "progress removed after success";

  // Killed (SIGKILL) right after layer 2 of 5 saved its progress.
  const int rc = test::run_command("LATENTLLM_TEST_KILL_AFTER_LAYER=2 " + compress_cmd(cut, ""), out);
  EXPECT_NE(rc, 0);
  EXPECT_FALSE(fs::exists(cut)) << "no checkpoint from a killed run";
  ASSERT_TRUE(fs::exists(cut.string() + ".resume/progress.json"));
  EXPECT_NE(read(cut.string() + ".resume/progress.json").find("\"layers_done\": 3"), std::string::npos);

  ASSERT_EQ(test::run_command(compress_cmd(cut, " --resume"), out), 0) << out;
  EXPECT_NE(out.find("resume: layers 0..2 restored"), std::string::npos) << out;
  EXPECT_EQ(out.find("layer 1/5 done"), std::string::npos) << "finished layers are not redone\n" << out;
  EXPECT_NE(out.find("layer 4/5 done"), std::string::npos) << out;
  EXPECT_EQ(digest(cut / "model.safetensors"), digest(full / "model.safetensors"));
  EXPECT_EQ(read(cut / "config.json"), read(full / "config.json"));
  EXPECT_FALSE(fs::exists(cut.string() + ".resume"));
}

TEST(Resume, NumericalNotesSurviveAResume) {
  // One window of 8 tokens, undamped: every module records notes (and gets a reduced rank); the notes of
  // the layers done before the kill come back from the progress, in order, without duplicates.
  const auto tmp = test::make_temp_dir("resume-notes");
  const auto cmd = [](const fs::path& out) {
    return test::cli_path().string() + " compress --model " + q(test::shared_path("models/stories260K/hf")) +
           " --method asvd-rootcov --lambda 0 --ratio 0.3 --dtype f32 --calib text --calib-data " +
           q(test::shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt")) +
           " --nsamples 1 --seqlen 8 --out " + q(out);
  };
  std::string out;
  ASSERT_EQ(test::run_command(cmd(tmp / "full"), out), 0) << out;
  EXPECT_NE(test::run_command("LATENTLLM_TEST_KILL_AFTER_LAYER=1 " + cmd(tmp / "cut"), out), 0);
  ASSERT_EQ(test::run_command(cmd(tmp / "cut") + " --resume", out), 0) << out;
  EXPECT_NE(out.find("resume: layers 0..1 restored"), std::string::npos) << out;
  const std::string config = read(tmp / "full" / "config.json");
  EXPECT_NE(config.find("\"rank-reduced\""), std::string::npos);
  EXPECT_EQ(read(tmp / "cut" / "config.json"), config);
  EXPECT_EQ(digest(tmp / "cut" / "model.safetensors"), digest(tmp / "full" / "model.safetensors"));
}

TEST(Resume, StateOfADifferentRunIsRefused) {
  const auto tmp = test::make_temp_dir("resume-mismatch");
  const fs::path cut = tmp / "cut";
  std::string out;
  EXPECT_NE(test::run_command("LATENTLLM_TEST_KILL_AFTER_LAYER=0 " + compress_cmd(cut, ""), out), 0);
  ASSERT_TRUE(fs::exists(cut.string() + ".resume/progress.json"));
  // Same output, another seed: a different calibration set.
  EXPECT_NE(test::run_command(compress_cmd(cut, " --seed 5 --resume"), out), 0);
  EXPECT_NE(out.find("resume state of a different run"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(cut));
}

TEST(Resume, ResumeWithoutStateStartsFromTheFirstLayer) {
  const auto tmp = test::make_temp_dir("resume-none");
  std::string out;
  ASSERT_EQ(test::run_command(compress_cmd(tmp / "out", " --resume"), out), 0) << out;
  EXPECT_NE(out.find("layer 1/5 done"), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(tmp / "out" / "model.safetensors"));
}

}  // namespace
}  // namespace latentllm
