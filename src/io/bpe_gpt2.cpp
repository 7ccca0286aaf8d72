// GPT-2 byte-level BPE from vocab.json + merges.txt (OPT, GPT-2, RoBERTa ids), built the way
// transformers' convert_slow_tokenizer.GPT2Converter builds the fast tokenizer: ByteLevel
// pre-tokenizer with the GPT-2 regex, BPE without unk token, the config's special tokens as added
// tokens (split out of the text), and BOS when tokenizer_config.json says add_bos_token (OPT: "</s>").
#include <fmt/format.h>

#include "core/mapped_file.hpp"
#include "io/hf_tokenizer.hpp"
#include "io/tokenizer_loaders.hpp"
#include "latentllm/error.hpp"

namespace latentllm::io {
namespace {

Vocab read_vocab(const std::filesystem::path& file) {
  const nlohmann::json doc = read_json_file(file);
  if (!doc.is_object() || doc.empty()) {
    throw FormatError(fmt::format("{}: expected a non-empty JSON object of token -> id", file.string()));
  }
  Vocab vocab;
  vocab.reserve(doc.size());
  for (const auto& [tok, id] : doc.items()) {
    vocab.emplace(tok, parse_token_id(id, fmt::format("{}: token \"{}\"", file.string(), tok)));
  }
  return vocab;
}

// "#version: ..." header, then one "a b" merge per line, in rank order.
std::vector<std::pair<std::string, std::string>> read_merges(const std::filesystem::path& file) {
  const std::string text = core::read_file(file);
  std::vector<std::pair<std::string, std::string>> merges;
  std::size_t line_no = 0;
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    const std::size_t sp = line.find(' ');
    if (sp == 0 || sp == std::string_view::npos || sp + 1 == line.size() ||
        line.find(' ', sp + 1) != std::string_view::npos) {
      throw FormatError(fmt::format("{}:{}: expected two tokens separated by one space (got \"{}\")", file.string(),
                                    line_no, line));
    }
    merges.emplace_back(std::string(line.substr(0, sp)), std::string(line.substr(sp + 1)));
  }
  if (merges.empty()) throw FormatError(fmt::format("{}: no merges", file.string()));
  return merges;
}

// GPT2Tokenizer's special tokens: bos/eos/unk default to "<|endoftext|>" when the config does not
// name them; pad has no default. Tokens missing from the vocabulary get new ids after it, as HF does.
std::vector<AddedToken> special_tokens(const nlohmann::json& config, Vocab& vocab, std::int32_t& next_id) {
  std::vector<std::string> names;
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    const ConfigToken t = config_token(config, key, "tokenizer_config");
    if (t.value) {
      names.push_back(*t.value);
    } else if (!t.present && std::string(key) != "pad_token") {
      names.push_back("<|endoftext|>");
    }
  }
  if (config.contains("additional_special_tokens") && config["additional_special_tokens"].is_array()) {
    for (const auto& t : config["additional_special_tokens"]) {
      names.push_back(t.is_string() ? t.get<std::string>() : t.at("content").get<std::string>());
    }
  }
  std::vector<AddedToken> out;
  for (const std::string& name : names) {
    bool dup = false;
    for (const AddedToken& t : out) dup = dup || t.content == name;
    if (dup) continue;
    auto it = vocab.find(name);
    const std::int32_t id = it != vocab.end() ? it->second : next_id++;
    out.push_back(AddedToken{name, id, true, false, false, false});
  }
  return out;
}

}  // namespace

std::unique_ptr<Tokenizer> load_gpt2_bpe(const std::filesystem::path& vocab_json,
                                         const std::filesystem::path& merges_txt, const nlohmann::json& config) {
  Vocab vocab = read_vocab(vocab_json);
  const auto merges = read_merges(merges_txt);
  std::int32_t next_id = 0;
  for (const auto& [tok, id] : vocab) next_id = std::max(next_id, id + 1);

  HfTokenizerParts parts;
  parts.kind = "gpt2-bpe";
  parts.origin = vocab_json.string();
  parts.decoder = make_byte_level_decoder();
  try {
    parts.added_tokens = special_tokens(config, vocab, next_id);
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(fmt::format("tokenizer config: unexpected structure ({})", e.what()));
  }
  parts.pre_tokenizer = make_byte_level_pre_tokenizer(config_bool(config, "add_prefix_space", false), true);
  parts.model = std::make_unique<BpeModel>(std::move(vocab), merges, BpeOptions{}, merges_txt.string());
  if (config_bool(config, "add_bos_token", false)) {
    const std::string bos = config_token(config, "bos_token", "tokenizer_config").value.value_or("<|endoftext|>");
    for (const AddedToken& t : parts.added_tokens)
      if (t.content == bos) parts.prefix_ids.push_back(t.id);
  }
  return std::make_unique<HfTokenizer>(std::move(parts));
}

}  // namespace latentllm::io
