// Calibration: sampling the calibration windows, accumulating input statistics in double, and the
// sequential layer-by-layer pipeline (SparseGPT style) that drives a compressor.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "latentllm/model.hpp"
#include "latentllm/tensor.hpp"
#include "latentllm/tokenizer.hpp"

namespace latentllm::calib {

enum class Sampling {
  Random,      // GPTQ/SparseGPT: a random document with > L tokens, a random L-token window of it
  Contiguous,  // window i = tokens [iL, (i+1)L) of the whole tokenized text (BOS once at the start)
};

struct CalibOptions {
  std::string source = "c4";        // "c4" (JSON lines, `text` field) or "text" (a plain file)
  std::filesystem::path data;       // the file
  int nsamples = 64;                // N windows
  int seqlen = 0;                   // L; 0 = min(2048, max_position_embeddings)
  std::uint64_t seed = 0;
  Sampling sampling = Sampling::Random;
  // c4: the last this many documents are never sampled (io::kC4HeldoutDocs = 100 keeps the text of the
  // dataset "c4-heldout" out of the calibration). ConfigError unless fewer than the file's documents.
  int holdout_docs = 0;
};

// Token ids of the N calibration windows, [N·L] row-major. Deterministic for a seed on every
// platform (own RNG mapping, not std::uniform_int_distribution). Throws FormatError when the data
// cannot supply N windows of L tokens.
std::vector<std::int32_t> sample_calibration(const io::Tokenizer& tok, const CalibOptions& opt);

// opt.seqlen 0: min(2048, max_position_embeddings) of the model. ConfigError "--seqlen beyond the model's
// context (expected at most max_position_embeddings = <n>, got <L>)" for a longer window.
void resolve_seqlen(CalibOptions& opt, const model::ModelConfig& c);

// The calibration set as a checkpoint records it (latent.calibration): {"source", "data" (the file's
// name), "nsamples", "seqlen", "seed", "sampling" ("random" or "contiguous"), "holdout_docs"}.
nlohmann::json calibration_record(const CalibOptions& opt);

// Sums that are exactly associative: each added double is rounded once to the grid 2⁻⁶⁴ and summed in
// 128-bit integers, so a sum of partial sums (one per batch of calibration windows, on whichever
// process holds that batch) has the same bits for any grouping and order of the additions; the total
// is rounded to double once, when read. Range: an added value must satisfy |v| < 2⁴⁷ ≈ 1.4e14
// (NumericError otherwise) and at most 2¹⁵ values are added per entry (one per batch of windows, or of
// 1024 tokens for the output statistics), so the total cannot overflow; resolution 2⁻⁶⁴ ≈ 5.4e-20
// absolute per added value (a value of magnitude ≥ 2⁻¹¹ keeps every bit of its double).
class ExactSums {
 public:
  static constexpr int kFractionBits = 64;
  static constexpr int kMaxAdds = 1 << 15;
  void resize(std::size_t n);  // n zeros
  std::size_t size() const { return words_.size() / 2; }
  void clear();                // size 0, memory released
  // Entries [offset, offset + v.size()) += v, each rounded to the grid (to nearest). context names the
  // statistics in the NumericError of a value out of range.
  void add(std::span<const double> v, std::size_t offset, std::string_view context);
  // Entries from `offset` on += the upper triangle of m ([w, w], column by column: w·(w+1)/2 values).
  void add_upper(const MatrixD& m, std::size_t offset, std::string_view context);
  // The entries rounded to double.
  void read(std::span<double> out, std::size_t offset) const;
  void read_upper(MatrixD& m, std::size_t offset) const;  // m: [w, w], its upper triangle written
  // Every entry += other's (the same size): partial sums gathered apart, combined in one process.
  void add(const ExactSums& other);
  // Every rank's sums added (dist::sum_int128): the same on every rank, and independent of K.
  void sum_ranks();
  // The same sums on `root` only (the other ranks' entries are left unspecified; their count of adds
  // is the total too): for statistics only root decomposes. Returns whether this rank is root.
  bool reduce_to(int root);
  int adds() const { return adds_; }
  void count_add() { ++adds_; }
  // NumericError (naming `context`) when more than kMaxAdds partial sums went in, or will with `more`.
  void check_adds(std::string_view context, int more = 0) const;

