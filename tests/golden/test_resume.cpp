// Interrupt and resume (issue 5, item 4): a compression killed after a layer (SIGKILL, no cleanup)
// leaves only its progress; resuming continues after the last finished layer and writes a checkpoint
// bit-identical to an uninterrupted run. A state of a different run is refused.
//
// The kill comes from the public per-layer callback (CompressOptions::layer_done) in a forked child
// process: ctest runs every test case in a process of its own, so the fork happens before the library
// has started any thread.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "latentllm/calib.hpp"
#include "latentllm/checkpoint.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/error.hpp"
#include "latentllm/model.hpp"
#include "latentllm/tokenizer.hpp"
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

fs::path model_dir() { return test::shared_path("models/stories260K/hf"); }
fs::path stories() { return test::shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt"); }

// One compression run of stories260K as `latentllm compress` sets it up, with its progress in
// <out>.resume (the CLI's place for it).
struct CompressRun {
  compress::CompressOptions opt;
  calib::CalibOptions calib;
  bool lazy = false;  // model::LoadOptions::lazy: the checkpoint is written from the progress files
  fs::path model = model_dir();

  CompressRun(compress::Method method, int nsamples, int seqlen) {
    opt.method = method;
    opt.ratio = 0.3;
    calib.source = "text";
    calib.data = stories();
    calib.nsamples = nsamples;
    calib.seqlen = seqlen;
  }

  // Compresses and saves to `out`; `on_layer` runs after each layer's progress is saved.
  compress::CompressReport go(const fs::path& out, bool resume, std::function<void(int)> on_layer = {}) const {
    auto m = model::Model::load(model, {.lazy = lazy});
    const auto ids = calib::sample_calibration(*io::load_tokenizer(model), calib);
    compress::CompressOptions o = opt;
    o.state_dir = out.string() + ".resume";
    o.resume = resume;
    o.layer_done = std::move(on_layer);
    auto report = compress::compress_model(*m, ids, calib.seqlen, o);
    for (int i = 0; lazy && i < m->num_layers(); ++i) EXPECT_FALSE(m->layer_loaded(i)) << "layer " << i;
    checkpoint::SaveOptions so;
    so.dtype = DType::F32;
    if (lazy) so.layer_factors_dir = o.state_dir;
    so.info["notes"] = report.to_json().at("notes");
    checkpoint::save(*m, out, so);
    fs::remove_all(o.state_dir);
    return report;
  }

  // Runs go(out) in a child process killed by SIGKILL right after layer `layer` saved its progress;
  // returns the signal that ended the child (0 if it exited).
  int killed_after(const fs::path& out, int layer) const {
    const pid_t pid = ::fork();
    if (pid == 0) {
      try {
        go(out, false, [layer](int done) {
          if (done == layer) ::raise(SIGKILL);
        });
      } catch (...) {
      }
      ::_exit(0);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  }
};

TEST(Resume, KilledRunResumesToABitIdenticalCheckpoint) {
  const auto tmp = test::make_temp_dir("resume");
  const fs::path full = tmp / "full", cut = tmp / "cut";
  const CompressRun run(compress::Method::LatentLlm, 4, 64);  // joint Q-K and up-down
  ASSERT_EQ(run.killed_after(cut, 2), SIGKILL);        // after layer 3 of 5
  EXPECT_FALSE(fs::exists(cut)) << "no checkpoint from a killed run";
  ASSERT_TRUE(fs::exists(cut.string() + ".resume/progress.json"));
  EXPECT_NE(read(cut.string() + ".resume/progress.json").find("\"layers_done\": 3"), std::string::npos);

  std::vector<int> redone;
  const auto resumed = run.go(cut, true, [&](int layer) { redone.push_back(layer); });
  EXPECT_EQ(redone, (std::vector<int>{3, 4})) << "finished layers are not redone";
  const auto whole = run.go(full, false);
  EXPECT_EQ(digest(cut / "model.safetensors"), digest(full / "model.safetensors"));
  EXPECT_EQ(read(cut / "config.json"), read(full / "config.json"));
  EXPECT_EQ(resumed.to_json().at("modules"), whole.to_json().at("modules"));
  EXPECT_EQ(resumed.to_json().at("mlp_output_loss"), whole.to_json().at("mlp_output_loss"));
}

// With global ranks the killed run's plan (plan.json, saved before layer 0) serves the resumed run: no
// second pre-pass, and the same checkpoint as an uninterrupted global run.
TEST(Resume, AResumedGlobalRunTakesTheSavedPlan) {
  const auto tmp = test::make_temp_dir("resume-global");
  const fs::path full = tmp / "full", cut = tmp / "cut";
  CompressRun run(compress::Method::AsvdRootCov, 4, 64);
  run.opt.rank_alloc = compress::RankAlloc::Global;
  ASSERT_EQ(run.killed_after(cut, 1), SIGKILL);
  ASSERT_TRUE(fs::exists(cut.string() + ".resume/plan.json"));
  const auto resumed = run.go(cut, true);
  EXPECT_EQ(resumed.prepass_s, 0.0) << "the pre-pass ran again";
  const auto whole = run.go(full, false);
  EXPECT_GT(whole.prepass_s, 0.0);
  EXPECT_EQ(digest(cut / "model.safetensors"), digest(full / "model.safetensors"));
  EXPECT_EQ(resumed.to_json().at("modules"), whole.to_json().at("modules"));
}

// A lazy model (one layer widened at a time, compressed layers only in the progress files) gives the
// eager run's checkpoint bit for bit, also when it was killed and resumed; the checkpoint streams
// from the progress files.
TEST(Resume, LazyModelWritesTheEagerCheckpoint) {
  // stories260K (Llama, no biases) and opt-tiny (biases, updated by the compression).
  const auto tmp = test::make_temp_dir("resume-lazy");
  std::vector<CompressRun> runs(2, CompressRun(compress::Method::LatentLlm, 4, 64));
  runs[1].model = test::shared_path("models/opt-tiny");
  for (std::size_t k = 0; k < runs.size(); ++k) {  // first: fork before this process starts threads
    runs[k].lazy = true;
    ASSERT_EQ(runs[k].killed_after(tmp / fmt::format("cut{}", k), 1), SIGKILL);
  }
  for (std::size_t k = 0; k < runs.size(); ++k) {
    const fs::path base = tmp / fmt::format("{}", k);
    runs[k].go(tmp / fmt::format("cut{}", k), true);
    runs[k].go(base / "lazy", false);
    runs[k].lazy = false;
    runs[k].go(base / "eager", false);
    for (const fs::path& dir : {base / "lazy", tmp / fmt::format("cut{}", k)}) {
      EXPECT_EQ(digest(dir / "model.safetensors"), digest(base / "eager" / "model.safetensors")) << dir;
      EXPECT_EQ(read(dir / "config.json"), read(base / "eager" / "config.json")) << dir;
    }
  }
}

TEST(Resume, LazyModelNeedsAProgressDirectory) {
  auto m = model::Model::load(model_dir(), {.lazy = true});
  compress::CompressOptions o;
  const std::vector<std::int32_t> ids(64, 1);
  test::expect_error<ConfigError>([&] { compress::compress_model(*m, ids, 64, o); },
                                  {"compressing a lazy model needs a progress directory", "state_dir"});
  checkpoint::SaveOptions so;
  const auto tmp = test::make_temp_dir("resume-lazy-save");
  test::expect_error<Error>([&] { checkpoint::save(*m, tmp / "out", so); },
                            {"is not loaded", "layer_factors_dir"});
  EXPECT_FALSE(fs::exists(tmp / "out")) << "no partial checkpoint";
}

TEST(Resume, NumericalNotesSurviveAResume) {
  // One window of 8 tokens, undamped: every module records notes (and gets a reduced rank); the notes of
  // the layers done before the kill come back from the progress, in order, without duplicates.
  const auto tmp = test::make_temp_dir("resume-notes");
  CompressRun run(compress::Method::AsvdRootCov, 1, 8);
  run.opt.local.lambda_rel = 0;
  ASSERT_EQ(run.killed_after(tmp / "cut", 1), SIGKILL);
  const auto resumed = run.go(tmp / "cut", true);
  const auto whole = run.go(tmp / "full", false);
  const std::string config = read(tmp / "full" / "config.json");
  EXPECT_NE(config.find("\"rank-reduced\""), std::string::npos);
  EXPECT_EQ(read(tmp / "cut" / "config.json"), config);
  EXPECT_EQ(resumed.notes, whole.notes);
  EXPECT_EQ(digest(tmp / "cut" / "model.safetensors"), digest(tmp / "full" / "model.safetensors"));
}

// The CLI's --resume: a state of another run (here: another calibration seed) is refused before any
// work, and --resume without a state starts from the first layer.
std::string compress_cmd(const fs::path& out, const std::string& extra) {
  return test::cli_path().string() + " compress --model " + q(model_dir()) +
         " --method latentllm --ratio 0.3 --dtype f32 --calib text --calib-data " + q(stories()) +
         " --nsamples 4 --seqlen 64 --out " + q(out) + extra;
}

TEST(Resume, StateOfADifferentRunIsRefused) {
  const auto tmp = test::make_temp_dir("resume-mismatch");
  const fs::path cut = tmp / "cut";
  ASSERT_EQ(CompressRun(compress::Method::LatentLlm, 4, 64).killed_after(cut, 0), SIGKILL);
  ASSERT_TRUE(fs::exists(cut.string() + ".resume/progress.json"));
  std::string out;
  EXPECT_NE(test::run_command(compress_cmd(cut, " --seed 5 --resume"), out), 0);
  EXPECT_NE(out.find("resume state of a different run"), std::string::npos) << out;
  EXPECT_EQ(out.find("dense pre-pass"), std::string::npos) << "refused before the global pre-pass:\n" << out;
  EXPECT_FALSE(fs::exists(cut));
}

TEST(Resume, ResumeWithoutStateStartsFromTheFirstLayer) {
  const auto tmp = test::make_temp_dir("resume-none");
  std::string out;
  ASSERT_EQ(test::run_command(compress_cmd(tmp / "out", " --resume"), out), 0) << out;
  EXPECT_NE(out.find("layer 1/5 done"), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(tmp / "out" / "model.safetensors"));
  EXPECT_FALSE(fs::exists(tmp / "out.resume")) << "progress removed after success";
}

// --stop-after-layers: the first layers only, no checkpoint, the progress kept; two more sessions with
// --resume (the second one stopping again) end in the checkpoint of an uninterrupted run, bit for bit.
// The default's global rank plan is computed once: the resumed sessions take the saved one.
TEST(Resume, StopAfterLayersSplitsARunIntoSessions) {
  const auto tmp = test::make_temp_dir("resume-stop");
  std::string out;
  ASSERT_EQ(test::run_command(compress_cmd(tmp / "cut", " --stop-after-layers 2 --json"), out), 0) << out;
  EXPECT_FALSE(fs::exists(tmp / "cut")) << "no checkpoint from a stopped run";
  test::expect_contains(out, {"\"stopped\": true", "\"done\": 2", "\"total\": 5", "projected_seconds_all_layers"});
  EXPECT_NE(read(tmp / "cut.resume" / "progress.json").find("\"layers_done\": 2"), std::string::npos);
  ASSERT_TRUE(fs::exists(tmp / "cut.resume" / "plan.json"));
  ASSERT_EQ(test::run_command(compress_cmd(tmp / "cut", " --resume --stop-after-layers 4"), out), 0) << out;
  test::expect_contains(out, {"stopped after layer 4 of 5", "layer 3/5 done", "layer 4/5 done",
                              "global rank allocation restored from"});
  EXPECT_EQ(out.find("layer 2/5 done"), std::string::npos) << out;
  EXPECT_EQ(out.find("dense pre-pass"), std::string::npos) << out;
  ASSERT_EQ(test::run_command(compress_cmd(tmp / "cut", " --resume"), out), 0) << out;
  EXPECT_EQ(out.find("layer 4/5 done"), std::string::npos) << out;
  EXPECT_EQ(out.find("dense pre-pass"), std::string::npos) << out;
  ASSERT_EQ(test::run_command(compress_cmd(tmp / "full", ""), out), 0) << out;
  EXPECT_EQ(digest(tmp / "cut" / "model.safetensors"), digest(tmp / "full" / "model.safetensors"));
  EXPECT_FALSE(fs::exists(tmp / "cut.resume"));
}

}  // namespace
}  // namespace latentllm
