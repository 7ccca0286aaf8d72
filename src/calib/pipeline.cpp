// The sequential layer-by-layer calibration pipeline (SparseGPT style; paper section "Calibration").
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <vector>

#include "calib/dense_stream.hpp"
#include "core/gemm16.hpp"
#include "dist/comm.hpp"
#include "latentllm/calib.hpp"
#include "latentllm/error.hpp"
#include "latentllm/log.hpp"
#include "latentllm/resources.hpp"

namespace latentllm::calib {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// What one tap gathers at each of its sites besides the statistics.
struct TapWants {
  std::vector<bool> stats;  // the statistics (SiteStats): some stage reads them
  std::vector<bool> keep;   // the activations themselves
  std::vector<bool> cross;  // the cross moments with the dense stream's inputs (DenseStream::input)
  std::vector<std::vector<Stage*>> consumers;  // the stages that consume its batches (Stage::consume)
};

// Taps sites of one layer: accumulates their statistics and, if asked, keeps the activations and the
// cross moments with the dense stream's inputs of the same batch. Statistics errors (non-finite
// activations) name the modules the site feeds.
class SiteTap : public model::ForwardObserver {
 public:
  // first_row: the global index of this rank's first calibration token (for messages).
  SiteTap(const model::DecoderLayer& layer_modules, int layer, std::vector<model::Site> sites, TapWants wants,
          std::int64_t total_rows, std::int64_t first_row, bool f32_products, const DenseStream* dense)
      : layer_modules_(layer_modules), layer_(layer), sites_(std::move(sites)), stats_(std::move(wants.stats)),
        keep_(std::move(wants.keep)),
        cross_(std::move(wants.cross)), consumers_(std::move(wants.consumers)), total_rows_(total_rows), f32_(f32_products), dense_(dense),
        stats(sites_.size()), activations(sites_.size()), crosses(sites_.size()), rows_(sites_.size(), 0),
        first_row_(first_row), rows_seen_(sites_.size(), first_row) {}

  void on_input(int layer, model::Site site, const MatrixF& x) override {
    if (layer != layer_) return;
    for (std::size_t k = 0; k < sites_.size(); ++k) {
      if (sites_[k] != site) continue;
      if (cross_[k]) add_cross(k, site, x);
      const auto t0 = Clock::now();
      with_context(site_modules(layer_modules_, layer_, site), [&] {
        if (!stats_[k]) return check_finite_rows(x, rows_seen_[k]);  // what the statistics would check
        if (stats[k].xtx.size() == 0) stats[k].reset(static_cast<int>(x.cols()));
        stats[k].add_upper(x, rows_seen_[k], f32_);
      });
      seconds += seconds_since(t0);
      consume(k, site, x);
      rows_seen_[k] += x.rows();
      const auto t1 = Clock::now();
      if (keep_[k]) {
        if (activations[k].size() == 0) activations[k].resize(total_rows_, x.cols());
        activations[k].middleRows(rows_[k], x.rows()) = x;
        rows_[k] += x.rows();
      }
      seconds += seconds_since(t1);
    }
  }

  // The taps need nothing past the last tapped site: the layer forward on the scratch copy stops
  // there (for the first stage of a sequential pass, right after the layer norm).
  bool done_after(model::Site site) const override { return site == last_site(); }

  model::Site last_site() const { return *std::max_element(sites_.begin(), sites_.end()); }
  const std::vector<model::Site>& sites() const { return sites_; }
  bool wants_stats(std::size_t k) const { return stats_[k]; }
  std::int64_t rows_seen(std::size_t k) const { return rows_seen_[k] - first_row_; }
  // The sites whose cross moments it gathers (what the dense stream must supply).
  std::vector<model::Site> cross_sites() const {
    std::vector<model::Site> out;
    for (std::size_t k = 0; k < sites_.size(); ++k)
      if (cross_[k]) out.push_back(sites_[k]);
    return out;
  }

 private:
  void add_cross(std::size_t k, model::Site site, const MatrixF& x) {
    const auto t0 = Clock::now();
    if (crosses[k].xh.size() == 0) crosses[k].reset(static_cast<int>(x.cols()));
    with_context(site_modules(layer_modules_, layer_, site) + " (dense inputs)",
                 [&] { crosses[k].add(dense_->input(site), x, rows_seen_[k]); });
    cross_seconds += seconds_since(t0);
  }

