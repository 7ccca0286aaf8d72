// Loaders behind load_tokenizer / load_tokenizer_files, one per format. `config` is the merged
// tokenizer_config.json + special_tokens_map.json + overrides (an object, possibly empty).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "latentllm/tokenizer.hpp"

namespace latentllm::io {

std::unique_ptr<Tokenizer> load_tokenizer_json(const std::filesystem::path& file, const nlohmann::json& config);
std::unique_ptr<Tokenizer> load_gpt2_bpe(const std::filesystem::path& vocab_json,
                                         const std::filesystem::path& merges_txt, const nlohmann::json& config);
std::unique_ptr<Tokenizer> load_sentencepiece(const std::filesystem::path& model_file, const nlohmann::json& config);

// Reads and parses a JSON file; FormatError "<file>: invalid JSON (...)" or IoError.
nlohmann::json read_json_file(const std::filesystem::path& file);

// A special-token entry of a tokenizer config: a string, {"content": ...} (AddedToken), or null.
struct ConfigToken {
  bool present = false;              // the key exists (possibly null)
  std::optional<std::string> value;  // nullopt when absent or null
};
// Throws FormatError "<origin>: <key>: ..." for any other JSON type.
ConfigToken config_token(const nlohmann::json& config, const std::string& key, const std::string& origin);

// Token ids of vocabularies, added tokens and templates: integers in [0, kMaxTokenId]. The bound is far
// above any released vocabulary (~260k) and leaves room for the ids loaders append without overflow.
inline constexpr std::int32_t kMaxTokenId = (1 << 30) - 1;
// `v` as a token id; throws FormatError "<what>: id (expected an integer in 0..1073741823, got X)".
std::int32_t parse_token_id(const nlohmann::json& v, const std::string& what);

// config[key] as a bool, `fallback` if absent or null.
bool config_bool(const nlohmann::json& config, const std::string& key, bool fallback);

}  // namespace latentllm::io
