// Rank planning internals (the public API is in include/latentllm/compress.hpp).
#pragma once

#include <cstdint>

#include "latentllm/compress.hpp"

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

}  // namespace latentllm::compress
