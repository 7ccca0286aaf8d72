// Tokenizer format dispatch and the config files that decide special-token handling.
#include <fmt/format.h>

#include "core/mapped_file.hpp"
#include "io/json_depth.hpp"
#include "io/tokenizer_loaders.hpp"
#include "latentllm/error.hpp"

namespace latentllm::io {

namespace fs = std::filesystem;

nlohmann::json read_json_file(const fs::path& file) {
  const std::string text = core::read_file(file);
  check_json_depth(text, file.string());
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(fmt::format("{}: invalid JSON ({})", file.string(), e.what()));
  }
}

ConfigToken config_token(const nlohmann::json& config, const std::string& key, const std::string& origin) {
  ConfigToken t;
  auto it = config.find(key);
  if (it == config.end()) return t;
  t.present = true;
  if (it->is_null()) return t;
  if (it->is_string()) {
    t.value = it->get<std::string>();
  } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    t.value = (*it)["content"].get<std::string>();
  } else {
    throw FormatError(fmt::format("{}: {}: expected a token string or {{\"content\": ...}} (got {})", origin, key,
                                  it->dump()));
  }
  return t;
}

std::int32_t parse_token_id(const nlohmann::json& v, const std::string& what) {
  // is_number_integer excludes floats, whose conversion to int32 is undefined when out of range.
  const bool ok = v.is_number_unsigned() ? v.get<std::uint64_t>() <= static_cast<std::uint64_t>(kMaxTokenId)
                                         : v.is_number_integer() && v.get<std::int64_t>() >= 0 &&
                                               v.get<std::int64_t>() <= kMaxTokenId;
  if (!ok) {
    throw FormatError(fmt::format("{}: id (expected an integer in 0..{}, got {})", what, kMaxTokenId,
                                  v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
  }
  return static_cast<std::int32_t>(v.get<std::int64_t>());
}

bool config_bool(const nlohmann::json& config, const std::string& key, bool fallback) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw FormatError(fmt::format("tokenizer config: {}: expected a boolean", key));
  return it->get<bool>();
}

namespace {

// tokenizer_config.json, then special_tokens_map.json over it (HF from_pretrained lets the map's
// entries override), then the caller's overrides.
nlohmann::json merged_config(const TokenizerFiles& f) {
  nlohmann::json config = nlohmann::json::object();
  auto merge = [&config](const nlohmann::json& doc, const std::string& origin) {
    if (!doc.is_object()) throw FormatError(fmt::format("{}: expected a JSON object", origin));
    for (const auto& [k, v] : doc.items()) config[k] = v;
  };
  if (!f.tokenizer_config.empty()) merge(read_json_file(f.tokenizer_config), f.tokenizer_config.string());
  if (!f.special_tokens_map.empty()) merge(read_json_file(f.special_tokens_map), f.special_tokens_map.string());
  merge(f.config_overrides, "tokenizer config overrides");
  return config;
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer_files(const TokenizerFiles& f) {
  const int formats = !f.tokenizer_json.empty() + (!f.vocab_json.empty() || !f.merges_txt.empty()) +
                      !f.sentencepiece_model.empty();
  if (formats != 1) {
    throw ConfigError(fmt::format("load_tokenizer_files: set exactly one tokenizer format (got {})", formats));
  }
  const nlohmann::json config = merged_config(f);
  if (!f.tokenizer_json.empty()) return load_tokenizer_json(f.tokenizer_json, config);
  if (!f.sentencepiece_model.empty()) return load_sentencepiece(f.sentencepiece_model, config);
  if (f.vocab_json.empty() || f.merges_txt.empty()) {
    throw FormatError(fmt::format("{}: GPT-2 BPE needs both a vocabulary and a merges file",
                                  (f.vocab_json.empty() ? f.merges_txt : f.vocab_json).string()));
  }
  return load_gpt2_bpe(f.vocab_json, f.merges_txt, config);
}

std::unique_ptr<Tokenizer> load_tokenizer(const fs::path& dir) {
  if (!fs::is_directory(dir)) throw IoError(fmt::format("{}: not a directory", dir.string()));
  auto has = [&dir](const char* name) { return fs::is_regular_file(dir / name); };
  TokenizerFiles f;
  if (has("tokenizer_config.json")) f.tokenizer_config = dir / "tokenizer_config.json";
  if (has("special_tokens_map.json")) f.special_tokens_map = dir / "special_tokens_map.json";
  if (has("tokenizer.json")) {
    f.tokenizer_json = dir / "tokenizer.json";
  } else if (has("vocab.json") || has("merges.txt")) {
    const char* missing = !has("vocab.json") ? "vocab.json" : !has("merges.txt") ? "merges.txt" : nullptr;
    if (missing != nullptr) {
      throw FormatError(fmt::format("{}: missing (GPT-2 BPE needs vocab.json and merges.txt)",
                                    (dir / missing).string()));
    }
    f.vocab_json = dir / "vocab.json";
    f.merges_txt = dir / "merges.txt";
  } else if (has("encoder.json") && has("vocab.bpe")) {
    f.vocab_json = dir / "encoder.json";
    f.merges_txt = dir / "vocab.bpe";
  } else if (has("tokenizer.model")) {
    f.sentencepiece_model = dir / "tokenizer.model";
  } else {
    throw FormatError(fmt::format(
        "{}: no tokenizer found (looked for tokenizer.json, vocab.json + merges.txt, encoder.json + vocab.bpe, "
        "tokenizer.model)",
        dir.string()));
  }
  return load_tokenizer_files(f);
}

void check_tokenizer_vocab(const Tokenizer& tok, std::int64_t model_vocab_size, const fs::path& model_dir) {
  if (tok.vocab_size() <= model_vocab_size) return;
  throw FormatError(fmt::format("{}: tokenizer vocabulary larger than the model's vocab_size (expected at most {} ids, "
                                "got {})", model_dir.string(), model_vocab_size, tok.vocab_size()));
}

}  // namespace latentllm::io
