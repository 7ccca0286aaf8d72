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
  void compress(const calib::StageInput& in, model::Model& m) override {
    auto& layer = m.layer(in.layer);
    model::Linear& v = layer.linear(model::Role::V);
    model::Linear& o = layer.linear(model::Role::O);
    const calib::SiteStats& v_st = in.stats_of(model::Site::AttnIn);
    const calib::SiteStats& o_st = in.stats_of(model::Site::AttnOut);
    const VoDense dense{weight_double(v), to_double(v.bias), weight_double(o), to_double(o.bias)};
    const CompressOptions& opt = ctx_.options();
    VoOptions vo;
    vo.r_v = ctx_.rank_of(v);
    vo.r_o = ctx_.rank_of(o);
    vo.iters = opt.vo_iters;
    vo.tol = opt.joint_tol;
    vo.lambda_rel = opt.local.lambda_rel;
    vo.o_moments = &o_st;
    const model::AttentionInfo& s = m.attention();
    const std::string ctx = joined_name({&v, &o});
    const VoResult res = joint_vo(dense, s, v_st, vo, ctx);
    JointLoss loss{in.layer, vo_output_loss(dense, res.f, s, v_st)};
    if (opt.diagnostics) {
      NoteCollector discard(/*silent=*/true);  // only compared against: its notes are not the run's
      loss.local = vo_output_loss(dense, separate_vo(dense, v_st, o_st, vo.r_v, vo.r_o, vo.lambda_rel, ctx), s, v_st);
      log_info("  layer {} V-O output loss (own-token attention): local {:.4e} joint {:.4e} (ratio {:.3f})", in.layer,
               loss.local, loss.joint, loss.local > 0 ? loss.joint / loss.local : 0.0);
    } else {
      log_info("  layer {} V-O output loss (own-token attention): joint {:.4e}", in.layer, loss.joint);
    }
    ctx_.report().vo_losses.push_back(loss);
    ctx_.install(v, res.f.v, dense.wv, dense.bv, &v_st, "joint-vo");
    ctx_.install(o, res.f.o, dense.wo, dense.bo, &o_st, "joint-vo");
  }
};

}  // namespace

std::unique_ptr<CompressStage> make_joint_vo_stage(StageContext& ctx) { return std::make_unique<JointVoStage>(ctx); }

}  // namespace latentllm::compress
