// docs/ERRORS.md in sync with the code (tests/support/errors_doc.hpp): the `compress` and `ppl` options
// and the output/resource errors, each produced by running the CLI on stories260K (exit status 1, one message).
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "compress/run/resume.hpp"
#include "errors_doc.hpp"
#include "latentllm/checkpoint.hpp"
#include "latentllm/files.hpp"
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
                    {"opt-junction", {compress("--junction diagonal --dry-run")}},
                    {"opt-joint", {compress("--joint qk,xx --dry-run")}},
                    {"opt-joint-qkv", {compress("--joint qk,qkv --dry-run"), compress("--joint vo,qkv --dry-run")}},
                    {"opt-attn-form-bits", {compress("--joint qkv --bits 4 --rank-alloc uniform --dry-run"),
                                            compress("--joint none --split-heads --bpw 3 --dry-run")}},
                    {"opt-attn-form-fit", {compress("--joint qkv --fit compensate --rank-alloc uniform --dry-run"),
                                           compress("--joint none --split-heads --fit compensate --rank-alloc uniform "
                                                    "--dry-run")}},
                    {"opt-attn-form-components",
                     {cli("compress --model " + q(shared_path("models/llava-shapes-tiny")) +
                          " --components lm,vision --joint qkv --rank-alloc uniform --dry-run"),
                      cli("compress --model " + q(shared_path("models/llava-shapes-tiny")) +
                          " --components lm,projector --joint none --split-heads --rank-alloc uniform --dry-run")}},
                    {"opt-split-joint", {compress("--split-heads --rank-alloc uniform --dry-run")}},
                    {"opt-split-rank", {compress("--joint none --split-heads --ratio 0.9 --rank-alloc uniform --dry-run")}},
                    {"opt-lambda", {compress("--lambda=-1 --dry-run"), compress("--lambda inf --dry-run")}},
                    {"opt-alpha", {compress("--alpha 0 --dry-run")}},
                    {"opt-iters", {compress("--qk-iters=-1 --dry-run"), compress("--rope-window=-2 --dry-run")}},
                    {"opt-ud-tokens", {compress("--ud-tokens=-5 --dry-run")}},
                    {"opt-ud-unit-tokens", {compress("--ud-unit-tokens=-5 --dry-run")}},
                    {"opt-ud-min-tokens", {compress("--ud-min-tokens-per-ffn=-1 --dry-run"),
                                           compress("--ud-min-tokens-per-ffn inf --dry-run")}},
                    {"opt-alloc-tokens", {compress("--alloc-tokens=-1 --dry-run")}},
                    {"opt-joint-tol", {compress("--joint-tol=-1 --dry-run"), compress("--joint-tol 1 --dry-run"),
                                       compress("--joint-tol nan --dry-run")}},
                    {"opt-batch", {compress("--batch=-1 --dry-run")}},
                    {"opt-threads", {compress("--threads=-2 --dry-run")}},
                    {"opt-stop-after", {compress("--stop-after-layers=-1 --dry-run")}},
                    {"opt-max-memory", {compress(calib() + out + " --max-memory 20X"), compress(calib() + out + " --max-memory 0")}},
                    // 100M is below the fixed runtime item; 20000 windows of 256 tokens need gigabytes of
                    // hidden states (refused before the calibration text is read).
                    {"compress-budget", {compress(calib() + out + " --max-memory 100M"),
                                         compress(big + out + " --max-memory 1G")}},
                    {"opt-dtype", {compress("--dtype f8 --dry-run")}},
                    {"opt-format", {compress("--format gguf --dry-run"), compress("--format Latent --dry-run")}},
                    {"opt-kv-cache", {compress("--format hf --kv-cache dense --dry-run"),
                                      compress("--kv-cache latent --dry-run"), compress("--format onnx --kv-cache mla --dry-run")}},
                    {"opt-out", {compress(calib())}},
                    {"opt-calib-data", {compress(out)}},
                    {"opt-calib-scienceqa",
                     {compress("--calib scienceqa --calib-data " + q(shared_path("data/scienceqa-shapes")) + " --out " +
                               q(make_temp_dir("err-sqa") / "o"))}},
                    {"opt-calib-scienceqa-window",
                     {cli("compress --model " + q(shared_path("models/llava-shapes-tiny")) + " --calib scienceqa --calib-data " +
                          q(shared_path("data/scienceqa-shapes")) + " --seqlen 128 --out " + q(make_temp_dir("err-sqw") / "o")),
                      cli("compress --model " + q(shared_path("models/llava-shapes-tiny")) + " --calib scienceqa --calib-data " +
                          q(shared_path("data/scienceqa-shapes")) + " --calib-sampling contiguous --dry-run")}},
                    {"opt-components", {compress("--components lm,mlp --dry-run"),
                                        compress("--components lm,vision,vision --dry-run"),
                                        compress("--components vision --dry-run"), compress("--components lm, --dry-run")}},
                    {"opt-components-model",
                     {compress("--components lm,vision --dry-run"),
                      cli("compress --model " + q(shared_path("models/llava-shapes-tiny")) + " --components lm,vision" +
                          calib() + " --dry-run")}},
                    {"components-no-images",
                     {cli("compress --model " + q(shared_path("models/llava-shapes-tiny")) + " --components lm,vision " +
                          "--calib scienceqa --calib-data " + q(shared_path("data/scienceqa-shapes")) +
                          " --nsamples 1 --seed 1 --dry-run")}},
                    // hf only: --format onnx reaches the same check, but a build without the ONNX module
                    // (the sanitizer build) refuses --format onnx before it.
                    {"opt-head-bits-format", {compress("--head-bits 8 --format hf --dry-run"),
                                              compress("--head-bits 4 --format hf --dry-run")}},
                    {"opt-target",
                     {compress("--target params --ratio 0.95 --dry-run"),
                      compress("--target bytes --ratio 0.4 --dtype f16 --dry-run"),
                      compress("--target bytes --ratio 0.1 --bits 4 --dry-run"),
                      cli("compress --model " + q(shared_path("models/llava-shapes-tiny")) + " --components lm,vision" +
                          " --target params --calib scienceqa --calib-data " + q(shared_path("data/scienceqa-shapes")) +
                          " --dry-run")}},
                    {"opt-unread", {compress("--method plain-svd --alpha 2 --dry-run"),
                                    compress("--joint qk --vo-iters 3 --dry-run"),
                                    compress("--method asvd-l2 --rank-alloc uniform --alloc-tokens 5 --dry-run"),
                                    compress("--method latentllm --solver fista --dry-run"),
                                    compress("--method wanda --ratio 0.5 --sparse-iters 5 --dry-run"),
                                    compress("--method lowrank-sparse --pattern 2:4 --ratio 0.5 --dry-run")}},
                    {"opt-bpw-ratio", {compress("--bpw 3 --ratio 0.3 --dry-run")}},
                    {"opt-bpw-target", {compress("--bpw 3 --target params --dry-run"),
                                        compress("--bpw 3 --target bytes --dry-run")}},
                    {"opt-bpw-data", {compress("--bpw 3 --dry-run")}},
                    {"opt-bpw-sweep-method", {cli("sweep --model " + model() + calib() + " --bpw 3 --methods wanda --out " +
                                                  q(make_temp_dir("err-bpw-sweep") / "s"))}},
                    {"opt-bpw-sweep-dense", {cli("sweep --model " + model() + calib() + " --bpw 2.1 --methods gptq --out " +
                                                 q(make_temp_dir("err-bpw-sweep") / "d"))}},
                    {"opt-bpw-list", {compress("--bpw 3,4 --dry-run"), compress("--bpw abc --dry-run"),
                                      cli("sweep --model " + model() + calib() + " --bpw 3,x --out " +
                                          q(make_temp_dir("err-bpw-sweep") / "l"))}},
                });
}

