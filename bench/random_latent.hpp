// Random factors at the ranks latentllm plans: a latent model of a real shape for speed measurements
// of random-weight checkpoints (latentllm-synth), shared by bench/decode and bench/onnx_latent.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>

#include "latentllm/compress.hpp"
#include "latentllm/model.hpp"

namespace latentllm::bench {

// Replaces the attention and MLP modules of layer i that `plan` names by random factors of the planned
// rank (block identity with a random permutation), freeing their dense weights.
inline void randomize_layer(model::Model& m, int i, const compress::RankPlan& plan, std::mt19937_64& rng) {
  for (auto& l : m.layer(i).linears) {
    const auto it = std::find_if(plan.modules.begin(), plan.modules.end(), [&](const auto& p) { return p.name == l.name; });
    if (it == plan.modules.end()) continue;
    const std::int64_t r = it->rank;
    const float s = 1.0f / std::sqrt(static_cast<float>(l.in));
    l.weight = {};
    l.B = MatrixF(MatrixF::Random(l.out, r) * s);     // [out, r]
    l.A = MatrixF(MatrixF::Random(r, l.in - r) * s);  // [r, in − r]
    l.perm.resize(static_cast<std::size_t>(l.in));
    std::iota(l.perm.begin(), l.perm.end(), 0);
    std::shuffle(l.perm.begin(), l.perm.end(), rng);
    l.block_identity = true;
  }
}

// The ranks latentllm plans for m at `ratio`.
inline compress::RankPlan latentllm_plan(const model::Model& m, double ratio) {
  compress::CompressOptions opt;
  opt.method = compress::Method::LatentLlm;
  opt.ratio = ratio;
  return compress::plan_model(m, opt);
}

// Every decoder layer of m (loaded) through randomize_layer at latentllm's planned ranks.
inline void randomize_latent(model::Model& m, double ratio, std::uint64_t seed) {
  const compress::RankPlan plan = latentllm_plan(m, ratio);
  std::mt19937_64 rng(seed);
  for (int i = 0; i < m.num_layers(); ++i) randomize_layer(m, i, plan, rng);
}

}  // namespace latentllm::bench
