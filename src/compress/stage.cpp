#include "compress/stage.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "compress/asvd.hpp"
#include "compress/junction.hpp"
#include "compress/notes.hpp"
#include "core/gemm.hpp"
#include "core/gemm16.hpp"
#include "core/parallel.hpp"
#include "core/mapped_file.hpp"
#include "dist/comm.hpp"
#include "latentllm/error.hpp"
#include "latentllm/log.hpp"
#include "model/ops.hpp"

namespace latentllm::compress {
namespace {

// Writes factors into a model Linear (float), replacing its dense weight.
void install_factors(model::Linear& lin, const LowRank& f) {
  MatrixF b = f.B.cast<float>(), a = f.A.cast<float>();  // [out, r], [r, in or in − r]
  // Factors beyond the float range (from weights near it) would poison every later layer.
  model::check_finite(b, lin.name + ".B.weight");
  model::check_finite(a, lin.name + ".A.weight");
  lin.B = std::move(b);
  lin.A = std::move(a);
  lin.block_identity = f.block_identity();
  lin.perm.assign(f.perm.begin(), f.perm.end());
  if (f.bias.size() > 0) lin.bias = f.bias.cast<float>();
  lin.weight.resize(0, 0);
  // A view of the mapped checkpoint (an owned copy is freed with it): its pages leave the resident set
  // now, not when the layer is released (the dense stream's copy reads them again if it needs them).
  if (lin.weight16.size() > 0 && !lin.weight16.owned) {
    core::MappedFile::drop_pages_within(lin.weight16.data, static_cast<std::size_t>(lin.weight16.bytes()));
  }
  lin.weight16 = {};
}

}  // namespace

const char* Payload::take(std::size_t n) {
  if (at_ + n > data_.size()) {
    throw Error(fmt::format("decomposition job: result bytes (expected {} more, got {})", n, data_.size() - at_));
  }
  const char* p = data_.data() + at_;
  at_ += n;
  return p;
}

void Payload::get(std::string& s) {
  s.resize(get<std::uint64_t>());
  take_into(s.data(), s.size());
}

// In units of one multiply-add of a [d, d] eigendecomposition (d³ for one): the weights below are
// this machine's single-thread seconds of each part relative to it (eigendecompositions of d ≤ 8192;
// the Cholesky whitening and its products; the Gram of the whitened weight and U_r; the column-pivoted
// QR of the block identity and its solve; the two output errors in float32).
double fit_cost(const model::Linear& lin, bool output_side) {
  const double o = static_cast<double>(lin.out), n = static_cast<double>(lin.in), k = std::min(o, n);
  return output_side ? o * o * o + 0.15 * o * o * n + 0.25 * o * n * k
                     : k * k * k + 0.1 * n * n * n + 0.1 * o * n * n + 0.25 * o * n * k;
}

double StageContext::finish_cost(const model::Linear& lin, std::int64_t rank, bool measured) const {
  const double o = static_cast<double>(lin.out), n = static_cast<double>(lin.in), r = static_cast<double>(rank);
  double c = local_.junction == Junction::BlockIdentity ? r * n * (1.5 * r + 0.1 * n) : 0.0;
  if (measured) c += 0.2 * o * n * n;
  return c;
}

MatrixD to_double(const MatrixF& m) { return m.cast<double>(); }
VectorD to_double(const VectorF& v) { return v.cast<double>(); }

namespace {

// [out, in] in double from float32 or from a 16-bit matrix (widened by blocks of rows, never whole in
// float32), exact either way.
MatrixD widened_double(const MatrixF& weight, const Matrix16& h) {
  if (h.size() == 0) return weight.cast<double>();
  constexpr std::int64_t kRows = 64;
  MatrixD out(h.rows, h.cols);
  MatrixF block(std::min(kRows, h.rows), h.cols);  // [rows, in]
  for (std::int64_t r0 = 0; r0 < h.rows; r0 += kRows) {
    const std::int64_t n = std::min(kRows, h.rows - r0);
    core::widen_rows(h, r0, r0 + n, block.data());
    out.middleRows(r0, n) = block.topRows(n).cast<double>();
  }
  return out;
}

}  // namespace

MatrixD weight_double(const model::Linear& lin) { return widened_double(lin.weight, lin.weight16); }
MatrixD weight_double(const DenseWeight& w) { return widened_double(w.weight, w.weight16); }

LowRank round_factors(LowRank f) {
  f.B = f.B.cast<float>().cast<double>();
  f.A = f.A.cast<float>().cast<double>();
  return f;
}

std::shared_ptr<const DenseWeight> take_dense(model::Linear& lin) {
  auto d = std::make_shared<DenseWeight>();
  d->weight = std::move(lin.weight);
  d->weight16 = std::move(lin.weight16);
  lin.weight.resize(0, 0);
  lin.weight16 = {};
  return d;
}

DenseWeight::~DenseWeight() {
  // A view of the mapped checkpoint: its pages leave the resident set now (install_factors' reason).
  if (weight16.size() > 0 && !weight16.owned) {
    core::MappedFile::drop_pages_within(weight16.data, static_cast<std::size_t>(weight16.bytes()));
  }
}

std::string joined_name(std::initializer_list<const model::Linear*> mods) {
  std::string out;
  for (const model::Linear* lin : mods) out += out.empty() ? lin->name : ", " + lin->name.substr(lin->name.rfind('.') + 1);
  return out;
}

StageContext::StageContext(const CompressOptions& opt, const RankPlan& plan, CompressReport& report)
    : opt_(opt), local_(opt.local), report_(report) {
  local_.preconditioner = preconditioner_of(opt.method);
  for (const auto& mp : plan.modules) ranks_[mp.name] = mp.rank;
}

int StageContext::rank_of(const model::Linear& lin) const {
  const auto it = ranks_.find(lin.name);
  if (it == ranks_.end()) throw Error(fmt::format("{}: no rank planned", lin.name));
  return static_cast<int>(it->second);
}

Fitted StageContext::fitted(const model::Linear& lin, LowRank f, const MatrixD& w, const VectorD& b,
                           const calib::SiteStats* st) const {
  Fitted r;
  r.f = with_junction(std::move(f), local_.junction, lin.name);
  if (st == nullptr) {
    r.loss = (w - r.f.dense()).squaredNorm();
    return r;
  }
  const MatrixD e = w - r.f.dense();
  VectorD delta;
  if (b.size() > 0) delta = b - r.f.bias;
  const VectorD mean = st->mean();
  const auto n = static_cast<double>(st->n);
  r.loss = output_error_f32(e, delta, st->xtx, mean, n);
  r.energy = output_error_f32(w, b, st->xtx, mean, n);
  return r;
}

Fitted StageContext::fitted_measured(const model::Linear& lin, LowRank f, double loss, double energy) const {
  return {with_junction(std::move(f), local_.junction, lin.name), loss, energy};
}

void StageContext::install_for_passes(model::Linear& lin, const LowRank& f) {
  in_passes_.insert(lin.name);
  const double r = static_cast<double>(f.rank()), o = static_cast<double>(lin.out), n = static_cast<double>(lin.in);
  if (f.block_identity() || r * (o + n) < o * n) return install_factors(lin, f);
  // B·A as one [out, in] matrix takes fewer multiply-adds per token than the two factors (ranks near
  // the width, where the block identity would have saved the difference). Formed in float32 on one
  // BLAS thread: the same bits on every rank for any thread count.
  const MatrixF b = f.B.cast<float>(), a = f.A.cast<float>();  // [out, r], [r, in]
  model::check_finite(b, lin.name + ".B.weight");
  model::check_finite(a, lin.name + ".A.weight");
  MatrixF w(lin.out, lin.in);  // [out, in]
  {
    const core::BlasSingleThreaded single;
    core::sgemm_rm(false, false, static_cast<int>(lin.out), static_cast<int>(lin.in), static_cast<int>(f.rank()), 1.0f,
                   b.data(), static_cast<int>(f.rank()), a.data(), static_cast<int>(lin.in), 0.0f, w.data(),
                   static_cast<int>(lin.in));
  }
  if (f.bias.size() > 0) lin.bias = f.bias.cast<float>();
  if (lin.weight16.size() > 0 && !lin.weight16.owned) {
    core::MappedFile::drop_pages_within(lin.weight16.data, static_cast<std::size_t>(lin.weight16.bytes()));
  }
  lin.weight16 = {};
  lin.weight = std::move(w);
}

void StageContext::defer(int layer, std::string_view stage, Job job, std::function<void()> install) {
  Deferred d;
  d.layer = layer;
  d.stage = stage;
  d.ran = !job.run;  // nothing to compute: only the install
  d.job = std::move(job);
  d.install = std::move(install);
  deferred_.push_back(std::move(d));
}

void StageContext::install(model::Linear& lin, const Fitted& f, std::string_view how) {
  ModuleReport r;
  r.name = lin.name;
  r.out = lin.out;
  r.in = lin.in;
  r.rank = f.f.rank();
  r.dense_params = lin.out * lin.in;
  r.params = f.f.weight_params();
  r.how = how;
  r.loss = f.loss;
  if (f.energy >= 0) {
    r.loss_rel = f.energy > 0 ? r.loss / f.energy : 0.0;
    log_info("  {} rank {} params {}/{} loss {:.4e} (rel {:.4f}) [{}]", lin.name, r.rank, r.params, r.dense_params,
             r.loss, r.loss_rel, how);
  }
  report_.modules.push_back(std::move(r));
  install_factors(lin, f.f);
}

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A job's results as its owner sends them: the payload, the notes it recorded, its seconds.
struct JobOut {
  Payload payload;
  std::vector<NumericNote> notes;
  double seconds = 0;
};

JobOut run_job(const Job& job, bool with_then = false) {
  JobOut out;
  NoteCollector held(/*silent=*/true);  // replayed on every rank in the stage's order (run_site)
  const auto t0 = Clock::now();
  job.run(out.payload);
  if (with_then) job.then_run(out.payload);
  out.seconds = seconds_since(t0);
  out.notes = held.notes();
  return out;
}

// root's job results to every rank (nothing with one rank).
void broadcast_job(JobOut& out, int root) {
  if (dist::size() == 1) return;
  Payload b;
  if (dist::rank() == root) {
    b.put(out.payload.bytes()), b.put(out.seconds);
    b.put<std::uint64_t>(out.notes.size());
    for (const NumericNote& n : out.notes) b.put(n.module), b.put(n.kind), b.put(n.detail);
  }
  auto size = static_cast<std::int64_t>(b.bytes().size());
  dist::broadcast_bytes(&size, sizeof size, root);
  b.bytes().resize(static_cast<std::size_t>(size));
  dist::broadcast_bytes(b.bytes().data(), size, root);
  if (dist::rank() == root) return;
  out = JobOut{};
  b.get(out.payload.bytes());
  out.seconds = b.get<double>();
  out.notes.resize(b.get<std::uint64_t>());
  for (NumericNote& n : out.notes) b.get(n.module), b.get(n.kind), b.get(n.detail);
}

// The input of one of a site's stages: the statistics it reads, its activations and cross moments only
// when it asks for them (a stage tells its fits apart by them).
calib::StageInput input_of(const calib::Stage& st, const calib::StageInput& in) {
  calib::StageInput r;
  r.layer = in.layer;
  r.seqlen = in.seqlen;
  for (const model::Site s : st.reads()) r.stats[static_cast<std::size_t>(s)] = in.stats[static_cast<std::size_t>(s)];
  r.activations = st.needs_activations() ? in.activations : nullptr;
  r.cross = st.needs_dense_cross() ? in.cross : nullptr;
  return r;
}

// The site's rounds: [round][stage] its jobs. A stage of several rounds takes the last ones (they end
// together); a stage of one round, whose jobs depend on nothing else, joins the round of the
// multi-round stages with the largest modelled cost, where the other ranks would wait longest.
std::vector<std::vector<std::vector<Job>>> schedule(std::span<CompressStage* const> stages,
                                                    const std::vector<int>& rounds) {
  const std::size_t n = stages.size();
  const int longest = n > 0 ? *std::max_element(rounds.begin(), rounds.end()) : 0;
  std::vector<std::vector<std::vector<Job>>> out(static_cast<std::size_t>(longest),
                                                 std::vector<std::vector<Job>>(n));
  if (longest == 0) return out;
  std::vector<double> cost(out.size(), 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    if (rounds[i] < 2) continue;
    for (int r = 0; r < rounds[i]; ++r) {
      const auto at = static_cast<std::size_t>(longest - rounds[i] + r);
      out[at][i] = stages[i]->jobs(r);
      for (const Job& j : out[at][i]) cost[at] += j.cost;
    }
  }
  const auto costliest = static_cast<std::size_t>(std::max_element(cost.begin(), cost.end()) - cost.begin());
  for (std::size_t i = 0; i < n; ++i)
    if (rounds[i] == 1) out[costliest][i] = stages[i]->jobs(0);
  return out;
}

// The pending deferred jobs (StageContext::defer) that fit, in defer order, into a round's idle
// time: each to the least loaded rank while that stays within the busiest rank's load (by modelled
// cost, so every rank computes the same). With one rank, or a round without jobs, none.
struct Fillers {
  std::vector<std::size_t> which;  // indices into StageContext::deferred()
  std::vector<int> owners;
};

// First the jobs' own finishing work (Job::then_run) in job order, each where its owner stays within
// the busiest rank's load (with_then), then the fillers.
Fillers fillers(const std::vector<StageContext::Deferred>& deferred, const std::vector<Job>& jobs,
                const std::vector<int>& owners, std::vector<char>& with_then) {
  Fillers out;
  const int k = dist::size();
  with_then.assign(jobs.size(), 0);
  if (k == 1 || jobs.empty()) return out;
  std::vector<double> load(static_cast<std::size_t>(k), 0.0);
  for (std::size_t j = 0; j < jobs.size(); ++j) load[static_cast<std::size_t>(owners[j])] += jobs[j].cost;
  const double busiest = *std::max_element(load.begin(), load.end());
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    double& l = load[static_cast<std::size_t>(owners[j])];
    if (!jobs[j].then_run || l + jobs[j].then_cost > busiest) continue;
    l += jobs[j].then_cost;
    with_then[j] = 1;
  }
  for (std::size_t d = 0; d < deferred.size(); ++d) {
    if (deferred[d].ran) continue;
    const auto least = std::min_element(load.begin(), load.end());  // the first of equal loads
    if (*least + deferred[d].job.cost > busiest) continue;
    *least += deferred[d].job.cost;
    out.which.push_back(d);
    out.owners.push_back(static_cast<int>(least - load.begin()));
  }
  return out;
}

