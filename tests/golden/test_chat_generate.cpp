// `generate --chat` / `--conv-mode` end to end: the prompt is the checkpoint's template rendered (one BOS,
// not two, when the template writes bos_token), LLaVA's conversation mode with the image placeholder
// first, and a LLaVA checkpoint's own chat_template.json (llava-hf's) preferred over vicuna_v1.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "latentllm/chat.hpp"
#include "latentllm/tokenizer.hpp"
#include "test_support.hpp"

namespace latentllm::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string q(const fs::path& p) { return "'" + p.string() + "'"; }

json run_json(const std::string& args) {
  std::string out;
  const int rc = run_command(cli_path().string() + " " + args + " --json --quiet 2>/dev/null", out);
  EXPECT_EQ(rc, 0) << args << "\n" << out;
  return json::parse(out);
}

// A copy of a model directory (files linked) with `extra` files written over it.
fs::path with_files(const fs::path& src, const std::string& tag, const std::map<std::string, std::string>& extra) {
  const fs::path dir = make_temp_dir(tag);
  for (const auto& e : fs::directory_iterator(src))
    if (!extra.count(e.path().filename().string())) fs::create_symlink(e.path(), dir / e.path().filename());
  for (const auto& [name, body] : extra) std::ofstream(dir / name) << body;
  return dir;
}

TEST(ChatGenerate, TemplateWithBosGivesOneBos) {
  const fs::path src = shared_path("models/TinyStories-656K");
  json config = json::parse(read_bytes(src / "tokenizer_config.json"));
  config["chat_template"] = read_bytes(test_data_path("chat_templates/llama-2-7b-chat.jinja"));
  const fs::path dir = with_files(src, "chat-gen-ts", {{"tokenizer_config.json", config.dump()}});
  const json r = run_json("generate --model " + q(dir) + " --chat --prompt 'Once upon a time' --max-new-tokens 3");
  EXPECT_EQ(r["prompt_text"], "<|start_story|>[INST] Once upon a time [/INST]");
  const auto tok = io::load_tokenizer(dir);
  const std::vector<std::int32_t> ids = tok->encode(r["prompt_text"].get<std::string>(), false);
  EXPECT_EQ(r["prompt_tokens"].get<std::vector<std::int32_t>>(), ids);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), *tok->bos_id()), 1);
  // With a system message the template puts it in the first [INST].
  const json s = run_json("generate --model " + q(dir) + " --chat --system 'Be kind.' --prompt hi --max-new-tokens 1");
  EXPECT_EQ(s["prompt_text"], "<|start_story|>[INST] <<SYS>>\nBe kind.\n<</SYS>>\n\nhi [/INST]");
  // --conv-mode on a text model; the tokenizer adds BOS.
  const json c = run_json("generate --model " + q(dir) + " --conv-mode chatml_direct --prompt hi --max-new-tokens 1");
  EXPECT_EQ(c["prompt_text"], "<|im_start|>system\nAnswer the questions.<|im_end|><|im_start|>user\nhi<|im_end|>"
                              "<|im_start|>assistant\n");
  EXPECT_EQ(c["prompt_tokens"][0], *tok->bos_id());
}

TEST(ChatGenerate, LlavaConvModeAndOwnTemplate) {
  const fs::path model = shared_path("models/llava-shapes-tiny");
  const std::string image = " --image " + q(shared_path("data/scienceqa-shapes/images/val/500002/image.png"));
  // No template: vicuna_v1, as before.
  const json d = run_json("generate --model " + q(model) + image + " --prompt 'What shape?' --max-new-tokens 1");
  EXPECT_EQ(d["prompt_text"], io::conv_prompt("vicuna_v1", io::Messages::parse(
                                                                R"([{"role": "user", "content": "<image>\nWhat shape?"}])")));
  const json l = run_json("generate --model " + q(model) + image + " --conv-mode llava_v1 --prompt 'What shape?' "
                          "--max-new-tokens 1");
  EXPECT_EQ(l["prompt_text"], "A chat between a curious human and an artificial intelligence assistant. The assistant "
                              "gives helpful, detailed, and polite answers to the human's questions. USER: <image>\n"
                              "What shape? ASSISTANT:");
  // llava-hf's chat_template.json: no system sentence, the image part first.
  const json t = json{{"chat_template", read_bytes(test_data_path("chat_templates/llava-1.5-7b-hf.jinja"))}};
  const fs::path dir = with_files(model, "chat-gen-llava", {{"chat_template.json", t.dump()}});
  const json h = run_json("generate --model " + q(dir) + image + " --prompt 'What shape?' --max-new-tokens 1");
  EXPECT_EQ(h["prompt_text"], "USER: <image>\nWhat shape? ASSISTANT:");
  EXPECT_EQ(h["prompt_tokens"][0], 1);  // the tokenizer's BOS: the template writes none
}

}  // namespace
}  // namespace latentllm::test