// A copy of stories260K whose config.json declares one layer fewer than its weights hold.
fs::path model_with_extra_layer() {
  const fs::path dir = make_temp_dir("err-extra") / "m";
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(shared_path("models/stories260K/hf")))
    if (e.is_regular_file()) fs::copy_file(e.path(), dir / e.path().filename());
  auto cfg = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  cfg["num_hidden_layers"] = cfg["num_hidden_layers"].get<int>() - 1;
  std::ofstream(dir / "config.json") << cfg.dump(2);
  return dir;
}

TEST(ErrorsDoc, CommandLine) {
  const fs::path tmp = make_temp_dir("err-cmdline");
  // A latent checkpoint to hand where a dense one is needed.
  std::string o;
  ASSERT_EQ(run_command(cli_path().string() + " compress --model " + model() + calib() + " --method plain-svd -q --out " +
                            q(tmp / "latent"), o), 0) << o;
  const std::string latent = q(tmp / "latent");
  const std::string text = q(shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt"));
  const fs::path extra = model_with_extra_layer();
  check_section("Command line (`latentllm`, every command)",
                {
                    {"cli-command-missing", {cli("")}},
                    {"cli-command-unknown", {cli("frobnicate")}},
                    {"cli-option-unknown", {compress("--frob")}},
                    {"cli-value-invalid", {compress("--ratio abc"), compress("--nsamples 1.5")}},
                    {"cli-value-choice", {compress("--calib foo")}},
                    {"cli-option-repeated", {compress("--ratio 0.2 --ratio 0.3 --dry-run")}},
                    {"cli-value-missing", {cli("ppl --model")}},
                    {"cli-option-required", {cli("compress"), cli("inspect")}},
                    {"cli-two-models", {cli("inspect " + model() + " --model " + latent)}},
                    {"cli-seed", {compress(calib() + " --seed=-1 --dry-run"),
                                  compress(calib() + " --seed 18446744073709551616 --dry-run"),
                                  cli("generate --model " + model() + " --seed 3x")}},
                    {"cli-unused-tensors", {cli("inspect --model " + q(extra)),
                                            cli("ppl --model " + q(extra) + " --dataset text --data " + text)}},
                    {"cli-latent-input", {cli("compress --model " + latent + " --dry-run"),
                                          cli("compress --model " + latent + calib() + " --out " + q(tmp / "x")),
                                          cli("sweep --model " + latent + calib() + " --datasets text=" + text +
                                              " --out " + q(tmp / "sweep"))}},
                    {"cli-seqlen-context",
                     {cli("ppl --model " + model() + " --dataset text --data " + text + " --seqlen 1024"),
                      compress(" --calib text --calib-data " + text + " --seqlen 513 --dry-run --rank-alloc uniform --out " +
                               q(tmp / "y")),
                      cli("sweep --model " + model() + calib() + " --datasets text=" + text + " --eval-seqlen 600 --out " +
                          q(tmp / "sweep2"))}},
                    {"cli-seqlen", {cli("ppl --model " + model() + " --dataset text --data " + text + " --seqlen 1"),
                                    compress(" --calib text --calib-data " + text + " --seqlen=-3 --out " + q(tmp / "z"))}},
                });
  // --allow-unused-tensors runs the model as config.json declares it.
  EXPECT_EQ(run_command(cli_path().string() + " inspect --allow-unused-tensors --model " + q(extra), o), 0) << o;
  // No stray progress directory from the refused runs.
  EXPECT_FALSE(fs::exists(tmp / "x.resume"));
  EXPECT_FALSE(fs::exists(tmp / "z.resume"));
}

TEST(ErrorsDoc, EvaluationOptions) {
  const std::string ppl = "ppl --model " + model() + " --dataset text --data " +
                          q(shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt")) +
                          " --seqlen 64 ";
  // opt-tiny on wikitext2 in windows of 256: 1123 windows, ~280 MiB of hidden states, so that a
  // 400 MiB budget holds some of them layer-major (and the eager plan, ~370 MiB, is skipped by
  // --layer-major).
  const fs::path tmp = make_temp_dir("err-eval");
  const fs::path tiny = tmp / "tiny.txt";
  std::ofstream(tiny) << "Once upon a time.";
  fs::create_directories(tmp / "full");
  std::ofstream(tmp / "full" / "notes.txt") << "mine";
  fs::create_directories(tmp / "prev");
  std::ofstream(tmp / "prev" / "results.json") << "{}";
  const std::string sweep = "sweep --model " + model() + calib() + " ";
  const std::string wiki = "ppl --model " + q(shared_path("models/opt-tiny")) + " --data " +
                           q(shared_path("data/wikitext2/wiki.test.raw")) + " --seqlen 256 --layer-major ";
  check_section("Evaluation options (`latentllm ppl`)",
                {
                    {"ppl-max-memory",
                     {cli(ppl + "--max-memory 20X"), cli(ppl + "--max-memory 0"), cli(ppl + "--max-memory 1.5"),
                      cli(ppl + "--max-memory=-1G"), cli(ppl + "--max-memory 0x10")}},
                    {"ppl-budget", {cli(ppl + "--max-memory 100M"), cli(wiki + "--max-memory 400M")}},
                    {"ppl-max-windows", {cli(ppl + "--max-windows=-1")}},
                    {"ppl-batch", {cli(ppl + "--batch=-2")}},
                    {"ppl-short", {cli("ppl --model " + model() + " --dataset text --data " + q(tiny) + " --seqlen 64")}},
                    {"sweep-data-dir", {cli(sweep + "--datasets wikitext2 --out " + q(tmp / "s1"))}},
                    {"sweep-data-missing", {cli(sweep + "--datasets text=" + q(tmp / "missing.txt") + " --out " +
                                                q(tmp / "s2"))}},
                    {"sweep-datasets-file", {cli(sweep + "--datasets text --out " + q(tmp / "s3"))}},
                    {"sweep-datasets-empty", {cli(sweep + "--datasets '' --out " + q(tmp / "s4"))}},
                    {"sweep-ratios", {cli(sweep + "--ratios 0.2,abc --datasets text=" + q(tiny) + " --out " + q(tmp / "s5")),
                                      cli(sweep + "--ratios , --datasets text=" + q(tiny) + " --out " + q(tmp / "s5"))}},
                    {"sweep-mc-name", {cli(sweep + "--datasets text=" + q(tiny) + " --mc tinystories-next=" + q(tiny) +
                                           ",tinystories-next=" + q(tiny) + " --out " + q(tmp / "s7"))}},
                    {"sweep-mc-limit", {cli(sweep + "--datasets text=" + q(tiny) + " --mc " + q(tiny) +
                                            " --mc-limit=-2 --out " + q(tmp / "s8"))}},
                    {"sweep-eval-seqlen", {cli(sweep + "--eval-seqlen=-4 --datasets text=" + q(tiny) + " --out " +
                                               q(tmp / "s6"))}},
                    {"sweep-calib-scienceqa",
                     {cli("sweep --model " + q(shared_path("models/llava-shapes-tiny")) + " --calib scienceqa --calib-data " +
                          q(shared_path("data/scienceqa-shapes")) + " --datasets text=" + q(tiny) + " --out " +
                          q(tmp / "s7"))}},
                    {"sweep-out-not-dir", {cli(sweep + "--datasets text=" + q(tiny) + " --out " + q(tiny))}},
                    {"sweep-out-exists", {cli(sweep + "--datasets text=" + q(tiny) + " --out " + q(tmp / "prev"))}},
                    {"sweep-out-foreign", {cli(sweep + "--datasets text=" + q(tiny) + " --force --out " + q(tmp / "full")),
                                           cli(sweep + "--datasets text=" + q(tiny) + " --out " + q(tmp / "full"))}},
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
                    {"gen-kv-latent-dense", {cli(gen + "--kv-cache latent --max-new-tokens 2"),
                                             lib([&] { model::KvCache(*m, 8, model::KvCacheMode::Latent); })}},
                    {"gen-eos", {cli("generate --model " + q(bad_eos))}},
                    {"gen-budget", {cli(gen + "--max-memory 100M"), cli(gen + "--max-memory 100M --weights f32")}},
                    {"gen-weights", {cli(gen + "--weights f16"), cli("ppl --model " + model() + " --dataset text --data " +
                                         q(shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt")) +
                                         " --weights F32"),
                                     compress("--weights bf16 --dry-run"), lib([] { model::parse_weights("half"); })}},
                    {"serve-port", {cli("serve --model " + model() + " --port 70000")}},
                    {"serve-max-batch", {cli("serve --model " + model() + " --max-batch 0")}},
                    {"serve-listen", {cli("serve --model " + model() + " --host 256.0.0.1 --port 8123")}},
                    {"gen-chat-none", {cli(gen + "--chat --prompt hi")}},
                    {"gen-raw-chat", {cli(gen + "--raw-prompt --chat"), cli(gen + "--raw-prompt --conv-mode v1"),
                                      cli(gen + "--raw-prompt --system s")}},
                    {"gen-chat-conv", {cli(gen + "--chat --conv-mode v1")}},
                    {"gen-system", {cli(gen + "--system s --prompt hi")}},
                    {"gen-conv-mode", {cli(gen + "--conv-mode vicuna --prompt hi")}},
                    {"gen-kv-full", {lib([&] {
                       model::KvCache cache(*m, 2);
                       MatrixF logits;
                       m->forward_cached(std::vector<std::int32_t>{1, 403, 407}, cache, logits);
                     }),
                                     lib([&] {
                                       model::KvCache cache(*m, 1);
                                       MatrixF logits;
                                       m->forward_cached(std::vector<std::int32_t>{1}, cache, logits);
                                       std::vector<model::KvCache*> caches = {&cache};
                                       m->forward_batch(std::vector<std::int32_t>{403}, caches, logits);
                                     })}},
                    {"gen-batch-ids", {lib([&] {
                       model::KvCache cache(*m, 4);
                       MatrixF logits;
                       std::vector<model::KvCache*> caches = {&cache};
                       m->forward_batch(std::vector<std::int32_t>{1, 403}, caches, logits);
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
  // A model of our own, so that --out can point at it, into it and around it (a symlink too).
  const fs::path user = tmp / "user";
  fs::create_directories(user / "model");
  for (const auto& e : fs::directory_iterator(shared_path("models/stories260K/hf")))
    if (e.is_regular_file()) fs::copy_file(e.path(), user / "model" / e.path().filename());
  fs::create_directory_symlink(user / "model", tmp / "link");
  const std::string user_model = "compress --model " + q(user / "model") + calib() + " ";
  // TinyStories-656K's asvd-cov factors overflow F16 in layer 0's down_proj on this calibration.
  const std::string overflow = "compress --model " + q(shared_path("models/TinyStories-656K")) + calib() +
                               " --method asvd-cov -q --out " + q(tmp / "f16");
  // sweep writes into its folder directly: the same checks of the parent, before any work.
  const std::string sweep = "sweep --model " + model() + calib() + " --methods plain-svd --ratios 0.2 --datasets text=" +
                            q(shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt")) + " ";
  check_section(
      "Output and resources (`latentllm compress`, `checkpoint::save`)",
      {
          {"out-exists", {compress(calib() + " --out " + q(tmp / "exists"))}},
          {"out-is-model", {cli(user_model + "--out " + q(user / "model")), cli(user_model + "--force --out " + q(user / "model")),
                            cli(user_model + "--force --out " + q(tmp / "link"))}},
          {"out-in-model", {cli(user_model + "--out " + q(user / "model" / "sub")), cli(user_model + "--out " + q(tmp / "link" / "x"))}},
          {"out-contains-model", {cli(user_model + "--force --out " + q(user))}},
          {"out-not-dir", {compress(calib() + " --out " + q(tmp / "file")), compress(calib() + " --force --out " + q(tmp / "file"))}},
          {"out-not-ours", {compress(calib() + " --force --out " + q(user))}},
          {"out-storage-layer", {cli(overflow)}},
          {"out-progress-kept", {cli(overflow)}},
          {"out-parent", {compress(calib() + " --out " + q(tmp / "file" / "out")),
                          cli(sweep + "--out " + q(tmp / "file" / "sweep"))}},
          {"out-unwritable", {compress(calib() + " --out /proc/latentllm-errors-test"),
                              cli(sweep + "--out /proc/latentllm-errors-sweep")}},
          {"out-write", {too_large}},
          {"out-progress-dir", {lib([&] { compress::ResumeState(tmp / "file" / "out.resume", "fp").create(); })}},
          {"out-resume-invalid", {compress(calib() + " --resume --out " + q(tmp / "damaged"))}},
          {"out-resume-other", {compress(calib() + " --resume --out " + q(tmp / "other"))}},
          {"out-resume-plan", {lib([&] {
             fs::create_directories(tmp / "plan.resume");
             std::ofstream(tmp / "plan.resume" / "plan.json") << R"({"fingerprint": "fp", "modules": [{"name": 3}]})";
             (void)compress::ResumeState(tmp / "plan.resume", "fp").restore_plan();
           }),
                               lib([&] {  // a --bpw plan whose module has bits no quantizer has
             fs::create_directories(tmp / "bits.resume");
             std::ofstream(tmp / "bits.resume" / "plan.json")
                 << R"({"fingerprint": "fp", "ratio": 0.1, "junction": "block-identity", "n_tok": 128, "modules": [)"
                 << R"({"name": "model.layers.0.mlp.up_proj", "out": 8, "in": 4, "rank": 4, "params": 32,)"
                 << R"( "dense_params": 32, "macs": 4096, "dense_macs": 4096, "bits": 5}]})";
             (void)compress::ResumeState(tmp / "bits.resume", "fp").restore_plan();
           })}},
          // A layer's progress file whose rewritten dense module (the sparse methods) is [3, 5], read into
          // a [5, 3] module.
          {"out-resume-shape", {lib([&] {
             auto layer_with = [](std::int64_t out, std::int64_t in) {
               model::DecoderLayer layer;
               model::Linear l;
               l.name = "model.layers.0.mlp.down_proj";
               l.role = model::Role::Down;
               l.out = out;
               l.in = in;
               l.weight = MatrixF(MatrixF::Zero(out, in));  // [out, in]
               layer.linears.push_back(std::move(l));
               return layer;
             };
             fs::create_directories(tmp / "shape.resume");
             checkpoint::write_layer_factors(tmp / "shape.resume" / "layer-0.safetensors", layer_with(3, 5), true);
             model::DecoderLayer other = layer_with(5, 3);
             checkpoint::read_layer_factors(tmp / "shape.resume" / "layer-0.safetensors", other);
           })}},
      });
  // The user's files are all still there, the overflowing run's progress is kept and resumes in f32.
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json"}) EXPECT_TRUE(fs::exists(user / "model" / f));
  EXPECT_TRUE(fs::exists(tmp / "file"));
  EXPECT_TRUE(fs::exists(tmp / "f16.resume" / "progress.json"));
  std::string o;
  EXPECT_EQ(run_command(cli_path().string() + " " + overflow + " --resume --dtype f32", o), 0) << o;
  EXPECT_TRUE(fs::exists(tmp / "f16" / "model.safetensors"));
  EXPECT_FALSE(fs::exists(tmp / "f16.resume"));
  // Nothing partial is left behind by the failed write.
  EXPECT_FALSE(fs::exists(tmp / "big"));
  for (const auto& e : fs::directory_iterator(tmp)) {
    EXPECT_EQ(e.path().filename().string().find(".partial-"), std::string::npos) << e.path();
  }
}

// stories260K with one added token beyond its 512 embedding rows (id 520): a tokenizer of another model.
fs::path model_with_larger_tokenizer() {
  const fs::path src = shared_path("models/stories260K/hf"), dir = make_temp_dir("err-vocab") / "m";
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(src / f, dir / f);
  auto tok = nlohmann::json::parse(core::read_file(src / "tokenizer.json"));
  tok["added_tokens"].push_back({{"id", 520}, {"content", "<extra_0>"}, {"single_word", false}, {"lstrip", false},
                                 {"rstrip", false}, {"normalized", false}, {"special", true}});
  std::ofstream(dir / "tokenizer.json") << tok.dump();
  return dir;
}

// Silent wrong results become one error before any work: each command, the same message.
TEST(CliChecks, TokenizerLargerThanTheModelIsRefusedByEveryCommand) {
  const fs::path dir = model_with_larger_tokenizer();
  const std::string expected = dir.string() + ": tokenizer vocabulary larger than the model's vocab_size (expected "
                                              "at most 512 ids, got 521)";
  const std::string stories = q(shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt"));
  for (const std::string& args :
       {"generate --model " + q(dir) + " --max-new-tokens 2",
        "ppl --model " + q(dir) + " --dataset tinystories-valid --data " + stories + " --seqlen 64 --max-windows 1",
        "compress --model " + q(dir) + " --calib text --calib-data " + stories + " --nsamples 2 --seqlen 32 --out " +
            q(make_temp_dir("err-vocab") / "out")}) {
    const Outcome o = cli(args)();
    EXPECT_EQ(o.type, "*") << args << "\n" << o.message;
    EXPECT_EQ(o.message, expected) << args;
  }
  std::string out;
  ASSERT_EQ(run_command(cli_path().string() + " inspect " + q(dir) + " --json 2>/dev/null", out), 0) << out;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["tokenizer"]["vocab_size"], 521);
  EXPECT_EQ(j["tokenizer"]["error"], expected);
  ASSERT_EQ(run_command(cli_path().string() + " inspect " + q(dir) + " 2>/dev/null", out), 0) << out;
  EXPECT_NE(out.find(expected), std::string::npos) << out;
}

TEST(CliChecks, DatasetKindMustMatchTheFile) {
  const std::string ppl = "ppl --model " + model() + " --seqlen 64 --max-windows 1 ";
  const std::string c4 = shared_path("data/c4/c4-train.00000-of-01024.first1000.jsonl").string();
  const std::string wiki = shared_path("data/wikitext2/wiki.test.raw").string();
  Outcome o = cli(ppl + "--dataset wikitext2 --data " + q(c4))();
  EXPECT_EQ(o.type, "*") << o.message;
  EXPECT_EQ(o.message, c4 + ": a JSON-lines file (expected the raw text of --dataset wikitext2; JSON lines with a "
                            "\"text\" per line are --dataset c4 or c4-heldout)");
  o = cli(ppl + "--dataset c4 --data " + q(wiki))();
  EXPECT_EQ(o.type, "*") << o.message;
  EXPECT_NE(o.message.find(wiki + ": not a JSON-lines file"), std::string::npos) << o.message;
  EXPECT_NE(o.message.find("raw text is --dataset wikitext2"), std::string::npos) << o.message;
  // The right pairs still work.
  std::string out;
  EXPECT_EQ(run_command(cli_path().string() + " " + ppl + "--dataset c4 --data " + q(c4) + " --json 2>/dev/null", out), 0)
      << out;
}

// Help texts say what the defaults do: eval keeps the weights as stored unless --weights f32.
TEST(CliChecks, EvalHelpNamesTheStoredWeightsDefault) {
  std::string out;
  ASSERT_EQ(run_command(cli_path().string() + " eval --help", out), 0) << out;
  EXPECT_EQ(out.find("the weights are widened to float32 at load"), std::string::npos) << out;
  EXPECT_NE(out.find("stored by default, float32 with --weights f32"), std::string::npos) << out;
}

TEST(CliChecks, DirectoryWhereAFileIsExpected) {
  const fs::path d = make_temp_dir("err-dir");
  const std::string expected = d.string() + ": is a directory (expected a file)";
  for (const std::string& args :
       {"ppl --model " + model() + " --dataset wikitext2 --data " + q(d),
        "compress --model " + model() + " --calib c4 --calib-data " + q(d) + " --nsamples 2 --seqlen 32 --out " +
            q(d / "out"),
        "generate --model " + q(shared_path("models/llava-shapes-tiny")) + " --image " + q(d) + " --max-new-tokens 1"}) {
    const Outcome o = cli(args)();
    EXPECT_EQ(o.type, "*") << args << "\n" << o.message;
    EXPECT_EQ(o.message, expected) << args;
  }
}

}  // namespace
}  // namespace latentllm::test
