// SentencePiece tokenizer.model (Llama-2) through libsentencepiece: ids = [bos] + sp.encode(text),
// exactly what sentencepiece gives (the model's own normalizer, dummy prefix and byte fallback).
// BOS/EOS follow tokenizer_config.json add_bos_token (default true) / add_eos_token (default false),
// the LlamaTokenizer defaults.
//
// Added tokens: tokenizer_config.json's "added_tokens_decoder" ({"<id>": {"content", "special", "lstrip",
// "rstrip"}}) lists the tokens transformers adds on top of the model, e.g. LLaVA's <image> = 32000 and
// <pad> = 32001 after Llama-2's 32000 pieces. They are split out of the text first (leftmost-longest, as
// tokenizer.json's added tokens) and every other segment is encoded by sentencepiece on its own, dummy
// prefix included: what the Llama fast tokenizer of such checkpoints gives (its Prepend("▁") normalizer
// runs per segment, hence the "▁" = 29871 after <image> in llava-hf prompts).
//
// Speed: sentencepiece's encoder is superlinear in the input length (WikiText-2 in one call: ~6 s).
// When no piece can span a newline and the normalizer is character-local, long texts are encoded in
// chunks that start at a "\n", which gives the same ids: see chunking_is_exact().
#include <sentencepiece_processor.h>

#include <algorithm>
#include <exception>
#include <new>

#include <fmt/format.h>

#include "core/mapped_file.hpp"
#include "io/hf_components.hpp"
#include "io/tokenizer_loaders.hpp"
#include "io/unicode.hpp"
#include "latentllm/error.hpp"

namespace latentllm::io {
namespace {

// The NormalizerSpec fields of a serialized ModelProto that decide whether chunking is exact
// (protobuf wire format; sentencepiece_model.proto field numbers).
struct NormalizerSpec {
  bool found = false;
  std::string name;
  bool has_charsmap = false;
  bool add_dummy_prefix = true, remove_extra_whitespaces = true, escape_whitespaces = true;
};

bool read_varint(std::string_view b, std::size_t& i, std::uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64 && i < b.size(); shift += 7) {
    const auto c = static_cast<unsigned char>(b[i++]);
    v |= static_cast<std::uint64_t>(c & 0x7F) << shift;
    if ((c & 0x80) == 0) return true;
  }
  return false;
}

// Calls fn(field, wire_type, varint, bytes) for each field of message `b`; false if malformed.
template <typename Fn>
bool for_each_field(std::string_view b, Fn&& fn) {
  std::size_t i = 0;
  while (i < b.size()) {
    std::uint64_t key = 0, v = 0;
    if (!read_varint(b, i, key)) return false;
    const auto wire = static_cast<int>(key & 7);
    std::string_view bytes;
    if (wire == 0) {
      if (!read_varint(b, i, v)) return false;
    } else if (wire == 1 || wire == 5) {
      const std::size_t n = wire == 1 ? 8 : 4;
      if (b.size() - i < n) return false;
      i += n;
    } else if (wire == 2) {
      if (!read_varint(b, i, v) || v > b.size() - i) return false;
      bytes = b.substr(i, v);
      i += v;
    } else {
      return false;
    }
    fn(key >> 3, wire, v, bytes);
  }
  return true;
}

// Why ModelProto.pieces (field 1; SentencePiece.piece = 1) cannot be loaded, or "" if they can.
// libsentencepiece hands the pieces to its bundled darts-clone as C strings, so a piece with a NUL
// byte becomes a shorter key: an empty one makes the trie builder throw an exception the library
// does not catch, a shorter one would silently map text to the wrong piece.
std::string bad_piece(std::string_view model) {
  std::int64_t index = 0;
  std::string why;
  for_each_field(model, [&](std::uint64_t field, int wire, std::uint64_t, std::string_view bytes) {
    if (field != 1 || wire != 2) return;
    for_each_field(bytes, [&](std::uint64_t f, int w, std::uint64_t, std::string_view b) {
      if (f != 1 || w != 2 || !why.empty()) return;
      if (b.empty()) why = fmt::format("piece {} is empty", index);
      if (b.find('\0') != std::string_view::npos) why = fmt::format("piece {} contains a NUL byte", index);
    });
    ++index;
  });
  return why;
}

NormalizerSpec read_normalizer_spec(std::string_view model) {
  NormalizerSpec spec;
  for_each_field(model, [&](std::uint64_t field, int wire, std::uint64_t, std::string_view bytes) {
    if (field != 3 || wire != 2) return;  // ModelProto.normalizer_spec = 3
    spec.found = true;
    for_each_field(bytes, [&](std::uint64_t f, int w, std::uint64_t v, std::string_view b) {
      if (f == 1 && w == 2) spec.name = std::string(b);
      if (f == 2 && w == 2) spec.has_charsmap = !b.empty();
      if (f == 3 && w == 0) spec.add_dummy_prefix = v != 0;
      if (f == 4 && w == 0) spec.remove_extra_whitespaces = v != 0;
      if (f == 5 && w == 0) spec.escape_whitespaces = v != 0;
    });
  });
  return spec;
}

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(const std::filesystem::path& file, const nlohmann::json& config) : origin_(file.string()) {
    const std::string bytes = core::read_file(file);
    if (const std::string why = bad_piece(bytes); !why.empty()) {
      throw FormatError(fmt::format("{}: not a readable SentencePiece model ({})", origin_, why));
    }
    const auto status = guarded("loading", [&] { return sp_.LoadFromSerializedProto(bytes); });
    if (!status.ok()) {
      throw FormatError(fmt::format("{}: not a readable SentencePiece model ({})", origin_, status.ToString()));
    }
    chunkable_ = chunking_is_exact(read_normalizer_spec(bytes));
    if (config_bool(config, "add_bos_token", true)) bos_ = piece_id(config, "bos_token", sp_.bos_id());
    if (config_bool(config, "add_eos_token", false)) eos_ = piece_id(config, "eos_token", sp_.eos_id());
    read_added_tokens(config);
  }

