// The spectra behind global rank allocation (the dense pre-pass of measure_spectra): σ_i² of W·F for
// a module W: [d', d] and any factor F·Fᵀ = C + λI of its damped input covariance (whitening.hpp: the
// singular values of W·P, P the root covariance). Two exact routes to the same values:
//
//   input side   F from the whitening of C (Cholesky, d³/3) and the Gram of W·F's shorter side: needs
//                the [d, d] covariance (d² per token) and two O(d²·d') products.
//   output side  W·(C + λI)·Wᵀ = Σ_t y_t·y_tᵀ + λ·W·Wᵀ with y_t = W·x_t, the module's outputs: d·d' +
//                d'²/2 per token and no [d, d] matrix at all. Cheaper when d' < (√2 − 1)·d, so for
//                the down projections (d' = d / 3.5 on Llama-3-8B): there it replaces a 14336-wide
//                covariance, Cholesky and triangular product (48 s of a 136 s pre-pass layer) by a
//                recomputed down projection and a 4096-wide Gram.
#pragma once

#include <string_view>
#include <vector>

#include "compress/math/output_side.hpp"
#include "compress/math/whitening.hpp"
#include "latentllm/tensor.hpp"

namespace latentllm::compress {

// Input side: w: [d', d], wh a whitening of its C + λI. σ_i², descending, min(d, d') of them.
std::vector<double> whitened_spectrum(const MatrixD& w, const Whitening& wh, std::string_view context);

// Output side (output_side.hpp): σ_i² of W·F as the eigenvalues of W·(C + λI)·Wᵀ, from the statistics
// of the module's outputs y = W·x (C centered when `centered`: a bias module whose bias is updated, as
// the local ASVD), λ = lambda_rel · mean(diag C) as absolute_damping. w: [d', d] as given to s.add.
// σ_i², descending, d' of them.
std::vector<double> output_spectrum(const OutputStats& s, const MatrixF& w, bool centered, double lambda_rel,
                                    std::string_view context);
// The same from the inputs x: [n, d] themselves (rows = tokens); throws Error unless d' ≤ d.
std::vector<double> output_spectrum(const MatrixF& w, const MatrixF& x, bool centered, double lambda_rel,
                                    std::string_view context);

}  // namespace latentllm::compress
