// docs/ERRORS.md in sync with the code (tests/support/errors_doc.hpp): the `compress` and `ppl` options
// and the output/resource errors, each produced by running the CLI on stories260K (exit status 1, one message).
#include <gtest/gtest.h>

#include <fstream>

#include "compress/resume.hpp"
#include "errors_doc.hpp"
#include "latentllm/generate.hpp"
#include "latentllm/model.hpp"
#include "latentllm/tokenizer.hpp"

namespace latentllm::test {
namespace {

namespace fs = std::filesystem;

std::string q(const fs::path& p) { return "'" + p.string() + "'"; }
std::string model() { return q(shared_path("models/stories260K/hf")); }
std::string calib() {
  return " --calib text --calib-data " + q(shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt")) +
         " --nsamples 4 --seqlen 64";
}
CaseFn compress(const std::string& args) { return cli("compress --model " + model() + " " + args); }

TEST(ErrorsDoc, CompressOptions) {
  const std::string out = " --out " + q(make_temp_dir("err-opt") / "out");
  const std::string big = " --calib text --calib-data " +
                          q(shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt")) +
                          " --nsamples 20000 --seqlen 256";
  check_section("Compress options (`latentllm compress`)",
                {
                    {"opt-ratio",
                     {compress("--ratio 0 --dry-run"), compress("--ratio 1 --dry-run"), compress("--ratio 1.5 --dry-run"),
                      compress("--ratio=-0.1 --dry-run"), compress("--ratio -0.1 --dry-run"),
                      compress("--ratio nan --dry-run")}},
                    {"opt-ratio-rank", {compress("--ratio 0.999 --dry-run")}},
                    {"opt-method", {compress("--method svd-magic --dry-run")}},
                    {"opt-preset", {compress("--preset sparsegpt --dry-run")}},
                    {"opt-multimodal",
                     {cli("compress --model " + q(shared_path("models/llava-shapes-tiny")) + " --dry-run")}},
                    {"opt-junction", {compress("--junction diagonal --dry-run")}},
                    {"opt-joint", {compress("--joint qk,xx --dry-run")}},
                    {"opt-lambda", {compress("--lambda=-1 --dry-run"), compress("--lambda inf --dry-run")}},
                    {"opt-alpha", {compress("--alpha 0 --dry-run")}},
                    {"opt-iters", {compress("--qk-iters=-1 --dry-run"), compress("--rope-window=-2 --dry-run")}},
                    {"opt-ud-tokens", {compress("--ud-tokens=-5 --dry-run")}},
                    {"opt-ud-min-tokens", {compress("--ud-min-tokens-per-ffn=-1 --dry-run"),
                                           compress("--ud-min-tokens-per-ffn inf --dry-run")}},
                    {"opt-alloc-tokens", {compress("--alloc-tokens=-1 --dry-run")}},
                    {"opt-joint-tol", {compress("--joint-tol=-1 --dry-run"), compress("--joint-tol 1 --dry-run"),
                                       compress("--joint-tol nan --dry-run")}},
                    {"opt-batch", {compress("--batch 0 --dry-run")}},
                    {"opt-threads", {compress("--threads=-2 --dry-run")}},
                    {"opt-stop-after", {compress("--stop-after-layers=-1 --dry-run")}},
                    {"opt-max-memory", {compress(calib() + out + " --max-memory 20X"), compress(calib() + out + " --max-memory 0")}},
                    // 100M is below the fixed runtime item; 20000 windows of 256 tokens need gigabytes of
                    // hidden states (refused before the calibration text is read).
                    {"compress-budget", {compress(calib() + out + " --max-memory 100M"),
                                         compress(big + out + " --max-memory 1G")}},
                    {"opt-dtype", {compress("--dtype f8 --dry-run")}},
                    {"opt-out", {compress(calib())}},
                    {"opt-calib-data", {compress(out)}},
                });
}

TEST(ErrorsDoc, EvaluationOptions) {
  const std::string ppl = "ppl --model " + model() + " --dataset text --data " +
                          q(shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt")) +
                          " --seqlen 64 ";
  // opt-tiny on wikitext2 in windows of 256: 1123 windows, ~280 MiB of hidden states, so that a
  // 400 MiB budget holds some of them layer-major (and the eager plan, ~370 MiB, is skipped by
  // --layer-major).
  const std::string wiki = "ppl --model " + q(shared_path("models/opt-tiny")) + " --data " +
                           q(shared_path("data/wikitext2/wiki.test.raw")) + " --seqlen 256 --layer-major ";
  check_section("Evaluation options (`latentllm ppl`)",
                {
                    {"ppl-max-memory",
                     {cli(ppl + "--max-memory 20X"), cli(ppl + "--max-memory 0"), cli(ppl + "--max-memory 1.5"),
                      cli(ppl + "--max-memory=-1G"), cli(ppl + "--max-memory 0x10")}},
                    {"ppl-budget", {cli(ppl + "--max-memory 100M"), cli(wiki + "--max-memory 400M")}},
                });
}

TEST(ErrorsDoc, Generation) {
  const std::string gen = "generate --model " + model() + " ";
  const fs::path empty = make_temp_dir("err-gen-empty");
  std::string long_prompt;
  for (int i = 0; i < 600; ++i) long_prompt += "a ";
  const auto m = model::Model::load(shared_path("models/stories260K/hf"));
  const auto tok = io::load_tokenizer(shared_path("models/stories260K/hf"));
  const fs::path bad_eos = make_temp_dir("err-gen-eos") / "m";
  fs::create_directories(bad_eos);
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json"})
    fs::copy_file(shared_path("models/stories260K/hf") / f, bad_eos / f);
  std::ofstream(bad_eos / "generation_config.json") << R"({"eos_token_id": "</s>"})";
  check_section("Generation (`latentllm generate`, `eval::generate`, `model::KvCache`)",
                {
                    {"gen-temperature", {cli(gen + "--temperature=-1"), cli(gen + "--temperature inf")}},
                    {"gen-top-k", {cli(gen + "--top-k=-1")}},
                    {"gen-top-p", {cli(gen + "--top-p 0"), cli(gen + "--top-p 1.5")}},
                    {"gen-max-new-tokens", {cli(gen + "--max-new-tokens=-1")}},
                    {"gen-kv-cache", {cli(gen + "--kv-cache mla"), lib([] { model::parse_kv_cache_mode("Dense"); })}},
                    {"gen-empty-model", {cli("generate --model " + q(empty))}},
                    {"gen-prompt-long", {cli(gen + "--prompt '" + long_prompt + "'")}},
                    {"gen-context", {cli(gen + "--prompt 'Once upon a time' --max-new-tokens 510")}},
                    {"gen-prompt-id", {lib([&] { eval::generate(*m, *tok, std::vector<std::int32_t>{1, 600}, {}); })}},
                    {"gen-decode-id", {lib([&] { tok->decode(std::vector<std::int32_t>{1, 600}); })}},
                    {"gen-kv-capacity", {lib([&] { model::KvCache(*m, 513); })}},
                    {"gen-eos", {cli("generate --model " + q(bad_eos))}},
                    {"gen-kv-full", {lib([&] {
                       model::KvCache cache(*m, 2);
                       MatrixF logits;
                       m->forward_cached(std::vector<std::int32_t>{1, 403, 407}, cache, logits);
                     })}},
                });
}

TEST(ErrorsDoc, OutputAndResources) {
  const fs::path tmp = make_temp_dir("err-out");
  std::ofstream(tmp / "file") << "x";
  fs::create_directories(tmp / "exists");
  // A damaged and a foreign progress directory for --resume.
  fs::create_directories(tmp / "damaged.resume");
  std::ofstream(tmp / "damaged.resume" / "progress.json") << "garbage";
  fs::create_directories(tmp / "other.resume");
  std::ofstream(tmp / "other.resume" / "progress.json")
      << R"({"fingerprint": "0000000000000000", "layers_done": 1, "hidden": "hidden-0.safetensors", "report": {}})";
  // A file size limit (as root, permissions do not stop writes; RLIMIT_FSIZE does): 256 KiB holds the
  // per-layer progress but not the checkpoint. SIGXFSZ ignored, so the write fails with EFBIG.
  const CaseFn too_large = [&] {
    std::string o;
    const std::string cmd = "bash -c \"trap '' XFSZ; ulimit -f 256; exec " + cli_path().string() + " compress --model " +
                            model() + calib() + " --dtype f32 --out " + q(tmp / "big") + "\"";
    const int rc = run_command(cmd, o);
    const auto pos = o.rfind("latentllm: error: ");
    if (rc != 1 || pos == std::string::npos) return Outcome{fmt::format("exit status {}", rc), o};
    return Outcome{"*", cli_error_line(o, pos + 18)};
  };
  check_section(
      "Output and resources (`latentllm compress`, `checkpoint::save`)",
      {
          {"out-exists", {compress(calib() + " --out " + q(tmp / "exists"))}},
          {"out-parent", {compress(calib() + " --out " + q(tmp / "file" / "out"))}},
          {"out-unwritable", {compress(calib() + " --out /proc/latentllm-errors-test")}},
          {"out-write", {too_large}},
          {"out-progress-dir", {lib([&] { compress::ResumeState(tmp / "file" / "out.resume", "fp").create(); })}},
          {"out-resume-invalid", {compress(calib() + " --resume --out " + q(tmp / "damaged"))}},
          {"out-resume-other", {compress(calib() + " --resume --out " + q(tmp / "other"))}},
          {"out-resume-plan", {lib([&] {
             fs::create_directories(tmp / "plan.resume");
             std::ofstream(tmp / "plan.resume" / "plan.json") << R"({"fingerprint": "fp", "modules": [{"name": 3}]})";
             (void)compress::ResumeState(tmp / "plan.resume", "fp").restore_plan();
           })}},
      });
  // Nothing partial is left behind by the failed write.
  EXPECT_FALSE(fs::exists(tmp / "big"));
  for (const auto& e : fs::directory_iterator(tmp)) {
    EXPECT_EQ(e.path().filename().string().find(".partial-"), std::string::npos) << e.path();
  }
}

}  // namespace
}  // namespace latentllm::test