// This rank's share of the deferred jobs `f` (the others' stay empty until take_deferred).
std::vector<JobOut> run_deferred(StageContext& ctx, const Fillers& f) {
  std::vector<JobOut> outs(f.which.size());
  const auto& observe = ctx.options().part_observer;
  for (std::size_t j = 0; j < f.which.size(); ++j) {
    if (f.owners[j] != dist::rank()) continue;
    const StageContext::Deferred& d = ctx.deferred()[f.which[j]];
    if (observe) observe(d.stage, true);
    outs[j] = run_job(d.job);
    if (observe) observe(d.stage, false);
  }
  return outs;
}

// Every rank receives the deferred jobs' results in order and keeps them (and their notes) for the
// installs of StageContext::finish_deferred.
void take_deferred(StageContext& ctx, const Fillers& f, std::vector<JobOut>& outs) {
  CompressReport& report = ctx.report();
  for (std::size_t j = 0; j < f.which.size(); ++j) {
    StageContext::Deferred& d = ctx.deferred()[f.which[j]];
    broadcast_job(outs[j], f.owners[j]);
    d.job.done(outs[j].payload);
    d.ran = true;
    d.notes = std::move(outs[j].notes);
    report.part_seconds[d.stage] += outs[j].seconds;
    report.jobs.push_back({d.layer, d.stage, d.job.what, f.owners[j], outs[j].seconds});
  }
}

}  // namespace