  std::vector<std::int32_t> encode(std::string_view text, bool add_special_tokens) const override {
    check_utf8(text, "text to tokenize");
    std::vector<std::int32_t> out;
    out.reserve(text.size() / 3 + 2);
    if (add_special_tokens && bos_) out.push_back(*bos_);
    if (added_matcher_.empty()) {
      encode_segment(text, out);
    } else {
      std::vector<Piece> pieces;
      added_matcher_.split(Piece{std::string(text), -1, true}, pieces);
      for (const Piece& p : pieces) {
        if (p.added_id >= 0) {
          out.push_back(p.added_id);
        } else {
          encode_segment(p.text, out);
        }
      }
    }
    if (add_special_tokens && eos_) out.push_back(*eos_);
    return out;
  }

  std::string describe() const override { return "sentencepiece"; }
  std::int64_t vocab_size() const override { return vocab_size_; }
  std::optional<std::int32_t> bos_id() const override { return bos_; }
  std::string id_to_token(std::int32_t id) const override {
    if (const AddedToken* t = added_token(id)) return t->content;
    if (id < 0 || id >= sp_.GetPieceSize()) return {};
    return sp_.IdToPiece(id);
  }
  // sentencepiece's decoder over the ids without control and unknown pieces (HF's skip_special_tokens):
  // "▁" -> " ", the first piece's dummy-prefix space dropped, byte pieces joined (U+FFFD for bytes
  // that are not valid UTF-8).
  std::string decode(std::span<const std::int32_t> ids) const override {
    std::string text;
    std::vector<int> run;  // sentencepiece ids up to the next non-special added token
    run.reserve(ids.size());
    for (const std::int32_t id : ids) {
      if (const AddedToken* t = added_token(id); t != nullptr && id >= sp_.GetPieceSize()) {
        if (t->special) continue;
        text += decode_pieces(run) + t->content;
        run.clear();
        continue;
      }
      if (id < 0 || id >= sp_.GetPieceSize()) {
        throw FormatError(fmt::format("{}: token id {} (expected one of the tokenizer's ids, 0..{})", origin_, id,
                                      vocab_size_ - 1));
      }
      if (!sp_.IsControl(id) && !sp_.IsUnknown(id)) run.push_back(id);
    }
    return text + decode_pieces(run);
  }

 private:
  // The id of the config's token (a piece name), else the model's own id; nullopt if neither exists.
  std::optional<std::int32_t> piece_id(const nlohmann::json& config, const char* key, int model_id) const {
    const ConfigToken t = config_token(config, key, origin_);
    if (t.value) {
      const int id = sp_.PieceToId(*t.value);
      if (id == sp_.unk_id() && *t.value != sp_.IdToPiece(sp_.unk_id())) {
        throw FormatError(fmt::format("{}: {} \"{}\" is not a piece of the model", origin_, key, *t.value));
      }
      return id;
    }
    if (model_id < 0) return std::nullopt;
    return model_id;
  }

  // Runs a libsentencepiece call; an exception from inside it (its bundled darts-clone throws on
  // inputs it does not expect) becomes the typed error instead of escaping untyped.
  template <typename Fn>
  sentencepiece::util::Status guarded(const char* what, Fn&& fn) const {
    try {
      return fn();
    } catch (const std::bad_alloc&) {
      throw;
    } catch (const std::exception& e) {
      throw FormatError(fmt::format("{}: not a readable SentencePiece model ({} failed: {})", origin_, what, e.what()));
    }
  }

  // The ids of a text without added tokens, appended to `out` (in chunks where that is exact).
  void encode_segment(std::string_view text, std::vector<std::int32_t>& out) const {
    std::vector<int> ids;
    std::size_t begin = 0;
    while (begin < text.size()) {
      const std::size_t end = chunk_end(text, begin);
      encode_raw(text.substr(begin, end - begin), ids);
      // A later chunk starts with "\n": its dummy-prefix "▁" stands alone; drop it.
      const std::size_t skip = begin > 0 && dummy_prefix_id_ >= 0 ? 1 : 0;
      if (skip == 1 && (ids.empty() || ids[0] != dummy_prefix_id_)) {
        throw FormatError(fmt::format("{}: chunked encoding lost its dummy prefix (internal error)", origin_));
      }
      out.insert(out.end(), ids.begin() + static_cast<std::ptrdiff_t>(skip), ids.end());
      begin = end;
    }
  }