  void consume(std::size_t k, model::Site site, const MatrixF& x) {
    if (consumers_[k].empty()) return;
    const auto t0 = Clock::now();
    with_context(site_modules(layer_modules_, layer_, site), [&] {
      for (Stage* s : consumers_[k]) consume_flops += s->consume(layer_modules_, layer_, x, rows_seen_[k]);
    });
    consume_seconds += seconds_since(t0);
  }

  const model::DecoderLayer& layer_modules_;
  int layer_;
  std::vector<model::Site> sites_;
  std::vector<bool> stats_, keep_, cross_;
  std::vector<std::vector<Stage*>> consumers_;
  std::int64_t total_rows_;
  bool f32_;
  const DenseStream* dense_;

 public:
  std::vector<SiteStats> stats;
  std::vector<MatrixF> activations;  // [N·L, w] where kept
  std::vector<CrossStats> crosses;   // where asked
  double seconds = 0;                // statistics and kept activations
  double cross_seconds = 0;          // cross moments
  double consume_seconds = 0;        // the consuming stages' work (Stage::consume)
  double consume_flops = 0;

 private:
  std::vector<std::int64_t> rows_;
  std::int64_t first_row_;
  std::vector<std::int64_t> rows_seen_;  // first_row_ + the tokens tapped so far
};

const char* site_name(model::Site s) {
  switch (s) {
    case model::Site::AttnIn: return "attn-in";
    case model::Site::AttnOut: return "attn-out";
    case model::Site::MlpIn: return "mlp-in";
    case model::Site::MlpMid: return "mlp-mid";
  }
  return "?";
}

// GEMM FLOPs (2 per multiply-add) of a layer pass over n_tok tokens from state `from` (empty: the
// layer's input) to site `until` (empty: the layer's end): the modules fed by sites in [from, until).
struct PassFlops {
  double linear = 0, attention = 0;
};
PassFlops pass_flops(const model::Model& m, int i, std::optional<model::Site> from, std::optional<model::Site> until,
                     int seqlen, std::int64_t n_tok) {
  auto runs = [&](model::Site site) { return (!from || *from <= site) && (!until || site < *until); };
  const model::DecoderLayer& layer = m.layer(i);
  double macs = 0;
  for (const auto& lin : layer.linears) {
    if (!runs(lin.site)) continue;
    macs += static_cast<double>(lin.num_params() - lin.bias.size());
  }
  PassFlops f;
  f.linear = 2.0 * macs * static_cast<double>(n_tok);
  if (runs(model::Site::AttnIn)) f.attention = m.attention_flops(seqlen, n_tok);  // between AttnIn and AttnOut
  return f;
}

// Input width of a site in layer i (of the modules it feeds).
std::int64_t site_width(const model::DecoderLayer& layer, model::Site site) {
  for (const auto& lin : layer.linears)
    if (lin.site == site) return lin.in;
  return 0;
}

// A layer's forward over all N·L rows, one state per batch of windows (batches run in place, so
// resuming copies nothing).
using BatchStates = std::vector<model::LayerState>;

// How the calibration rows split into forward calls: batch_windows windows of seqlen at a time, or with
// PipelineOptions::lengths one sequence per call.
struct Batches {
  std::vector<std::int64_t> start, rows;  // each batch's first row and row count
  std::vector<int> T;                     // tokens per sequence of each batch
  int mean_T = 0;                         // for the attention FLOPs
  std::int64_t first_row = 0;             // the global row of start 0 (this rank's share, below)
};

// This rank's batches (dist::my_share of the batches: whole batches, so that every batch's partial
// statistics are the same on any number of ranks), their rows counted from the share's first.
Batches rank_share(const Batches& all) {
  const auto n = static_cast<std::int64_t>(all.start.size());
  if (n < dist::size()) {
    throw ConfigError(fmt::format("calibration: {} batches of windows for {} ranks (expected at least one batch per "
                                  "rank: more --nsamples, a smaller --batch, or fewer ranks)", n, dist::size()));
  }
  const dist::Share sh = dist::my_share(n);
  Batches b;
  b.mean_T = all.mean_T;
  b.first_row = all.start[static_cast<std::size_t>(sh.begin)];
  for (auto k = sh.begin; k < sh.end; ++k) {
    const auto i = static_cast<std::size_t>(k);
    b.start.push_back(all.start[i] - b.first_row);
    b.rows.push_back(all.rows[i]);
    b.T.push_back(all.T[i]);
  }
  return b;
}

std::int64_t share_rows(const Batches& b) { return b.start.empty() ? 0 : b.start.back() + b.rows.back(); }

Batches make_batches(std::int64_t n_rows, int seqlen, const PipelineOptions& opt) {
  Batches b;
  if (!opt.lengths.empty()) {
    std::int64_t r0 = 0;
    for (const int len : opt.lengths) {
      b.start.push_back(r0);
      b.rows.push_back(len);
      b.T.push_back(len);
      r0 += len;
    }
    b.mean_T = static_cast<int>(n_rows / static_cast<std::int64_t>(opt.lengths.size()));
    return b;
  }
  const std::int64_t per = static_cast<std::int64_t>(opt.batch_windows) * seqlen;
  for (std::int64_t r0 = 0; r0 < n_rows; r0 += per) {
    b.start.push_back(r0);
    b.rows.push_back(std::min(per, n_rows - r0));
    b.T.push_back(seqlen);
  }
  b.mean_T = seqlen;
  return b;
}

// States at the layer's input: hidden's rows in batches.
BatchStates input_states(const MatrixF& hidden, const Batches& batches) {
  BatchStates st;
  for (std::size_t k = 0; k < batches.start.size(); ++k) {
    st.emplace_back().resid = hidden.middleRows(batches.start[k], batches.rows[k]);
  }
  return st;
}

// Progress of one pass over a layer's batches, on the log at most every 10 s: a pass over millions of
// tokens takes minutes, which must not pass in silence.
class BatchProgress {
 public:
  explicit BatchProgress(std::function<std::string()> what) : what_(std::move(what)) {}
  void done(std::size_t k, std::size_t n) {
    const auto now = Clock::now();
    if (std::chrono::duration<double>(now - last_).count() < 10.0 || k >= n) return;
    last_ = now;
    const double elapsed = std::chrono::duration<double>(now - t0_).count();
    log_info("  {}: {}/{} batches (elapsed {:.0f}s, ETA {:.0f}s)", what_(), k, n, elapsed,
             elapsed / static_cast<double>(k) * static_cast<double>(n - k));
  }

