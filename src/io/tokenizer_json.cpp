// Hugging Face tokenizer.json with a BPE model. Supported components (anything else is a FormatError
// naming the file and the component):
//   normalizer:     Sequence, Prepend, Replace (String or Regex), NFC
//   pre_tokenizer:  Sequence, Split (String or Regex, every behavior, invert), ByteLevel, Metaspace
//   model:          BPE (merges as "a b" strings or [a, b] pairs; byte_fallback, fuse_unk, ignore_merges)
//   post_processor: TemplateProcessing, ByteLevel (adds nothing), Sequence of those
//   decoder:        ByteLevel, Metaspace, Replace (String), ByteFallback, Fuse, Strip, Sequence (decode
//                   only: another decoder fails decode(), not the load)
// The truncation and padding sections do not affect encoding and are ignored (transformers disables
// truncation/padding unless a call asks for them).
#include <fmt/format.h>

#include "io/hf_tokenizer.hpp"
#include "io/tokenizer_loaders.hpp"
#include "io/unicode.hpp"
#include "latentllm/error.hpp"

namespace latentllm::io {
namespace {

using nlohmann::json;

std::string type_of(const json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    throw FormatError(fmt::format("{}: expected an object with a \"type\"", where));
  }
  return j["type"].get<std::string>();
}

[[noreturn]] void unsupported(const std::string& where, const std::string& type, const char* supported) {
  throw FormatError(fmt::format("{}: type \"{}\" is not supported (supported: {})", where, type, supported));
}

// {"Regex": "..."} or {"String": "..."}.
std::unique_ptr<Regex> parse_pattern(const json& pattern, const std::string& where) {
  if (pattern.contains("Regex")) return std::make_unique<Regex>(pattern["Regex"].get<std::string>(), false, where);
  if (pattern.contains("String")) return std::make_unique<Regex>(pattern["String"].get<std::string>(), true, where);
  throw FormatError(fmt::format("{}: pattern must be {{\"Regex\": ...}} or {{\"String\": ...}}", where));
}

std::unique_ptr<Normalizer> parse_normalizer(const json& j, const std::string& where) {
  const std::string type = type_of(j, where);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (const auto& n : j.at("normalizers")) parts.push_back(parse_normalizer(n, where));
    return make_sequence_normalizer(std::move(parts));
  }
  if (type == "Prepend") return make_prepend_normalizer(j.at("prepend").get<std::string>());
  if (type == "Replace") {
    const json& p = j.at("pattern");
    std::string content = j.at("content").get<std::string>();
    if (p.contains("String")) return make_replace_normalizer(p["String"].get<std::string>(), nullptr, content);
    return make_replace_normalizer({}, parse_pattern(p, where + ".pattern"), content);
  }
  if (type == "NFC") return make_nfc_normalizer();
  unsupported(where, type, "Sequence, Prepend, Replace, NFC");
}

SplitBehavior parse_behavior(const std::string& b, const std::string& where) {
  if (b == "Removed") return SplitBehavior::Removed;
  if (b == "Isolated") return SplitBehavior::Isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (b == "Contiguous") return SplitBehavior::Contiguous;
  throw FormatError(fmt::format("{}: unknown split behavior \"{}\"", where, b));
}

std::unique_ptr<PreTokenizer> parse_metaspace(const json& j, const std::string& where) {
  const std::string replacement = j.value("replacement", std::string("\u2581"));
  // tokenizers reads a `char`; an empty replacement would also make the split loop stand still.
  std::size_t first_end = 0;  // byte length of the first character
  if (!replacement.empty()) next_code_point(replacement, first_end);
  if (replacement.empty() || first_end != replacement.size()) {
    throw FormatError(
        fmt::format("{}: Metaspace replacement (expected one character, got \"{}\")", where, replacement));
  }
  PrependScheme scheme = PrependScheme::Always;
  if (j.contains("prepend_scheme")) {
    const std::string s = j["prepend_scheme"].get<std::string>();
    if (s == "always") {
      scheme = PrependScheme::Always;
    } else if (s == "first") {
      scheme = PrependScheme::First;
    } else if (s == "never") {
      scheme = PrependScheme::Never;
    } else {
      throw FormatError(fmt::format("{}: unknown prepend_scheme \"{}\"", where, s));
    }
  } else if (j.contains("add_prefix_space")) {  // older files
    scheme = j["add_prefix_space"].get<bool>() ? PrependScheme::Always : PrependScheme::Never;
  }
  return make_metaspace_pre_tokenizer(replacement, scheme, j.value("split", true));
}