 private:
  std::vector<std::uint64_t> words_;  // (low, high) 64-bit words of each two's complement 128-bit entry
  int adds_ = 0;
};

// First and second moments of one input site over the calibration tokens, in double: the one
// statistics type of the project (the pipeline accumulates it; every pre-conditioner, root covariance
// and joint solver of src/compress reads it). The compressors are invariant to scaling C with μ and n
// consistent, so C is the plain sum over tokens.
struct SiteStats {
  MatrixD xtx;      // [w, w]  C = Σ_t x_t x_tᵀ (= XXᵀ in the paper; uncentered)
  VectorD sum;      // [w]     Σ_t x_t
  VectorD abs_sum;  // [w]     Σ_t |x_t|   (for the diagonal ℓ1 pre-conditioner)
  std::int64_t n = 0;

  // The statistics of the rows (tokens) of x: [n, w], or of the columns of h: [w, n].
  static SiteStats of_rows(const MatrixD& x);
  static SiteStats of_columns(const MatrixD& h);

  // The running sums of xtx's upper triangle, sum and abs_sum (ExactSums): every add is one batch's
  // partial sum, so the totals do not depend on which process added which batch.
  ExactSums exact = {};

  void reset(int width);
  // x: [n_tok, w]. Throws NumericError naming the token (first_token + row) and feature of a NaN/Inf.
  // xtx in double from products of the widened inputs (dsyrk), or with f32_products from float products
  // (ssyrk, about twice the rate) over blocks of 1024 tokens, each block's sum added in double:
  // relative error about √1024·2⁻²⁴ ≈ 2e-6 of Σ|x_i·x_j| per entry (tests/unit/test_pipeline.cpp).
  void add(const MatrixF& x, std::int64_t first_token = 0, bool f32_products = false);
  // add() without its last step: only the exact sums are updated (xtx, sum and abs_sum hold the last
  // batch's partial sums until symmetrize()). A stream of adds (the pipeline's batches) then rounds and
  // mirrors [w, w] once.
  void add_upper(const MatrixF& x, std::int64_t first_token = 0, bool f32_products = false);
  // xtx, sum, abs_sum from the exact sums (rounded once), xtx mirrored; the exact sums are released (a
  // later add starts them again from these values).
  void symmetrize();
  // Every rank's sums added (ExactSums::sum_ranks, n summed), then symmetrize(): the statistics of all
  // the ranks' tokens, the same bits for any number of ranks. A collective: every rank calls it.
  void combine_ranks();
  int width() const { return static_cast<int>(xtx.rows()); }
  VectorD mean() const;        // [w]  μ = Σ x / n
  VectorD abs_mean() const;    // [w]
  // Σ (x−μ)(x−μ)ᵀ = XXᵀ − n·μμᵀ: [w, w] (with a free bias the output error sees only centered inputs)
  MatrixD centered() const;
  // [[C, s], [sᵀ, n]]: [w+1, w+1], the statistics of the augmented input x' = [x; 1] (bias-aware joint
  // solutions, src/compress/bias.hpp).
  MatrixD augmented() const;

 private:
  // x's partial sums added to xtx's upper triangle, sum and abs_sum (zero at the start of a batch).
  void add_partial(const MatrixF& x, std::int64_t first_token, bool f32_products);
};

// Throws the NumericError SiteStats::add would for a NaN/Inf in x: [n_tok, w] (naming the token,
// first_token + row, and the feature), for sites tapped without statistics.
void check_finite_rows(const MatrixF& x, std::int64_t first_token);

// The cross moments of one site between the dense model's inputs x_t and the compressed pipeline's
// inputs x̂_t of the same calibration tokens (error-compensating fits, compress/compensate.hpp), in
// double beside the x̂ statistics (SiteStats).
struct CrossStats {
  MatrixD xh;   // [w, w]  Σ_t x_t x̂_tᵀ (rows: dense features, columns: compressed ones)
  VectorD sum;  // [w]     Σ_t x_t (the dense inputs)
  std::int64_t n = 0;

  ExactSums exact = {};  // the running sums of xh and sum (as SiteStats::exact)

  void reset(int width);
  // x: [n_tok, w] dense inputs, x_hat: [n_tok, w] the compressed pipeline's, row t the same token.
  // Products of the widened inputs (dgemm) over chunks of rows, one exactly added partial sum per call.
  // Throws NumericError naming the token (first_token + row) of a non-finite dense input, Error when
  // the shapes differ. xh and sum hold the totals after every add.
  void add(const MatrixF& x, const MatrixF& x_hat, std::int64_t first_token = 0);
  // Every rank's sums added, xh and sum read from them (a collective, as SiteStats::combine_ranks).
  void combine_ranks();
  int width() const { return static_cast<int>(xh.rows()); }
};

// What the pipeline hands a stage of one layer.
struct StageInput {
  int layer = 0;
  int seqlen = 0;
  // The statistics of the sites the stage reads (Stage::reads), by Site; null for the others.
  std::array<const SiteStats*, 4> stats{};
  // [n_r, w] the inputs of the stage's site, if it asked for them: this rank's tokens (all N·L on one
  // process; under K ranks every rank's rows in rank order make the N·L, dist::redistribute_rows).
  const MatrixF* activations = nullptr;
  // The cross moments of the stage's site with the dense model's inputs, if it asked for them
  // (Stage::needs_dense_cross); null otherwise.
  const CrossStats* cross = nullptr;

