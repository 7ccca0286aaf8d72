// `latentllm serve` end to end with the official OpenAI client (tests/serve/check_serve.mjs, npm openai
// pinned by tests/serve/package-lock.json): the client's own checks (models, stop strings, seeds, token-id
// and batched prompts, a streamed chat equal to the plain one, concurrent requests equal to sequential ones,
// bad requests), then here: greedy completions equal `generate`, echo + logprobs give `ppl`'s negative
// log-likelihood, the chat reply equals `generate --chat`, the HTTP statuses and error codes, and SIGTERM
// stops the server after the requests in flight. Skipped when node or the client is missing, unless
// LATENTLLM_REQUIRE_ORT is set (CI sets it: scripts/setup installs both npm folders).
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "latentllm/model.hpp"
#include "latentllm/tokenizer.hpp"
#include "test_support.hpp"

namespace latentllm::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

fs::path serve_dir() { return fs::path(LATENTLLM_TEST_DATA_DIR).parent_path() / "serve"; }
std::string q(const fs::path& p) { return "'" + p.string() + "'"; }

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

json cli_json(const std::string& args) {
  std::string out;
  EXPECT_EQ(run_command(cli_path().string() + " " + args + " --json --quiet 2>/dev/null", out), 0) << args;
  return json::parse(out);
}

bool alive(int pid) { return fs::exists("/proc/" + std::to_string(pid)); }

TEST(Serve, OpenAiClientEndToEnd) {
  if (const std::string why = client_missing(); !why.empty()) {
    if (std::getenv("LATENTLLM_REQUIRE_ORT") != nullptr) FAIL() << why << " (LATENTLLM_REQUIRE_ORT is set)";
    GTEST_SKIP() << why;
  }
  const fs::path model = chat_model();
  const fs::path log = model.parent_path() / "serve.log";
  std::string out;
  ASSERT_EQ(run_command(cli_path().string() + " serve --model " + q(model) + " --port 0 > /dev/null 2> " + q(log) +
                            " & echo $!",
                        out),
            0);
  const int pid = std::stoi(out);
  // The server prints its address once it listens.
  std::string address;
  for (int i = 0; i < 600 && address.empty() && alive(pid); ++i) {
    const std::string text = read_bytes(log);
    if (const auto at = text.find("http://"); at != std::string::npos && text.find('\n', at) != std::string::npos)
      address = text.substr(at, text.find('\n', at) - at);
    else std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_FALSE(address.empty()) << read_bytes(log);
  const int rc = run_command("node " + q(serve_dir() / "check_serve.mjs") + " " + address + " tiny 2>&1", out);
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
  ASSERT_EQ(run_command("kill -TERM " + std::to_string(pid), out), 0);
  for (int i = 0; i < 600 && alive(pid); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(alive(pid));
  EXPECT_NE(read_bytes(log).find("serve: stopped"), std::string::npos) << read_bytes(log);
}

}  // namespace
}  // namespace latentllm::test
