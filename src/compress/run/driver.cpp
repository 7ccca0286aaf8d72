// compress_model: the rank plan, the method's stages (stage.hpp), the layer-by-layer pipeline and the
// per-layer progress that --resume continues from.
#include <algorithm>
#include <chrono>
#include <exception>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>

#include "compress/plan/rank_plan.hpp"
#include "compress/run/resume.hpp"
#include "compress/stages/stage.hpp"
#include "graph/graph.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/error.hpp"
#include "latentllm/log.hpp"

namespace latentllm::compress {
namespace {

std::vector<ModuleShape> module_shapes(const model::Model& m) {
  std::vector<ModuleShape> shapes;
  for (int i = 0; i < m.num_layers(); ++i)
    for (const auto& lin : m.layer_spec(i).linears) shapes.push_back({lin.name, lin.out, lin.in});
  return shapes;
}

// Fewer calibration tokens than a module has input features: its input covariance is singular and
// only the damping (or, without it, the pseudo-inverse) makes the pre-conditioner defined. Recorded
// once per run, for the widest input.
void note_few_tokens(const model::Model& m, std::int64_t n_tok, const CompressOptions& opt, CompressReport& report) {
  const model::Linear* widest = nullptr;
  int short_modules = 0, modules = 0;
  for (int i = 0; i < m.num_layers(); ++i) {
    for (const auto& lin : m.layer_spec(i).linears) {
      ++modules;
      if (lin.in <= n_tok) continue;
      ++short_modules;
      if (!widest || lin.in > widest->in) widest = &lin;
    }
  }
  if (!widest) return;
  const Preconditioner p = preconditioner_of(opt.method);
  const bool damped = opt.local.lambda_rel > 0 && p != Preconditioner::DiagL1 && p != Preconditioner::DiagL2;
  const std::string how = damped ? fmt::format("the damping λ = {:g}·mean(diag C) (--lambda) keeps the "
                                               "pre-conditioners invertible", opt.local.lambda_rel)
                                 : "directions the calibration never excited are left out of the pre-conditioners "
                                   "(their pseudo-inverse; see the pinv-drop and rank-reduced notes)";
  NumericNote n{"calibration", "few-tokens",
                fmt::format("{} calibration tokens for {} of {} modules with more input features (up to {} in {}): "
                            "their input covariances are singular; {}", n_tok, short_modules, modules, widest->in,
                            widest->name, how)};
  if (std::find(report.notes.begin(), report.notes.end(), n) == report.notes.end()) {
    log_warn("numerics [{}]: {}", n.kind, n.message());
    report.add_note(n);
  }
}

// The ETA's weight of each layer: a share that does not depend on the ranks (the covariances and the
// eigendecompositions have the dense widths) plus the weights its modules keep under the plan (the
// compressed forward and the factors follow them). Global ranks make layers unequal: on the OPT-1.3B
// shape the layers took 54 s down to 42 s for 49.5 M down to 37.5 M kept weights, t ≈ 15.7 s + 0.77 s
// per M, a third of the mean fixed; counting the remaining layers over-estimated the rest by 16 %
// after layer 1, this weighting by 0.3 % (bench/results/scale/README.md). Uniform plans: equal weights.
std::vector<double> layer_weights(const model::Model& m, const RankPlan& plan) {
  std::map<std::string, std::int64_t> kept;
  for (const auto& p : plan.modules) kept[p.name] = p.params;
  std::vector<double> w(static_cast<std::size_t>(m.num_layers()), 0.0);
  for (int i = 0; i < m.num_layers(); ++i)
    for (const auto& lin : m.layer_spec(i).linears) {
      const auto it = kept.find(lin.name);
      w[static_cast<std::size_t>(i)] += static_cast<double>(it != kept.end() ? it->second : lin.out * lin.in);
    }
  double mean = 0;
  for (const double x : w) mean += x / static_cast<double>(w.size());
  for (double& x : w) x += 0.5 * mean;
  return w;
}

// The per-layer progress of opt.state_dir (none without it; a lazy model needs it): created, and
// emptied first unless the run resumes (ConfigError when it holds saved work: never discarded silently).
std::optional<ResumeState> open_state(const model::Model& m, std::span<const std::int32_t> ids, int seqlen,
                                      const CompressOptions& opt) {
  if (m.lazy() && opt.state_dir.empty()) {
    throw ConfigError(fmt::format("{}: compressing a lazy model needs a progress directory (expected "
                                  "CompressOptions::state_dir, got none): its compressed layers are kept there, "
                                  "not in memory", m.dir().string()));
  }
  if (opt.state_dir.empty()) return std::nullopt;
  std::optional<ResumeState> state(std::in_place, opt.state_dir, run_fingerprint(m, ids, seqlen, opt),
                                   sparsifies(opt.method));
  // Every rank checks; rank 0 alone writes the directory (the others read it on resume).
  if (opt.resume) {
    state->check_fingerprint();  // a different run's progress fails now, not after the pre-pass
  } else {
    ResumeState::check_not_discarded(opt.state_dir, opt.resume);  // saved work is never discarded silently
  }
  graph::processes().barrier();
  if (graph::processes().rank() == 0) {
    if (!opt.resume) {
      std::error_code ec;
      std::filesystem::remove_all(opt.state_dir, ec);
      if (ec) throw IoError(fmt::format("{}: cannot remove the old progress ({})", opt.state_dir.string(), ec.message()));
    }
    state->create();
  }
  graph::processes().barrier();
  return state;
}

// A failed run leaves its progress directory only when it holds saved work (finished layers, a plan).
class StrayStateGuard {
 public:
  explicit StrayStateGuard(std::filesystem::path dir) : dir_(std::move(dir)), exceptions_(std::uncaught_exceptions()) {}
  ~StrayStateGuard() {
    if (dir_.empty() || std::uncaught_exceptions() == exceptions_ || ResumeState::holds_progress(dir_)) return;
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  StrayStateGuard(const StrayStateGuard&) = delete;
  StrayStateGuard& operator=(const StrayStateGuard&) = delete;

 private:
  std::filesystem::path dir_;
  int exceptions_;
};

}  // namespace

RankPlan plan_model(const model::Model& m, const CompressOptions& opt, std::int64_t n_tok) {
  return plan_ranks(module_shapes(m), opt.ratio, opt.local.junction, n_tok);
}

std::string_view planned_source_name(PlannedRanks::Source s) {
  switch (s) {
    case PlannedRanks::Source::Uniform: return "uniform";
    case PlannedRanks::Source::Global: return "global";
    case PlannedRanks::Source::Resumed: return "resumed";
    case PlannedRanks::Source::UniformNoData: return "uniform-no-data";
  }
  return "uniform";
}

namespace {

// One line of what --bpw chose: the budget used and how many modules took each bit width.
void log_bits_plan(const RankPlan& plan, double bpw, int group) {
  std::map<int, int> by_bits;
  std::int64_t bytes = 0, dense = 0;
  for (const auto& mp : plan.modules) {
    ++by_bits[mp.bits];
    bytes += module_bytes(mp.out, mp.in, mp.rank, mp.bits, group, plan.junction == Junction::BlockIdentity);
    dense += mp.dense_params;
  }
  std::string mix;
  for (const auto& [b, n] : by_bits) mix += fmt::format("{}{} at {} bits", mix.empty() ? "" : ", ", n, b);
  log_info("rank and bits allocation: {:.4f} of {} bits per weight ({}), {} weights",
           8.0 * static_cast<double>(bytes) / static_cast<double>(dense), bpw, mix, plan.params());
}

}  // namespace

PlannedRanks plan_run(model::Model& m, std::span<const std::int32_t> ids, int seqlen, const CompressOptions& requested,
                      std::vector<ModuleSpectrum>* spectra, const PlanParts* more) {
  const CompressOptions opt = effective_options(m.config(), static_cast<std::int64_t>(ids.size()), requested);
  PlannedRanks p;
  CompressOptions plain_opt = opt;
  plain_opt.local.junction = Junction::Identity;
  if (opt.quant.bpw > 0 && ids.empty()) {
    throw ConfigError("--bpw: calibration windows (expected --calib-data: each module's rank and bits come from the "
                      "spectra of a dense pre-pass over them, got none)");
  }
  if (opt.rank_alloc == RankAlloc::Uniform || ids.empty()) {
    p.plan = plan_model(m, opt);
    p.plain = plan_model(m, plain_opt);
    p.source = opt.rank_alloc == RankAlloc::Uniform ? PlannedRanks::Source::Uniform
                                                    : PlannedRanks::Source::UniformNoData;
    plan_attention_forms(p.plan, m, opt);
    plan_attention_forms(p.plain, m, opt);
    for (RankPlan* plan : {&p.plan, &p.plain}) {
      if (more == nullptr) break;
      const RankPlan parts = plan_ranks(more->shapes, opt.ratio, plan->junction, plan->n_tok);
      plan->modules.insert(plan->modules.end(), parts.modules.begin(), parts.modules.end());
    }
    return p;
  }
  if (opt.resume && !opt.state_dir.empty()) {
    // The killed run's plan: the pre-pass (an hour at 8 B) is not redone.
    const ResumeState state(opt.state_dir, run_fingerprint(m, ids, seqlen, opt));
    state.check_fingerprint();  // another run's progress fails now, before the pre-pass
    if (auto saved = state.restore_plan()) {
      p.plan = std::move(*saved);
      p.source = PlannedRanks::Source::Resumed;
      return p;
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<ModuleSpectrum> local;
  std::vector<ModuleSpectrum>& measured = spectra ? *spectra : local;
  if (measured.empty()) {
    if (opt.part_observer) opt.part_observer("pre-pass", true);
    measured = measure_spectra(m, ids, seqlen, opt);
    if (opt.part_observer) opt.part_observer("pre-pass", false);
    p.prepass_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  std::vector<ModuleSpectrum> with_parts;  // m's spectra and more's, when there are more
  if (more != nullptr) {
    const auto t1 = std::chrono::steady_clock::now();
    with_parts = measured;
    std::vector<ModuleSpectrum> parts = more->spectra();
    with_parts.insert(with_parts.end(), parts.begin(), parts.end());
    p.prepass_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  }
  const std::vector<ModuleSpectrum>& all = more != nullptr ? with_parts : measured;
  if (opt.quant.bpw > 0) {
    p.plan = allocate_ranks_bits(all, opt.quant.bpw, opt.quant.group, opt.local.junction);
    p.plain = allocate_ranks_bits(all, opt.quant.bpw, opt.quant.group, Junction::Identity);
    p.source = PlannedRanks::Source::Global;
    log_bits_plan(p.plan, opt.quant.bpw, opt.quant.group);
    return p;
  }
  p.plan = allocate_ranks(all, opt.ratio, opt.local.junction, opt.alloc_score);
  p.plain = allocate_ranks(all, opt.ratio, Junction::Identity, opt.alloc_score);
  plan_attention_forms(p.plan, m, opt);
  plan_attention_forms(p.plain, m, opt);
  p.source = PlannedRanks::Source::Global;
  if (more != nullptr) {
    log_info("rank allocation across {} ({}): {} weights for {} modules", more->name, alloc_score_name(opt.alloc_score),
             p.plan.params(), p.plan.modules.size());
    return p;
  }
  const RankPlan uniform = plan_model(m, opt);
  const auto [lo, hi] = std::minmax_element(p.plan.modules.begin(), p.plan.modules.end(),
                                            [](const auto& a, const auto& b) { return a.rank < b.rank; });
  log_info("rank allocation ({}): {} weights for {} modules (uniform: {}), ranks {}..{}",
           alloc_score_name(opt.alloc_score), p.plan.params(), p.plan.modules.size(), uniform.params(), lo->rank,
           hi->rank);
  return p;
}

void check_progress_kept(const std::filesystem::path& state_dir, bool resume) {
  ResumeState::check_not_discarded(state_dir, resume);
}

CompressReport compress_model(model::Model& m, std::span<const std::int32_t> ids, int seqlen,
                              const CompressOptions& requested, const RankPlan* given) {
  requested.validate();
  const auto t0 = std::chrono::steady_clock::now();
  CompressReport report;
  std::string skipped;
  const CompressOptions opt = effective_options(m.config(), static_cast<std::int64_t>(ids.size()), requested, &skipped);
  if (!skipped.empty()) {
    const NumericNote n{"calibration", "joint-skipped", skipped};
    log_warn("numerics [{}]: {}", n.kind, n.message());
    report.add_note(n);
  }
  report.method = opt.method;
  report.ratio = opt.ratio;
  report.rank_alloc = opt.rank_alloc;
  std::optional<ResumeState> state = open_state(m, ids, seqlen, opt);
  const StrayStateGuard stray(state && graph::processes().rank() == 0 ? opt.state_dir : std::filesystem::path());
  // A rank the launcher stops (another failed or was killed) says how to continue.
  if (state) {
    graph::set_stop_advice("finished layers stay in the progress directory: run the same command with --resume");
  }
  const bool global = opt.rank_alloc == RankAlloc::Global;
  std::optional<PlannedRanks> planned;
  if (!given) {
    planned = plan_run(m, ids, seqlen, opt);
    report.prepass_s = planned->prepass_s;
  }
  const RankPlan& plan = given ? *given : planned->plan;
  if (global && state && graph::processes().rank() == 0) state->save_plan(plan);  // for resumed_plan after a kill
  StageContext ctx(opt, plan, report);
  const auto stages = plan_stages(ctx, m);
  const auto sites = site_stages(ctx, stages);  // a site's stages share the ranks (run_site)
  std::vector<calib::Stage*> stage_ptrs;
  for (const auto& s : sites) stage_ptrs.push_back(s.get());
  calib::PipelineOptions po = opt.pipeline;
  po.layer_weights = layer_weights(m, plan);
  const bool dense_stream = std::any_of(stages.begin(), stages.end(), [](const auto& s) { return s->needs_dense_cross(); });
  MatrixF start_hidden;  // [N·L, d] after the restored layers
  MatrixF start_dense;   // [N·L, d] the dense stream's, with error-compensating fits
  if (state && opt.resume) {
    po.start_layer = state->restore(m, start_hidden, dense_stream ? &start_dense : nullptr, report);
    po.start_hidden = &start_hidden;
    po.start_dense = dense_stream ? &start_dense : nullptr;
  }
  // Rank 0 saves the progress (the pipeline hands it every rank's hidden states).
  po.layer_done = [&](int layer, const MatrixF& hidden, const MatrixF* dense) {
    if (graph::processes().rank() != 0) return;
    if (state) state->save_layer(m, layer, hidden, dense, report);
    if (opt.layer_done) opt.layer_done(layer);
  };
  note_few_tokens(m, static_cast<std::int64_t>(ids.size()), opt, report);  // after a restore: deduplicated
  report.layers_total = m.num_layers();
  report.layers_resumed = po.start_layer;
  po.end_layer = opt.stop_after_layers > 0 ? std::max(po.start_layer, std::min(opt.stop_after_layers, m.num_layers()))
                                           : m.num_layers();
  report.times = calib::run_layerwise(m, ids, seqlen, stage_ptrs, po);
  if (ctx.graph().pending() > 0) {  // every layer's end_layer runs what its sites declared
    throw Error(fmt::format("compression: {} tasks and effects left after the layers (expected none)",
                            ctx.graph().pending()));
  }
  report.layers_done = po.end_layer;
  for (const auto& r : report.modules) {
    report.dense_params += r.dense_params;
    report.params += r.params;
  }
  report.total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace latentllm::compress