 private:
  std::function<std::string()> what_;
  Clock::time_point t0_ = Clock::now(), last_ = t0_;
};

// Runs layer i on every batch from where it stands to obs's last site (or the end without obs). In
// place, the states end where the forward stopped; otherwise each batch runs on a copy and the
// states are left as they were (obs keeps what it needs). before_batch(b), if set, runs first for
// each batch b (the dense stream's batch b).
void advance(const model::Model& m, int i, BatchStates& st, const Batches& batches, model::ForwardObserver* obs,
             bool in_place, BatchProgress& progress, const std::function<void(std::size_t)>& before_batch = {}) {
  model::LayerState copy;
  for (std::size_t k = 0; k < st.size(); ++k) {
    model::LayerState& b = st[k];
    if (before_batch) before_batch(k);
    if (in_place) {
      m.layer_resume(i, b, batches.T[k], obs);
    } else {
      copy = b;
      m.layer_resume(i, copy, batches.T[k], obs);
    }
    progress.done(k + 1, st.size());
  }
}

// Runs layer i on every batch from the layer's input (the rows of `hidden`), one batch state at a time:
// a pass whose states are not kept holds one batch's, never a copy of every batch's input.
void advance_from_input(const model::Model& m, int i, const MatrixF& hidden, const Batches& batches,
                        model::ForwardObserver* obs, BatchProgress& progress,
                        const std::function<void(std::size_t)>& before_batch = {}) {
  model::LayerState s;
  for (std::size_t k = 0; k < batches.start.size(); ++k) {
    if (before_batch) before_batch(k);
    s = model::LayerState{};
    s.resid = hidden.middleRows(batches.start[k], batches.rows[k]);
    m.layer_resume(i, s, batches.T[k], obs);
    progress.done(k + 1, batches.start.size());
  }
}

std::int64_t resume_limit(const PipelineOptions& opt) {
  return opt.resume_limit_bytes >= 0 ? opt.resume_limit_bytes : core::physical_memory_bytes() / 4;
}

// The calibration passes of one layer over all N·L rows (batch states, see BatchStates), and their
// times. With resume_passes, each pass starts where the previous one stopped while no stage has
// rewritten a module before that point.
class LayerPasses {
 public:
  // keep_state: a pass may leave the batch states at its last site for the next pass to resume from
  // (worth it when the layer is re-run after each stage, or when no stage rewrites a module and the
  // final pass only has to finish the layer, as in the rank allocation's pre-pass).
  LayerPasses(const model::Model& m, int layer, const MatrixF& hidden, const Batches& batches,
              const PipelineOptions& opt, PipelineTimes& times, bool keep_state)
      : m_(m), layer_(layer), hidden_(hidden), batches_(batches), opt_(opt), times_(times), keep_state_(keep_state) {}

