// Native tokenizers: GPT-2 byte-level BPE (vocab.json + merges.txt), Hugging Face tokenizer.json
// with a BPE model (ByteLevel, Metaspace / byte-fallback), and SentencePiece tokenizer.model.
//
// Encoding reproduces Hugging Face's default call `tokenizer(text)` id for id (tests compare with
// ../shared/data/tokenizers/*/REFERENCE.json and ../shared/models/*/TOKENIZER_REFERENCE.json):
//  - literal added/special-token text (e.g. "</s>" for OPT, "<|endoftext|>" for GPT-2) is split out
//    as that token, as HF does by default (split_special_tokens = false);
//  - \s in the pre-tokenizer regexes means Unicode White_Space (Oniguruma), so U+0085 is a space and
//    U+FEFF is not;
//  - SentencePiece models follow sentencepiece itself: [bos] + sp.encode(text), where literal "<s>"
//    stays text (HF's slow/fast Llama tokenizers would split it out; perplexity texts never have it).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace latentllm::io {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Token ids of `text` (UTF-8). add_special_tokens = HF's default call: prepends BOS where the
  // model's tokenizer does (OPT: </s> = 2; Llama-2 / TinyStories: BOS = 1; GPT-2, Llama-3: nothing).
  // Throws FormatError if `text` is not valid UTF-8. Thread-safe (no shared mutable state).
  virtual std::vector<std::int32_t> encode(std::string_view text, bool add_special_tokens = true) const = 0;
  // "gpt2-bpe", "tokenizer.json:BPE", "sentencepiece"; for inspect.
  virtual std::string describe() const = 0;
  // Number of ids (largest id + 1, added tokens included).
  virtual std::int64_t vocab_size() const = 0;
  // The id the default call prepends, if any.
  virtual std::optional<std::int32_t> bos_id() const = 0;
  // The vocabulary string of `id` (byte-level / "▁" form, as in the files); empty if out of range.
  virtual std::string id_to_token(std::int32_t id) const = 0;
};

// Loads the tokenizer a model directory ships, in order of preference: tokenizer.json,
// vocab.json + merges.txt, encoder.json + vocab.bpe (OpenAI's GPT-2 names), tokenizer.model;
// tokenizer_config.json and special_tokens_map.json decide BOS handling. Throws FormatError naming
// the file for an unknown or malformed format, or naming the directory and listing what was looked
// for when it holds none of them.
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& model_dir);

// Tokenizer files given one by one, for folders that are not model directories (e.g.
// ../shared/data/tokenizers/*). Set exactly one format; the configs are optional.
struct TokenizerFiles {
  std::filesystem::path tokenizer_json;        // Hugging Face tokenizer.json, or
  std::filesystem::path vocab_json;            // vocab.json / encoder.json, with
  std::filesystem::path merges_txt;            //   merges.txt / vocab.bpe, or
  std::filesystem::path sentencepiece_model;   // tokenizer.model
  std::filesystem::path tokenizer_config;      // tokenizer_config.json (optional)
  std::filesystem::path special_tokens_map;    // special_tokens_map.json (optional; overrides the config)
  // Keys applied over both config files, e.g. {"add_bos_token": true, "bos_token": "</s>"} for an
  // upstream tokenizer_config.json that is not on disk.
  nlohmann::json config_overrides = nlohmann::json::object();
};
std::unique_ptr<Tokenizer> load_tokenizer_files(const TokenizerFiles& files);

}  // namespace latentllm::io
