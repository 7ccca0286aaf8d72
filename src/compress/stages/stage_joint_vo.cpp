// The joint V-O stage (appendix "Joint Value-Output Compression", attention-aware; joint_vo.hpp):
// v_proj's input statistics from AttnIn, o_proj's from AttnOut, so it waits for AttnOut and rewrites
// v_proj too (the next pass restarts at the layer's input).
#include "compress/stages/codecs.hpp"
#include "compress/math/joint_vo.hpp"
#include "compress/stages/notes.hpp"
#include "compress/stages/stage.hpp"
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
  // The solution of one layer's group: both factors in their junction form with their output errors, and
  // the group's output loss.
  struct Solved {
    Fitted v, o;
    JointLoss loss;
    template <class S>
    static auto fields(S& s) { return std::tie(s.v, s.o, s.loss); }
  };

  // One task: the joint solve, its loss and both factors' junction forms, on one owner rank; the factors
  // serve the later passes at the site's end and are installed and reported at the layer's end.
  void declare(graph::Graph& g, const calib::StageInput& in, model::Model& m) override {
    auto& layer = m.layer(in.layer);
    model::Linear* v = &layer.linear(model::Role::V);
    model::Linear* o = &layer.linear(model::Role::O);
    const calib::SiteStats* v_st = &in.stats_of(model::Site::AttnIn);
    const calib::SiteStats* o_st = &in.stats_of(model::Site::AttnOut);
    const std::string name = joined_name({v, o});
    const double cost = fit_cost(*v, false) + fit_cost(*o, false) * (1 + ctx_.options().vo_iters);
    const auto solved = g.task({name, cost}, [this, v, o, v_st, o_st, name, layer = in.layer, attn = &m.attention()] {
      return solve(*v, *o, *v_st, *o_st, *attn, layer, name);
    });
    g.at_site_end([this, v, o](const Solved& s) {
      ctx_.install_for_passes(*v, s.v.f);
      ctx_.install_for_passes(*o, s.o.f);
    }, solved);
    g.at_layer_end([this, v, o](const Solved& s) {
      const JointLoss& loss = s.loss;
      if (ctx_.options().diagnostics) {
        log_info("  layer {} V-O output loss (own-token attention): local {:.4e} joint {:.4e} (ratio {:.3f})",
                 loss.layer, loss.local, loss.joint, loss.local > 0 ? loss.joint / loss.local : 0.0);
      } else {
        log_info("  layer {} V-O output loss (own-token attention): joint {:.4e}", loss.layer, loss.joint);
      }
      ctx_.report().vo_losses.push_back(loss);
      ctx_.install(*v, s.v, "joint-vo");
      ctx_.install(*o, s.o, "joint-vo");
    }, solved);
  }

  Solved solve(const model::Linear& v, const model::Linear& o, const calib::SiteStats& v_st,
               const calib::SiteStats& o_st, const model::AttentionInfo& attn, int layer, const std::string& name) const {
    const VoDense dense{weight_double(v), to_double(v.bias), weight_double(o), to_double(o.bias)};
    const CompressOptions& opt = ctx_.options();
    VoOptions vo;
    vo.r_v = ctx_.rank_of(v);
    vo.r_o = ctx_.rank_of(o);
    vo.iters = opt.vo_iters;
    vo.tol = opt.joint_tol;
    vo.lambda_rel = opt.local.lambda_rel;
    vo.o_moments = &o_st;
    const VoResult res = joint_vo(dense, attn, v_st, vo, name);
    JointLoss loss{layer, vo_output_loss(dense, res.f, attn, v_st)};
    if (opt.diagnostics) {
      NoteCollector discard(/*silent=*/true);  // only compared against: its notes are not the run's
      loss.local = vo_output_loss(dense, separate_vo(dense, v_st, o_st, vo.r_v, vo.r_o, vo.lambda_rel, name),
                                  attn, v_st);
    }
    return {ctx_.fitted(v, res.f.v, dense.wv, dense.bv, &v_st), ctx_.fitted(o, res.f.o, dense.wo, dense.bo, &o_st),
            loss};
  }
};

}  // namespace

std::unique_ptr<CompressStage> make_joint_vo_stage(StageContext& ctx) { return std::make_unique<JointVoStage>(ctx); }

}  // namespace latentllm::compress
