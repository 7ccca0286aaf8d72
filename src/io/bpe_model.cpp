#include "io/bpe_model.hpp"

#include <queue>

#include <fmt/format.h>

#include "io/unicode.hpp"
#include "latentllm/error.hpp"

namespace latentllm::io {

BpeModel::BpeModel(Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
                   const std::string& origin)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  merges_.reserve(merges.size() * 2);
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const auto ia = token_to_id(a), ib = token_to_id(b), inew = token_to_id(a + b);
    if (!ia || !ib || !inew) {
      throw FormatError(fmt::format("{}: merge {} \"{} {}\": token \"{}\" is not in the vocabulary", origin, rank,
                                    a, b, !ia ? a : !ib ? b : a + b));
    }
    // A repeated pair keeps its last rank, as tokenizers' HashMap collect does.
    merges_.insert_or_assign(pair_key(*ia, *ib), Merge{static_cast<std::int32_t>(rank), *inew});
  }
  if (options_.unk_token) {
    unk_id_ = token_to_id(*options_.unk_token);
    if (!unk_id_) {
      throw FormatError(fmt::format("{}: unk_token \"{}\" is not in the vocabulary", origin, *options_.unk_token));
    }
  }
  for (int b = 0; b < 256; ++b) {
    const auto id = token_to_id(fmt::format("<0x{:02X}>", b));
    byte_ids_[b] = id ? *id : -1;
  }
}

std::optional<std::int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

// One symbol per character; unknown characters become byte tokens or (fused) unk tokens exactly as
// tokenizers' BPE::merge_word does. (Its quirk is kept: a pending unk is not flushed before byte
// tokens, so it lands after them.)
void BpeModel::initial_symbols(std::string_view word, std::vector<Symbol>& symbols) const {
  std::optional<std::int32_t> pending_unk;
  auto add = [&symbols](std::int32_t id) { symbols.push_back(Symbol{id, -1, -1, false}); };
  for (std::size_t i = 0; i < word.size();) {
    const std::size_t start = i;
    i += utf8_length(static_cast<unsigned char>(word[i]));
    const std::string_view ch = word.substr(start, i - start);
    if (auto id = token_to_id(ch)) {
      if (pending_unk) add(*pending_unk), pending_unk.reset();
      add(*id);
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (unsigned char b : ch) all = all && byte_ids_[b] >= 0;
      if (all) {
        for (unsigned char b : ch) add(byte_ids_[b]);
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk && !options_.fuse_unk) add(*pending_unk);
      pending_unk = *unk_id_;
    }
    // With no unk token the character is dropped, as in tokenizers.
  }
  if (pending_unk) add(*pending_unk);
  for (std::size_t k = 0; k < symbols.size(); ++k) {
    symbols[k].prev = static_cast<std::int32_t>(k) - 1;
    symbols[k].next = k + 1 < symbols.size() ? static_cast<std::int32_t>(k + 1) : -1;
  }
}

// tokenizers' Word::merge_all: a min-heap of candidate merges ordered by (rank, position); stale
// entries (a side already merged away) are skipped.
void BpeModel::merge_all(std::vector<Symbol>& symbols) const {
  struct Candidate {
    std::int32_t rank, pos, new_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto push_pair = [&](std::int32_t left) {
    const std::int32_t right = symbols[left].next;
    if (right < 0) return;
    auto it = merges_.find(pair_key(symbols[left].id, symbols[right].id));
    if (it != merges_.end()) queue.push({it->second.rank, left, it->second.new_id});
  };
  for (std::int32_t k = 0; k + 1 < static_cast<std::int32_t>(symbols.size()); ++k) push_pair(k);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.removed || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    auto it = merges_.find(pair_key(left.id, right.id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;
    left.id = top.new_id;
    right.removed = true;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
}

void BpeModel::tokenize(std::string_view word, std::vector<std::int32_t>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (auto id = token_to_id(word)) {
      out.push_back(*id);
      return;
    }
  }
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  initial_symbols(word, symbols);
  merge_all(symbols);
  for (const Symbol& s : symbols) {
    if (!s.removed) out.push_back(s.id);
  }
}

}  // namespace latentllm::io
