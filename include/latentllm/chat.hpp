// Chat prompts: the checkpoint's own chat template (Jinja, as transformers' apply_chat_template renders
// it) and, for LLaVA checkpoints that ship none, LLaVA's conversation modes (llava/conversation.py).
// `generate --chat` and `serve`'s /v1/chat/completions build their prompts here.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace latentllm::io {

namespace jinja {
class Template;
}

// A conversation: [{"role": "system" | "user" | "assistant" | ..., "content": <string or a list of parts>}],
// parts as transformers' processors take them ({"type": "text", "text": ...}, {"type": "image"}).
using Messages = nlohmann::ordered_json;

class ChatTemplate {
 public:
  // The template a checkpoint directory ships, in transformers' order of preference: chat_template.jinja,
  // chat_template.json ("chat_template" key; a processor's, as llava-hf ships), tokenizer_config.json's
  // "chat_template" (a string, or a list of {name, template} of which "default" is taken). bos_token and
  // eos_token (strings or {"content": ...}) come from tokenizer_config.json. nullopt when there is no
  // template. FormatError for a file that is not JSON or a template it cannot parse (io/jinja.hpp).
  static std::optional<ChatTemplate> load(const std::filesystem::path& dir);

  // `origin` names the template in messages ("<dir>/tokenizer_config.json: chat_template").
  ChatTemplate(std::string_view source, std::string origin, std::string bos_token = "", std::string eos_token = "");

  // The prompt: the template rendered with messages, add_generation_prompt, bos_token, eos_token and
  // the keys of `extra` (e.g. tools, enable_thinking). ConfigError "<origin>: <message>" when the template
  // refuses the conversation (raise_exception), FormatError for an operation it cannot evaluate.
  std::string render(const Messages& messages, bool add_generation_prompt = true,
                     const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

  const std::string& origin() const { return origin_; }
  const std::string& bos_token() const { return bos_; }

 private:
  std::shared_ptr<const jinja::Template> template_;
  std::string origin_, bos_, eos_;
};

// LLaVA's conversation modes (conv_templates of llava/conversation.py, those without few-shot
// examples): vicuna_v1 (= v1), llava_v1, llama_2, llava_llama_2, mistral_instruct, chatml_direct
// (= mistral_direct), mpt, plain.
const std::vector<std::string>& conv_mode_names();
// Conversation.get_prompt() of `mode` with the messages' turns (string contents, user first, then
// alternating; a leading "system" message replaces the mode's system text) and the assistant's turn
// left open. ConfigError "--conv-mode (expected one of ..., got X)" for an unknown mode, ConfigError
// "<mode>: messages (expected ..., got ...)" for turns it cannot place.
std::string conv_prompt(std::string_view mode, const Messages& messages);

// The ids a rendered chat prompt tokenizes to is the tokenizer's default call unless the text already
// starts with the BOS token's text (a template that writes bos_token itself): then no second BOS.
bool prompt_has_bos(std::string_view prompt, std::string_view bos_token);

}  // namespace latentllm::io
