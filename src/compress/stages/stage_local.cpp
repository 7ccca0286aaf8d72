// The local stage: each module by itself, activation-aware SVD with the method's pre-conditioner
// (paper Table 1; asvd.hpp), or with CompressOptions::error_compensation and the root covariance, the
// error-compensating fit to the dense model's output (compensate.hpp). With the root covariance, wide
// modules are fitted from their outputs (output_side.hpp): their site's covariance is never formed.
// A fit serves the layer's later passes at once; its junction form and output error are finishing work
// off the critical path (graph::Graph::finishing).
#include <map>
#include <memory>

#include "compress/math/asvd.hpp"
#include "compress/math/compensate.hpp"
#include "compress/stages/notes.hpp"
#include "compress/stages/codecs.hpp"
#include "compress/math/output_side.hpp"
#include "compress/math/split_heads.hpp"
#include "compress/stages/stage.hpp"
#include "model/linear_fused.hpp"

namespace latentllm::compress {
namespace {

class LocalStage final : public CompressStage {
 public:
  LocalStage(StageContext& ctx, const model::Model& m, model::Site site, std::vector<model::Role> roles)
      : CompressStage(ctx), site_(site), roles_(std::move(roles)) {
    heads_ = m.attention().num_heads;
    kv_heads_ = m.attention().num_kv_heads;
    // Split heads fit each head's rows from the site's covariance (split_heads.hpp).
    output_side_ = !compensating() && !(ctx_.options().split_heads && site_ == model::Site::AttnIn);
    bool any = false;
    for (const auto& lin : m.layer_spec(0).linears) {  // the layers are alike
      if (!mine(lin)) continue;
      any = true;
      output_side_ = output_side_ && local_output_side(ctx_.options(), lin.out, lin.in);
    }
    output_side_ = output_side_ && any;
  }
  std::string_view name() const override { return "local"; }
  model::Site site() const override { return site_; }
  std::vector<model::Site> reads() const override { return output_side_ ? std::vector<model::Site>{} : std::vector{site_}; }
  bool consumes_batches() const override { return output_side_; }
  double consume(const model::DecoderLayer& layer, int i, const MatrixF& x, std::int64_t first_token) override {
    return outputs_.add(layer, i, x, first_token, [&](const model::Linear& lin) { return mine(lin) && !lin.factored() && !ctx_.fitted_in_layer(lin); });
  }
  // The compensating fit is the root-covariance ASVD of W̃ (compensate.hpp); the other pre-conditioners
  // have no such form and stay local. Without intra-layer passes only at the layer's input: a later
  // site's x̂ then comes from the layer's DENSE earlier modules, while the model will feed it the
  // outputs of their compensated factors, which already undo the upstream error; compensating again
  // there over-corrects (stories260K 30 %: validation perplexity 17.19 local, 18.25 compensating every
  // site, bench/results/error_fit.md).
  bool needs_dense_cross() const override { return compensating(); }

 private:
  bool compensating() const {
    const CompressOptions& o = ctx_.options();
    return o.error_compensation && ctx_.local().preconditioner == Preconditioner::RootCovariance &&
           (o.pipeline.sequential_within_layer || site_ == model::Site::AttnIn);
  }
  // The heads lin is factored by under --split-heads (q_proj H, k_proj and v_proj H_kv), else 0.
  int split_heads_of(const model::Linear& lin) const {
    if (!ctx_.options().split_heads || lin.site != model::Site::AttnIn) return 0;
    if (lin.role == model::Role::Q) return heads_;
    return lin.role == model::Role::K || lin.role == model::Role::V ? kv_heads_ : 0;
  }
  bool mine(const model::Linear& lin) const {
    return lin.site == site_ && std::find(roles_.begin(), roles_.end(), lin.role) != roles_.end();
  }