void StageContext::finish_deferred() {
  if (deferred_.empty()) return;
  Fillers rest;  // costliest first (a stable order: ties keep the defer order), for the owners' balance
  for (std::size_t d = 0; d < deferred_.size(); ++d)
    if (!deferred_[d].ran) rest.which.push_back(d);
  std::stable_sort(rest.which.begin(), rest.which.end(),
                   [&](std::size_t a, std::size_t b) { return deferred_[a].job.cost > deferred_[b].job.cost; });
  std::vector<double> costs;
  for (const std::size_t d : rest.which) costs.push_back(deferred_[d].job.cost);
  rest.owners = dist::size() > 1 ? dist::owners_by_cost(costs, dist::size()) : std::vector<int>(costs.size(), 0);
  std::vector<JobOut> outs = run_deferred(*this, rest);
  take_deferred(*this, rest, outs);
  for (Deferred& d : deferred_) {
    NoteCollector collect;  // the job's numerical fallbacks, into the report in defer order
    for (const NumericNote& note : d.notes) record_note(note.module, note.kind, note.detail);
    const auto t0 = Clock::now();
    d.install();
    report_.part_seconds[d.stage] += seconds_since(t0);
    for (const NumericNote& note : collect.notes()) report_.add_note(note);
  }
  deferred_.clear();
  in_passes_.clear();
}

