// The local stage: each module by itself, activation-aware SVD with the method's pre-conditioner
// (paper Table 1; asvd.hpp), or with CompressOptions::error_compensation and the root covariance, the
// error-compensating fit to the dense model's output (compensate.hpp). With the root covariance, wide
// modules are fitted from their outputs (output_side.hpp): their site's covariance is never formed.
#include <map>

#include "compress/asvd.hpp"
#include "compress/compensate.hpp"
#include "compress/notes.hpp"
#include "compress/output_side.hpp"
#include "compress/stage.hpp"
#include "dist/comm.hpp"
#include "model/linear_fused.hpp"

namespace latentllm::compress {
namespace {

class LocalStage final : public CompressStage {
 public:
  LocalStage(StageContext& ctx, const model::Model& m, model::Site site, std::vector<model::Role> roles)
      : CompressStage(ctx), site_(site), roles_(std::move(roles)) {
    output_side_ = !compensating();
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
    return outputs_.add(layer, i, x, first_token, [&](const model::Linear& lin) { return mine(lin) && !lin.factored(); });
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
  bool mine(const model::Linear& lin) const {
    return lin.site == site_ && std::find(roles_.begin(), roles_.end(), lin.role) != roles_.end();
  }

  // One module's factors, computed by its owner rank from its weight w: [out, in] (weight_double): the
  // output side measures its loss and energy itself (ModuleFit::loss ≥ 0), the other fits are measured at
  // install over the site's statistics.
  ModuleFit fit(const model::Linear& lin, const MatrixD& w, const calib::SiteStats* st,
                const calib::CrossStats* cross, const OutputStats* os) const {
    const VectorD b = to_double(lin.bias);  // [out] or empty
    LocalOptions lo = ctx_.local();
    if (b.size() == 0) lo.update_bias = false;
    ModuleFit r;
    if (os != nullptr) {
      MatrixF widened;  // [out, in] when lin keeps a 16-bit matrix, for this fit
      OutputSideFit f = output_side_asvd(w, model::weight_f32(lin, widened), b, *os, ctx_.rank_of(lin), lo, lin.name);
      r.f = std::move(f.f);
      r.loss = f.loss;
      r.energy = f.energy;
    } else if (cross != nullptr) {
      r.f = compensated_fit(w, b, *st, *cross, ctx_.rank_of(lin), lo, lin.name);
    } else {
      r.f = asvd(w, b, *st, ctx_.rank_of(lin), lo, lin.name);
    }
    return r;
  }

  void install(model::Linear& lin, ModuleFit r, const MatrixD& w, const calib::SiteStats* st, bool cross) {
    if (r.loss >= 0) return ctx_.install_measured(lin, std::move(r.f), r.loss, r.energy, "local, output side");
    ctx_.install(lin, std::move(r.f), w, to_double(lin.bias), st, cross ? "compensate" : "local");
  }

  // The site's modules are independent: under K ranks each is decomposed by one owner rank (by modelled
  // cost, dist::owners_by_cost) and its factors and notes are broadcast, so every rank installs the same
  // bytes in module order; with one rank each module is fitted and installed in turn.
  void compress(const calib::StageInput& in, model::Model& m) override {
    const calib::SiteStats* st = output_side_ ? nullptr : &in.stats_of(site_);
    std::vector<model::Linear*> todo;
    for (model::Linear& lin : m.layer(in.layer).linears)
      if (mine(lin) && !lin.factored()) todo.push_back(&lin);
    // Output side: every module's output statistics combined over the ranks (collectives, in order).
    std::vector<const OutputStats*> os(todo.size(), nullptr);
    if (output_side_)
      for (std::size_t i = 0; i < todo.size(); ++i) os[i] = &outputs_.finished(todo[i]->name);
    const bool split = dist::size() > 1;
    std::vector<ModuleFit> fits(todo.size());
    std::vector<int> owners(todo.size(), 0);
    if (split) {
      std::vector<double> costs;
      for (const model::Linear* lin : todo) costs.push_back(fit_cost(*lin, output_side_));
      owners = dist::owners_by_cost(costs, dist::size());
      for (std::size_t i = 0; i < todo.size(); ++i) {
        if (owners[i] != dist::rank()) continue;
        NoteCollector held(true);  // replayed below on every rank, in module order
        fits[i] = fit(*todo[i], weight_double(*todo[i]), st, in.cross, os[i]);
        fits[i].notes = held.notes();
      }
    }
    for (std::size_t i = 0; i < todo.size(); ++i) {
      const MatrixD w = weight_double(*todo[i]);  // [out, in]
      if (split) {
        broadcast_fit(fits[i], owners[i]);
        for (const NumericNote& n : fits[i].notes) record_note(n.module, n.kind, n.detail);
      } else {
        fits[i] = fit(*todo[i], w, st, in.cross, os[i]);
      }
      install(*todo[i], std::move(fits[i]), w, st, in.cross != nullptr);
    }
    outputs_.clear();
  }

  model::Site site_;
  std::vector<model::Role> roles_;
  bool output_side_ = false;
  LayerOutputs outputs_;  // output side
};

}  // namespace

std::unique_ptr<CompressStage> make_local_stage(StageContext& ctx, const model::Model& m, model::Site site,
                                                std::vector<model::Role> roles) {
  return std::make_unique<LocalStage>(ctx, m, site, std::move(roles));
}

}  // namespace latentllm::compress
