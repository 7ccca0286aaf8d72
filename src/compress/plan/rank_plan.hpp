// Rank planning internals (the public API is in include/latentllm/compress.hpp).
#pragma once

#include <cstdint>

#include "latentllm/compress.hpp"
#include "latentllm/model.hpp"

namespace latentllm::compress {

// The largest r in [0, min(d, d')] with eval::factored_params(out, in, r, j == BlockIdentity) ≤ budget
// (0 if none fits).
// params(r) is increasing on that range (r·(d'+d) − r² increases up to r = (d'+d)/2 ≥ min(d, d')), so
// r is the floor of the smaller root of the quadratic, corrected by exact integer checks. A budget met
// within 1e-12 relative counts as met, so decimal ratios (0.2 → 0.8·d'·d) land on exact boundaries.
std::int64_t max_rank_for_budget(std::int64_t out, std::int64_t in, double budget, Junction j);

// Σ σ_i² of a module's spectrum (what the allocations normalize by), its length min(d, d') and its values
// checked: ConfigError "<module>: spectrum length (...)", NumericError "<module>: singular value squared
// (expected finite and >= 0, got x)".
double spectrum_energy(const ModuleSpectrum& s);

// --joint qkv and --split-heads (attention_forms.cpp): each layer's q_proj, k_proj and v_proj re-planned
// within the weights `plan` gave them. Joint Q-K-V: one rank r for the three from their summed budget,
// r·(d_q + d_k + d_v + d) (− r² once with the block identity), q_proj counting the shared A and k_proj,
// v_proj their B; split heads: each module at the largest multiple of its heads with r·(d'/h + d) within
// its own budget (no junction). Nothing for other options. ConfigError "<module>: --split-heads leaves no rank
// (...)".
void plan_attention_forms(RankPlan& plan, const model::Model& m, const CompressOptions& opt);

}  // namespace latentllm::compress
