// The memory plan of a lazy compression run (latentllm/compress.hpp, plan_compress_memory; the
// items are explained in docs/SCALE.md).
#include <algorithm>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "compress/math/joint_ud.hpp"
#include "compress/methods.hpp"
#include "compress/math/output_side.hpp"
#include "graph/graph.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/eval.hpp"
#include "latentllm/threads.hpp"

namespace latentllm::compress {
namespace {

constexpr std::int64_t kMiB = std::int64_t{1} << 20;
constexpr std::int64_t kRuntime = 256 * kMiB;  // program, BLAS buffers, tokenizer (as eval's plan)

// Widths of the sites the method's stages wait for (stage.cpp plan_stages): attention input d, the
// o_proj input H·d_h, the MLP input d and, without joint up-down, the down_proj input ffn.
std::int64_t widest_site(const model::ModelConfig& c, bool ud) {
  const std::int64_t q = c.num_attention_heads * c.head_dim;
  return ud ? std::max(c.hidden_size, q) : std::max({c.hidden_size, q, c.ffn_width()});
}
// down_proj / fc2 [d, ffn] fitted from its outputs (output_side.hpp): no [ffn, ffn] covariance.
bool down_output_side(const model::ModelConfig& c, const CompressOptions& opt, bool ud) {
  const bool compensating = opt.error_compensation && opt.pipeline.sequential_within_layer;
  return !ud && !compensating && local_output_side(opt, c.hidden_size, c.ffn_width());
}
std::int64_t site_covariances(const model::ModelConfig& c, bool ud, bool down_out) {
  const std::int64_t d = c.hidden_size, q = c.num_attention_heads * c.head_dim, f = c.ffn_width();
  return 8 * (2 * d * d + q * q + (ud || down_out ? 0 : f * f));
}

}  // namespace

core::MemoryPlan plan_compress_memory(const model::Model& m, std::int64_t n_tok, int seqlen, const CompressOptions& opt,
                                      std::int64_t budget) {
  const model::WeightFootprint& fp = m.footprint();
  const model::ModelConfig& c = m.config();
  const bool ud = has_joint_parts(opt.method) && effective_options(m.config(), n_tok, opt).joint.ud;
  const std::int64_t d = c.hidden_size, f = c.ffn_width(), w = widest_site(c, ud);
  const bool down_out = down_output_side(c, opt, ud);
  core::MemoryPlan p;
  p.title = "compress (lazy layers)";
  p.budget = budget;
  const bool stored = fp.weights == model::LoadOptions::Weights::Stored;
  if (stored) {
    // The loaded layer's 16-bit matrices are the mapped checkpoint; its factors are float32 (at most the
    // layer widened: twice its 16-bit bytes); the forward over a batch and a solver widen one module.
    p.add("one layer as stored (mapped)", fp.largest_layer(), "the largest decoder layer's checkpoint bytes");
    p.add("its factors (float32)", 2 * fp.largest_layer(), "at most the layer widened");
    p.add("widened module (float32)", fp.largest_widened, "the largest module, widened for a product or a solver");
  } else {
    p.add("one layer and its factors (float32)", 2 * fp.largest_layer(), "the largest decoder layer, twice");
  }
  p.add("other weights (float32)", fp.other, "norms, positions, projections");
  if (stored) {
    p.add("mapped pages", fp.largest_table_stored, "embedding (read per batch)");
  } else {
    p.add("mapped pages", fp.largest_table_stored + fp.largest_layer_tensor_stored,
          "embedding (read per batch) + one layer tensor (while widened)");
  }
  const std::int64_t limit = opt.pipeline.resume_limit_bytes >= 0 ? opt.pipeline.resume_limit_bytes
                                                                  : core::physical_memory_bytes() / 4;
  const auto& lengths = opt.pipeline.lengths;  // multimodal sequences: one per forward call
  const std::int64_t batch_tokens = lengths.empty() ? static_cast<std::int64_t>(opt.pipeline.batch_windows) * seqlen
                                                    : *std::max_element(lengths.begin(), lengths.end());
  // Under K ranks each holds and propagates its share of the batches (calib::run_layerwise); rank 0
  // also gathers every rank's hidden states for the progress it saves.
  const std::int64_t ranks = graph::processes().size();
  const std::int64_t batches = (n_tok + batch_tokens - 1) / std::max<std::int64_t>(batch_tokens, 1);
  const std::int64_t r_tok = ranks > 1 ? std::min(n_tok, (batches + ranks - 1) / ranks * batch_tokens) : n_tok;
  p.add("hidden states", 4 * r_tok * d, fmt::format("{} tokens x {} x 4 B (the layer's input)", r_tok, d));
  if (ranks > 1) {
    p.add("gathered hidden states (rank 0)", 4 * n_tok * d,
          fmt::format("{} tokens x {} x 4 B, every rank's, for the saved progress", n_tok, d));
  }
  if (4 * r_tok * (d + w) <= limit) {
    p.add("pass states", 4 * r_tok * (d + w), fmt::format("{} tokens x ({} + {}) x 4 B (residual + site input)", r_tok, d, w));
  } else {
    // Beyond the limit every pass starts from the layer's input, one batch state at a time (pipeline.cpp).
    p.add("pass states", 4 * batch_tokens * (d + w),
          fmt::format("one batch of {} tokens x ({} + {}) x 4 B, from the layer's input", batch_tokens, d, w));
  }
  const std::int64_t act = eval::activation_floats_per_token(c);
  p.add("forward activations", 4 * batch_tokens * act, fmt::format("{} tokens x {} floats", batch_tokens, act));
  p.add("site covariances (double)", site_covariances(c, ud, down_out),
        down_out ? "every tapped site's [w, w] at once; the down projection's from its outputs, [d, d]"
                 : "every tapped site's [w, w] at once");
  p.add("exact sums of the statistics", site_covariances(c, ud, down_out),
        "128-bit upper triangles while the batches are added (calib::ExactSums)");
  if (ud) {
    const std::int64_t n_ud = opt.ud_max_tokens > 0 ? std::min(n_tok, opt.ud_max_tokens) : n_tok;
    const std::int64_t mats = m.mlp().gated ? 3 : 2;
    // Each rank keeps its own tokens' MLP inputs and receives the rows of its share of joint up-down's
    // units (stage_joint_ud.cpp); one process without a stride passes its kept rows as they are.
    UdOptions uo;
    uo.f32_passes = opt.ud_f32;
    uo.unit_tokens = opt.ud_unit_tokens;
    const std::int64_t unit = ud_unit_tokens(uo, f), units = (n_ud + unit - 1) / unit;
    const std::int64_t r_ud = std::min(n_ud, (units + ranks - 1) / ranks * unit);
    const bool copied = ranks > 1 || n_ud < n_tok;
    p.add("MLP inputs kept for joint up-down", 4 * r_tok * d + (copied ? 4 * r_ud * d : 0),
          fmt::format("{} tokens x {} x 4 B (+ the {} rows of this rank's units of {} tokens)", r_tok, d,
                      copied ? r_ud : 0, unit));
    // Per thread, about a dozen [f, c] matrices of the chunk in flight (joint_ud.cpp sizes c so that
    // f·c is about 4 Mi doubles or 8 Mi floats, c >= 256). With float passes the inputs and outputs are
    // float, and the accumulators hold the chunk's float products ([f, f] + [f, d]) before adding them.
    const std::int64_t chunk = std::max<std::int64_t>(f * 256, std::int64_t{4} << 20);
    const std::int64_t threads = std::max(core::num_threads(), 1);
    const std::int64_t token_bytes = opt.ud_f32 ? 4 : 8;
    const std::int64_t f32_part = opt.ud_f32 ? 4 * (f * f + f * d) : 0;
    p.add("joint up-down working set",
          token_bytes * r_ud * 2 * d + 4 * r_ud * f + 8 * (5 * f * f + (12 + mats) * f * d) + f32_part +
              threads * 12 * 8 * chunk,
          fmt::format("{} tokens: inputs and outputs in {}, Z in float; [{}, {}] statistics, regressions, "
                      "factor candidates; {} threads' chunks", r_ud, opt.ud_f32 ? "float" : "double", f, f, threads));
    // The paper path's two accumulators at once (token_passes.hpp): up's cross [f, d], down's cross
    // [d, f] and Gram upper triangle [f, f], and their sums, 128 bits per entry.
    p.add("joint up-down exact sums", 16 * (2 * f * d + f * (f + 1) / 2 + 2 * (f + d + 1)),
          "128-bit cross and Gram entries of the finished units (calib::ExactSums)");
  } else {
    // The widest module's whitening (in²) and the SVD of W·L ([out, in]) with its factors, in double.
    const std::int64_t q = c.num_attention_heads * c.head_dim;
    std::int64_t work = 0, in = 0, out = 0;
    for (const auto& [i, o] : {std::pair{d, f}, std::pair{f, d}, std::pair{d, q}, std::pair{q, d}}) {
      // From the outputs: the [o, o] Gram, its eigenvectors and W·Wᵀ, W and U_rᵀ·W in double.
      const std::int64_t need = down_out && i == f && o == d ? 3 * o * o + 2 * i * o : 2 * i * i + 4 * i * o;
      if (need > work) std::tie(work, in, out) = std::tuple{need, i, o};
    }
    // The task graph runs up to one decomposition per thread at once (docs/ARCHITECTURE.md "Threads").
    const std::int64_t at_once = std::max(core::num_threads(), 1);
    p.add("decomposition working set", 8 * work * at_once,
          fmt::format("whitening and SVD of a [{}, {}] module in double, {} at once (one per thread)", out, in,
                      at_once));
  }
  {
    // Held from a module's fit to the layer's end (finishing work, graph::Graph::finishing): the fits in float32 (r·(out + in)
    // at most twice a module's weights), copies of the sites' statistics the deferred output errors read,
    // joint Q-K's dense q/k weights in double.
    const std::int64_t q = c.num_attention_heads * c.head_dim;
    const std::int64_t kv = (c.num_key_value_heads > 0 ? c.num_key_value_heads : c.num_attention_heads) * c.head_dim;
    const std::int64_t layer = d * q + 2 * d * kv + q * d + (m.mlp().gated ? 3 : 2) * d * f;
    p.add("deferred finishing work", 8 * layer + site_covariances(c, ud, down_out) + 8 * (q + kv) * d,
          "the layer's fits in float32, its sites' statistics and q/k in double until the layer's end");
  }
  if (opt.error_compensation && preconditioner_of(opt.method) == Preconditioner::RootCovariance) {
    // The dense stream (calib/dense_stream.hpp): its hidden states, its pass states (resumable when both
    // streams' fit in the limit), the dense copy of the layer, and the cross moments of the sites.
    p.add("dense stream hidden states", 4 * r_tok * d, fmt::format("{} tokens x {} x 4 B (error compensation)", r_tok, d));
    const std::int64_t dense_states = 8 * r_tok * (d + w) <= limit ? 4 * r_tok * (d + w) : 4 * batch_tokens * (d + w);
    p.add("dense stream pass states", dense_states, "residual + site input, all tokens or one batch");
    if (stored) {
      p.add("dense copy of the layer", 0, "views of the layer's mapped matrices, counted above");
    } else {
      p.add("dense copy of the layer", fp.largest_layer(), "its modules before the stages replace them");
    }
    p.add("cross moments (double)", site_covariances(c, ud, down_out), "Σ x·x̂ᵀ of the tapped sites, [w, w] each");
  }
  p.add("runtime and token ids", kRuntime + 4 * n_tok, fmt::format("256 MiB + {} ids x 4 B", n_tok));
  return p;
}

}  // namespace latentllm::compress
