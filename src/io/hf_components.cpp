#include "io/hf_components.hpp"

#include <algorithm>
#include <cstring>

#include "io/unicode.hpp"

namespace latentllm::io {

const char kGpt2Pattern[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

namespace {

void push_piece(std::vector<Piece>& out, std::string_view text, std::int32_t id, bool at_start) {
  if (!text.empty()) out.push_back(Piece{std::string(text), id, at_start});
}

// Byte index where the trailing White_Space of `s` begins.
std::size_t space_leftmost_at_end(std::string_view s) {
  std::size_t end = s.size();
  while (end > 0) {
    std::size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    std::size_t i = start;
    if (!is_white_space(next_code_point(s, i))) break;
    end = start;
  }
  return end;
}

// Byte length of the leading White_Space of `s`.
std::size_t space_rightmost_at_start(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t next = i;
    if (!is_white_space(next_code_point(s, next))) break;
    i = next;
  }
  return i;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Added tokens

AddedTokenMatcher::AddedTokenMatcher(std::vector<std::string> patterns, std::vector<AddedToken> tokens)
    : patterns_(std::move(patterns)), tokens_(std::move(tokens)), by_first_byte_(256) {
  for (std::size_t k = 0; k < patterns_.size(); ++k) {
    if (!patterns_[k].empty()) by_first_byte_[static_cast<unsigned char>(patterns_[k][0])].push_back(k);
  }
  for (auto& list : by_first_byte_) {
    std::stable_sort(list.begin(), list.end(),
                     [this](std::size_t a, std::size_t b) { return patterns_[a].size() > patterns_[b].size(); });
  }
}

void AddedTokenMatcher::split(Piece&& in, std::vector<Piece>& out) const {
  const std::string_view s = in.text;
  std::size_t start_offset = 0;  // end of the last emitted piece
  std::size_t pos = 0;
  while (pos < s.size()) {
    const std::size_t* hit = nullptr;
    for (const std::size_t& k : by_first_byte_[static_cast<unsigned char>(s[pos])]) {
      const std::string& p = patterns_[k];
      if (p.size() <= s.size() - pos && std::memcmp(s.data() + pos, p.data(), p.size()) == 0) {
        hit = &k;  // longest first, so the first hit is the leftmost-longest match
        break;
      }
    }
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    const AddedToken& tok = tokens_[*hit];
    std::size_t start = pos, stop = pos + patterns_[*hit].size();
    if (tok.lstrip) start = std::max(space_leftmost_at_end(s.substr(0, start)), start_offset);
    if (tok.rstrip) stop += space_rightmost_at_start(s.substr(stop));
    push_piece(out, s.substr(start_offset, start - start_offset), -1, in.at_start && start_offset == 0);
    out.push_back(Piece{std::string(s.substr(start, stop - start)), tok.id, false});
    start_offset = pos = stop;
  }
  if (start_offset == 0) {
    if (!in.text.empty()) out.push_back(std::move(in));
  } else {
    push_piece(out, s.substr(start_offset), -1, false);
  }
}

// ---------------------------------------------------------------------------------------------
// Normalizers

namespace {

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(std::string& s) const override {
    for (const auto& p : parts_) p->normalize(s);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prepend) : prepend_(std::move(prepend)) {}
  void normalize(std::string& s) const override {
    if (!s.empty()) s.insert(0, prepend_);
  }

 private:
  std::string prepend_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(std::string pattern, std::unique_ptr<Regex> regex, std::string content)
      : pattern_(std::move(pattern)), regex_(std::move(regex)), content_(std::move(content)) {}
  void normalize(std::string& s) const override {
    std::vector<MatchRange> matches;
    if (regex_) {
      regex_->find_all(s, matches);
    } else if (!pattern_.empty()) {
      for (std::size_t p = s.find(pattern_); p != std::string::npos; p = s.find(pattern_, p + pattern_.size())) {
        matches.emplace_back(p, p + pattern_.size());
      }
    }
    if (matches.empty()) return;
    std::string out;
    out.reserve(s.size() + matches.size() * content_.size());
    std::size_t prev = 0;
    for (const auto& [b, e] : matches) {
      out.append(s, prev, b - prev);
      out += content_;
      prev = e;
    }
    out.append(s, prev, std::string::npos);
    s = std::move(out);
  }

 private:
  std::string pattern_;
  std::unique_ptr<Regex> regex_;
  std::string content_;
};

class NfcNormalizer final : public Normalizer {
 public:
  void normalize(std::string& s) const override { s = nfc(s); }
};

}  // namespace

std::unique_ptr<Normalizer> make_sequence_normalizer(std::vector<std::unique_ptr<Normalizer>> parts) {
  return std::make_unique<SequenceNormalizer>(std::move(parts));
}
std::unique_ptr<Normalizer> make_prepend_normalizer(std::string prepend) {
  return std::make_unique<PrependNormalizer>(std::move(prepend));
}
std::unique_ptr<Normalizer> make_replace_normalizer(std::string pattern, std::unique_ptr<Regex> regex,
                                                    std::string content) {
  return std::make_unique<ReplaceNormalizer>(std::move(pattern), std::move(regex), std::move(content));
}
std::unique_ptr<Normalizer> make_nfc_normalizer() { return std::make_unique<NfcNormalizer>(); }

// ---------------------------------------------------------------------------------------------
// Pre-tokenizers

std::vector<MatchRange> apply_split_behavior(std::size_t text_size, const std::vector<MatchRange>& matches,
                                             SplitBehavior behavior, bool invert) {
  struct Part {
    MatchRange r;
    bool is_match;
  };
  std::vector<Part> parts;  // the whole text as alternating gaps and matches
  parts.reserve(matches.size() * 2 + 1);
  std::size_t prev = 0;
  for (const auto& m : matches) {
    if (prev != m.first) parts.push_back({{prev, m.first}, invert});
    parts.push_back({m, !invert});
    prev = m.second;
  }
  if (prev != text_size) parts.push_back({{prev, text_size}, invert});

  std::vector<MatchRange> out;
  out.reserve(parts.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::Removed:
      for (const auto& p : parts)
        if (!p.is_match) out.push_back(p.r);
      break;
    case SplitBehavior::Isolated:
      for (const auto& p : parts) out.push_back(p.r);
      break;
    case SplitBehavior::MergedWithPrevious:
      for (const auto& p : parts) {
        if (p.is_match && !previous_match && !out.empty()) {
          out.back().second = p.r.second;
        } else {
          out.push_back(p.r);
        }
        previous_match = p.is_match;
      }
      break;
    case SplitBehavior::MergedWithNext:
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty()) {
          out.back().first = it->r.first;
        } else {
          out.push_back(it->r);
        }
        previous_match = it->is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
    case SplitBehavior::Contiguous:
      for (const auto& p : parts) {
        if (p.is_match == previous_match && !out.empty()) {
          out.back().second = p.r.second;
        } else {
          out.push_back(p.r);
        }
        previous_match = p.is_match;
      }
      break;
  }
  std::erase_if(out, [](const MatchRange& r) { return r.first == r.second; });
  return out;
}

namespace {

void emit_ranges(Piece&& in, const std::vector<MatchRange>& ranges, std::vector<Piece>& out) {
  if (ranges.size() == 1 && ranges[0].first == 0 && ranges[0].second == in.text.size()) {
    out.push_back(std::move(in));
    return;
  }
  for (const auto& [b, e] : ranges) push_piece(out, std::string_view(in.text).substr(b, e - b), -1, in.at_start && b == 0);
}

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void split(Piece&& in, std::vector<Piece>& out) const override {
    std::vector<Piece> cur, next;
    cur.push_back(std::move(in));
    for (const auto& p : parts_) {
      next.clear();
      for (auto& piece : cur) p->split(std::move(piece), next);
      std::swap(cur, next);
    }
    for (auto& piece : cur) out.push_back(std::move(piece));
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Regex> regex, SplitBehavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}
  void split(Piece&& in, std::vector<Piece>& out) const override {
    std::vector<MatchRange> matches;
    regex_->find_all(in.text, matches);
    emit_ranges(std::move(in), apply_split_behavior(in.text.size(), matches, behavior_, invert_), out);
  }