void run_site(StageContext& ctx, std::span<CompressStage* const> stages, const calib::StageInput& in,
              model::Model& m) {
  CompressReport& report = ctx.report();
  const std::size_t n = stages.size();
  std::vector<std::vector<NumericNote>> notes(n);  // per stage, in the order one process records them
  std::vector<double> seconds(n, 0.0);
  std::vector<int> rounds(n, 0);
  const auto& observe = ctx.options().part_observer;
  for (std::size_t i = 0; i < n; ++i) {
    const std::string part(stages[i]->name());
    if (observe) observe(part, true);
    NoteCollector held(/*silent=*/true);
    const auto t0 = Clock::now();
    rounds[i] = stages[i]->begin(input_of(*stages[i], in), m);
    seconds[i] += seconds_since(t0);
    notes[i] = held.notes();
    if (observe) observe(part, false);
  }
  const std::vector<std::vector<std::vector<Job>>> planned = schedule(stages, rounds);
  for (std::size_t round = 0; round < planned.size(); ++round) {
    std::vector<Job> jobs;
    std::vector<std::size_t> stage_of;
    for (std::size_t i = 0; i < n; ++i)
      for (const Job& j : planned[round][i]) jobs.push_back(j), stage_of.push_back(i);
    std::vector<int> owners(jobs.size(), 0);
    std::vector<double> costs;
    for (const Job& j : jobs) costs.push_back(j.cost);
    if (dist::size() > 1) owners = dist::owners_by_cost(costs, dist::size());
    std::vector<char> with_then;
    const Fillers fill = fillers(ctx.deferred(), jobs, owners, with_then);
    std::vector<JobOut> outs(jobs.size());
    for (std::size_t j = 0; j < jobs.size(); ++j) {
      if (owners[j] != dist::rank()) continue;
      const std::string part(stages[stage_of[j]]->name());
      if (observe) observe(part, true);
      outs[j] = run_job(jobs[j], with_then[j] != 0);
      if (observe) observe(part, false);
    }
    std::vector<JobOut> fill_outs = run_deferred(ctx, fill);
    for (std::size_t j = 0; j < jobs.size(); ++j) {
      broadcast_job(outs[j], owners[j]);
      const std::size_t i = stage_of[j];
      notes[i].insert(notes[i].end(), outs[j].notes.begin(), outs[j].notes.end());
      jobs[j].done(outs[j].payload);
      if (with_then[j]) jobs[j].then_done(outs[j].payload);
      seconds[i] += outs[j].seconds;
      report.jobs.push_back({in.layer, std::string(stages[i]->name()),
                             with_then[j] ? jobs[j].what + " + junction form" : jobs[j].what, owners[j],
                             outs[j].seconds});
    }
    take_deferred(ctx, fill, fill_outs);
  }
  for (std::size_t i = 0; i < n; ++i) {
    const std::string part(stages[i]->name());
    if (observe) observe(part, true);
    NoteCollector collect;  // the stage's numerical fallbacks, into the report in order
    for (const NumericNote& note : notes[i]) record_note(note.module, note.kind, note.detail);
    const auto t0 = Clock::now();
    stages[i]->finish(m);
    seconds[i] += seconds_since(t0);
    if (observe) observe(part, false);
    report.part_seconds[part] += seconds[i];
    for (const NumericNote& note : collect.notes()) report.add_note(note);
  }
}