  // Runs the layer to the last of `sites`, tapping them; returns the tap (statistics, activations,
  // cross moments with the dense stream's inputs, which it advances batch by batch beside).
  std::unique_ptr<SiteTap> tap(const std::vector<model::Site>& sites, TapWants wants, std::int64_t limit,
                               DenseStream* dense) {
    const auto n_tok = hidden_.rows();
    const model::Site until = *std::max_element(sites.begin(), sites.end());
    const bool in_place = opt_.resume_passes && keep_state_ &&
                          4 * n_tok * (m_.config().hidden_size + site_width(m_.layer(layer_), until)) <= limit;
    // From the layer's input without kept states: batch by batch, no copy of every batch's input.
    const bool from_input = !valid_ && !in_place;
    if (!valid_) state_.clear();  // stale states freed before new ones are made
    if (!valid_ && in_place) state_ = input_states(hidden_, batches_);
    auto tap = std::make_unique<SiteTap>(m_.layer(layer_), layer_, sites, std::move(wants), n_tok,
                                         batches_.first_row, opt_.covariance_f32, dense);
    const auto from = from_input ? std::nullopt : state_.front().at;
    const std::vector<model::Site> cross_sites = tap->cross_sites();
    std::function<void(std::size_t)> dense_batch;
    if (!cross_sites.empty()) dense_batch = [&](std::size_t b) { dense->advance_batch(b, cross_sites); };
    const double dense0 = dense ? dense->seconds() : 0.0;
    const auto t0 = Clock::now();
    BatchProgress progress([&] { return fmt::format("layer {}: pass to {}", layer_, site_name(until)); });
    if (from_input) {
      advance_from_input(m_, layer_, hidden_, batches_, tap.get(), progress, dense_batch);
    } else {
      advance(m_, layer_, state_, batches_, tap.get(), in_place, progress, dense_batch);
    }
    const double dense_s = dense ? dense->seconds() - dense0 : 0.0;
    times_.forward += seconds_since(t0) - tap->seconds - tap->cross_seconds - tap->consume_seconds - dense_s;
    times_.consume += tap->consume_seconds;
    times_.consume_flops += tap->consume_flops;
    times_.dense_forward += dense_s;
    times_.cross += tap->cross_seconds;
    valid_ = valid_ || in_place;  // a pass on copies leaves a valid state where it was
    add_flops(from, until);
    times_.covariance += tap->seconds;
    for (const auto& st : tap->stats) {
      const double w = static_cast<double>(st.xtx.rows());
      times_.covariance_flops += static_cast<double>(st.n) * w * (w + 1);  // dsyrk: one triangle
    }
    return tap;
  }

  // A stage rewrote the modules of these sites: inputs of later sites computed before are stale.
  void rewritten(const std::vector<model::Site>& sites) {
    for (const model::Site r : sites) {
      if (valid_ && state_.front().at && r < *state_.front().at) valid_ = false;
    }
  }

  // Runs the (compressed) layer to its end and writes its output for the N·L rows to `out`, which
  // may be the layer's input matrix itself (the batch states hold copies of it).
  void finish(MatrixF& out) {
    const auto from = valid_ ? state_.front().at : std::nullopt;
    const auto t0 = Clock::now();
    BatchProgress progress([&] { return fmt::format("layer {}: pass to its output", layer_); });
    if (valid_) {
      advance(m_, layer_, state_, batches_, nullptr, /*in_place=*/true, progress);
      for (std::size_t b = 0; b < state_.size(); ++b) {
        out.middleRows(batches_.start[b], state_[b].resid.rows()) = state_[b].resid;
      }
    } else {
      // Batch by batch from the input: a batch reads only its own rows before its output replaces them,
      // so `out` may be the input itself, and no copy of every batch's input is held.
      state_.clear();
      model::LayerState s;
      for (std::size_t b = 0; b < batches_.start.size(); ++b) {
        s = model::LayerState{};
        s.resid = hidden_.middleRows(batches_.start[b], batches_.rows[b]);
        m_.layer_resume(layer_, s, batches_.T[b], nullptr);
        out.middleRows(batches_.start[b], s.resid.rows()) = s.resid;
        progress.done(b + 1, batches_.start.size());
      }
    }
    times_.forward += seconds_since(t0);
    add_flops(from, std::nullopt);
  }

