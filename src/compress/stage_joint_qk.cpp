// The joint Q-K stage (paper §"Multi-head latent attention: Joint QK SVD", Algorithm 1; joint_qk.hpp).
// Qwen3-style per-head q_norm / k_norm sit between the factors and the attention map, which the
// bilinear objective does not model: there q_proj and k_proj are compressed locally, with a note.
#include "compress/asvd.hpp"
#include "compress/bias.hpp"
#include "compress/compensate.hpp"
#include "compress/joint_qk.hpp"
#include "compress/notes.hpp"
#include "compress/stage.hpp"
#include "latentllm/log.hpp"

namespace latentllm::compress {
namespace {

class JointQkStage final : public CompressStage {
 public:
  using CompressStage::CompressStage;
  std::string_view name() const override { return "joint-qk"; }
  model::Site site() const override { return model::Site::AttnIn; }
  // Error compensation through the map of compensate.hpp; not with the RoPE window (see there).
  bool needs_dense_cross() const override { return ctx_.options().error_compensation && ctx_.options().rope_window == 0; }

 private:
  void compress(const calib::StageInput& in, model::Model& m) override {
    auto& layer = m.layer(in.layer);
    model::Linear& q = layer.linear(model::Role::Q);
    model::Linear& k = layer.linear(model::Role::K);
    const calib::SiteStats& st = in.stats_of(model::Site::AttnIn);
    const QkDense dense{weight_double(q), to_double(q.bias), weight_double(k), to_double(k.bias)};
    const std::string ctx = joined_name({&q, &k});
    const CompressOptions& o = ctx_.options();
    if (m.attention().qk_norm) {
      record_note(ctx, "joint-skipped",
                  "joint Q-K compression skipped: the per-head RMSNorm of q and k (q_norm, k_norm) between the "
                  "projections and the attention map is not part of its objective; q_proj and k_proj are "
                  "compressed separately (local root covariance)");
      if (in.cross) {  // each by itself: the local stage's compensating fit
        LocalOptions lo = ctx_.local();
        lo.junction = Junction::Identity;
        const LowRank fq = compensated_fit(dense.wq, dense.bq, st, *in.cross, ctx_.rank_of(q), lo, q.name);
        const LowRank fk = compensated_fit(dense.wk, dense.bk, st, *in.cross, ctx_.rank_of(k), lo, k.name);
        ctx_.install(q, fq, dense.wq, dense.bq, &st, "compensate");
        ctx_.install(k, fk, dense.wk, dense.bk, &st, "compensate");
        return;
      }
      const QkFactors sep = separate_qk(dense, st, ctx_.rank_of(q), ctx_.rank_of(k), o.local.lambda_rel, ctx);
      ctx_.install(q, sep.q, dense.wq, dense.bq, &st, "local");
      ctx_.install(k, sep.k, dense.wk, dense.bk, &st, "local");
      return;
    }
    QkOptions qo;
    qo.r_q = ctx_.rank_of(q);
    qo.r_k = ctx_.rank_of(k);
    qo.iters = o.qk_iters;
    qo.tol = o.joint_tol;
    qo.lambda_rel = o.local.lambda_rel;
    qo.rope.window = o.rope_window;
    const model::AttentionInfo& s = m.attention();
    const QkDense target = in.cross ? compensated_target(dense, st, *in.cross, qo.lambda_rel, ctx) : dense;
    const QkResult res = joint_qk(target, s, st, qo, ctx);
    JointLoss loss{in.layer, qk_attention_loss(dense, res.f, s, st, qo.rope)};
    if (o.diagnostics) {
      NoteCollector discard(/*silent=*/true);  // only compared against: its notes are not the run's
      const QkFactors sep = separate_qk(dense, st, qo.r_q, qo.r_k, qo.lambda_rel, ctx);
      loss.local = qk_attention_loss(dense, sep, s, st, qo.rope);
      log_info("  layer {} attention-map loss: local {:.4e} joint {:.4e} (ratio {:.3f}){}", in.layer, loss.local,
               loss.joint, loss.local > 0 ? loss.joint / loss.local : 0.0, res.used_local_start ? " [local start]" : "");
    } else {
      log_info("  layer {} attention-map loss: joint {:.4e} ({} iterations){}", in.layer, loss.joint,
               res.loss.size() - 1, res.used_local_start ? " [local start]" : "");
    }
    ctx_.report().qk_losses.push_back(loss);
    const char* how = in.cross ? "joint-qk-compensate" : "joint-qk";
    ctx_.install(q, res.f.q, dense.wq, dense.bq, &st, how);
    ctx_.install(k, res.f.k, dense.wk, dense.bk, &st, how);
  }

  // W_q·M and W_k·M (compensate.hpp compensation_map): the dense weights seen through x̂. With biases on
  // both (the augmented joint Q-K), [W | b]·M' in the augmented space; with a bias on one of them only
  // (no architecture has that) the dense weights as they are.
  static QkDense compensated_target(const QkDense& dense, const calib::SiteStats& st, const calib::CrossStats& cross,
                                    double lambda_rel, std::string_view ctx) {
    const bool bq = dense.bq.size() > 0, bk = dense.bk.size() > 0;
    if (bq != bk) return dense;
    const MatrixD map = compensation_map(st, cross, lambda_rel, bq, ctx);  // [d, d] or [d+1, d+1]
    if (!bq) return QkDense{dense.wq * map, {}, dense.wk * map, {}};
    const auto d = dense.wq.cols();
    const MatrixD q = with_bias_column(dense.wq, dense.bq) * map, k = with_bias_column(dense.wk, dense.bk) * map;
    return QkDense{q.leftCols(d), q.col(d), k.leftCols(d), k.col(d)};
  }
};

}  // namespace

std::unique_ptr<CompressStage> make_joint_qk_stage(StageContext& ctx) { return std::make_unique<JointQkStage>(ctx); }

}  // namespace latentllm::compress