  std::string decode_pieces(const std::vector<int>& ids) const {
    std::string text;
    if (ids.empty()) return text;
    const auto status = guarded("decoding", [&] { return sp_.Decode(ids, &text); });
    if (!status.ok()) throw FormatError(fmt::format("{}: decoding failed ({})", origin_, status.ToString()));
    return text;
  }

  // added_tokens_decoder (header comment); vocab_size_ covers the largest added id.
  void read_added_tokens(const nlohmann::json& config) {
    vocab_size_ = sp_.GetPieceSize();
    const auto it = config.find("added_tokens_decoder");
    if (it == config.end() || it->is_null()) return;
    const std::string where = origin_ + ": tokenizer_config added_tokens_decoder";
    if (!it->is_object()) throw FormatError(fmt::format("{} (expected an object, got {})", where, it->dump()));
    std::vector<std::string> patterns;
    for (const auto& [key, entry] : it->items()) {
      std::int64_t id = -1;
      try {
        std::size_t used = 0;
        id = std::stoll(key, &used);
        if (used != key.size()) id = -1;
      } catch (const std::exception&) {
        id = -1;
      }
      const std::string what = fmt::format("{} \"{}\"", where, key);
      const std::int32_t tok_id = parse_token_id(id >= 0 ? nlohmann::json(id) : nlohmann::json(key), what);
      if (!entry.is_object() || !entry.contains("content") || !entry.at("content").is_string() ||
          entry.at("content").get<std::string>().empty()) {
        throw FormatError(fmt::format("{} (expected {{\"content\": a non-empty string, ...}}, got {})", what,
                                      entry.dump()));
      }
      AddedToken t{entry.at("content").get<std::string>(), tok_id, entry.value("special", false), false,
                   entry.value("lstrip", false), entry.value("rstrip", false)};
      patterns.push_back(t.content);
      added_.push_back(t);
      vocab_size_ = std::max<std::int64_t>(vocab_size_, std::int64_t{tok_id} + 1);
    }
    added_matcher_ = AddedTokenMatcher(std::move(patterns), added_);
  }

  const AddedToken* added_token(std::int32_t id) const {
    for (const AddedToken& t : added_)
      if (t.id == id) return &t;
    return nullptr;
  }

  void encode_raw(std::string_view text, std::vector<int>& ids) const {
    const auto status = guarded("encoding", [&] { return sp_.Encode(text, &ids); });
    if (!status.ok()) throw FormatError(fmt::format("{}: encoding failed ({})", origin_, status.ToString()));
  }

  // End of the chunk starting at `begin`: the first "\n" at or after begin + kChunk, or the end.
  std::size_t chunk_end(std::string_view text, std::size_t begin) const {
    constexpr std::size_t kChunk = 2048;
    if (!chunkable_ || text.size() - begin <= kChunk) return text.size();
    const std::size_t nl = text.find('\n', begin + kChunk);
    return nl == std::string_view::npos ? text.size() : nl;
  }

  // Chunks cut just before a "\n" encode exactly like the whole text when (a) no piece contains
  // "\n", so no piece spans the cut and BPE merges on both sides never interact; (b) the normalizer
  // is the identity map without whitespace removal, so each side normalizes alone as it does in
  // place; (c) the dummy prefix that a later chunk gets is one "▁" token, which (a) keeps separate
  // from the "\n" and which is dropped.
  bool chunking_is_exact(const NormalizerSpec& spec) {
    if (!spec.found || spec.name != "identity" || spec.has_charsmap || spec.remove_extra_whitespaces ||
        !spec.escape_whitespaces) {
      return false;
    }
    for (int id = 0; id < sp_.GetPieceSize(); ++id) {
      if (sp_.IdToPiece(id).find('\n') != std::string::npos) return false;
    }
    std::vector<int> probe;
    encode_raw("\n", probe);
    if (spec.add_dummy_prefix) {
      if (probe.size() < 2 || sp_.IdToPiece(probe[0]) != "\u2581") return false;
      dummy_prefix_id_ = probe[0];
    }
    return true;
  }

  std::string origin_;
  sentencepiece::SentencePieceProcessor sp_;
  std::optional<std::int32_t> bos_, eos_;
  bool chunkable_ = false;
  int dummy_prefix_id_ = -1;  // the "▁" a chunk's dummy prefix becomes; -1 without dummy prefix
  std::vector<AddedToken> added_;     // added_tokens_decoder, in file order
  AddedTokenMatcher added_matcher_;   // splits them out of the text
  std::int64_t vocab_size_ = 0;       // pieces, or the largest added id + 1
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece(const std::filesystem::path& model_file, const nlohmann::json& config) {
  return std::make_unique<SentencePieceTokenizer>(model_file, config);
}

}  // namespace latentllm::io
