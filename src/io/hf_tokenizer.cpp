#include "io/hf_tokenizer.hpp"

#include <fmt/format.h>

#include "io/unicode.hpp"
#include "latentllm/error.hpp"

namespace latentllm::io {

HfTokenizer::HfTokenizer(HfTokenizerParts parts) : parts_(std::move(parts)) {
  std::vector<std::string> raw_patterns, norm_patterns;
  std::vector<AddedToken> raw_tokens, norm_tokens;
  for (const AddedToken& t : parts_.added_tokens) {
    if (t.normalized) {
      std::string pattern = t.content;
      if (parts_.normalizer) parts_.normalizer->normalize(pattern);
      norm_patterns.push_back(std::move(pattern));
      norm_tokens.push_back(t);
    } else {
      raw_patterns.push_back(t.content);
      raw_tokens.push_back(t);
    }
  }
  raw_matcher_ = AddedTokenMatcher(std::move(raw_patterns), std::move(raw_tokens));
  normalized_matcher_ = AddedTokenMatcher(std::move(norm_patterns), std::move(norm_tokens));

  // Ids are in [0, kMaxTokenId] (the loaders check), so the largest + 1 does not overflow.
  id_to_token_.reserve(parts_.model->vocab().size() + parts_.added_tokens.size());
  for (const auto& [tok, id] : parts_.model->vocab()) id_to_token_[id] = tok;
  for (const AddedToken& t : parts_.added_tokens) {
    id_to_token_[t.id] = t.content;
    if (t.special) special_ids_.insert(t.id);
  }
  for (const auto& [id, tok] : id_to_token_) vocab_size_ = std::max<std::int64_t>(vocab_size_, std::int64_t{id} + 1);
}

std::optional<std::int32_t> HfTokenizer::bos_id() const {
  if (parts_.prefix_ids.empty()) return std::nullopt;
  return parts_.prefix_ids.front();
}

std::string HfTokenizer::id_to_token(std::int32_t id) const {
  const auto it = id_to_token_.find(id);
  return it == id_to_token_.end() ? std::string() : it->second;
}

std::string HfTokenizer::decode(std::span<const std::int32_t> ids) const {
  if (!parts_.decoder_error.empty()) throw FormatError(parts_.decoder_error);
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const std::int32_t id : ids) {
    const auto it = id_to_token_.find(id);
    if (it == id_to_token_.end()) {
      throw FormatError(fmt::format("{}: token id {} (expected one of the tokenizer's ids, 0..{})", parts_.origin, id,
                                    vocab_size_ - 1));
    }
    if (!special_ids_.contains(id)) tokens.push_back(it->second);
  }
  std::string out;
  if (parts_.decoder) {
    parts_.decoder->decode_chain(tokens);
    for (const std::string& t : tokens) out += t;
  } else {
    for (std::size_t i = 0; i < tokens.size(); ++i) out += (i > 0 ? " " : "") + tokens[i];
  }
  return out;
}

// Steps 1-2 of the pipeline (tokenizers' AddedVocabulary::extract_and_normalize).
std::vector<Piece> HfTokenizer::split_and_normalize(std::string_view text) const {
  std::vector<Piece> raw;
  raw_matcher_.split(Piece{std::string(text), -1, true}, raw);
  std::vector<Piece> out;
  out.reserve(raw.size());
  for (Piece& p : raw) {
    if (p.added_id >= 0) {
      out.push_back(std::move(p));
      continue;
    }
    if (parts_.normalizer) parts_.normalizer->normalize(p.text);
    normalized_matcher_.split(std::move(p), out);
  }
  return out;
}

std::vector<std::int32_t> HfTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  check_utf8(text, "text to tokenize");
  std::vector<Piece> pieces = split_and_normalize(text);
  if (parts_.pre_tokenizer) {
    std::vector<Piece> words;
    words.reserve(text.size() / 4 + 1);
    for (Piece& p : pieces) {
      if (p.added_id >= 0) {
        words.push_back(std::move(p));
      } else {
        parts_.pre_tokenizer->split(std::move(p), words);
      }
    }
    pieces = std::move(words);
  }

  std::vector<std::int32_t> ids;
  ids.reserve(text.size() / 3 + parts_.prefix_ids.size() + parts_.suffix_ids.size());
  if (add_special_tokens) ids.insert(ids.end(), parts_.prefix_ids.begin(), parts_.prefix_ids.end());
  // Word cache for this call (tokenizers caches words shorter than 256 characters the same way);
  // values are [begin, end) ranges into `cached`.
  constexpr std::size_t kMaxCachedBytes = 256;
  std::unordered_map<std::string, std::pair<std::size_t, std::size_t>, StringHash, std::equal_to<>> cache;
  std::vector<std::int32_t> cached;
  for (const Piece& p : pieces) {
    if (p.added_id >= 0) {
      ids.push_back(p.added_id);
      continue;
    }
    if (p.text.size() >= kMaxCachedBytes) {
      parts_.model->tokenize(p.text, ids);
      continue;
    }
    auto it = cache.find(std::string_view(p.text));
    if (it == cache.end()) {
      const std::size_t begin = cached.size();
      parts_.model->tokenize(p.text, cached);
      it = cache.emplace(p.text, std::pair{begin, cached.size()}).first;
    }
    ids.insert(ids.end(), cached.begin() + static_cast<std::ptrdiff_t>(it->second.first),
               cached.begin() + static_cast<std::ptrdiff_t>(it->second.second));
  }
  if (add_special_tokens) ids.insert(ids.end(), parts_.suffix_ids.begin(), parts_.suffix_ids.end());
  return ids;
}

}  // namespace latentllm::io
