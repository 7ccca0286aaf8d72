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
#include <span>
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
  // The text of `ids` as Hugging Face's tokenizer.decode(ids, skip_special_tokens=True) gives it,
  // without clean_up_tokenization_spaces: special tokens are skipped (BOS, EOS, SentencePiece's
  // control and unknown pieces), the tokenizer's decoder applies (tokenizer.json "decoder": ByteLevel,
  // Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence; GPT-2 BPE: ByteLevel; SentencePiece:
  // sentencepiece's own decoder), so the leading space of the first word is dropped where the
  // tokenizer does (Metaspace, Strip, SentencePiece's dummy prefix) and kept where it does not (byte
  // level). Bytes that do not form valid UTF-8 (a character whose bytes are split across tokens and
  // not all there yet) become U+FFFD, so the result is valid UTF-8. Throws FormatError "<file>: token
  // id <id> (expected one of the tokenizer's ids, 0..<V − 1>)" for an id the tokenizer does not have,
  // and "<file>: decoder: type \"X\" is not supported (...)" for an unsupported tokenizer.json decoder.
  virtual std::string decode(std::span<const std::int32_t> ids) const = 0;
};

// Incremental detokenization: the text that ids add, one at a time, after a prefix (the prompt). Each
// push decodes the whole sequence (Tokenizer::decode) and returns what it adds after the text already
// returned, so the pieces concatenate to decode(prefix + ids) after decode(prefix) exactly, for every
// tokenizer rule (a leading space dropped after BOS, bytes of one character split across tokens). A
// trailing U+FFFD, which may be an incomplete character that the next token completes, is held back
// until a later push or finish().
class TextStream {
 public:
  TextStream(const Tokenizer& tok, std::vector<std::int32_t> prefix);
  // Appends id; returns the text it makes final (possibly empty). Throws as Tokenizer::decode.
  std::string push(std::int32_t id);
  // The text held back at the end of the stream.
  std::string finish();
  // Everything returned so far.
  const std::string& text() const { return emitted_; }

 private:
  const Tokenizer& tok_;
  std::vector<std::int32_t> ids_;
  std::string prefix_text_;  // decode(prefix)
  std::string emitted_;      // returned after prefix_text_
  std::string full_;         // the last decode(prefix + ids)
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

// Refuses a tokenizer with more ids than the model's embedding has rows (config.json `vocab_size`): its
// largest ids would index past the embedding and every result would be wrong. A smaller vocabulary is
// fine (embeddings padded to a multiple). Throws FormatError "<model_dir>: tokenizer vocabulary larger
// than the model's vocab_size (expected at most <vocab_size> ids, got <n>)".
void check_tokenizer_vocab(const Tokenizer& tok, std::int64_t model_vocab_size, const std::filesystem::path& model_dir);

}  // namespace latentllm::io
