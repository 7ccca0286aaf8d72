// Presets: the paper's protocol and this project's validated defaults (docs/PRESETS.md).
#include <algorithm>
#include <array>

#include "core/enum_names.hpp"
#include "compress/methods.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/error.hpp"

namespace latentllm::compress {

namespace {
constexpr auto kPresetNames = core::enum_names<Preset>(core::Named<Preset>{Preset::Default, "default"},
                                                       core::Named<Preset>{Preset::Paper, "paper"});
}  // namespace

std::string_view preset_name(Preset p) { return kPresetNames.name(p); }

Preset parse_preset(std::string_view name) {
  return kPresetNames.parse(name, "--preset: unknown preset (expected {}, got {})");
}

CompressOptions preset_options(Preset p, Method method, double ratio) {
  CompressOptions o;
  o.method = method;
  o.ratio = ratio;
  o.local.junction = default_junction(method);
  o.joint = {.qk = true, .vo = false, .ud = true};
  // Quantized factors (--bits): GPTQ by default; the paper's appendix rounds each chunk to nearest.
  o.quant.gptq = p != Preset::Paper;
  if (p == Preset::Default) apply_default_preset(method, o);
  // Float covariance products, each 1024-token block's sum added in double: faster covariances at the
  // same perplexity to a few parts in 1e5 on the fixtures (bench/results/covariance.md).
  // The paper preset keeps double products.
  if (p == Preset::Default) o.pipeline.covariance_f32 = true;
  if (p == Preset::Paper) {
    // SparseGPT/SparseLLM's percdamp = 0.01 of the mean diagonal of the Hessian XXᵀ.
    o.local.lambda_rel = 0.01;
    // SparseGPT's sequential protocol: layer i sees the compressed layers before it, but all of its
    // own sites' statistics come from one pass through the dense layer i.
    o.pipeline.sequential_within_layer = false;
  }
  return o;
}

CompressOptions effective_options(const model::ModelConfig& c, std::int64_t n_tok, const CompressOptions& opt,
                                  std::string* why) {
  CompressOptions o = opt;
  if (why) why->clear();
  const std::int64_t f = c.ffn_width();
  const std::int64_t n_ud = opt.ud_max_tokens > 0 ? std::min(n_tok, opt.ud_max_tokens) : n_tok;
  if (!has_joint_parts(o.method) || !o.joint.ud || f <= 0 || !(o.ud_min_tokens_per_ffn > 0)) return o;
  if (static_cast<double>(n_ud) >= o.ud_min_tokens_per_ffn * static_cast<double>(f)) return o;
  o.joint.ud = false;
  if (why) {
    *why = fmt::format("joint up-down skipped, gate/up/down compressed locally: it would fit its [ffn, ffn] statistics "
                       "on {} tokens = {:.1f} x ffn {} (expected at least {:g} x ffn, --ud-min-tokens-per-ffn; with "
                       "fewer it did worse than local up/down on validation text, bench/results/ud_tokens); more "
                       "calibration tokens, a larger --ud-tokens or --ud-min-tokens-per-ffn 0 would run it", n_ud,
                       static_cast<double>(n_ud) / static_cast<double>(f), f, o.ud_min_tokens_per_ffn);
  }
  return o;
}

}  // namespace latentllm::compress
