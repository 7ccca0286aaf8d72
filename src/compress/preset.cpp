// Presets: the paper's protocol and this project's validated defaults (docs/PRESETS.md).
#include <array>

#include "latentllm/compress.hpp"
#include "latentllm/error.hpp"

namespace latentllm::compress {

std::string_view preset_name(Preset p) { return p == Preset::Paper ? "paper" : "default"; }

Preset parse_preset(std::string_view name) {
  for (Preset p : {Preset::Default, Preset::Paper})
    if (preset_name(p) == name) return p;
  throw ConfigError(fmt::format("--preset: unknown preset (expected default or paper, got {})", name));
}

Junction default_junction(Method m) { return m == Method::LatentLlm ? Junction::BlockIdentity : Junction::Identity; }

CompressOptions preset_options(Preset p, Method method, double ratio) {
  CompressOptions o;
  o.method = method;
  o.ratio = ratio;
  o.local.junction = default_junction(method);
  o.joint = {.qk = true, .vo = false, .ud = true};
  if (p == Preset::Default && method == Method::LatentLlm) {
    // Beyond the paper, validated on TinyStories stories 1-116 (bench/results/rank_alloc, docs/PRESETS.md):
    // the uniform budget spread over modules and layers by the spectra of W·P.
    o.rank_alloc = RankAlloc::Global;
    o.alloc_score = AllocScore::Relative;
  }
  if (p == Preset::Paper) {
    // SparseGPT/SparseLLM's percdamp = 0.01 of the mean diagonal of the Hessian XXᵀ.
    o.local.lambda_rel = 0.01;
    // SparseGPT's sequential protocol: layer i sees the compressed layers before it, but all of its
    // own sites' statistics come from one pass through the dense layer i.
    o.pipeline.sequential_within_layer = false;
  }
  return o;
}

}  // namespace latentllm::compress
