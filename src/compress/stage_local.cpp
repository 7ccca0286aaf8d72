// The local stage: each module by itself, activation-aware SVD with the method's pre-conditioner
// (paper Table 1; asvd.hpp), or with CompressOptions::error_compensation and the root covariance, the
// error-compensating fit to the dense model's output (compensate.hpp). With the root covariance, wide
// modules are fitted from their outputs (output_side.hpp): their site's covariance is never formed.
// A fit serves the layer's later passes at once; its junction form and output error are finishing work
// off the critical path (StageContext::defer, Job::then_run).
#include <map>
#include <memory>

#include "compress/asvd.hpp"
#include "compress/compensate.hpp"
#include "compress/notes.hpp"
#include "compress/output_side.hpp"
#include "compress/stage.hpp"
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
  bool mine(const model::Linear& lin) const {
    return lin.site == site_ && std::find(roles_.begin(), roles_.end(), lin.role) != roles_.end();
  }

  // One module's fit, before its junction form (the output side measures its loss and energy itself;
  // the other fits are measured with their junction form, deferred).
  struct Fit {
    LowRank f;
    double loss = 0, energy = -1;
  };
  Fit fit(const model::Linear& lin, const calib::SiteStats* st, const calib::CrossStats* cross,
          const OutputStats* os) const {
    const MatrixD w = weight_double(lin);  // [out, in]
    const VectorD b = to_double(lin.bias);  // [out] or empty
    LocalOptions lo = ctx_.local();
    if (b.size() == 0) lo.update_bias = false;
    lo.junction = Junction::Identity;  // B = U·S, A = M: the junction form is taken from them (deferred)
    if (os != nullptr) {
      MatrixF widened;  // [out, in] when lin keeps a 16-bit matrix, for this fit
      OutputSideFit f = output_side_asvd(w, model::weight_f32(lin, widened), b, *os, ctx_.rank_of(lin), lo, lin.name);
      return {std::move(f.f), f.loss, f.energy};
    }
    return {cross != nullptr ? compensated_fit(w, b, *st, *cross, ctx_.rank_of(lin), lo, lin.name)
                             : asvd(w, b, *st, ctx_.rank_of(lin), lo, lin.name)};
  }

  // The site's modules are independent: one job each (run_site gives each an owner rank by its
  // modelled cost); every rank installs them in module order.
  int begin(const calib::StageInput& in, model::Model& m) override {
    st_ = output_side_ ? nullptr : &in.stats_of(site_);
    cross_ = in.cross;
    layer_ = in.layer;
    todo_.clear();
    for (model::Linear& lin : m.layer(in.layer).linears)
      if (mine(lin) && !lin.factored() && !ctx_.fitted_in_layer(lin)) todo_.push_back(&lin);
    // Output side: every module's output statistics combined over the ranks (collectives, in order).
    os_.assign(todo_.size(), nullptr);
    if (output_side_)
      for (std::size_t i = 0; i < todo_.size(); ++i) os_[i] = &outputs_.finished(todo_[i]->name);
    fits_.assign(todo_.size(), Fit{});
    finals_.assign(todo_.size(), Fitted{});
    has_final_.assign(todo_.size(), 0);
    return todo_.empty() ? 0 : 1;
  }
  std::vector<Job> jobs(int) override {
    std::vector<Job> out;
    for (std::size_t i = 0; i < todo_.size(); ++i) {
      const model::Linear* lin = todo_[i];
      Job job{lin->name, fit_cost(*lin, output_side_),
              [this, i](Payload& p) {
                fits_[i] = fit(*todo_[i], st_, cross_, os_[i]);
                fits_[i].f = round_factors(std::move(fits_[i].f));  // as every rank reads it (then_run too)
                p.put_rounded(fits_[i].f), p.put(fits_[i].loss), p.put(fits_[i].energy);
              },
              [this, i](Payload& p) {
                p.get_rounded(fits_[i].f), fits_[i].loss = p.get<double>(), fits_[i].energy = p.get<double>();
              }};
      // Its junction form and output error at once where the round leaves time for them (the module
      // is still dense: its weight and bias as they were).
      job.then_cost = ctx_.finish_cost(*lin, ctx_.rank_of(*lin), !output_side_);
      job.then_run = [this, i](Payload& p) { p.put_installed(finished(i)); };
      job.then_done = [this, i](Payload& p) { p.get_installed(finals_[i]), has_final_[i] = 1; };
      out.push_back(std::move(job));
    }
    return out;
  }
  Fitted finished(std::size_t i) const {
    const model::Linear& lin = *todo_[i];
    const Fit& f = fits_[i];
    if (output_side_) return ctx_.fitted_measured(lin, f.f, f.loss, f.energy);
    return ctx_.fitted(lin, f.f, weight_double(lin), to_double(lin.bias), st_);
  }
  // The fits serve the layer's later passes at once; each one's junction form and output error, unless
  // a job did them already, are deferred, holding what they read (the dense weight, a copy of the
  // site's statistics).
  void finish(model::Model&) override {
    const char* how = output_side_ ? "local, output side" : cross_ != nullptr ? "compensate" : "local";
    std::shared_ptr<const calib::SiteStats> stats;
    if (!output_side_ && !todo_.empty()) stats = std::make_shared<const calib::SiteStats>(*st_);
    for (std::size_t i = 0; i < todo_.size(); ++i) {
      model::Linear* lin = todo_[i];
      if (has_final_[i]) {
        ctx_.install_for_passes(*lin, fits_[i].f);
        ctx_.defer(layer_, name(), {}, [this, lin, done = std::move(finals_[i]), how] { ctx_.install(*lin, done, how); });
        continue;
      }
      // What the deferred job reads, before the fit replaces the dense weight and bias.
      std::shared_ptr<const VectorD> b;
      std::shared_ptr<const DenseWeight> dense;
      if (!output_side_) {
        b = std::make_shared<const VectorD>(to_double(lin->bias));
        dense = take_dense(*lin);
      }
      ctx_.install_for_passes(*lin, fits_[i].f);
      auto f = std::make_shared<const Factors32>(fits_[i].f);
      const double loss = fits_[i].loss, energy = fits_[i].energy;
      auto done = std::make_shared<Fitted>();
      Job job{lin->name + ": junction form", ctx_.finish_cost(*lin, fits_[i].f.rank(), !output_side_), {},
              [done](Payload& p) { p.get_installed(*done); }};
      if (output_side_) {
        job.run = [this, lin, f, loss, energy](Payload& p) {
          p.put_installed(ctx_.fitted_measured(*lin, f->widened(), loss, energy));
        };
      } else {
        job.run = [this, lin, f, b, dense, stats](Payload& p) {
          p.put_installed(ctx_.fitted(*lin, f->widened(), weight_double(*dense), *b, stats.get()));
        };
      }
      ctx_.defer(layer_, name(), std::move(job), [this, lin, done, how] { ctx_.install(*lin, *done, how); });
    }
    outputs_.clear();
    fits_.clear();
    finals_.clear();
    has_final_.clear();
  }

  model::Site site_;
  std::vector<model::Role> roles_;
  bool output_side_ = false;
  LayerOutputs outputs_;  // output side
  // The layer's work (begin to finish): the modules to fit, their inputs and their fits.
  std::vector<model::Linear*> todo_;
  const calib::SiteStats* st_ = nullptr;
  const calib::CrossStats* cross_ = nullptr;
  int layer_ = 0;
  std::vector<const OutputStats*> os_;
  std::vector<Fit> fits_;
  std::vector<Fitted> finals_;    // junction forms done by the fit's job (Job::then_run)
  std::vector<char> has_final_;
};

}  // namespace

std::unique_ptr<CompressStage> make_local_stage(StageContext& ctx, const model::Model& m, model::Site site,
                                                std::vector<model::Role> roles) {
  return std::make_unique<LocalStage>(ctx, m, site, std::move(roles));
}

}  // namespace latentllm::compress
