// config.json -> ModelConfig: the registry of architectures (each defined in its family's file) and
// the keys every architecture shares.
#include <array>
#include <fmt/format.h>

#include "io/latent_format.hpp"
#include "latentllm/error.hpp"
#include "latentllm/model.hpp"
#include "latentllm/multimodal.hpp"
#include "model/arch.hpp"

namespace latentllm::model {
namespace {

using json = nlohmann::json;

// The families' architectures, in the order messages list them.
std::vector<const Architecture*> registry() {
  std::vector<const Architecture*> out;
  for (auto family : {opt_architectures(), llama_architectures()})
    for (const Architecture& a : family) out.push_back(&a);
  return out;
}

std::string supported_list(std::string_view Architecture::*field) {
  std::string out;
  for (const Architecture* a : registry()) out += fmt::format("{}{}", out.empty() ? "" : ", ", a->*field);
  return out;
}

// architectures[0] (or model_type when architectures is absent) -> the supported architecture.
const Architecture& find_architecture(const io::JsonKeys& k, ModelConfig& c) {
  if (const json* archs = k.find("architectures")) {
    if (!archs->is_array() || archs->empty() || !archs->front().is_string()) {
      k.fail("architectures", "a non-empty list of strings", archs);
    }
    c.architecture = archs->front().get<std::string>();
  }
  c.model_type = k.string_or("model_type", "");
  if (c.architecture.empty() && c.model_type.empty()) {
    k.fail("architectures", fmt::format("one of {}", supported_list(&Architecture::architecture)), nullptr);
  }
  for (const Architecture* a : registry()) {
    if (c.architecture.empty() ? c.model_type != a->model_type : c.architecture != a->architecture) continue;
    if (c.model_type.empty()) c.model_type = a->model_type;
    if (c.architecture.empty()) c.architecture = a->architecture;
    if (c.model_type != a->model_type) {
      throw ConfigError(fmt::format("{}: model_type (expected {} for {}, got {})", k.origin(), a->model_type,
                                    a->architecture, c.model_type));
    }
    return *a;
  }
  if (c.architecture.empty()) {
    throw ConfigError(fmt::format("{}: model_type {} is not supported (supported: {})", k.origin(), c.model_type,
                                  supported_list(&Architecture::model_type)));
  }
  throw ConfigError(fmt::format("{}: architecture {} is not supported (supported: {})", k.origin(), c.architecture,
                                supported_list(&Architecture::architecture)));
}

}  // namespace

json with_class_defaults(const json& doc) {
  if (!doc.is_object()) return doc;
  std::string arch, type;
  const auto a = doc.find("architectures");
  if (a != doc.end() && a->is_array() && !a->empty() && a->front().is_string()) arch = a->front().get<std::string>();
  if (const auto t = doc.find("model_type"); t != doc.end() && t->is_string()) type = t->get<std::string>();
  for (const Architecture* r : registry()) {
    if (arch.empty() ? type != r->model_type : arch != r->architecture) continue;
    json out = json::parse(r->class_defaults);
    for (const auto& [k, v] : doc.items()) out[k] = v;
    return out;
  }
  return doc;
}

ModelConfig parse_config(const json& stored, const std::string& origin) {
  const json doc = io::with_source_identity(stored);  // a latent checkpoint reads as its source model
  // A multimodal checkpoint: its language model (text_config), the part text-only commands run.
  if (is_llava_config(doc)) return parse_llava_config(doc, origin).text;
  const io::JsonKeys k(doc, origin);
  ModelConfig c;
  const Architecture& a = find_architecture(k, c);
  a.parse(k, c);
  c.tie_word_embeddings = k.boolean_or("tie_word_embeddings", a.tie_word_embeddings);
  c.bos_token_id = k.token_id("bos_token_id");
  c.eos_token_id = k.token_id("eos_token_id");
  c.eos_token_ids = k.token_ids("eos_token_id");
  c.pad_token_id = k.token_id("pad_token_id");
  c.torch_dtype = k.string_or("torch_dtype", k.string_or("dtype", ""));
  c.raw = doc;
  return c;
}

ModelConfig load_config(const std::filesystem::path& config_json) {
  return parse_config(io::load_json_file(config_json), config_json.string());
}

std::vector<std::string> supported_architectures() {
  std::vector<std::string> out;
  for (const Architecture* a : registry()) out.emplace_back(a->architecture);
  return out;
}

std::unique_ptr<Model> Model::load(const std::filesystem::path& dir, const LoadOptions& opt) {
  const auto config = load_config(dir / "config.json");
  const Architecture* arch = nullptr;
  for (const Architecture* a : registry())
    if (a->architecture == config.architecture) arch = a;
  auto source = std::make_shared<WeightSource>(dir, config.raw, (dir / "config.json").string());
  source->loader.set_lazy(opt.lazy);
  source->loader.set_stored(opt.weights == LoadOptions::Weights::Stored);
  if (opt.huge_pages && !opt.lazy && opt.weights == LoadOptions::Weights::Stored) {
    source->loader.set_huge_pages(opt.huge_pages_min_bytes);
  }
  source->loader.set_scan(opt.lazy && opt.scan_finite);
  std::vector<std::string> language;  // a multimodal checkpoint's language-model prefixes: what is checked here
  std::vector<std::string> towers;    // and its other parts' (their latent modules are LlavaModel's)
  if (!config.multimodal_architecture.empty()) {
    const auto rules = multimodal_language_rules(source->loader);
    towers = multimodal_tower_prefixes(source->loader);  // before the rules: it asks for stored names
    source->loader.set_prefix_rules(rules);
    for (const auto& r : rules) language.push_back(r.to);
  }
  auto m = arch->make(config, dir, source->loader);
  for (const auto& r : source->loader.prefix_rules()) m->stored_prefixes_.emplace_back(r.from, r.to);
  m->init_layers(source, opt);
  source->loader.check_latent_used(towers);
  if (!opt.allow_unused_tensors) source->loader.check_tensors_used(language);
  return m;
}

}  // namespace latentllm::model