 private:
  std::unique_ptr<Regex> regex_;
  SplitBehavior behavior_;
  bool invert_;
};

const Regex& gpt2_regex() {
  static const Regex regex(kGpt2Pattern, false, "ByteLevel pre-tokenizer");
  return regex;
}

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {}
  void split(Piece&& in, std::vector<Piece>& out) const override {
    if (add_prefix_space_ && in.text[0] != ' ') in.text.insert(in.text.begin(), ' ');
    const std::size_t first = out.size();
    if (use_regex_) {
      std::vector<MatchRange> matches;
      gpt2_regex().find_all(in.text, matches);
      emit_ranges(std::move(in), apply_split_behavior(in.text.size(), matches, SplitBehavior::Isolated, false), out);
    } else {
      out.push_back(std::move(in));
    }
    const auto& alphabet = byte_level_alphabet();
    for (std::size_t k = first; k < out.size(); ++k) {
      std::string mapped;
      mapped.reserve(out[k].text.size() * 2);
      for (unsigned char b : out[k].text) mapped += alphabet[b];
      out[k].text = std::move(mapped);
    }
  }

 private:
  bool add_prefix_space_, use_regex_;
};

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void split(Piece&& in, std::vector<Piece>& out) const override {
    std::string s;
    s.reserve(in.text.size() + replacement_.size());
    for (char c : in.text) {
      if (c == ' ') {
        s += replacement_;
      } else {
        s += c;
      }
    }
    const bool starts = s.compare(0, replacement_.size(), replacement_) == 0;
    if (!starts && (scheme_ == PrependScheme::Always || (scheme_ == PrependScheme::First && in.at_start))) {
      s.insert(0, replacement_);
    }
    in.text = std::move(s);
    if (!split_) {
      out.push_back(std::move(in));
      return;
    }
    std::vector<MatchRange> matches;
    for (std::size_t p = in.text.find(replacement_); p != std::string::npos;
         p = in.text.find(replacement_, p + replacement_.size())) {
      matches.emplace_back(p, p + replacement_.size());
    }
    emit_ranges(std::move(in), apply_split_behavior(in.text.size(), matches, SplitBehavior::MergedWithNext, false),
                out);
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_sequence_pre_tokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts) {
  return std::make_unique<SequencePreTokenizer>(std::move(parts));
}
std::unique_ptr<PreTokenizer> make_split_pre_tokenizer(std::unique_ptr<Regex> regex, SplitBehavior behavior,
                                                       bool invert) {
  return std::make_unique<SplitPreTokenizer>(std::move(regex), behavior, invert);
}
std::unique_ptr<PreTokenizer> make_byte_level_pre_tokenizer(bool add_prefix_space, bool use_regex) {
  return std::make_unique<ByteLevelPreTokenizer>(add_prefix_space, use_regex);
}
std::unique_ptr<PreTokenizer> make_metaspace_pre_tokenizer(std::string replacement, PrependScheme scheme, bool split) {
  return std::make_unique<MetaspacePreTokenizer>(std::move(replacement), scheme, split);
}

}  // namespace latentllm::io
