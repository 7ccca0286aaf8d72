// The memory plan of a perplexity evaluation (latentllm/eval.hpp, "Memory of an evaluation").
#include <algorithm>

#include <fmt/format.h>

#include "latentllm/eval.hpp"

namespace latentllm::eval {
namespace {

constexpr std::int64_t kMiB = std::int64_t{1} << 20;
// Program, OpenBLAS's per-thread buffers, the tokenizer and the dataset text (measured: a
// stories260K evaluation peaks at about 60 MiB; opt-125m's tokenizer and BLAS at about 150 MiB).
constexpr std::int64_t kRuntime = 256 * kMiB;
// The fused head's per-thread logits block [256, 512] floats (model/head.cpp) and its vocabulary
// block of rows [512, p] widened from a lazy head.
constexpr std::int64_t kHeadRows = 256, kHeadVocab = 512;

struct Shape {
  std::int64_t d, p, q_width, kv_width, ffn;
};

Shape shape_of(const model::ModelConfig& c) {
  return {c.hidden_size, c.word_embed_proj_dim > 0 ? c.word_embed_proj_dim : c.hidden_size,
          c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim, c.ffn_width()};
}

// Floats per token alive at a layer's peak (eval.hpp).
std::int64_t activation_floats(const Shape& s) {
  return 2 * s.d + std::max({2 * s.q_width + 2 * s.kv_width, 2 * s.ffn, s.d + s.p});
}

void add_common(core::MemoryPlan& plan, const Shape& s, std::int64_t n_ids, std::int64_t batch_tokens, int threads,
                bool widened_head) {
  plan.add("activations (one batch)", 4 * batch_tokens * activation_floats(s),
           fmt::format("{} tokens x {} floats", batch_tokens, activation_floats(s)));
  const std::int64_t per_thread = 4 * kHeadRows * kHeadVocab + (widened_head ? 4 * kHeadVocab * s.p : 0);
  plan.add("head blocks", threads * per_thread,
           fmt::format("{} threads x {}{}", threads, widened_head ? "(logits + widened vocabulary block) " : "logits ",
                       core::format_bytes(per_thread)));
  plan.add("runtime and token ids", kRuntime + 4 * n_ids, fmt::format("256 MiB + {} ids x 4 B", n_ids));
}

bool stored(const model::WeightFootprint& f) { return f.weights == model::LoadOptions::Weights::Stored; }

// Stored weights: the largest module a product over many rows widens whole (linear_forward).
void add_widened(core::MemoryPlan& plan, const model::WeightFootprint& f) {
  if (f.largest_widened > 0) plan.add("widened module (float32)", f.largest_widened, "the largest 16-bit module, while a product runs");
}

}  // namespace

std::int64_t activation_floats_per_token(const model::ModelConfig& c) { return activation_floats(shape_of(c)); }

PplMemory plan_perplexity_memory(const model::Model& m, std::int64_t n_ids, std::int64_t windows, int seqlen,
                                 int batch, int threads, std::int64_t budget) {
  const model::WeightFootprint& f = m.footprint();
  const Shape s = shape_of(m.config());
  const std::int64_t per_batch = std::min<std::int64_t>(eval_batch(batch, seqlen), std::max<std::int64_t>(windows, 1));
  const std::int64_t batch_tokens = per_batch * seqlen;
  threads = std::max(threads, 1);
  PplMemory out;

  core::MemoryPlan& e = out.eager;
  e.title = "eager (window-major)";
  e.budget = budget;
  if (stored(f)) {
    e.add("weights (stored)", f.all_layers() + f.tables + f.other,
          fmt::format("{} layers + embedding/head (mapped) + the rest", f.layers.size()));
    add_widened(e, f);
  } else {
    e.add("weights (float32)", f.all_layers() + f.tables + f.other,
          fmt::format("{} layers + embedding/head + the rest", f.layers.size()));
    e.add("mapped pages at load", std::max(f.largest_layer_tensor_stored, f.largest_table_stored),
          "the largest tensor, while it is widened");
  }
  add_common(e, s, n_ids, batch_tokens, threads, false);

  core::MemoryPlan& l = out.layer_major;
  l.title = "layer-major (lazy layers)";
  l.budget = budget;
  l.add(stored(f) ? "one layer (stored)" : "one layer (float32)", f.largest_layer(), "the largest of the decoder layers");
  l.add("other weights (float32)", f.other, "norms, positions, projections");
  l.add("hidden states", 4 * windows * seqlen * s.d,
        fmt::format("{} windows x {} tokens x {} x 4 B", windows, seqlen, s.d));
  if (stored(f)) {
    l.add("mapped pages", f.largest_table_stored, "embedding or head (read per batch)");
    add_widened(l, f);
  } else {
    l.add("mapped pages", f.largest_table_stored + f.largest_layer_tensor_stored,
          "embedding or head (read per batch) + one layer tensor (while widened)");
  }
  add_common(l, s, n_ids, batch_tokens, threads, true);
  return out;
}

std::int64_t max_layer_major_windows(const model::Model& m, std::int64_t n_ids, std::int64_t windows, int seqlen,
                                     int batch, int threads, std::int64_t budget) {
  std::int64_t lo = 0, hi = windows;  // the plan of lo windows fits (0: by definition)
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo + 1) / 2;
    if (plan_perplexity_memory(m, n_ids, mid, seqlen, batch, threads, budget).layer_major.fits()) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

core::MemoryPlan plan_inference_memory(const model::Model& m, std::int64_t positions, std::int64_t budget) {
  const model::WeightFootprint& f = m.footprint();
  const model::ModelConfig& c = m.config();
  const Shape s = shape_of(c);
  core::MemoryPlan plan;
  plan.title = "in memory";
  plan.budget = budget;
  if (stored(f)) {
    plan.add("weights (stored)", f.all_layers() + f.tables + f.other,
             "every layer, the embedding and the head as stored");
    add_widened(plan, f);
  } else {
    plan.add("weights (float32)", f.all_layers() + f.tables + f.other,
             "every layer, the embedding and the head widened at load");
  }
  plan.add("KV cache (dense)", 4 * 2 * s.kv_width * positions * c.num_hidden_layers,
           fmt::format("{} layers x {} positions x 2 x {} floats", c.num_hidden_layers, positions, s.kv_width));
  plan.add("activations (one prompt)", 4 * positions * activation_floats(s),
           fmt::format("{} tokens x {} floats", positions, activation_floats(s)));
  plan.add("runtime", kRuntime, "256 MiB");
  return plan;
}

}  // namespace latentllm::eval