  // One module's fit before its junction form, as the layer's passes read it (float32 factors); the
  // output side measures its loss and energy itself, the other fits are measured with their junction
  // form (finishing work).
  using Fit = RoundedFit;
  Fit fit(const model::Linear& lin, const MatrixD& w, const VectorD& b, const calib::SiteStats* st,
          const calib::CrossStats* cross, const OutputStats* os) const {
    LocalOptions lo = ctx_.local();
    if (b.size() == 0) lo.update_bias = false;
    lo.junction = Junction::Identity;  // B = U·S, A = M: the junction form is taken from them (finishing)
    if (os != nullptr) {
      MatrixF widened;  // [out, in] when lin keeps a 16-bit matrix, for this fit
      OutputSideFit f = output_side_asvd(w, model::weight_f32(lin, widened), b, *os, ctx_.rank_of(lin), lo, lin.name);
      return {Factors32(f.f), f.loss, f.energy};
    }
    if (const int h = split_heads_of(lin); h > 0)
      return {Factors32(split_heads_asvd(w, b, *st, h, ctx_.rank_of(lin), lo, lin.name))};
    return {Factors32(cross != nullptr ? compensated_fit(w, b, *st, *cross, ctx_.rank_of(lin), lo, lin.name)
                                       : asvd(w, b, *st, ctx_.rank_of(lin), lo, lin.name))};
  }

  // The site's modules are independent: one task each, its junction form and output error a finishing
  // task; the fits serve the layer's later passes at the site's end, in module order, and are installed
  // and reported at the layer's end.
  void declare(graph::Graph& g, const calib::StageInput& in, model::Model& m) override {
    const calib::SiteStats* st = output_side_ ? nullptr : &in.stats_of(site_);
    const calib::CrossStats* cross = in.cross;
    std::vector<model::Linear*> todo;
    for (model::Linear& lin : m.layer(in.layer).linears)
      if (mine(lin) && !lin.factored() && !ctx_.fitted_in_layer(lin)) todo.push_back(&lin);
    if (todo.empty()) return;
    // Output side: every module's output statistics combined over the ranks (collectives, in order).
    std::vector<const OutputStats*> os(todo.size(), nullptr);
    if (output_side_)
      for (std::size_t i = 0; i < todo.size(); ++i) os[i] = &outputs_.finished(todo[i]->name);
    // What the finishing work reads after the fits replace the dense weights: a copy of the statistics.
    std::shared_ptr<const calib::SiteStats> stats;
    if (!output_side_) stats = std::make_shared<const calib::SiteStats>(*st);
    const char* how = output_side_ ? "local, output side" : cross != nullptr ? "compensate" : "local";
    for (std::size_t i = 0; i < todo.size(); ++i) declare_module(g, *todo[i], st, cross, os[i], stats, how);
    if (output_side_) g.at_site_end([this] { outputs_.clear(); });
  }

  void declare_module(graph::Graph& g, model::Linear& lin, const calib::SiteStats* st, const calib::CrossStats* cross,
                      const OutputStats* os, const std::shared_ptr<const calib::SiteStats>& stats, const char* how) {
    auto b = std::make_shared<const VectorD>(to_double(lin.bias));  // [out] or empty: as before the fit
    std::shared_ptr<const DenseWeight> dense;  // the output side reads lin itself until the site's end
    if (!output_side_) dense = take_dense(lin);
    const auto fitted = g.task({lin.name, fit_cost(lin, output_side_)}, [this, &lin, st, cross, os, dense, b] {
      return fit(lin, dense ? weight_double(*dense) : weight_double(lin), *b, st, cross, os);
    });
    const auto done = g.finishing(
        {lin.name + ": junction form", ctx_.finish_cost(lin, ctx_.rank_of(lin), !output_side_)},
        [this, &lin, dense, b, stats](const Fit& f) {
          if (!dense) return ctx_.fitted_measured(lin, f.f.widened(), f.loss, f.energy);
          const int h = split_heads_of(lin);
          Fitted fit = ctx_.fitted(lin, f.f.widened(), weight_double(*dense), *b, stats.get(), h > 0);
          if (h > 0) fit.params = split_heads_params(lin.out, lin.in, h, fit.f.rank());
          return fit;
        },
        fitted);
    g.at_site_end([this, &lin](const Fit& f) { ctx_.install_for_passes(lin, f.f.widened()); }, fitted);
    g.at_layer_end([this, &lin, how](const Fitted& f) { ctx_.install(lin, f, how); }, done);
  }

  model::Site site_;
  std::vector<model::Role> roles_;
  bool output_side_ = false;
  int heads_ = 0, kv_heads_ = 0;
  LayerOutputs outputs_;  // output side
};

}  // namespace

std::unique_ptr<CompressStage> make_local_stage(StageContext& ctx, const model::Model& m, model::Site site,
                                                std::vector<model::Role> roles) {
  return std::make_unique<LocalStage>(ctx, m, site, std::move(roles));
}

}  // namespace latentllm::compress
