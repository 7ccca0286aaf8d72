// Chat prompts (include/latentllm/chat.hpp): the checkpoint's Jinja chat template, found where
// transformers looks for it, and LLaVA's conversation modes, transcribed from llava/conversation.py's
// Conversation.get_prompt (separator styles TWO, LLAMA_2, MPT, PLAIN).
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "io/jinja.hpp"
#include "io/json_keys.hpp"
#include "latentllm/chat.hpp"
#include "latentllm/error.hpp"

namespace latentllm::io {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw IoError(fmt::format("{}: cannot open", p.string()));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A special token of tokenizer_config.json: a string or an AddedToken {"content": ...}; "" when absent.
std::string special_token(const nlohmann::json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"];
  return "";
}

// tokenizer_config.json's chat_template: a string, or named templates of which "default" is used.
std::optional<std::string> config_template(const nlohmann::json& config, const std::string& origin) {
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    for (const auto& t : *it)
      if (t.is_object() && t.value("name", "") == "default" && t.contains("template") && t["template"].is_string())
        return t["template"].get<std::string>();
  }
  throw FormatError(fmt::format("{}: chat_template (expected a string or a list of {{name, template}} with a "
                                "\"default\", got {})", origin, brief(*it)));
}

struct ConvMode {
  enum class Style { Two, Llama2, Mpt, Plain } style;
  std::string system;
  std::string user, assistant;  // the roles
  std::string sep, sep2;
};

const std::vector<std::pair<std::string, ConvMode>>& conv_modes() {
  using S = ConvMode::Style;
  static const std::string kVicuna =
      "A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, "
      "detailed, and polite answers to the user's questions.";
  static const std::string kLlavaV1 =
      "A chat between a curious human and an artificial intelligence assistant. The assistant gives helpful, "
      "detailed, and polite answers to the human's questions.";
  static const std::string kLlama2 =
      "You are a helpful, respectful and honest assistant. Always answer as helpfully as possible, while being "
      "safe.  Your answers should not include any harmful, unethical, racist, sexist, toxic, dangerous, or "
      "illegal content. Please ensure that your responses are socially unbiased and positive in nature.\n\nIf a "
      "question does not make any sense, or is not factually coherent, explain why instead of answering "
      "something not correct. If you don't know the answer to a question, please don't share false "
      "information.";
  static const std::string kLlavaLlama2 =
      "You are a helpful language and vision assistant. You are able to understand the visual content that the "
      "user provides, and assist the user with a variety of tasks using natural language.";
  static const std::vector<std::pair<std::string, ConvMode>> kModes = {
      {"vicuna_v1", {S::Two, kVicuna, "USER", "ASSISTANT", " ", "</s>"}},
      {"v1", {S::Two, kVicuna, "USER", "ASSISTANT", " ", "</s>"}},
      {"llava_v1", {S::Two, kLlavaV1, "USER", "ASSISTANT", " ", "</s>"}},
      {"llama_2", {S::Llama2, kLlama2, "USER", "ASSISTANT", "<s>", "</s>"}},
      {"llava_llama_2", {S::Llama2, kLlavaLlama2, "USER", "ASSISTANT", "<s>", "</s>"}},
      {"mistral_instruct", {S::Llama2, "", "USER", "ASSISTANT", "", "</s>"}},
      {"chatml_direct", {S::Mpt, "<|im_start|>system\nAnswer the questions.", "<|im_start|>user\n",
                         "<|im_start|>assistant\n", "<|im_end|>", ""}},
      {"mistral_direct", {S::Mpt, "<|im_start|>system\nAnswer the questions.", "<|im_start|>user\n",
                          "<|im_start|>assistant\n", "<|im_end|>", ""}},
      {"mpt", {S::Mpt, "<|im_start|>system\nA conversation between a user and an LLM-based AI assistant. The "
                       "assistant gives helpful and honest answers.", "<|im_start|>user\n", "<|im_start|>assistant\n",
               "<|im_end|>", ""}},
      {"plain", {S::Plain, "", "", "", "\n", ""}},  // no sep2 upstream: no assistant turn can be written
  };
  return kModes;
}

// Python's str.lstrip(chars).
std::string lstrip_chars(const std::string& s, const std::string& chars) {
  if (chars.empty()) return s;
  const std::size_t b = s.find_first_not_of(chars);
  return b == std::string::npos ? "" : s.substr(b);
}

