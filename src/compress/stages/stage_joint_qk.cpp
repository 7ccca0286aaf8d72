// The joint Q-K stage (paper §"Multi-head latent attention: Joint QK SVD", Algorithm 1; joint_qk.hpp).
// Qwen3-style per-head q_norm / k_norm sit between the factors and the attention map, which the
// bilinear objective does not model: there q_proj and k_proj are compressed locally, with a note.
#include <limits>
#include <memory>

#include "compress/math/asvd.hpp"
#include "compress/math/bias.hpp"
#include "compress/stages/codecs.hpp"
#include "compress/math/compensate.hpp"
#include "compress/math/joint_qk.hpp"
#include "compress/math/junction.hpp"
#include "compress/stages/notes.hpp"
#include "compress/stages/stage.hpp"
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
  // Algorithm 1's tasks (declare_qk: the two starts; the iterations from them, beside which the local
  // safeguard's starts and another stage's tasks at the site run; the choice and the factors), whose
  // factors serve the later passes at the site's end; the attention-map loss and each factor's junction
  // form and output error are finishing work. The same tasks as joint_qk's wherever they run.
  void declare(graph::Graph& g, const calib::StageInput& in, model::Model& m) override {
    auto& layer = m.layer(in.layer);
    model::Linear* q = &layer.linear(model::Role::Q);
    model::Linear* k = &layer.linear(model::Role::K);
    const calib::SiteStats* st = &in.stats_of(model::Site::AttnIn);
    const calib::CrossStats* cross = in.cross;
    const model::AttentionInfo& attn = m.attention();
    auto dense = std::make_shared<const QkDense>(QkDense{weight_double(*q), to_double(q->bias), weight_double(*k),
                                                         to_double(k->bias)});
    const std::string name = joined_name({q, k});
    if (attn.qk_norm) {
      record_note(name, "joint-skipped",
                  "joint Q-K compression skipped: the per-head RMSNorm of q and k (q_norm, k_norm) between the "
                  "projections and the attention map is not part of its objective; q_proj and k_proj are "
                  "compressed separately (local root covariance)");
      return declare_separate(g, *q, *k, dense, st, cross, name);
    }
    const CompressOptions& o = ctx_.options();
    QkOptions qo;
    qo.r_q = ctx_.rank_of(*q);
    qo.r_k = ctx_.rank_of(*k);
    qo.iters = o.qk_iters;
    qo.tol = o.joint_tol;
    qo.lambda_rel = o.local.lambda_rel;
    qo.rope.window = o.rope_window;
    const QkDense target = cross ? compensated_target(*dense, *st, *cross, qo.lambda_rel, name) : *dense;
    const auto solved = declare_qk(g, std::make_shared<const QkProblem>(qk_problem(target, attn, *st, qo, name)), attn,
                                   qo, name);
    g.at_site_end([this, q, k](const QkResult& r) {
      ctx_.install_for_passes(*q, Factors32(r.f.q).widened());
      ctx_.install_for_passes(*k, Factors32(r.f.k).widened());
    }, solved);
    Finishing f{*q, *k, dense, std::make_shared<const calib::SiteStats>(*st), qo, attn, name, in.layer,
                cross ? "joint-qk-compensate" : "joint-qk"};
    declare_finishing(g, f, solved);
  }

  // q_norm / k_norm: q_proj and k_proj each by itself (the local stage's fits, compensating with cross
  // moments), both fits then their junction forms in one task, as their notes come on one process.
  void declare_separate(graph::Graph& g, model::Linear& q, model::Linear& k, std::shared_ptr<const QkDense> dense,
                        const calib::SiteStats* st, const calib::CrossStats* cross, const std::string& name) {
    const auto fits = g.task({name, fit_cost(q, false) + fit_cost(k, false)}, [this, &q, &k, dense, st, cross, name] {
      LocalOptions lo = ctx_.local();
      lo.junction = Junction::Identity;
      LowRank fq, fk;
      if (cross) {
        fq = compensated_fit(dense->wq, dense->bq, *st, *cross, ctx_.rank_of(q), lo, q.name);
        fk = compensated_fit(dense->wk, dense->bk, *st, *cross, ctx_.rank_of(k), lo, k.name);
      } else {
        QkFactors sep = separate_qk(*dense, *st, ctx_.rank_of(q), ctx_.rank_of(k), lo.lambda_rel, name);
        fq = std::move(sep.q);
        fk = std::move(sep.k);
      }
      return std::pair<Fitted, Fitted>{ctx_.fitted(q, std::move(fq), dense->wq, dense->bq, st),
                                       ctx_.fitted(k, std::move(fk), dense->wk, dense->bk, st)};
    });
    g.at_site_end([this, &q, &k](const std::pair<Fitted, Fitted>& f) {
      ctx_.install_for_passes(q, f.first.f);
      ctx_.install_for_passes(k, f.second.f);
    }, fits);
    const char* how = cross ? "compensate" : "local";
    g.at_layer_end([this, &q, &k, how](const std::pair<Fitted, Fitted>& f) {
      ctx_.install(q, f.first, how);
      ctx_.install(k, f.second, how);
    }, fits);
  }

  // What the finishing work reads: the modules, the dense weights, a copy of the site's statistics.
  struct Finishing {
    model::Linear &q, &k;
    std::shared_ptr<const QkDense> dense;
    std::shared_ptr<const calib::SiteStats> stats;
    QkOptions qo;
    const model::AttentionInfo& attn;
    std::string name;
    int layer;
    const char* how;
  };

  // The attention-map loss (reported at the layer's end) and each factor's junction form and output
  // error (installed at the layer's end).
  void declare_finishing(graph::Graph& g, const Finishing& f, const graph::Value<QkResult>& solved) {
    const double d = static_cast<double>(f.dense->wq.cols());
    const bool diagnostics = ctx_.options().diagnostics;
    const auto loss = g.finishing(
        {fmt::format("{}: attention-map loss", f.name), 1.5 * d * d * d},
        [dense = f.dense, stats = f.stats, diagnostics, attn = &f.attn, qo = f.qo, name = f.name](const QkResult& r) {
          const QkFactors fac{Factors32(r.f.q).widened(), Factors32(r.f.k).widened()};
          std::pair<double, double> out{qk_attention_loss(*dense, fac, *attn, *stats, qo.rope),
                                        std::numeric_limits<double>::quiet_NaN()};
          if (diagnostics) {
            NoteCollector discard(/*silent=*/true);  // only compared against: not the run's notes
            const QkFactors sep = separate_qk(*dense, *stats, qo.r_q, qo.r_k, qo.lambda_rel, name);
            out.second = qk_attention_loss(*dense, sep, *attn, *stats, qo.rope);
          }
          return out;
        },
        solved);
    g.at_layer_end([this, diagnostics, layer = f.layer](const std::pair<double, double>& lj, const QkResult& r) {
      const JointLoss l{layer, lj.first, lj.second};
      const char* start = r.used_local_start ? " [local start]" : "";
      if (diagnostics) {
        log_info("  layer {} attention-map loss: local {:.4e} joint {:.4e} (ratio {:.3f}){}", l.layer, l.local, l.joint,
                 l.local > 0 ? l.joint / l.local : 0.0, start);
      } else {
        log_info("  layer {} attention-map loss: joint {:.4e} ({} iterations){}", l.layer, l.joint, r.loss.size() - 1,
                 start);
      }
      ctx_.report().qk_losses.push_back(l);
    }, loss, solved);
    for (model::Linear* lin : {&f.q, &f.k}) {
      const bool is_q = lin == &f.q;
      const auto done = g.finishing(
          {lin->name + ": junction form", ctx_.finish_cost(*lin, is_q ? f.qo.r_q : f.qo.r_k, true)},
          [this, lin, is_q, dense = f.dense, stats = f.stats](const QkResult& r) {
            const LowRank fac = Factors32(is_q ? r.f.q : r.f.k).widened();
            return is_q ? ctx_.fitted(*lin, fac, dense->wq, dense->bq, stats.get())
                        : ctx_.fitted(*lin, fac, dense->wk, dense->bk, stats.get());
          },
          solved);
      g.at_layer_end([this, lin, how = f.how](const Fitted& fit) { ctx_.install(*lin, fit, how); }, done);
    }
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
