// The `latent` section of a latent checkpoint's config.json (docs/FORMAT.md): a module's entry, read and
// written here. It stays in io, below model, because every model load reads it (model::WeightLoader);
// the writer of the whole checkpoint is src/format/latent.cpp.
#include <algorithm>

#include <fmt/format.h>

#include "io/latent_format.hpp"
#include "latentllm/error.hpp"
#include "latentllm/io.hpp"

namespace latentllm::io {

namespace {

// The optional bits and group of a module entry: both or neither, bits in {2, 3, 4, 8} (16 = absent),
// the group a positive multiple of 8 (a group's codes fill whole bytes).
void parse_bits(const nlohmann::json& e, const std::string& ctx, LatentModule& mod) {
  if (!e.contains("bits") && !e.contains("group")) return;
  mod.bits = e.at("bits").get<int>();
  mod.group = e.at("group").get<int>();
  if (mod.bits != 2 && mod.bits != 3 && mod.bits != 4 && mod.bits != 8) {
    throw FormatError(fmt::format("{}: bits (expected 2, 3, 4 or 8, got {})", ctx, mod.bits));
  }
  if (mod.group <= 0 || mod.group % 8 != 0) {
    throw FormatError(fmt::format("{}: group (expected a positive multiple of 8, got {})", ctx, mod.group));
  }
}

}  // namespace

std::map<std::string, LatentModule> parse_latent_modules(const nlohmann::json& config, const std::string& origin) {
  std::map<std::string, LatentModule> out;
  if (!config.contains("latent")) return out;
  const auto& latent = config.at("latent");
  if (!latent.is_object() || !latent.contains("modules") || !latent.at("modules").is_object()) {
    throw FormatError(fmt::format("{}: latent: expected an object with a `modules` object", origin));
  }
  const int version = latent.value("format_version", 0);
  if (version != kLatentFormatVersion) {
    throw FormatError(fmt::format("{}: latent.format_version (expected {}, got {})", origin, kLatentFormatVersion, version));
  }
  for (const auto& [name, e] : latent.at("modules").items()) {
    const std::string ctx = fmt::format("{}: latent.modules.{}", origin, name);
    try {
      LatentModule mod;
      parse_bits(e, ctx, mod);
      // A quantized dense module has no rank (docs/FORMAT.md "Quantized tensors").
      mod.rank = mod.quantized() && !e.contains("rank") ? 0 : e.at("rank").get<std::int64_t>();
      mod.in = e.at("in").get<std::int64_t>();
      mod.out = e.at("out").get<std::int64_t>();
      const std::string junction = e.value("junction", "none");
      if (junction != "none" && junction != "block-identity") {
        throw FormatError(fmt::format("{}: junction (expected none or block-identity, got {})", ctx, junction));
      }
      mod.block_identity = junction == "block-identity";
      if (mod.rank == 0 && mod.quantized() && mod.in > 0 && mod.out > 0 && junction == "none") {
        out.emplace(name, std::move(mod));
        continue;
      }
      // A rank above d' is a module sharing its A (compress --joint qkv: k_proj, v_proj under GQA).
      if (mod.in <= 0 || mod.out <= 0 || mod.rank <= 0 || mod.rank > mod.in) {
        throw FormatError(fmt::format("{}: rank (expected 1..{}, got {})", ctx, mod.in, mod.rank));
      }
      if (mod.block_identity) {
        mod.perm = e.at("perm").get<std::vector<std::int32_t>>();
        std::vector<bool> seen(static_cast<std::size_t>(mod.in), false);
        bool ok = static_cast<std::int64_t>(mod.perm.size()) == mod.in;
        for (auto p : mod.perm) {
          if (!ok || p < 0 || p >= mod.in || seen[static_cast<std::size_t>(p)]) {
            ok = false;
            break;
          }
          seen[static_cast<std::size_t>(p)] = true;
        }
        if (!ok) throw FormatError(fmt::format("{}: perm is not a permutation of 0..{}", ctx, mod.in - 1));
      }
      out.emplace(name, std::move(mod));
    } catch (const nlohmann::json::exception& ex) {
      throw FormatError(fmt::format("{}: {}", ctx, ex.what()));
    }
  }
  return out;
}

nlohmann::json latent_module_json(const LatentModule& m) {
  nlohmann::json e = nlohmann::json::object();
  if (m.rank > 0) e["rank"] = m.rank;
  e["in"] = m.in;
  e["out"] = m.out;
  e["junction"] = m.block_identity ? "block-identity" : "none";
  if (m.block_identity) e["perm"] = m.perm;
  if (m.quantized()) {
    e["bits"] = m.bits;
    e["group"] = m.group;
  }
  return e;
}

std::string latent_tensor_name(std::string_view module, Factor f, Piece p, Naming naming) {
  std::string n(module);
  if (f == Factor::B) n += ".B";
  if (f == Factor::A) n += ".A";
  switch (p) {
    case Piece::Values:
      if (naming == Naming::Checkpoint || f == Factor::Weight) n += ".weight";
      break;
    case Piece::Codes: n += ".qweight"; break;
    case Piece::Scales: n += ".scales"; break;
    case Piece::Zeros: n += ".qzeros"; break;
  }
  return n;
}

std::optional<LatentTensorName> parse_latent_tensor_name(std::string_view name) {
  static constexpr std::pair<std::string_view, Piece> kPieces[] = {
      {".weight", Piece::Values}, {".qweight", Piece::Codes}, {".scales", Piece::Scales}, {".qzeros", Piece::Zeros}};
  for (const auto& [suffix, piece] : kPieces) {
    if (!name.ends_with(suffix) || name.size() == suffix.size()) continue;
    std::string_view rest = name.substr(0, name.size() - suffix.size());
    Factor f = Factor::Weight;
    if (rest.ends_with(".B") && rest.size() > 2) f = Factor::B;
    if (rest.ends_with(".A") && rest.size() > 2) f = Factor::A;
    if (f != Factor::Weight) rest.remove_suffix(2);
    return LatentTensorName{std::string(rest), f, piece};
  }
  return std::nullopt;
}

nlohmann::json with_latent_identity(nlohmann::json config) {
  if (!config.is_object() || !config.contains("latent") || !config["latent"].is_object()) return config;
  nlohmann::json& latent = config["latent"];
  bool conditional = false;
  if (const auto a = config.find("architectures"); a != config.end()) {
    latent["source_architectures"] = *a;
    conditional = a->is_array() && !a->empty() && a->front().is_string() &&
                  a->front().get<std::string>().ends_with("ForConditionalGeneration");
  }
  if (const auto t = config.find("model_type"); t != config.end()) latent["source_model_type"] = *t;
  config["architectures"] = {conditional ? kLatentConditionalGeneration : kLatentCausalLm};
  config["model_type"] = kLatentModelType;
  return config;
}

nlohmann::json with_source_identity(nlohmann::json config) {
  if (!config.is_object()) return config;
  const auto l = config.find("latent");
  if (l == config.end() || !l->is_object() || !l->contains("source_architectures")) return config;
  const nlohmann::json latent = *l;
  config["architectures"] = latent["source_architectures"];
  if (latent.contains("source_model_type")) config["model_type"] = latent["source_model_type"];
  else config.erase("model_type");
  return config;
}

}  // namespace latentllm::io