std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const json& j, const std::string& where) {
  const std::string type = type_of(j, where);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (const auto& p : j.at("pretokenizers")) parts.push_back(parse_pre_tokenizer(p, where));
    return make_sequence_pre_tokenizer(std::move(parts));
  }
  if (type == "Split") {
    return make_split_pre_tokenizer(parse_pattern(j.at("pattern"), where + ".pattern"),
                                    parse_behavior(j.at("behavior").get<std::string>(), where),
                                    j.value("invert", false));
  }
  if (type == "ByteLevel") {
    return make_byte_level_pre_tokenizer(j.value("add_prefix_space", true), j.value("use_regex", true));
  }
  if (type == "Metaspace") return parse_metaspace(j, where);
  unsupported(where, type, "Sequence, Split, ByteLevel, Metaspace");
}

std::vector<AddedToken> parse_added_tokens(const json& list) {
  std::vector<AddedToken> out;
  for (const auto& t : list) {
    if (t.value("single_word", false)) {
      throw FormatError(fmt::format("added token \"{}\": single_word is not supported",
                                    t.at("content").get<std::string>()));
    }
    const std::string content = t.at("content").get<std::string>();
    out.push_back(AddedToken{content, parse_token_id(t.at("id"), fmt::format("added token \"{}\"", content)),
                             t.value("special", false), t.value("normalized", false), t.value("lstrip", false),
                             t.value("rstrip", false)});
  }
  return out;
}

std::unique_ptr<BpeModel> parse_model(const json& m, const std::string& where) {
  const std::string type = m.contains("type") ? m["type"].get<std::string>() : std::string("BPE");
  if (type != "BPE") unsupported(where, type, "BPE");
  if (m.contains("dropout") && !m["dropout"].is_null() && m["dropout"].get<double>() != 0.0) {
    throw FormatError(fmt::format("{}: BPE dropout is not supported (non-deterministic)", where));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (m.contains(key) && !m[key].is_null() && !m[key].get<std::string>().empty()) {
      throw FormatError(fmt::format("{}: non-empty {} is not supported", where, key));
    }
  }
  Vocab vocab;
  vocab.reserve(m.at("vocab").size());
  for (const auto& [tok, id] : m.at("vocab").items()) {
    vocab.emplace(tok, parse_token_id(id, fmt::format("{}: vocab \"{}\"", where, tok)));
  }
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(m.at("merges").size());
  for (const auto& e : m.at("merges")) {
    if (e.is_array() && e.size() == 2) {
      merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
      continue;
    }
    const std::string s = e.get<std::string>();
    const std::size_t sp = s.find(' ');
    if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
      throw FormatError(fmt::format("{}: merge \"{}\" is not two tokens separated by one space", where, s));
    }
    merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
  }
  BpeOptions opt;
  if (m.contains("unk_token") && !m["unk_token"].is_null()) opt.unk_token = m["unk_token"].get<std::string>();
  opt.fuse_unk = m.value("fuse_unk", false);
  opt.byte_fallback = m.value("byte_fallback", false);
  opt.ignore_merges = m.value("ignore_merges", false);
  return std::make_unique<BpeModel>(std::move(vocab), merges, std::move(opt), where);
}

struct TokenResolver {
  const std::vector<AddedToken>& added;
  const BpeModel& model;
  std::string where;
  std::int32_t operator()(const std::string& token) const {
    for (const AddedToken& t : added)
      if (t.content == token) return t.id;
    if (auto id = model.token_to_id(token)) return *id;
    throw FormatError(fmt::format("{}: special token \"{}\" is in neither added_tokens nor the vocabulary", where,
                                  token));
  }
};

