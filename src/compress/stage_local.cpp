// The local stage: each module by itself, activation-aware SVD with the method's pre-conditioner
// (paper Table 1; asvd.hpp), or with CompressOptions::error_compensation and the root covariance, the
// error-compensating fit to the dense model's output (compensate.hpp). With the root covariance, wide
// modules are fitted from their outputs (output_side.hpp): their site's covariance is never formed.
#include <map>

#include "compress/asvd.hpp"
#include "compress/compensate.hpp"
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

  void compress(const calib::StageInput& in, model::Model& m) override {
    const calib::SiteStats* st = output_side_ ? nullptr : &in.stats_of(site_);
    for (model::Linear& lin : m.layer(in.layer).linears) {
      if (!mine(lin) || lin.factored()) continue;
      const MatrixD w = weight_double(lin);  // [out, in]
      const VectorD b = to_double(lin.bias);    // [out] or empty
      LocalOptions lo = ctx_.local();
      if (b.size() == 0) lo.update_bias = false;
      if (output_side_) {
        const OutputStats& os = outputs_.finished(lin.name);
        MatrixF widened;  // [out, in] when lin keeps a 16-bit matrix, for this fit
        OutputSideFit fit =
            output_side_asvd(w, model::weight_f32(lin, widened), b, os, ctx_.rank_of(lin), lo, lin.name);
        ctx_.install_measured(lin, std::move(fit.f), fit.loss, fit.energy, "local, output side");
      } else if (in.cross) {
        ctx_.install(lin, compensated_fit(w, b, *st, *in.cross, ctx_.rank_of(lin), lo, lin.name), w, b, st,
                     "compensate");
      } else {
        ctx_.install(lin, asvd(w, b, *st, ctx_.rank_of(lin), lo, lin.name), w, b, st, "local");
      }
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
