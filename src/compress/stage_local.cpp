// The local stage: each module by itself, activation-aware SVD with the method's pre-conditioner
// (paper Table 1; asvd.hpp), or with CompressOptions::error_compensation and the root covariance, the
// error-compensating fit to the dense model's output (compensate.hpp).
#include "compress/asvd.hpp"
#include "compress/compensate.hpp"
#include "compress/stage.hpp"

namespace latentllm::compress {
namespace {

class LocalStage final : public CompressStage {
 public:
  LocalStage(StageContext& ctx, model::Site site, std::vector<model::Role> roles)
      : CompressStage(ctx), site_(site), roles_(std::move(roles)) {}
  std::string_view name() const override { return "local"; }
  model::Site site() const override { return site_; }
  // The compensating fit is the root-covariance ASVD of W̃ (compensate.hpp); the other pre-conditioners
  // have no such form and stay local. Without intra-layer passes only at the layer's input: a later
  // site's x̂ then comes from the layer's DENSE earlier modules, while the model will feed it the
  // outputs of their compensated factors, which already undo the upstream error; compensating again
  // there over-corrects (stories260K 30 %: validation perplexity 17.19 local, 18.25 compensating every
  // site, bench/results/error_fit.md).
  bool needs_dense_cross() const override {
    const CompressOptions& o = ctx_.options();
    return o.error_compensation && ctx_.local().preconditioner == Preconditioner::RootCovariance &&
           (o.pipeline.sequential_within_layer || site_ == model::Site::AttnIn);
  }

 private:
  void compress(const calib::StageInput& in, model::Model& m) override {
    const calib::SiteStats& st = in.stats_of(site_);
    for (model::Linear& lin : m.layer(in.layer).linears) {
      if (lin.site != site_ || lin.factored() || std::find(roles_.begin(), roles_.end(), lin.role) == roles_.end()) {
        continue;
      }
      const MatrixD w = to_double(lin.weight);  // [out, in]
      const VectorD b = to_double(lin.bias);    // [out] or empty
      LocalOptions lo = ctx_.local();
      if (b.size() == 0) lo.update_bias = false;
      if (in.cross) {
        ctx_.install(lin, compensated_fit(w, b, st, *in.cross, ctx_.rank_of(lin), lo, lin.name), w, b, &st,
                     "compensate");
      } else {
        ctx_.install(lin, asvd(w, b, st, ctx_.rank_of(lin), lo, lin.name), w, b, &st, "local");
      }
    }
  }

  model::Site site_;
  std::vector<model::Role> roles_;
};

}  // namespace

std::unique_ptr<CompressStage> make_local_stage(StageContext& ctx, model::Site site, std::vector<model::Role> roles) {
  return std::make_unique<LocalStage>(ctx, site, std::move(roles));
}

}  // namespace latentllm::compress
