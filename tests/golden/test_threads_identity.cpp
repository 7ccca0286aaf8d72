// `latentllm compress` and `ppl` give the same bytes for any --threads (docs/ARCHITECTURE.md, "Threads"):
// a calibration of several batches on opt-tiny at 1, 2 and 3 threads (3 oversubscribes a 2-core
// machine, which is allowed), through the decompositions that OpenBLAS's own threads once made depend
// on the count, and that the task graph runs several at once on the threads (its --json says how many
// ran at the same moment). scripts/fingerprint runs one batch at the default thread count, so it cannot
// see this.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "test_support.hpp"

namespace latentllm {
namespace {

std::string q(const std::filesystem::path& p) { return "'" + p.string() + "'"; }

std::string bytes_of(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The line "ppl <value>" of a ppl run's stdout.
std::string ppl_line(const std::string& out) {
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("ppl ", 0) == 0) return line;
  return {};
}

TEST(ThreadsIdentity, MultiBatchCompressAndPplAreByteIdenticalForOneTwoAndThreeThreads) {
  const auto dir = test::make_temp_dir("threads");
  const std::string cli = test::cli_path().string();
  // 8 windows in batches of 2: four calibration forwards, each adding partial sums.
  const std::string compress = cli + " compress --model " + q(test::shared_path("models/opt-tiny")) +
                               " --method latentllm --ratio 0.3 --calib c4 --calib-data " +
                               q(test::shared_path("data/c4/c4-train.00000-of-01024.first1000.jsonl")) +
                               " --nsamples 8 --seqlen 128 --batch 2 --seed 0 --dtype f32 --force";
  std::string reference_bytes, reference_ppl;
  for (int threads : {1, 2, 3}) {
    SCOPED_TRACE(threads);
    const auto out_dir = dir / ("t" + std::to_string(threads));
    std::string out;
    // The report alone on stdout (run_command adds stderr to it; the subshell keeps it out).
    ASSERT_EQ(test::run_command("(" + compress + " --json --out " + q(out_dir) + " --threads " +
                                    std::to_string(threads) + " 2>/dev/null)", out), 0) << out;
    ASSERT_TRUE(nlohmann::json::accept(out)) << out;
    const auto report = nlohmann::json::parse(out);
    const int at_once = report.at("stage_seconds").at("decompositions_at_once").get<int>();
    if (threads == 1) {
      EXPECT_EQ(at_once, 1);
    } else {
      EXPECT_GT(at_once, 1) << "no two decompositions ran at the same moment";
      EXPECT_LE(at_once, threads);
    }
    ASSERT_EQ(test::run_command(cli + " ppl --model " + q(out_dir) + " --dataset wikitext2 --data " +
                                    q(test::shared_path("data/wikitext2/wiki.test.raw")) +
                                    " --seqlen 128 --max-windows 4 --threads " + std::to_string(threads) +
                                    " 2>/dev/null", out), 0) << out;
    const std::string bytes = bytes_of(out_dir / "model.safetensors");
    const std::string ppl = ppl_line(out);
    ASSERT_FALSE(bytes.empty());
    ASSERT_FALSE(ppl.empty()) << out;
    if (threads == 1) {
      reference_bytes = bytes;
      reference_ppl = ppl;
      continue;
    }
    EXPECT_TRUE(bytes == reference_bytes) << "model.safetensors differs from the --threads 1 checkpoint";
    EXPECT_EQ(ppl, reference_ppl);
  }
}

}  // namespace
}  // namespace latentllm