 private:
  void add_flops(std::optional<model::Site> from, std::optional<model::Site> until) {
    const PassFlops pf = pass_flops(m_, layer_, from, until, batches_.mean_T, hidden_.rows());
    times_.forward_flops += pf.linear;
    times_.attention_flops += pf.attention;
  }

  const model::Model& m_;
  int layer_;
  const MatrixF& hidden_;  // [N·L, d] the layer's input
  const Batches& batches_;
  const PipelineOptions& opt_;
  PipelineTimes& times_;
  bool keep_state_;
  BatchStates state_;
  bool valid_ = false;
};

// Consecutive stages waiting for the same site: one tap serves them all.
struct SiteGroup {
  model::Site site = model::Site::AttnIn;
  std::vector<Stage*> stages;
  bool needs_activations = false;
  bool needs_cross = false;        // a stage needs_dense_cross
  std::vector<model::Site> reads;  // every site its stages read
};

std::vector<SiteGroup> group_stages(std::span<Stage* const> stages) {
  std::vector<SiteGroup> groups;
  for (Stage* st : stages) {
    const model::Site site = st->site();
    if (!groups.empty() && site < groups.back().site) {
      throw ConfigError(fmt::format("calibration stages: {} at {} after a stage at {} (expected the sites' forward order)",
                                    st->name(), site_name(site), site_name(groups.back().site)));
    }
    if (groups.empty() || groups.back().site != site) groups.push_back({site, {}, false, false, {}});
    for (const model::Site r : st->reads()) {
      if (r > site) {
        throw ConfigError(fmt::format("calibration stages: {} at {} reads the later site {}", st->name(),
                                      site_name(site), site_name(r)));
      }
      groups.back().reads.push_back(r);
    }
    groups.back().stages.push_back(st);
    groups.back().needs_activations = groups.back().needs_activations || st->needs_activations();
    groups.back().needs_cross = groups.back().needs_cross || st->needs_dense_cross();
  }
  return groups;
}

// Whether some stage reads the statistics of `site`: a site tapped only for its activations (or cross
// moments) skips the [w, w] products.
bool read_by_any(const std::vector<SiteGroup>& groups, model::Site site) {
  return std::any_of(groups.begin(), groups.end(), [&](const SiteGroup& g) {
    return std::find(g.reads.begin(), g.reads.end(), site) != g.reads.end();
  });
}

// The statistics (and kept activations) of the sites a layer's taps gathered, until no later group
// reads them (a [w, w] double matrix per site: 2 GiB at w = 16384).
class LayerStats {
 public:
  void take(int layer, std::unique_ptr<SiteTap> tap) {
    for (std::size_t k = 0; k < tap->sites().size(); ++k) {
      const auto s = static_cast<std::size_t>(tap->sites()[k]);
      if (tap->rows_seen(k) == 0) {
        throw Error(fmt::format("layer {}: the model did not report its {} input", layer, site_name(tap->sites()[k])));
      }
      // Every rank's batches combined (exact sums: the same bits for any number of ranks), and
      // rounded and mirrored (the tap added only upper triangles).
      if (tap->wants_stats(k)) {
        tap->stats[k].combine_ranks();
        stats_[s] = std::make_unique<SiteStats>(std::move(tap->stats[k]));
      }
      // Kept activations: this rank's rows (the stage redistributes what it needs, StageInput).
      activations_[s] = std::move(tap->activations[k]);
      if (tap->crosses[k].n > 0) tap->crosses[k].combine_ranks();
      crosses_[s] = std::move(tap->crosses[k]);
    }
  }
  const SiteStats& stats(model::Site site) const {
    const auto& p = stats_[static_cast<std::size_t>(site)];
    if (!p) throw Error(fmt::format("calibration: the statistics of {} were not tapped", site_name(site)));
    return *p;
  }
  const MatrixF& activations(model::Site site) const { return activations_[static_cast<std::size_t>(site)]; }
  const CrossStats& cross(model::Site site) const {
    const CrossStats& c = crosses_[static_cast<std::size_t>(site)];
    if (c.n == 0) throw Error(fmt::format("calibration: the dense cross moments of {} were not tapped", site_name(site)));
    return c;
  }
  // Frees what no group after g reads.
  void release_after(std::size_t g, const std::vector<SiteGroup>& groups) {
    for (std::size_t s = 0; s < stats_.size(); ++s) {
      bool needed = false;
      for (std::size_t k = g + 1; k < groups.size() && !needed; ++k) {
        needed = groups[k].site == static_cast<model::Site>(s);
        for (const model::Site r : groups[k].reads) needed = needed || r == static_cast<model::Site>(s);
      }
      if (!needed) {
        stats_[s].reset();
        activations_[s].resize(0, 0);
        crosses_[s] = CrossStats{};
      }
    }
  }

