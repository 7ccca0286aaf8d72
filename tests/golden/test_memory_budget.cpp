// What the user is told about memory before the work: the default budget from the memory actually
// available (MemAvailable, a cgroup's limit), and a warning when calibration repeats its data many times.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <string>
#include <vector>

#include "latentllm/calib.hpp"
#include "latentllm/log.hpp"
#include "latentllm/resources.hpp"
#include "latentllm/tokenizer.hpp"
#include "test_support.hpp"

namespace latentllm {
namespace {

constexpr std::int64_t kGiB = std::int64_t{1} << 30;

TEST(MemoryBudget, PhysicalMemoryLessTwoGiBWhenNothingLimitsIt) {
  const auto b = core::budget_from(24 * kGiB, -1, -1, -1, 0);
  EXPECT_EQ(b.bytes, 22 * kGiB);
  EXPECT_EQ(b.source, "physical memory - 2 GiB");
  // Plenty available, and a cgroup without a limit (v2 "max" reads as unknown, v1 as about 2^63).
  EXPECT_EQ(core::budget_from(24 * kGiB, 23 * kGiB, std::int64_t{1} << 62, kGiB, 0).bytes, 22 * kGiB);
}

TEST(MemoryBudget, WhatOtherProcessesHoldIsNotInTheBudget) {
  // 10 GiB available now and this process already holds 1 GiB: 10.5 GiB.
  const auto b = core::budget_from(24 * kGiB, 10 * kGiB, -1, -1, kGiB);
  EXPECT_EQ(b.bytes, 10 * kGiB + kGiB / 2);
  EXPECT_EQ(b.source, "available memory (MemAvailable + this process - 512 MiB)");
}

TEST(MemoryBudget, ACgroupLimitBoundsIt) {
  // An 8 GiB container whose other processes hold 2 GiB beside this one's 1 GiB: 5.5 GiB.
  const auto b = core::budget_from(24 * kGiB, 20 * kGiB, 8 * kGiB, 3 * kGiB, kGiB);
  EXPECT_EQ(b.bytes, 5 * kGiB + kGiB / 2);
  EXPECT_EQ(b.source, "cgroup limit (less the rest of the cgroup - 512 MiB)");
  // Never below 1 GiB.
  EXPECT_EQ(core::budget_from(2 * kGiB, kGiB / 4, -1, -1, 0).bytes, kGiB);
  // This machine's: at least 1 GiB, at most physical memory - 2 GiB.
  const auto here = core::default_budget();
  EXPECT_GE(here.bytes, kGiB);
  EXPECT_LE(here.bytes, std::max(core::physical_memory_bytes() - 2 * kGiB, kGiB));
}

// Random windows that add up to many times the text they come from: one warning naming the repetition.
TEST(CalibrationSampling, WarnsWhenWindowsRepeatTheirDataManyTimes) {
  const auto tok = io::load_tokenizer(test::shared_path("models/stories260K/hf"));
  const auto dir = test::make_temp_dir("resample");
  const std::string text_file = (dir / "small.txt").string();
  {
    std::ofstream f(text_file);
    for (int i = 0; i < 20; ++i) f << "Once upon a time there was a little dog who liked to run in the park. ";
  }
  std::vector<std::string> warnings;
  set_log_callback([&](LogLevel level, std::string_view msg) {
    if (level == LogLevel::Warn) warnings.emplace_back(msg);
  });
  calib::CalibOptions co;
  co.source = "text";
  co.data = text_file;
  co.seqlen = 32;
  co.nsamples = 2;  // 64 tokens of a few hundred: no warning
  calib::sample_calibration(*tok, co);
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  co.nsamples = 200;  // 6400 tokens
  calib::sample_calibration(*tok, co);
  set_log_callback(nullptr);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("calibration resamples its data: 200 windows of 32 tokens = 6400 tokens drawn from 1 "
                             "documents of more than 32 tokens holding"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("times (more distinct text needs a larger --calib-data file"), std::string::npos);
}

// The plan is an upper bound of the measured peak over a range of token counts (bench/results/memory_plan.md
// has the table up to millions of tokens).
TEST(CompressMemoryPlan, BoundsTheMeasuredPeak) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's shadow memory and quarantine are not in the plan (the Release suite checks it)";
#endif
  const auto out = test::make_temp_dir("plan-peak") / "out";
  for (int windows : {500, 4000}) {
    SCOPED_TRACE(windows);
    std::string text;
    const std::string cmd = "(" + test::cli_path().string() + " compress --model " +
                            test::shared_path("models/TinyStories-656K").string() + " --out " + out.string() +
                            " --force --calib c4 --calib-data " +
                            test::shared_path("data/c4/c4-train.00000-of-01024.first1000.jsonl").string() +
                            " --nsamples " + std::to_string(windows) + " --seqlen 128 --json > " +
                            (out.parent_path() / "result.json").string() + ")";
    ASSERT_EQ(test::run_command(cmd, text), 0) << text;
    std::ifstream result(out.parent_path() / "result.json");
    const auto j = nlohmann::json::parse(result);
    const std::int64_t peak = j.at("peak_rss_bytes"), planned = j.at("planned_peak_bytes");
    EXPECT_GT(peak, 0);
    EXPECT_LE(peak, planned) << "measured " << peak << " bytes above the plan's " << planned;
  }
}

}  // namespace
}  // namespace latentllm
