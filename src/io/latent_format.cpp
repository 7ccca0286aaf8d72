// The `latent` section of a latent checkpoint's config.json (docs/FORMAT.md): a module's entry, read and
// written here. It stays in io, below model, because every model load reads it (model::WeightLoader);
// the writer of the whole checkpoint is src/format/latent.cpp.
#include <algorithm>

#include <fmt/format.h>

#include "io/latent_format.hpp"
#include "latentllm/error.hpp"
#include "latentllm/io.hpp"

namespace latentllm::io {

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
      mod.rank = e.at("rank").get<std::int64_t>();
      mod.in = e.at("in").get<std::int64_t>();
      mod.out = e.at("out").get<std::int64_t>();
      const std::string junction = e.value("junction", "none");
      if (junction != "none" && junction != "block-identity") {
        throw FormatError(fmt::format("{}: junction (expected none or block-identity, got {})", ctx, junction));
      }
      mod.block_identity = junction == "block-identity";
      if (mod.in <= 0 || mod.out <= 0 || mod.rank <= 0 || mod.rank > std::min(mod.in, mod.out)) {
        throw FormatError(fmt::format("{}: rank (expected 1..{}, got {})", ctx, std::min(mod.in, mod.out), mod.rank));
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
  nlohmann::json e = {{"rank", m.rank}, {"in", m.in}, {"out", m.out},
                      {"junction", m.block_identity ? "block-identity" : "none"}};
  if (m.block_identity) e["perm"] = m.perm;
  return e;
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
