// `latentllm serve` end to end with the official OpenAI client (tests/serve/check_serve.mjs, npm openai
// pinned by tests/serve/package-lock.json): the client's own checks (models, stop strings, seeds, token-id
// and batched prompts, a streamed chat equal to the plain one, concurrent requests equal to sequential ones,
// bad requests), then here: greedy completions equal `generate`, echo + logprobs give `ppl`'s negative
// log-likelihood, the chat reply equals `generate --chat`, the HTTP statuses and error codes, and SIGTERM
// stops the server after the requests in flight. Skipped when node or the client is missing, unless
// LATENTLLM_REQUIRE_ORT is set (CI sets it: scripts/setup installs both npm folders). On a LLaVA checkpoint
// (tests/serve/check_serve_llava.mjs): chat images as base64 data URLs give `generate --image`'s reply, with
// and without a chat template, and bad images are 400s with docs/ERRORS.md's messages.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "latentllm/model.hpp"
#include "latentllm/multimodal.hpp"
#include "latentllm/tokenizer.hpp"
#include "errors_doc.hpp"
#include "test_support.hpp"

namespace latentllm::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

fs::path serve_dir() { return fs::path(LATENTLLM_TEST_DATA_DIR).parent_path() / "serve"; }
// A shell word: single quotes around the text, each of its own quotes as '\''.
std::string q(const fs::path& p) {
  std::string out = "'";
  for (const char c : p.string()) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string client_missing() {
  std::string out;
  if (run_command("node --version 2>&1", out) != 0) return "node is not installed";
  if (!fs::exists(serve_dir() / "node_modules" / "openai" / "package.json"))
    return "the openai client is not installed in tests/serve (scripts/setup runs npm ci --ignore-scripts there)";
  return "";
}

// stories260K with llama-2-chat's template as its chat_template.json.
fs::path chat_model() {
  const fs::path src = shared_path("models/stories260K/hf");
  const fs::path dir = make_temp_dir("serve-model") / "tiny";
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(src)) fs::create_symlink(e.path(), dir / e.path().filename());
  std::ofstream(dir / "chat_template.json")
      << json{{"chat_template", read_bytes(test_data_path("chat_templates/llama-2-7b-chat.jinja"))}}.dump();
  std::ofstream(dir / "tokenizer_config.json") << R"({"bos_token": "<s>", "eos_token": "</s>"})";
  return dir;
}

// A copy of a checkpoint directory (symlinks) with `template_file` as its chat_template.json.
fs::path with_template(const fs::path& src, const std::string& name, const std::string& template_file) {
  const fs::path dir = make_temp_dir("serve-model") / name;
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(src)) fs::create_symlink(e.path(), dir / e.path().filename());
  std::ofstream(dir / "chat_template.json") << json{{"chat_template", read_bytes(test_data_path(template_file))}}.dump();
  return dir;
}

json cli_json(const std::string& args) {
  std::string out;
  EXPECT_EQ(run_command(cli_path().string() + " " + args + " --json --quiet 2>/dev/null", out), 0) << args;
  return json::parse(out);
}

bool alive(int pid) { return fs::exists("/proc/" + std::to_string(pid)); }

// `latentllm serve --port 0` on a model, in the background; its address once it listens ("" if it died).
struct Served {
  int pid = -1;
  std::string address;
  fs::path log;
};

