// Typed access to the keys of a JSON object read from a downloaded file (config.json today), with one
// message format for every failure: ConfigError "<origin>: <key> (expected X, got Y)" or
// "<origin>: missing key <key> (expected X)". io knows no architecture: the architecture files
// (src/model/opt.cpp, llama.cpp) say which keys they read and with which defaults.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>
#include <string_view>

#include <nlohmann/json.hpp>

namespace latentllm::io {

// Reads and parses a JSON file: IoError when it cannot be read, FormatError "<path>: not valid JSON
// (...)" or "<path>: JSON nesting too deep (...)".
nlohmann::json load_json_file(const std::filesystem::path& path);

class JsonKeys {
 public:
  // Throws ConfigError "<origin>: config (expected a JSON object, got <type>)" unless doc is an object.
  JsonKeys(const nlohmann::json& doc, std::string origin);

  const std::string& origin() const { return origin_; }
  const nlohmann::json& doc() const { return doc_; }
  // nullptr when absent or null (transformers treats null as "use the default").
  const nlohmann::json* find(std::string_view key) const;
  // True when the key is present with the value null (for the few keys where null differs from absent).
  bool is_null(std::string_view key) const;
  [[noreturn]] void fail(std::string_view key, std::string_view expected, const nlohmann::json* got) const;

  std::int64_t positive(std::string_view key) const;
  std::int64_t positive_or(std::string_view key, std::int64_t fallback) const;
  double positive_number_or(std::string_view key, double fallback) const;
  bool boolean_or(std::string_view key, bool fallback) const;
  std::string string_or(std::string_view key, std::string fallback) const;
  // bos/eos/pad ids: an integer, or a list of integers (the first is returned).
  std::optional<std::int64_t> token_id(std::string_view key) const;
  // Every id of such a key (empty when absent or null; ConfigError as token_id for anything else).
  std::vector<std::int64_t> token_ids(std::string_view key) const;
  // ConfigError "<origin>: <key> <value> (expected a multiple of <of_key> <of>)".
  void check_multiple(std::string_view key, std::int64_t value, std::string_view of_key, std::int64_t of) const;

 private:
  const nlohmann::json& doc_;
  std::string origin_;
};

// A JSON value for an error message, cut to a readable length (80 characters).
std::string brief(const nlohmann::json& v);

}  // namespace latentllm::io
