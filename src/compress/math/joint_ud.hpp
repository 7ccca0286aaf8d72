// Joint MLP up-down compression (LatentLLM §"Latent MLP: Joint UD SVD", appendix "MLP-Aware Joint
// Compression"), and our extension to GELU/SiLU and gated (SwiGLU) MLPs (docs/JOINT.md).
//
// Plain MLP   y = W_d·σ(W_u·x + b_u) + b_d                        (OPT fc1/fc2: σ = ReLU)
// Gated MLP   y = W_d·(σ(W_g·x + b_g) ⊙ (W_u·x + b_u)) + b_d       (Llama/Qwen2 gate/up/down: σ = SiLU)
//
// ReLU, not gated (the paper): SparseLLM-style auxiliaries Z (pre-activation) and Z' (hidden),
//   min α‖Y − Ŵ_d·Z'‖² + β‖Z' − σ(Z)‖² + γ‖Z − Ŵ_u·X‖²
// over rank-limited Ŵ_u, Ŵ_d and Z, Z', by exact block updates: Ŵ_u, Ŵ_d by reduced-rank regression
// (activation-aware low-rank fit), Z' by ridge, Z by the per-element ReLU case split. This auxiliary
// objective never increases. Y = the DENSE MLP's output on the calibration tokens.
//
// Everything else (the extension): block descent on the TRUE output loss ‖Y − Ŷ‖²: an exact
// output-aware refit of the down projection (reduced-rank regression of Y on the compressed hidden
// activations H', so it absorbs the upstream error), then a Gauss-Newton step for the up (and gate)
// pre-activations towards a ridge hidden target, refit by reduced-rank regression, accepted only if the
// true loss drops (step halving otherwise).
//
// Both paths start from the local root-cov solution and return the best candidate seen, never worse
// than that start. The tokens are streamed in chunks (token_passes.hpp): memory is the inputs and the
// dense outputs in double ([n, d] each), the paper path's auxiliary Z in float ([n, f]; also Z' with
// track_aux_loss), a few [f, c] chunk matrices per thread and the [f, f] statistics — never an
// [f, n] double matrix. Results do not depend on the thread count. With f32_passes the token passes
// run in float (inputs and outputs [n, d] float) and their statistics are summed in double.
#pragma once

#include <string_view>
#include <vector>

#include "compress/math/low_rank.hpp"
#include "graph/graph.hpp"
#include "latentllm/calib.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/model.hpp"

namespace latentllm::compress {


// Dense MLP of one layer. Empty bias vectors mean no bias.
struct MlpDense {
  model::Activation act = model::Activation::Relu;
  bool gated = false;
  MatrixD w_up;    // [f, d]  fc1 / up_proj
  VectorD b_up;    // [f]
  MatrixD w_gate;  // [f, d]  gate_proj (gated only)
  VectorD b_gate;  // [f]
  MatrixD w_down;  // [d, f]  fc2 / down_proj
  VectorD b_down;  // [d]
};

// Factored MLP; gate is empty (rank 0) when not gated. Biases exist where the dense module has one.
struct MlpFactors {
  LowRank up;    // b: [f, r_u], a: [r_u, d]
  LowRank gate;  // b: [f, r_g], a: [r_g, d]
  LowRank down;  // b: [d, r_d], a: [r_d, f]
};

struct MlpRanks {
  int up = 0;
  int gate = 0;  // gated only
  int down = 0;
};

struct UdOptions {
  MlpRanks ranks;
  int iters = 4;                           // --ud-iters (paper: 4)
  // Auxiliary weights α‖Y − Ŵ_dZ'‖² + β‖Z' − σ(Z)‖² + γ‖Z − Ŵ_uX‖². β and γ are RELATIVE to the
  // mean squared singular value of the starting Ŵ_d (so the trade-off does not depend on the scale of
  // W_d); defaults chosen on random ReLU MLPs (tests/unit/test_joint_ud.cpp), not on evaluation text.
  // β also weights the hidden target of the extension.
  double alpha = 1.0, beta = 0.1, gamma = 0.01;
  double lambda_rel = kDefaultLambdaRel;   // damping of every covariance
  bool refit_down = true;                  // also try the output-aware down refit of each iterate
  bool paper_admm = true;                  // ReLU, not gated: use the paper's auxiliary updates
  // Paper path: record the auxiliary objective per iteration (keeps Z' too: another [n, f] float).
  bool track_aux_loss = false;
  // Tokens per chunk of the streaming passes; 0 = about 4 M (double) or 8 M (float) elements of an
  // [f, c] chunk matrix (clamped to 256..4096 tokens).
  int chunk_tokens = 0;
  // The token passes in float (inputs, outputs and every per-chunk product; sums over chunks, the
  // regressions and the losses from statistics stay in double): sgemm's rate and half the token
  // memory. The regressions' statistics then carry float's rounding over one chunk (token_passes.hpp).
  bool f32_passes = false;
  // Tokens per unit of the global token sequence (token_passes.hpp: the statistics are exact sums of
  // per-unit partial sums, the same for any number of ranks); 0 = ud_unit_tokens's default.
  int unit_tokens = 0;
};

// Tokens per unit: opt.unit_tokens, or by default the least multiple of the pass's chunk that is at
// least 4096 tokens (chunks never cross a unit, so a unit of whole chunks wastes no chunk).
Eigen::Index ud_unit_tokens(const UdOptions& opt, Eigen::Index f);

struct UdResult {
  MlpFactors f;
  double output_energy = 0;       // ‖Y − mean(Y)‖² (scale for relative losses)
  double loss_local = 0;          // true output loss of the local root-cov start
  std::vector<double> loss;       // true output loss of each iteration's best candidate: [0] = start
                                  // (after the down refit, if enabled), then one per iteration
  std::vector<double> aux_loss;   // paper path with track_aux_loss: auxiliary objective, [0] = start, one per iteration
  int best_iter = -1;             // index into `loss` of the returned solution; −1 = the local start
};

// X: [n, d] calibration inputs of the MLP (rows = tokens). Under K ranks (data parallel) each rank
// passes the rows of its own units of the global token sequence (ud_unit_tokens; calib::token_units:
// units, in rank order) and every rank gets the same result, for any K: a collective.
// g: the runtime whose ranks take the decisions from the statistics (graph::Graph::on); null: a graph
// of the run's processes of its own.
UdResult joint_ud(const MlpDense& w, const MatrixD& x, const UdOptions& opt, std::string_view context,
                  graph::Graph* g = nullptr);
UdResult joint_ud(const MlpDense& w, const MatrixF& x, const UdOptions& opt, std::string_view context,
                  graph::Graph* g = nullptr);

// Local root-cov ASVD of each module (the baseline and the start): up/gate from the input moments,
// down from the moments of the hidden activations; `sequential` = of the COMPRESSED up/gate (as the
// pipeline's sequential_within_layer does), else of the dense ones.
MlpFactors local_mlp(const MlpDense& w, const MatrixD& x, const MlpRanks& r, double lambda_rel, bool sequential,
                     std::string_view context);

// Σ_t ‖y_t − ŷ_t‖² over the rows of x: [n, d].
double mlp_output_loss(const MlpDense& w, const MlpFactors& f, const MatrixD& x);
// MLP outputs [d, n] for inputs xt: [d, n] (columns = tokens).
MatrixD mlp_forward(const MlpDense& w, const MatrixD& xt);
MatrixD mlp_forward(const MlpDense& w, const MlpFactors& f, const MatrixD& xt);


}  // namespace latentllm::compress