Served start_server(const fs::path& model, const std::string& extra = "") {
  Served s;
  s.log = make_temp_dir("serve-log") / "serve.log";
  std::string out;
  EXPECT_EQ(run_command(cli_path().string() + " serve --model " + q(model) + " --port 0 " + extra + " > /dev/null 2> " +
                            q(s.log) + " & echo $!",
                        out),
            0);
  s.pid = std::stoi(out);
  // The server prints its address once it listens.
  for (int i = 0; i < 600 && s.address.empty() && alive(s.pid); ++i) {
    const std::string text = read_bytes(s.log);
    if (const auto at = text.find("http://"); at != std::string::npos && text.find('\n', at) != std::string::npos)
      s.address = text.substr(at, text.find('\n', at) - at);
    else std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return s;
}

// SIGTERM, then waits until the server has exited.
void stop_server(const Served& s) {
  std::string out;
  ASSERT_EQ(run_command("kill -TERM " + std::to_string(s.pid), out), 0);
  for (int i = 0; i < 600 && alive(s.pid); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(alive(s.pid));
}

TEST(Serve, OpenAiClientEndToEnd) {
  if (const std::string why = client_missing(); !why.empty()) {
    if (std::getenv("LATENTLLM_REQUIRE_ORT") != nullptr) FAIL() << why << " (LATENTLLM_REQUIRE_ORT is set)";
    GTEST_SKIP() << why;
  }
  const fs::path model = chat_model();
  const Served server = start_server(model);
  const fs::path& log = server.log;
  ASSERT_FALSE(server.address.empty()) << read_bytes(log);
  std::string out;
  const int rc = run_command("node " + q(serve_dir() / "check_serve.mjs") + " " + server.address + " tiny 2>&1", out);
  ASSERT_EQ(rc, 0) << out;
  const json r = json::parse(out);

  // Greedy completions and chat equal generate's.
  const json gen = cli_json("generate --model " + q(model) + " --prompt 'Once upon a time' --max-new-tokens 20 "
                            "--temperature 0");
  EXPECT_EQ(r.at("greedy_text"), gen.at("text"));
  const json chat = cli_json("generate --model " + q(model) + " --chat --prompt 'Tell me a story.' --max-new-tokens 16 "
                             "--temperature 0");
  EXPECT_EQ(r.at("chat_text"), chat.at("text"));

  // echo + logprobs: the sum over the predicted tokens is ppl's negative log-likelihood of the sequence.
  const auto m = model::Model::load(model);
  const auto tok = io::load_tokenizer(model);
  const std::vector<std::int32_t> ids = tok->encode("Once upon a time, there was a little girl.");
  ASSERT_EQ(r.at("echo_logprobs").size(), ids.size());
  double sum = 0;
  for (std::size_t i = 1; i < ids.size(); ++i) sum += r.at("echo_logprobs")[i].get<double>();
  EXPECT_NEAR(-sum, m->windows_nll(ids, static_cast<int>(ids.size())), 1e-3);

  const json& e = r.at("errors");
  EXPECT_EQ(e.at("unknown_model"), (json{{"status", 404}, {"code", "model_not_found"}, {"type", "invalid_request_error"}}));
  EXPECT_EQ(e.at("too_long").at("status"), 400);
  EXPECT_EQ(e.at("too_long").at("code"), "context_length_exceeded");
  for (const char* k : {"bad_type", "negative", "no_messages", "malformed"}) EXPECT_EQ(e.at(k).at("status"), 400) << k;
  EXPECT_EQ(e.at("malformed").at("body").at("error").at("type"), "invalid_request_error");
  EXPECT_EQ(e.at("no_route").at("status"), 404);

  // SIGTERM: the server stops and exits.
  stop_server(server);
  EXPECT_NE(read_bytes(log).find("serve: stopped"), std::string::npos) << read_bytes(log);
}

// A message's outcome in the report as an ERRORS.md case: the CLI's "*" type (the HTTP error carries no
// exception type), the message of an HTTP 400.
CaseFn reported(const json& error) {
  return [error] {
    if (error.at("status") != 400) return Outcome{fmt::format("HTTP {}", error.at("status").dump()), error.dump()};
    return Outcome{"*", error.at("message").get<std::string>()};
  };
}

TEST(Serve, LlavaChatImages) {
  if (const std::string why = client_missing(); !why.empty()) {
    if (std::getenv("LATENTLLM_REQUIRE_ORT") != nullptr) FAIL() << why << " (LATENTLLM_REQUIRE_ORT is set)";
    GTEST_SKIP() << why;
  }
  // llava-shapes-tiny ships no chat template (vicuna_v1, as generate's default); the copy has llava-hf's.
  const fs::path plain = shared_path("models/llava-shapes-tiny");
  const fs::path templated = with_template(plain, "llava-tmpl", "chat_templates/llava-1.5-7b-hf.jinja");
  const fs::path png = shared_path("data/scienceqa-shapes/images/val/500002/image.png");
  const fs::path jpeg = test_data_path("golden/images/jpeg_rgb_70x52.jpg");
  const std::string prompt = "How many shapes are in the picture?\nA. 1\nB. 2\nC. 3\nAnswer with the letter.";
  const std::string before = "Look at this picture.";
  const int max_tokens = 12;
  const Served a = start_server(plain), b = start_server(templated), text = start_server(chat_model());
  for (const Served* s : {&a, &b, &text}) ASSERT_FALSE(s->address.empty()) << read_bytes(s->log);
  const json config = {{"servers", {{{"base", a.address}, {"model", "llava-shapes-tiny"}},
                                    {{"base", b.address}, {"model", "llava-tmpl"}}}},
                       {"text", {{"base", text.address}, {"model", "tiny"}}},
                       {"png", png.string()}, {"jpeg", jpeg.string()}, {"prompt", prompt}, {"before", before},
                       {"max_tokens", max_tokens}, {"too_many", 512 / 16 + 1}};  // 16 tokens each of 512
  std::string out;
  const int rc = run_command("node " + q(serve_dir() / "check_serve_llava.mjs") + " " + q(config.dump()) + " 2>&1", out);
  for (const Served* s : {&a, &b, &text}) stop_server(*s);
  ASSERT_EQ(rc, 0) << out;
  const json r = json::parse(out);

  // The replies equal generate --image's greedy text for the same image and prompt: the default
  // conversation without a template, --chat with one; the prompt's size counts the image's tokens.
  const std::string gen = " --prompt " + q(prompt) + " --max-new-tokens " + std::to_string(max_tokens) + " --temperature 0";
  const json g_png = cli_json("generate --model " + q(plain) + " --image " + q(png) + gen);
  const json g_jpeg = cli_json("generate --model " + q(plain) + " --image " + q(jpeg) + gen);
  const json g_chat = cli_json("generate --model " + q(templated) + " --chat --image " + q(png) + gen);
  const json g_jpeg_chat = cli_json("generate --model " + q(templated) + " --chat --image " + q(jpeg) + gen);
  const json& s0 = r.at("servers").at(0);
  const json& s1 = r.at("servers").at(1);
  EXPECT_EQ(s0.at("text"), g_png.at("text"));
  EXPECT_EQ(s0.at("prompt_tokens"), g_png.at("prompt_tokens").size());
  EXPECT_EQ(s0.at("jpeg_text"), g_jpeg.at("text"));
  EXPECT_EQ(s1.at("text"), g_chat.at("text"));
  EXPECT_EQ(s1.at("prompt_tokens"), g_chat.at("prompt_tokens").size());
  EXPECT_EQ(s1.at("jpeg_text"), g_jpeg_chat.at("text"));
  // An image after a text: vicuna_v1's message holds the parts in order, each text followed by a newline
  // (generate --raw-prompt with that conversation); llava-hf's template puts the image first.
  const std::string raw = model::vicuna_v1_prompt(before + "\n<image>\n" + prompt);
  const json g_after = cli_json("generate --model " + q(plain) + " --raw-prompt --image " + q(png) + " --prompt " + q(raw) +
                                " --max-new-tokens " + std::to_string(max_tokens) + " --temperature 0");
  EXPECT_EQ(s0.at("text_after"), g_after.at("text"));
  EXPECT_EQ(s0.at("text_after_prompt_tokens"), g_after.at("prompt_tokens").size());
  const json g_first = cli_json("generate --model " + q(templated) + " --chat --image " + q(png) + " --prompt " +
                                q(before + " " + prompt) + " --max-new-tokens " + std::to_string(max_tokens) +
                                " --temperature 0");
  EXPECT_EQ(s1.at("text_after"), g_first.at("text"));
  EXPECT_EQ(s1.at("text_after_prompt_tokens"), g_first.at("prompt_tokens").size());
  // The image's 16 tokens (image_seq_length) and its placeholder's newline are in the prompt.
  for (const json* s : {&s0, &s1}) EXPECT_GE(s->at("prompt_tokens").get<int>(), s->at("text_prompt_tokens").get<int>() + 16);

  // Bad images: 400s whose messages are docs/ERRORS.md's (the Images rows: the decoding is image::'s).
  const json& e = r.at("errors");
  for (const auto& [k, v] : e.items()) EXPECT_EQ(v.at("status"), 400) << k << ": " << v.dump();
  const std::vector<DocRow> rows = load_errors_doc();
  // Whether the error's message matches a pattern of one of the rows `ids`, and names the image's part.
  const auto matches_row = [&](std::initializer_list<std::string_view> ids, const json& err) {
    const std::string message = err.value("message", "");
    bool any = false;
    for (const DocRow& row : rows)
      for (const std::string_view id : ids)
        for (const std::string& p : row.patterns) any = any || (row.id == id && matches_pattern(p, message));
    return any && message.rfind("messages[0].content[0].image_url: ", 0) == 0;
  };
  EXPECT_TRUE(matches_row({"img-data-url"}, e.at("http_url"))) << e.at("http_url");
  EXPECT_TRUE(matches_row({"img-base64"}, e.at("not_base64"))) << e.at("not_base64");
  EXPECT_TRUE(matches_row({"img-format"}, e.at("not_an_image"))) << e.at("not_an_image");
  EXPECT_TRUE(matches_row({"img-png-truncated", "img-png-corrupt"}, e.at("truncated"))) << e.at("truncated");
  check_section("Chat requests (`latentllm serve`)",
                {
                    {"serve-content-part", {reported(e.at("bad_part"))}},
                    {"serve-image-model", {reported(e.at("text_model"))}},
                    {"serve-image-placeholders", {reported(e.at("placeholder"))}},
                    {"serve-image-count", {reported(e.at("too_many"))}},
                });
}

// GET /health of a running server, parsed.
json health(const Served& s) {
  std::string out;
  EXPECT_EQ(run_command("node -e 'fetch(process.argv[1]).then((r) => r.text()).then((t) => process.stdout.write(t))' " +
                            q(s.address + "/health"), out), 0);
  return json::parse(out);
}

// Continuous batching (tests/serve/check_serve_batch.mjs): a --max-memory whose KV budget holds exactly
// K = 2 requests of P = 300 positions (stories260K: 512 positions of context, and the budget must hold one
// request of 512 dense positions; 2·300 + 150 does, 3·300 does not), found from a first server's /health
// (the budget less its KV bytes is what the weights, one prompt's activations and the runtime take).
TEST(Serve, ContinuousBatchingWithinTheKvBudget) {
  if (const std::string why = client_missing(); !why.empty()) {
    if (std::getenv("LATENTLLM_REQUIRE_ORT") != nullptr) FAIL() << why << " (LATENTLLM_REQUIRE_ORT is set)";
    GTEST_SKIP() << why;
  }
  const fs::path model = chat_model();
  const std::int64_t probe_budget = std::int64_t{1} << 30;
  const Served probe = start_server(model, "--max-memory " + std::to_string(probe_budget));
  ASSERT_FALSE(probe.address.empty()) << read_bytes(probe.log);
  const json h = health(probe);
  stop_server(probe);
  const std::int64_t others = probe_budget - h.at("kv_bytes").get<std::int64_t>();
  const std::int64_t per_token = h.at("kv_bytes_per_token").get<std::int64_t>();
  ASSERT_GT(per_token, 0);
  const int K = 2, P = 300;
  const std::int64_t budget = others + (K * P + P / 2) * per_token;
  const Served server = start_server(model, "--max-memory " + std::to_string(budget) + " --max-batch 8");
  ASSERT_FALSE(server.address.empty()) << read_bytes(server.log);
  std::string out;
  const int rc = run_command("node " + q(serve_dir() / "check_serve_batch.mjs") + " " + server.address + " tiny " +
                                 std::to_string(K) + " " + std::to_string(P) + " 2>&1", out);
  stop_server(server);
  ASSERT_EQ(rc, 0) << out;
  const json r = json::parse(out);
  std::printf("[ info ] KV budget %lld B at %lld B/position; peak running %d, peak queued %d, abandoned %d\n",
              static_cast<long long>(r.at("health_start").at("kv_bytes").get<std::int64_t>()),
              static_cast<long long>(per_token), r.at("peak_running").get<int>(), r.at("peak_queued").get<int>(),
              r.at("abandoned").get<int>());
  // The budget holds K, never more at once; the (K+1)-th was served (the client checked every reply).
  EXPECT_LE(r.at("peak_running").get<int>(), K);
  EXPECT_GE(r.at("peak_running").get<int>(), 1);
  EXPECT_EQ(r.at("health_start").at("max_batch"), 8);
  // The greedy completion beside three others equals generate's.
  const json gen = cli_json("generate --model " + q(model) + " --prompt 'Once upon a time' --max-new-tokens 20 "
                            "--temperature 0");
  EXPECT_EQ(r.at("greedy_text"), gen.at("text"));
  EXPECT_NE(read_bytes(server.log).find("concurrent"), std::string::npos) << read_bytes(server.log);
}

}  // namespace
}  // namespace latentllm::test