void CompressStage::run(const calib::StageInput& in, model::Model& m) {
  CompressStage* self = this;
  run_site(ctx_, std::span<CompressStage* const>(&self, 1), in, m);
}

namespace {

// The stages waiting for one site, as the pipeline's one stage of that site.
class SiteStage final : public calib::Stage {
 public:
  SiteStage(StageContext& ctx, std::vector<CompressStage*> stages) : ctx_(ctx), stages_(std::move(stages)) {
    for (const CompressStage* s : stages_) name_ += (name_.empty() ? "" : "+") + std::string(s->name());
  }
  std::string_view name() const override { return name_; }
  model::Site site() const override { return stages_.front()->site(); }
  std::vector<model::Site> reads() const override {
    return joined([](const CompressStage* s) { return s->reads(); });
  }
  std::vector<model::Site> rewrites() const override {
    return joined([](const CompressStage* s) { return s->rewrites(); });
  }
  bool needs_activations() const override {
    return std::any_of(stages_.begin(), stages_.end(), [](const CompressStage* s) { return s->needs_activations(); });
  }
  bool needs_dense_cross() const override {
    return std::any_of(stages_.begin(), stages_.end(), [](const CompressStage* s) { return s->needs_dense_cross(); });
  }
  bool consumes_batches() const override {
    return std::any_of(stages_.begin(), stages_.end(), [](const CompressStage* s) { return s->consumes_batches(); });
  }
  double consume(const model::DecoderLayer& layer, int i, const MatrixF& x, std::int64_t first_token) override {
    double flops = 0;
    for (CompressStage* s : stages_)
      if (s->consumes_batches()) flops += s->consume(layer, i, x, first_token);
    return flops;
  }
  void run(const calib::StageInput& in, model::Model& m) override { run_site(ctx_, stages_, in, m); }
  void end_layer(int, model::Model&) override { ctx_.finish_deferred(); }

 private:
  template <typename F>
  std::vector<model::Site> joined(F sites_of) const {
    std::vector<model::Site> out;
    for (const CompressStage* s : stages_)
      for (const model::Site site : sites_of(s))
        if (std::find(out.begin(), out.end(), site) == out.end()) out.push_back(site);
    return out;
  }
  StageContext& ctx_;
  std::vector<CompressStage*> stages_;
  std::string name_;
};

}  // namespace

std::vector<std::unique_ptr<calib::Stage>> site_stages(StageContext& ctx,
                                                       std::span<const std::unique_ptr<CompressStage>> stages) {
  std::vector<std::vector<CompressStage*>> groups;
  for (const auto& s : stages) {
    if (groups.empty() || groups.back().front()->site() != s->site()) groups.emplace_back();
    groups.back().push_back(s.get());
  }
  std::vector<std::unique_ptr<calib::Stage>> out;
  for (auto& g : groups) out.push_back(std::make_unique<SiteStage>(ctx, std::move(g)));
  return out;
}

}  // namespace latentllm::compress