// get_prompt over (role, message) turns; an empty message is the open turn (None upstream).
std::string get_prompt(const ConvMode& c, const std::vector<std::pair<std::string, std::string>>& turns) {
  std::string ret;
  switch (c.style) {
    case ConvMode::Style::Two: {
      const std::string seps[2] = {c.sep, c.sep2};
      ret = c.system + seps[0];
      for (std::size_t i = 0; i < turns.size(); ++i) {
        const auto& [role, msg] = turns[i];
        ret += msg.empty() ? role + ":" : role + ": " + msg + seps[i % 2];
      }
      return ret;
    }
    case ConvMode::Style::Mpt:
      ret = c.system + c.sep;
      for (const auto& [role, msg] : turns) ret += msg.empty() ? role : role + msg + c.sep;
      return ret;
    case ConvMode::Style::Plain: {
      const std::string seps[2] = {c.sep, c.sep2};
      ret = c.system;
      for (std::size_t i = 0; i < turns.size(); ++i) {
        if (turns[i].second.empty()) continue;
        if (i % 2 == 1) throw ConfigError("plain: messages (expected one user turn, got an assistant turn)");
        ret += turns[i].second + seps[i % 2];
      }
      return ret;
    }
    case ConvMode::Style::Llama2:
      for (std::size_t i = 0; i < turns.size(); ++i) {
        std::string msg = turns[i].second;
        if (msg.empty()) continue;
        if (i == 0 && !c.system.empty()) msg = "<<SYS>>\n" + c.system + "\n<</SYS>>\n\n" + msg;
        if (i % 2 == 0) ret += c.sep + "[INST] " + msg + " [/INST]";
        else ret += " " + msg + " " + c.sep2;
      }
      return lstrip_chars(ret, c.sep);
  }
  return ret;
}

}  // namespace

ChatTemplate::ChatTemplate(std::string_view source, std::string origin, std::string bos_token, std::string eos_token)
    : template_(std::make_shared<const jinja::Template>(source, origin)),
      origin_(std::move(origin)),
      bos_(std::move(bos_token)),
      eos_(std::move(eos_token)) {}

std::optional<ChatTemplate> ChatTemplate::load(const fs::path& dir) {
  nlohmann::json config = nlohmann::json::object();
  if (fs::is_regular_file(dir / "tokenizer_config.json")) config = load_json_file(dir / "tokenizer_config.json");
  if (!config.is_object()) config = nlohmann::json::object();
  const std::string bos = special_token(config, "bos_token"), eos = special_token(config, "eos_token");
  if (fs::is_regular_file(dir / "chat_template.jinja")) {
    const fs::path p = dir / "chat_template.jinja";
    return ChatTemplate(read_text(p), p.string(), bos, eos);
  }
  if (fs::is_regular_file(dir / "chat_template.json")) {
    const fs::path p = dir / "chat_template.json";
    const nlohmann::json doc = load_json_file(p);
    const auto t = doc.is_object() ? doc.find("chat_template") : doc.end();
    if (t == doc.end() || !t->is_string()) {
      throw FormatError(fmt::format("{}: chat_template (expected a string, got {})", p.string(),
                                    t == doc.end() ? std::string("nothing") : brief(*t)));
    }
    return ChatTemplate(t->get<std::string>(), p.string() + ": chat_template", bos, eos);
  }
  const std::string origin = (dir / "tokenizer_config.json").string() + ": chat_template";
  if (auto t = config_template(config, origin)) return ChatTemplate(*t, origin, bos, eos);
  return std::nullopt;
}

std::string ChatTemplate::render(const Messages& messages, bool add_generation_prompt, const ojson& extra) const {
  ojson ctx = ojson::object();
  ctx["messages"] = messages;
  ctx["add_generation_prompt"] = add_generation_prompt;
  ctx["bos_token"] = bos_;
  ctx["eos_token"] = eos_;
  for (const auto& [k, v] : extra.items()) ctx[k] = v;
  return template_->render(ctx);
}

const std::vector<std::string>& conv_mode_names() {
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> n;
    for (const auto& [name, mode] : conv_modes()) n.push_back(name);
    return n;
  }();
  return kNames;
}

std::string conv_prompt(std::string_view mode_name, const Messages& messages) {
  const auto& modes = conv_modes();
  const auto it = std::find_if(modes.begin(), modes.end(), [&](const auto& m) { return m.first == mode_name; });
  if (it == modes.end()) {
    std::string names;
    for (const auto& n : conv_mode_names()) names += (names.empty() ? "" : ", ") + n;
    throw ConfigError(fmt::format("--conv-mode (expected one of {}, got {})", names, mode_name));
  }
  ConvMode mode = it->second;
  std::vector<std::pair<std::string, std::string>> turns;
  const auto bad = [&](const std::string& what) {
    throw ConfigError(fmt::format("{}: messages (expected {}, got {})", mode_name,
                                  "a system message first or none, then user and assistant turns alternating, "
                                  "each with a non-empty string content", what));
  };
  if (!messages.is_array()) bad("not a list");
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const ojson& m = messages[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string() || m["content"].get<std::string>().empty())
      bad(fmt::format("message {}", i));
    const std::string role = m["role"];
    if (role == "system" && i == 0) {
      mode.system = mode.style == ConvMode::Style::Mpt ? "<|im_start|>system\n" + m["content"].get<std::string>()
                                                       : m["content"].get<std::string>();
      continue;
    }
    const bool user_turn = turns.size() % 2 == 0;
    if (role != (user_turn ? "user" : "assistant")) bad(fmt::format("role {} for message {}", role, i));
    turns.emplace_back(user_turn ? mode.user : mode.assistant, m["content"].get<std::string>());
  }
  if (turns.empty() || turns.size() % 2 == 0) bad("a conversation that does not end with a user turn");
  turns.emplace_back(mode.assistant, "");
  return get_prompt(mode, turns);
}

bool prompt_has_bos(std::string_view prompt, std::string_view bos_token) {
  return !bos_token.empty() && prompt.starts_with(bos_token);
}

}  // namespace latentllm::io
