#include "compress/stages/stage.hpp"

#include <algorithm>

#include "compress/math/asvd.hpp"
#include "compress/math/junction.hpp"
#include "compress/stages/notes.hpp"
#include "core/gemm.hpp"
#include "core/gemm16.hpp"
#include "core/parallel.hpp"
#include "core/mapped_file.hpp"
#include "latentllm/error.hpp"
#include "latentllm/log.hpp"
#include "model/ops.hpp"
#include "quant/factors.hpp"
#include "quant/gptq.hpp"

namespace latentllm::compress {
namespace {

// Empties w. A view of the mapped checkpoint (an owned copy is freed with it): its pages leave the
// resident set now, not when the layer is released (the dense stream's copy reads them again if it needs
// them).
void release(model::Weight& w) {
  if (const Matrix16* h = w.half(); h != nullptr && h->size() > 0 && !h->owned) {
    core::MappedFile::drop_pages_within(h->data, static_cast<std::size_t>(h->bytes()));
  }
  w = {};
}

// Writes quantized factors into a model Linear, replacing its dense weight (f: their perm and bias).
void install_quantized(model::Linear& lin, const Fitted& fit) {
  lin.B = fit.qb;
  lin.A = fit.qa;
  lin.block_identity = fit.f.block_identity();
  lin.perm.assign(fit.f.perm.begin(), fit.f.perm.end());
  if (fit.f.bias.size() > 0) lin.bias = fit.f.bias.cast<float>();
  release(lin.weight);
}

// Writes a full-rank fit quantized as one dense matrix into a model Linear (--bpw), with its bias.
void install_quantized_dense(model::Linear& lin, const Fitted& fit) {
  release(lin.weight);
  lin.weight = fit.qw;
  lin.B = {};
  lin.A = {};
  lin.block_identity = false;
  lin.perm.clear();
  if (fit.f.bias.size() > 0) lin.bias = fit.f.bias.cast<float>();
}

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
  release(lin.weight);
}

}  // namespace

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
MatrixD widened_double(const model::Weight& w) {
  if (w.half() == nullptr) return w.f32().cast<double>();
  const Matrix16& h = *w.half();
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

MatrixD weight_double(const model::Linear& lin) { return widened_double(lin.weight); }
MatrixD weight_double(const DenseWeight& w) { return widened_double(w.weight); }

std::shared_ptr<const DenseWeight> take_dense(model::Linear& lin) {
  auto d = std::make_shared<DenseWeight>();
  d->weight = std::move(lin.weight);
  lin.weight = {};
  return d;
}

// A view of the mapped checkpoint: its pages leave the resident set now (release's reason).
DenseWeight::~DenseWeight() { release(weight); }

std::string joined_name(std::initializer_list<const model::Linear*> mods) {
  std::string out;
  for (const model::Linear* lin : mods) out += out.empty() ? lin->name : ", " + lin->name.substr(lin->name.rfind('.') + 1);
  return out;
}

StageContext::StageContext(const CompressOptions& opt, const RankPlan& plan, CompressReport& report)
    : opt_(opt),
      local_(opt.local),
      report_(report),
      journal_(report),
      graph_(graph::processes(), graph::Hooks{&journal_, opt.part_observer, [this](const graph::Timing& t) {
                                                 report_.part_seconds[t.group] += t.seconds;
                                                 if (t.task.empty()) return;
                                                 report_.jobs.push_back({t.layer, t.group, t.task, t.owner, t.seconds, t.after, t.thread});
                                                 report_.jobs_at_once = std::max(report_.jobs_at_once, graph_.most_at_once());
                                               }}) {
  local_.preconditioner = preconditioner_of(opt.method);
  for (const auto& mp : plan.modules) {
    ranks_[mp.name] = mp.rank;
    if (mp.bits > 0) bits_[mp.name] = mp.bits;
  }
}

int StageContext::bits_of(const model::Linear& lin) const {
  const auto it = bits_.find(lin.name);
  return it != bits_.end() ? it->second : opt_.quant.bits;
}

int StageContext::rank_of(const model::Linear& lin) const {
  const auto it = ranks_.find(lin.name);
  if (it == ranks_.end()) throw Error(fmt::format("{}: no rank planned", lin.name));
  return static_cast<int>(it->second);
}

Fitted StageContext::fitted(const model::Linear& lin, LowRank f, const MatrixD& w, const VectorD& b,
                           const calib::SiteStats* st, bool keep_form) const {
  Fitted r;
  r.f = keep_form ? std::move(f) : with_junction(std::move(f), local_.junction, lin.name);
  if (st == nullptr) {
    r.loss = (w - r.f.dense()).squaredNorm();
    if (bits_of(lin) < 16) quantize_fitted(lin, r, w, b, nullptr);
    return r;
  }
  const MatrixD e = w - r.f.dense();
  VectorD delta;
  if (b.size() > 0) delta = b - r.f.bias;
  const VectorD mean = st->mean();
  const auto n = static_cast<double>(st->n);
  r.loss = output_error_f32(e, delta, st->xtx, mean, n);
  r.energy = output_error_f32(w, b, st->xtx, mean, n);
  if (bits_of(lin) < 16) quantize_fitted(lin, r, w, b, st);
  return r;
}

Fitted StageContext::fitted_measured(const model::Linear& lin, LowRank f, double loss, double energy) const {
  Fitted r;
  r.f = with_junction(std::move(f), local_.junction, lin.name);
  r.loss = loss;
  r.energy = energy;
  if (bits_of(lin) < 16) quantize_fitted(lin, r, MatrixD(), VectorD(), nullptr);
  return r;
}

void StageContext::quantize_fitted(const model::Linear& lin, Fitted& fit, const MatrixD& w, const VectorD& b,
                                   const calib::SiteStats* st) const {
  quant::FactorOptions qo;
  const bool gptq = uses_gptq(opt_);
  qo.spec = {bits_of(lin), opt_.quant.group, gptq ? quant::Grid::IntegerZero : quant::Grid::MinMax};
  qo.quantizer = gptq ? quant::Quantizer::Gptq : quant::Quantizer::Rtn;
  // With GPTQ, B is first refitted to the quantized A on the same statistics (quant::quantize_factors):
  // it absorbs A's rounding before its own is compensated (docs/QUANT.md "Factors").
  qo.refit_b = gptq;
  const Eigen::Index d = fit.f.in_features();
  const MatrixD c = st != nullptr ? st->xtx : MatrixD(MatrixD::Identity(d, d));  // [d, d]
  if (opt_.quant.bpw > 0 && fit.f.rank() == std::min(lin.out, lin.in)) return quantize_dense(lin, fit, w, b, c, qo, st);
  const quant::QuantizedFactors q = quant::quantize_factors(fit.f.B, fit.f.A, c, qo, lin.name, fit.f.perm);
  fit.qb = std::make_shared<const quant::PackedMatrix>(quant::pack(q.b));
  fit.qa = std::make_shared<const quant::PackedMatrix>(quant::pack(q.a));
  fit.f.B = quant::dequantize(q.b);  // [d', r]
  fit.f.A = quant::dequantize(q.a);  // [r, d] or [r, d − r]
  if (st == nullptr || w.size() == 0) {
    if (w.size() > 0) fit.loss = (w - fit.f.dense()).squaredNorm();
    return;
  }
  VectorD delta;
  if (b.size() > 0) delta = b - fit.f.bias;
  fit.loss = output_error_f32(w - fit.f.dense(), delta, st->xtx, st->mean(), static_cast<double>(st->n));
}

void StageContext::quantize_dense(const model::Linear& lin, Fitted& fit, const MatrixD& w, const VectorD& b,
                                  const MatrixD& c, const quant::FactorOptions& qo, const calib::SiteStats* st) const {
  const MatrixD full = fit.f.dense();  // [d', d] B·A
  const quant::QuantizedMatrix q = qo.quantizer == quant::Quantizer::Gptq
                                       ? quant::gptq(full, c, qo.spec, quant::GptqOptions{}, lin.name).q
                                       : quant::rtn(full, qo.spec, lin.name);
  fit.qw = std::make_shared<const quant::PackedMatrix>(quant::pack(q));
  if (w.size() == 0) return;  // an output-side fit: its measured loss stays
  const MatrixD e = w - quant::dequantize(q);  // [d', d]
  if (st == nullptr) {
    fit.loss = e.squaredNorm();
    return;
  }
  VectorD delta;
  if (b.size() > 0) delta = b - fit.f.bias;
  fit.loss = output_error_f32(e, delta, st->xtx, st->mean(), static_cast<double>(st->n));
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
  release(lin.weight);
  lin.weight = std::move(w);
}

void StageContext::end_layer() {
  graph_.end_layer();
  in_passes_.clear();
}

void StageContext::install(model::Linear& lin, const Fitted& f, std::string_view how) {
  ModuleReport r;
  r.name = lin.name;
  r.out = lin.out;
  r.in = lin.in;
  r.rank = f.f.rank();
  r.dense_params = lin.out * lin.in;
  r.params = f.params >= 0 ? f.params : f.f.weight_params();
  r.how = how;
  r.loss = f.loss;
  if (f.energy >= 0) {
    r.loss_rel = f.energy > 0 ? r.loss / f.energy : 0.0;
    log_info("  {} rank {} params {}/{} loss {:.4e} (rel {:.4f}) [{}]", lin.name, r.rank, r.params, r.dense_params,
             r.loss, r.loss_rel, how);
  }
  report_.modules.push_back(std::move(r));
  if (f.qw) return install_quantized_dense(lin, f);
  if (f.qb) return install_quantized(lin, f);
  install_factors(lin, f.f);
}

namespace {

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

}  // namespace

void run_site(StageContext& ctx, std::span<CompressStage* const> stages, const calib::StageInput& in,
              model::Model& m) {
  graph::Graph& g = ctx.graph();
  g.set_layer(in.layer);
  for (CompressStage* s : stages) {
    const calib::StageInput mine = input_of(*s, in);
    g.declare(std::string(s->name()), [&](graph::Graph& gr) { s->declare(gr, mine, m); });
  }
  g.run_site();
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
  void end_layer(int, model::Model&) override { ctx_.end_layer(); }

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
