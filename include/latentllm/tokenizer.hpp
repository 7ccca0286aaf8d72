// Native tokenizers: GPT-2 byte-level BPE (vocab.json + merges.txt), Hugging Face tokenizer.json
// with a BPE model (ByteLevel, Metaspace / byte-fallback), and SentencePiece tokenizer.model.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace latentllm::io {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Token ids of `text` (UTF-8). add_special_tokens = HF's default call: prepends BOS where the
  // model's tokenizer does (OPT: </s> = 2; Llama-2 / TinyStories: BOS = 1; GPT-2, Llama-3: nothing).
  virtual std::vector<std::int32_t> encode(std::string_view text, bool add_special_tokens = true) const = 0;
  // "gpt2-bpe", "tokenizer.json:BPE", "sentencepiece"; for inspect.
  virtual std::string describe() const = 0;
  virtual std::int64_t vocab_size() const = 0;
  virtual std::optional<std::int32_t> bos_id() const = 0;
};

// Loads the tokenizer a model directory ships, in order of preference: tokenizer.json,
// vocab.json + merges.txt, tokenizer.model; tokenizer_config.json and special_tokens_map.json
// decide BOS handling. Throws FormatError naming the file for an unknown or malformed format.
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& model_dir);

}  // namespace latentllm::io