  // The statistics of `site`; throws Error when the stage did not declare that it reads them.
  const SiteStats& stats_of(model::Site site) const;
};

// One step of compressing a layer, as the pipeline drives it: it waits for the inputs of one site,
// may read the statistics of that site and of earlier sites of the same layer, and rewrites modules.
// A compression method is a sequence of stages in the sites' forward order (src/compress/stage.hpp).
class Stage {
 public:
  virtual ~Stage() = default;
  virtual std::string_view name() const = 0;  // "local", "joint-qk", ... (logs and timing)
  // The site whose inputs it waits for: it runs once they are tapped on the layer compressed so far.
  virtual model::Site site() const = 0;
  // The sites whose statistics it reads (default: its own site); each is its site or an earlier one.
  virtual std::vector<model::Site> reads() const { return {site()}; }
  // Whether it needs the inputs of its site themselves (this rank's [n_r, w] rows), not only their statistics.
  virtual bool needs_activations() const { return false; }
  // Whether it needs the cross moments of its site's inputs with the dense model's inputs of the same
  // tokens (StageInput::cross). If any stage does, the pipeline also runs the calibration windows
  // through the dense layers (a second stream of hidden states, see run_layerwise).
  virtual bool needs_dense_cross() const { return false; }
  // Whether it takes its site's inputs batch by batch as the pipeline taps them (consume), before it
  // runs: for what it gathers itself instead of, or beside, the statistics (the output side of a wide
  // module, src/compress/output_side.hpp) without the [N·L, w] inputs being kept.
  virtual bool consumes_batches() const { return false; }
  // One batch x: [rows, w] of its site's inputs in layer i (tokens first_token...), the layer's modules
  // as they stand then. Returns the FLOPs it did (PipelineTimes::consume_flops).
  virtual double consume(const model::DecoderLayer& layer, int i, const MatrixF& x, std::int64_t first_token) {
    (void)layer, (void)i, (void)x, (void)first_token;
    return 0;
  }
  // The sites whose modules it may rewrite (default: its own). The next pass resumes from the layer's
  // current state only if none of them comes before the site that state stands at (a rewritten
  // earlier module changes every later site's input); otherwise it restarts at the layer's input.
  virtual std::vector<model::Site> rewrites() const { return {site()}; }
  virtual void run(const StageInput& in, model::Model& m) = 0;
  // After layer i's output is propagated (the next layer's input), before layer_done saves it: work
  // it left for the layer's end (the compressor's finishing work). Every stage is called, in order.
  virtual void end_layer(int i, model::Model& m) { (void)i, (void)m; }
};

// Seconds spent per part of the pipeline.
struct PipelineTimes {
  double forward = 0;     // layer forwards (calibration + propagation), covariance taps excluded
  double covariance = 0;  // accumulating SiteStats
  double compress = 0;    // the compressor's decompositions
  double forward_flops = 0;     // linear-layer FLOPs of the forwards (for the fraction of peak)
  double attention_flops = 0;   // attention GEMM FLOPs of the forwards (Q·Kᵀ and ·V, block-causal)
  double covariance_flops = 0;  // Σ n·w·(w+1): the triangle dsyrk computes, 2 per multiply-add
  // The dense stream (when a stage needs_dense_cross): its layer forwards and the cross moments
  // (CrossStats), not counted in forward and covariance above.
  double dense_forward = 0;
  double cross = 0;
  // The stages' own work on the tapped batches (Stage::consume), not counted in covariance above.
  double consume = 0;
  double consume_flops = 0;
};

struct PipelineOptions {
  // Re-run the layer after each stage so later stages see the compressed earlier modules of the
  // same layer (not only of earlier layers).
  bool sequential_within_layer = true;
  int batch_windows = 8;  // windows per layer_forward call (bounds intermediate memory)
  // Covariances from float products summed in double per block of 1024 tokens (SiteStats::add).
  bool covariance_f32 = false;
  // Each stage's pass resumes where the previous one stopped (one model::LayerState per batch of
  // windows), so every module runs once per layer; off, each pass re-runs the layer from its input
  // (the results are bit-identical either way).
  bool resume_passes = true;
  // Most bytes the resumable state may hold: the [N·L, d] residual and the [N·L, w] input of the
  // site a pass stops at. A pass whose state would not fit runs on per-batch copies instead, and the
  // next one starts from the last state kept. -1: a quarter of physical memory (0 when unknown).
  std::int64_t resume_limit_bytes = -1;
  // Resume: layers [0, start_layer) are already compressed in the model and *start_hidden holds their
  // output for the N windows ([N·L, d]).
  int start_layer = 0;
  const MatrixF* start_hidden = nullptr;
  // With a dense stream (Stage::needs_dense_cross), resuming also needs the dense model's hidden
  // states after layer start_layer − 1 ([N·L, d]); ConfigError without them.
  const MatrixF* start_dense = nullptr;
  // Stop after layers [start_layer, end_layer) (-1: every layer): the cost of the first layers of a
  // large model, or a long run split over several sessions (with progress saving and resume).
  int end_layer = -1;
  // Replaces "layer " in the per-layer progress lines: "layer 2/5 done ..." becomes "<prefix>2/5 layers
  // done ...", so another pass over the layers (the rank allocation's pre-pass) is told apart.
  std::string log_prefix;
  // Relative cost of each layer (one per layer of the model), for the ETA of the progress lines: the
  // remaining layers' share of the work instead of their count. Empty: equal.
  std::vector<double> layer_weights;
  // Calibration sequences of their own lengths (multimodal prompts: each ScienceQA problem, with its
  // image features, is one sequence): `ids` holds them one after another ([Σ lengths]) and `seqlen` only
  // sizes memory; each forward call runs one sequence, so there is no padding and no attention across
  // sequences. Empty: ids.size() / seqlen windows of seqlen, batch_windows per call.
  std::vector<int> lengths;
  // The layer-0 input in place of the token embeddings of `ids` ([rows of ids, d]): a multimodal prompt's
  // embeddings with the projected image features in place of its image tokens. Null: embed(ids).
  const MatrixF* input_embeddings = nullptr;
  // Called after layer i is compressed and the hidden states propagated through it (progress saving);
  // dense: the dense stream's hidden states after layer i, or null when no stage needs_dense_cross.
  std::function<void(int layer, const MatrixF& hidden, const MatrixF* dense)> layer_done;
};

// The HF name of decoder layer i ("model.layers.3", "model.decoder.layers.3"), from its modules' names.
std::string layer_name(const model::DecoderLayer& layer, int i);
// The modules a site feeds, for messages: "model.layers.3.self_attn.q_proj, k_proj, v_proj".
std::string site_modules(const model::DecoderLayer& layer, int i, model::Site site);

// The ETA after layer i of [start_layer, n_layers), `elapsed` seconds after start_layer began: elapsed ×
// (weight of the layers after i) / (weight of the layers done), by PipelineOptions::layer_weights, or
// by their count when it is empty (or does not have n_layers entries, or the layers done weigh 0).
double eta_seconds(const PipelineOptions& opt, int n_layers, int i, double elapsed);

// Runs the N calibration windows through the model layer by layer: for layer i and each site some
// stage waits for, gathers that site's input statistics on the current hidden states (which already
// passed through the compressed layers 0..i−1, and with sequential_within_layer through the modules
// of layer i compressed by the earlier stages), runs the site's stages in the order given, then
// propagates the hidden states through the compressed layer. Statistics are kept until the last stage
// that reads them. Memory: the hidden states of the N windows twice (the layer's input and its
// running residual) plus one site's inputs (within resume_limit_bytes), never the whole model's
// activations. Throws ConfigError when the stages are not in the sites' forward order or read a
// later site. A lazy model (model::LoadOptions::lazy) has layer i loaded for its work and released
// after layer_done, which must keep what is needed of it (compress writes its factors to a file).
//
// Dense stream: when a stage needs_dense_cross, the windows also run through the dense model (its
// hidden states, [N·L, d], propagated through each layer's dense weights, copied before its stages
// replace them), batch by batch beside the compressed stream so that each tap sees the dense inputs
// of the same tokens, and the stage's site gets CrossStats. Cost per layer: one dense layer forward,
// one [out, in] float copy of the layer's weights, the dense hidden states (and, when they fit in
// resume_limit_bytes together with the compressed ones, its own resumable pass states), and one
// [w, w] double accumulator and a 2·n·w² dgemm per site that needs it. Without such a stage nothing
// of this runs and the results are bit-identical.
PipelineTimes run_layerwise(model::Model& m, std::span<const std::int32_t> ids, int seqlen,
                            std::span<Stage* const> stages, const PipelineOptions& opt = {});

}  // namespace latentllm::calib