 private:
  std::array<std::unique_ptr<SiteStats>, 4> stats_;
  std::array<MatrixF, 4> activations_;
  std::array<CrossStats, 4> crosses_;
};

// The dense stream when some stage needs_dense_cross (null otherwise): from the embedded windows, or
// on resume from start_dense. Its resumable states share the limit with the compressed ones.
std::unique_ptr<DenseStream> make_dense_stream(model::Model& m, const std::vector<SiteGroup>& groups,
                                               const MatrixF& hidden, std::int64_t row0, int seqlen,
                                               const PipelineOptions& opt, std::int64_t limit) {
  if (std::none_of(groups.begin(), groups.end(), [](const SiteGroup& g) { return g.needs_cross; })) return nullptr;
  if (!opt.lengths.empty()) {
    throw ConfigError("calibration: error-compensating fits (--fit compensate) on sequences of unequal lengths are "
                      "not supported (expected windows of one length, got multimodal sequences)");
  }
  MatrixF start = hidden;  // [N·L, d] at layer 0 the embeddings are the dense model's too
  if (opt.start_layer > 0) {
    if (!opt.start_dense || opt.start_dense->rows() != opt.start_hidden->rows() ||
        opt.start_dense->cols() != hidden.cols()) {
      throw ConfigError(fmt::format("calibration resume: layer {} without the dense stream's hidden states (expected "
                                    "[{}, {}], got {}): error-compensating fits need them", opt.start_layer,
                                    opt.start_hidden->rows(), hidden.cols(),
                                    opt.start_dense ? "other dimensions" : "none"));
    }
    start = opt.start_dense->middleRows(row0, hidden.rows());  // this rank's windows
  }
  const std::int64_t rows_per_batch = static_cast<std::int64_t>(opt.batch_windows) * seqlen;
  return std::make_unique<DenseStream>(m, std::move(start), seqlen, rows_per_batch, opt.resume_passes ? limit / 2 : 0);
}

// PipelineOptions::layer_done with every rank's rows: gathered on rank 0, in rank order (the rows of
// one process); the other ranks pass their own rows.
void layer_done(const PipelineOptions& opt, int i, const MatrixF& hidden, const MatrixF* dense) {
  if (dist::size() == 1) return opt.layer_done(i, hidden, dense);
  MatrixF all_hidden, all_dense;  // [N·L, d] on rank 0
  dist::gather_rows(hidden.data(), hidden.rows(), hidden.cols(), all_hidden);
  if (dense) dist::gather_rows(dense->data(), dense->rows(), dense->cols(), all_dense);
  if (!dist::is_root()) return opt.layer_done(i, hidden, dense);
  opt.layer_done(i, all_hidden, dense ? &all_dense : nullptr);
}

}  // namespace

std::string layer_name(const model::DecoderLayer& layer, int i) {
  for (const auto& lin : layer.linears) {
    const auto pos = lin.name.find(".layers.");
    if (pos == std::string::npos) continue;
    return lin.name.substr(0, lin.name.find('.', pos + 8));
  }
  return fmt::format("layer {}", i);
}

const SiteStats& StageInput::stats_of(model::Site site) const {
  const SiteStats* s = stats[static_cast<std::size_t>(site)];
  if (s == nullptr) throw Error(fmt::format("stage input: no statistics of {} (not among the stage's reads)", site_name(site)));
  return *s;
}

std::string site_modules(const model::DecoderLayer& layer, int i, model::Site site) {
  const std::string prefix = layer_name(layer, i);
  std::string out;
  for (const auto& lin : layer.linears) {
    if (lin.site != site) continue;
    if (out.empty()) {
      out = lin.name;
    } else {
      out += ", ";
      out += lin.name.substr(lin.name.rfind('.') + 1);
    }
  }
  return out.empty() ? fmt::format("{} ({})", prefix, site_name(site)) : out;
}

