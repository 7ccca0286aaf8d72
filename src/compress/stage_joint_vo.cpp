// The joint V-O stage (appendix "Joint Value-Output Compression", attention-aware; joint_vo.hpp):
// v_proj's input statistics from AttnIn, o_proj's from AttnOut, so it waits for AttnOut and rewrites
// v_proj too (the next pass restarts at the layer's input).
#include "compress/joint_vo.hpp"
#include "compress/notes.hpp"
#include "compress/stage.hpp"
#include "latentllm/log.hpp"

namespace latentllm::compress {
namespace {

class JointVoStage final : public CompressStage {
 public:
  using CompressStage::CompressStage;
  std::string_view name() const override { return "joint-vo"; }
  model::Site site() const override { return model::Site::AttnOut; }
  std::vector<model::Site> reads() const override { return {model::Site::AttnIn, model::Site::AttnOut}; }
  std::vector<model::Site> rewrites() const override { return {model::Site::AttnIn, model::Site::AttnOut}; }

 private:
  // One job: the joint solve, its loss and both factors' junction forms, on one owner rank.
  int begin(const calib::StageInput& in, model::Model& m) override {
    auto& layer = m.layer(in.layer);
    v_ = &layer.linear(model::Role::V);
    o_ = &layer.linear(model::Role::O);
    v_st_ = &in.stats_of(model::Site::AttnIn);
    o_st_ = &in.stats_of(model::Site::AttnOut);
    layer_ = in.layer;
    attn_ = &m.attention();
    name_ = joined_name({v_, o_});
    return 1;
  }
  std::vector<Job> jobs(int) override {
    const double cost = fit_cost(*v_, false) + fit_cost(*o_, false) * (1 + ctx_.options().vo_iters);
    return {{name_, cost, [this](Payload& p) { solve(p); }, [this](Payload& p) {
               p.get(fv_), p.get(fo_);
               loss_ = JointLoss{layer_, p.get<double>(), p.get<double>()};
             }}};
  }
  void solve(Payload& p) const {
    const VoDense dense{weight_double(*v_), to_double(v_->bias), weight_double(*o_), to_double(o_->bias)};
    const CompressOptions& opt = ctx_.options();
    VoOptions vo;
    vo.r_v = ctx_.rank_of(*v_);
    vo.r_o = ctx_.rank_of(*o_);
    vo.iters = opt.vo_iters;
    vo.tol = opt.joint_tol;
    vo.lambda_rel = opt.local.lambda_rel;
    vo.o_moments = o_st_;
    const VoResult res = joint_vo(dense, *attn_, *v_st_, vo, name_);
    JointLoss loss{layer_, vo_output_loss(dense, res.f, *attn_, *v_st_)};
    if (opt.diagnostics) {
      NoteCollector discard(/*silent=*/true);  // only compared against: its notes are not the run's
      loss.local = vo_output_loss(dense, separate_vo(dense, *v_st_, *o_st_, vo.r_v, vo.r_o, vo.lambda_rel, name_),
                                  *attn_, *v_st_);
    }
    p.put(ctx_.fitted(*v_, res.f.v, dense.wv, dense.bv, v_st_));
    p.put(ctx_.fitted(*o_, res.f.o, dense.wo, dense.bo, o_st_));
    p.put(loss.joint), p.put(loss.local);
  }
  void finish(model::Model&) override {
    ctx_.install_for_passes(*v_, fv_.f);
    ctx_.install_for_passes(*o_, fo_.f);
    // Reported with the layer's deferred work, in stage order (StageContext::defer).
    ctx_.defer(layer_, name(), {}, [this, v = v_, o = o_, fv = fv_, fo = fo_, loss = loss_] {
      if (ctx_.options().diagnostics) {
        log_info("  layer {} V-O output loss (own-token attention): local {:.4e} joint {:.4e} (ratio {:.3f})",
                 loss.layer, loss.local, loss.joint, loss.local > 0 ? loss.joint / loss.local : 0.0);
      } else {
        log_info("  layer {} V-O output loss (own-token attention): joint {:.4e}", loss.layer, loss.joint);
      }
      ctx_.report().vo_losses.push_back(loss);
      ctx_.install(*v, fv, "joint-vo");
      ctx_.install(*o, fo, "joint-vo");
    });
    fv_ = fo_ = {};
  }

  // The layer's work (begin to finish).
  model::Linear *v_ = nullptr, *o_ = nullptr;
  const calib::SiteStats *v_st_ = nullptr, *o_st_ = nullptr;
  const model::AttentionInfo* attn_ = nullptr;
  int layer_ = 0;
  std::string name_;
  Fitted fv_, fo_;
  JointLoss loss_;
};

}  // namespace

std::unique_ptr<CompressStage> make_joint_vo_stage(StageContext& ctx) { return std::make_unique<JointVoStage>(ctx); }

}  // namespace latentllm::compress