// Special ids before and after "$A" in the single-sequence template.
void parse_post_processor(const json& j, const std::string& where, const TokenResolver& resolve,
                          std::vector<std::int32_t>& prefix, std::vector<std::int32_t>& suffix) {
  const std::string type = type_of(j, where);
  if (type == "ByteLevel") return;  // offsets only
  if (type == "Sequence") {
    for (const auto& p : j.at("processors")) parse_post_processor(p, where, resolve, prefix, suffix);
    return;
  }
  if (type != "TemplateProcessing") unsupported(where, type, "TemplateProcessing, ByteLevel, Sequence");
  bool seen_sequence = false;
  for (const auto& item : j.at("single")) {
    if (item.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    const std::string name = item.at("SpecialToken").at("id").get<std::string>();
    std::vector<std::int32_t> ids;
    const json& specials = j.at("special_tokens");
    if (specials.contains(name)) {
      for (const auto& id : specials[name].at("ids")) ids.push_back(parse_token_id(id, where + ": " + name));
    } else {
      ids.push_back(resolve(name));
    }
    auto& dst = seen_sequence ? suffix : prefix;
    dst.insert(dst.end(), ids.begin(), ids.end());
  }
}

std::unique_ptr<Decoder> parse_decoder(const json& j, const std::string& where) {
  const std::string type = type_of(j, where);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> parts;
    for (const auto& d : j.at("decoders")) parts.push_back(parse_decoder(d, where));
    return make_sequence_decoder(std::move(parts));
  }
  if (type == "ByteLevel") return make_byte_level_decoder();
  if (type == "ByteFallback") return make_byte_fallback_decoder();
  if (type == "Fuse") return make_fuse_decoder();
  if (type == "Replace") {
    const json& p = j.at("pattern");
    if (!p.contains("String")) throw FormatError(fmt::format("{}: Replace decoder (expected a String pattern, got {})", where, p.dump()));
    return make_replace_decoder(p["String"].get<std::string>(), j.at("content").get<std::string>());
  }
  if (type == "Strip") {
    const std::string content = j.at("content").get<std::string>();
    std::size_t end = 0;
    const char32_t c = content.empty() ? U'\0' : next_code_point(content, end);
    if (content.empty() || end != content.size()) {
      throw FormatError(fmt::format("{}: Strip content (expected one character, got \"{}\")", where, content));
    }
    return make_strip_decoder(c, j.at("start").get<int>(), j.at("stop").get<int>());
  }
  if (type == "Metaspace") {
    const std::string replacement = j.value("replacement", std::string("\u2581"));
    bool strip_first = true;
    if (j.contains("prepend_scheme")) {
      strip_first = j["prepend_scheme"].get<std::string>() != "never";
    } else if (j.contains("add_prefix_space")) {
      strip_first = j["add_prefix_space"].get<bool>();
    }
    return make_metaspace_decoder(replacement, strip_first);
  }
  unsupported(where, type, "ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence");
}

bool is_llama_class(const json& config) {
  const std::string cls = config.value("tokenizer_class", std::string());
  return cls == "LlamaTokenizer" || cls == "LlamaTokenizerFast" || cls == "CodeLlamaTokenizer" ||
         cls == "CodeLlamaTokenizerFast";
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer_json(const std::filesystem::path& file, const json& config) {
  const std::string origin = file.string();
  const json doc = read_json_file(file);
  try {
    HfTokenizerParts parts;
    parts.kind = "tokenizer.json:BPE";
    parts.origin = origin;
    if (!doc.is_object() || !doc.contains("model")) throw FormatError(fmt::format("{}: no \"model\"", origin));
    parts.model = parse_model(doc["model"], origin + ": model");
    if (doc.contains("added_tokens")) parts.added_tokens = parse_added_tokens(doc["added_tokens"]);
    if (doc.contains("normalizer") && !doc["normalizer"].is_null()) {
      parts.normalizer = parse_normalizer(doc["normalizer"], origin + ": normalizer");
    }
    if (doc.contains("pre_tokenizer") && !doc["pre_tokenizer"].is_null()) {
      parts.pre_tokenizer = parse_pre_tokenizer(doc["pre_tokenizer"], origin + ": pre_tokenizer");
    }
    if (doc.contains("decoder") && !doc["decoder"].is_null()) {
      try {
        parts.decoder = parse_decoder(doc["decoder"], origin + ": decoder");
      } catch (const FormatError& e) {
        parts.decoder_error = e.what();
      } catch (const nlohmann::json::exception& e) {
        parts.decoder_error = fmt::format("{}: decoder: unexpected structure ({})", origin, e.what());
      }
    }
    const TokenResolver resolve{parts.added_tokens, *parts.model, origin};
    if (doc.contains("post_processor") && !doc["post_processor"].is_null()) {
      parse_post_processor(doc["post_processor"], origin + ": post_processor", resolve, parts.prefix_ids,
                           parts.suffix_ids);
    }
    // transformers' LlamaTokenizerFast rebuilds the post-processor from add_bos_token (default true)
    // and add_eos_token (default false) in its constructor (update_post_processor).
    if (is_llama_class(config)) {
      parts.prefix_ids.clear();
      parts.suffix_ids.clear();
      const std::string cfg = "tokenizer_config";
      if (config_bool(config, "add_bos_token", true)) {
        parts.prefix_ids.push_back(resolve(config_token(config, "bos_token", cfg).value.value_or("<s>")));
      }
      if (config_bool(config, "add_eos_token", false)) {
        parts.suffix_ids.push_back(resolve(config_token(config, "eos_token", cfg).value.value_or("</s>")));
      }
    }
    return std::make_unique<HfTokenizer>(std::move(parts));
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(fmt::format("{}: unexpected structure ({})", origin, e.what()));
  } catch (const FormatError& e) {
    const std::string what = e.what();
    if (what.rfind(origin, 0) == 0) throw;
    throw FormatError(fmt::format("{}: {}", origin, what));
  }
}

}  // namespace latentllm::io