double eta_seconds(const PipelineOptions& opt, int n_layers, int i, double elapsed) {
  const std::vector<double>& w = opt.layer_weights;
  double done = 0, rest = 0;
  if (static_cast<int>(w.size()) == n_layers) {
    for (int j = opt.start_layer; j <= i; ++j) done += w[static_cast<std::size_t>(j)];
    for (int j = i + 1; j < n_layers; ++j) rest += w[static_cast<std::size_t>(j)];
  }
  if (!(done > 0)) return elapsed / (i + 1 - opt.start_layer) * (n_layers - i - 1);
  return elapsed * rest / done;
}

PipelineTimes run_layerwise(model::Model& m, std::span<const std::int32_t> ids, int seqlen,
                            std::span<Stage* const> stages, const PipelineOptions& opt) {
  if (!opt.lengths.empty()) {
    std::int64_t total = 0;
    for (const int len : opt.lengths) total += len > 0 ? len : -(std::int64_t{1} << 40);
    if (total != static_cast<std::int64_t>(ids.size())) {
      throw ConfigError(fmt::format("calibration: sequence lengths sum to {} (expected positive lengths summing to "
                                    "the {} tokens)", total, ids.size()));
    }
  } else if (seqlen <= 0 || ids.empty() || ids.size() % static_cast<std::size_t>(seqlen) != 0) {
    throw ConfigError(fmt::format("calibration: token count {} is not a positive multiple of seqlen {}",
                                  ids.size(), seqlen));
  }
  const auto n_rows = static_cast<std::int64_t>(ids.size());
  if (opt.input_embeddings &&
      (opt.input_embeddings->rows() != n_rows || opt.input_embeddings->cols() != m.config().hidden_size)) {
    throw ConfigError(fmt::format("calibration: input embeddings [{}, {}] (expected [{}, {}])",
                                  opt.input_embeddings->rows(), opt.input_embeddings->cols(), n_rows,
                                  m.config().hidden_size));
  }
  // Weights kept as stored give the float32 path's bits for any batch height (a window of <= 4 tokens
  // would otherwise take decoding's GEMV): the factors never depend on how the weights are held.
  const core::ExactProducts exact;
  const Batches all_batches = make_batches(n_rows, seqlen, opt);
  const Batches batches = rank_share(all_batches);  // this rank's windows; all of them on one rank
  const std::int64_t row0 = batches.first_row, my_rows = share_rows(batches);
  const auto my_ids = ids.subspan(static_cast<std::size_t>(row0), static_cast<std::size_t>(my_rows));
  PipelineTimes times;
  const auto t_start = Clock::now();
  MatrixF hidden;  // [N·L, d]
  auto t0 = Clock::now();
  const int n_layers = m.num_layers();
  if (opt.start_layer == 0 && opt.input_embeddings) {
    hidden = opt.input_embeddings->middleRows(row0, my_rows);
  } else if (opt.start_layer == 0 && !opt.lengths.empty()) {
    hidden.resize(my_rows, m.config().hidden_size);
    MatrixF h;  // [T_k, d] one sequence's embeddings (positions restart in each)
    for (std::size_t k = 0; k < batches.start.size(); ++k) {
      m.embed(my_ids.subspan(static_cast<std::size_t>(batches.start[k]), static_cast<std::size_t>(batches.rows[k])),
              batches.T[k], h);
      hidden.middleRows(batches.start[k], batches.rows[k]) = h;
    }
  } else if (opt.start_layer == 0) {
    m.embed(my_ids, seqlen, hidden);
  } else {
    if (opt.start_layer < 0 || opt.start_layer > n_layers || !opt.start_hidden ||
        opt.start_hidden->rows() != static_cast<Eigen::Index>(ids.size()) ||
        opt.start_hidden->cols() != m.config().hidden_size) {
      throw ConfigError(fmt::format("calibration resume: layer {} with hidden states [{}, {}] (expected layer 0..{} "
                                    "and [{}, {}])", opt.start_layer, opt.start_hidden ? opt.start_hidden->rows() : 0,
                                    opt.start_hidden ? opt.start_hidden->cols() : 0, n_layers, ids.size(),
                                    m.config().hidden_size));
    }
    hidden = opt.start_hidden->middleRows(row0, my_rows);
  }
  times.forward += seconds_since(t0);
  const std::vector<SiteGroup> groups = group_stages(stages);
  const bool rewrites = std::any_of(stages.begin(), stages.end(), [](const Stage* s) { return !s->rewrites().empty(); });
  const std::int64_t limit = resume_limit(opt);
  std::unique_ptr<DenseStream> dense = make_dense_stream(m, groups, hidden, row0, seqlen, opt, limit);

  const int end = opt.end_layer < 0 ? n_layers : std::min(opt.end_layer, n_layers);
  for (int i = opt.start_layer; i < end; ++i) {
    const auto t_layer = Clock::now();
    dist::set_activity(fmt::format("{}layer {} ({})", opt.log_prefix, i, layer_name(m.layer_spec(i), i)));
    if (m.lazy()) m.load_layer(i);  // widened for its passes and stages; released once it is done
    if (dense) dense->begin_layer(i);  // its dense modules, before any stage replaces them
    LayerPasses passes(m, i, hidden, batches, opt, times, opt.sequential_within_layer || !rewrites);
    LayerStats kept;  // the statistics of the sites tapped so far that a later stage still reads
    for (std::size_t g = 0; g < groups.size(); ++g) {
      // The group's inputs: run the (partly compressed) layer to its site, tapping it. Without
      // sequential_within_layer one pass over the dense layer taps every group's site at once.
      if (g == 0 || opt.sequential_within_layer) {
        std::vector<model::Site> sites;
        TapWants wants;
        for (std::size_t k = opt.sequential_within_layer ? g : 0; k < (opt.sequential_within_layer ? g + 1 : groups.size());
             ++k) {
          sites.push_back(groups[k].site);
          wants.stats.push_back(read_by_any(groups, groups[k].site));
          wants.keep.push_back(groups[k].needs_activations);
          wants.cross.push_back(groups[k].needs_cross);
          wants.consumers.emplace_back();
          for (Stage* st : groups[k].stages)
            if (st->consumes_batches()) wants.consumers.back().push_back(st);
        }
        kept.take(i, passes.tap(sites, std::move(wants), limit, dense.get()));
      }
      for (Stage* stage : groups[g].stages) {
        StageInput in;
        in.layer = i;
        in.seqlen = seqlen;
        for (const model::Site r : stage->reads()) in.stats[static_cast<std::size_t>(r)] = &kept.stats(r);
        in.activations = stage->needs_activations() ? &kept.activations(groups[g].site) : nullptr;
        in.cross = stage->needs_dense_cross() ? &kept.cross(groups[g].site) : nullptr;
        t0 = Clock::now();
        with_context(fmt::format("layer {} ({})", i, site_name(groups[g].site)), [&] { stage->run(in, m); });
        times.compress += seconds_since(t0);
        passes.rewritten(stage->rewrites());
      }
      kept.release_after(g, groups);
    }
    // Propagate through the compressed layer: the next layer sees compressed outputs.
    passes.finish(hidden);
    if (!std::isfinite((hidden.array() * 0.0f).sum())) {  // NaN iff a non-finite entry (vectorized sum)
      Eigen::Index t = 0, f = 0;
      (!hidden.array().isFinite()).cast<int>().maxCoeff(&t, &f);
      throw NumericError(fmt::format("{}: non-finite hidden states after compression (expected finite values, got "
                                     "{} at token {}, feature {})", layer_name(m.layer(i), i), hidden(t, f), row0 + t,
                                     f));
    }
    t0 = Clock::now();
    for (Stage* stage : stages) with_context(fmt::format("layer {}", i), [&] { stage->end_layer(i, m); });
    times.compress += seconds_since(t0);
    if (dense) {
      const double s0 = dense->seconds();
      dense->finish_layer();
      times.dense_forward += dense->seconds() - s0;
    }
    if (opt.layer_done) layer_done(opt, i, hidden, dense ? &dense->hidden() : nullptr);
    if (m.lazy()) m.release_layer(i);  // layer_done kept what is needed of it
    const double elapsed = seconds_since(t_start);
    const double eta = eta_seconds(opt, n_layers, i, elapsed);
    log_info("{}{}/{} done in {:.1f}s (elapsed {:.1f}s, ETA {:.1f}s)",
             opt.log_prefix.empty() ? "layer " : opt.log_prefix, i + 1,
             opt.log_prefix.empty() ? std::to_string(n_layers) : std::to_string(n_layers) + " layers",
             seconds_since(t_layer), elapsed, eta);
  }
  return times;
}

}  // namespace latentllm::calib
