// The joint Q-K stage (paper §"Multi-head latent attention: Joint QK SVD", Algorithm 1; joint_qk.hpp).
// Qwen3-style per-head q_norm / k_norm sit between the factors and the attention map, which the
// bilinear objective does not model: there q_proj and k_proj are compressed locally, with a note.
#include <limits>
#include <memory>

#include "compress/asvd.hpp"
#include "compress/bias.hpp"
#include "compress/compensate.hpp"
#include "compress/joint_qk.hpp"
#include "compress/junction.hpp"
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
  // Three rounds of jobs (run_site): Algorithm 1's two starts (one [d, d] eigendecomposition each);
  // the iterations from them (two per iteration, a chain: one owner), beside which the local
  // safeguard's starts and their loss and another stage's jobs at the site (the local v_proj) run; the
  // safeguard's choice (the iterations from the local starts when they start lower) and the factors.
  // The attention-map loss and each factor's junction form and output error are deferred
  // (StageContext::defer). With one rank they run in turn, the same computations as joint_qk.
  int begin(const calib::StageInput& in, model::Model& m) override {
    auto& layer = m.layer(in.layer);
    q_ = &layer.linear(model::Role::Q);
    k_ = &layer.linear(model::Role::K);
    st_ = &in.stats_of(model::Site::AttnIn);
    cross_ = in.cross;
    layer_ = in.layer;
    attn_ = &m.attention();
    dense_ = QkDense{weight_double(*q_), to_double(q_->bias), weight_double(*k_), to_double(k_->bias)};
    name_ = joined_name({q_, k_});
    const CompressOptions& o = ctx_.options();
    separate_ = attn_->qk_norm;
    if (separate_) {
      record_note(name_, "joint-skipped",
                  "joint Q-K compression skipped: the per-head RMSNorm of q and k (q_norm, k_norm) between the "
                  "projections and the attention map is not part of its objective; q_proj and k_proj are "
                  "compressed separately (local root covariance)");
      return 1;
    }
    qo_ = QkOptions{};
    qo_.r_q = ctx_.rank_of(*q_);
    qo_.r_k = ctx_.rank_of(*k_);
    qo_.iters = o.qk_iters;
    qo_.tol = o.joint_tol;
    qo_.lambda_rel = o.local.lambda_rel;
    qo_.rope.window = o.rope_window;
    const QkDense target = cross_ ? compensated_target(dense_, *st_, *cross_, qo_.lambda_rel, name_) : dense_;
    problem_ = qk_problem(target, *attn_, *st_, qo_, name_);
    return 3;
  }

  std::vector<Job> jobs(int round) override {
    const auto d = static_cast<double>(dense_.wq.cols()), eig = d * d * d;
    std::vector<Job> out;
    if (separate_) {  // each by itself: the local stage's fits (compensating with cross moments)
      out.push_back({name_, fit_cost(*q_, false) + fit_cost(*k_, false), [this](Payload& p) { separate(p); },
                     [this](Payload& p) { p.get(fq_), p.get(fk_); }});
      return out;
    }
    if (round == 0) {
      for (QkStart k : {QkStart::Left, QkStart::Right}) {
        const auto i = static_cast<std::size_t>(k);
        out.push_back({fmt::format("{}: {}", name_, k == QkStart::Left ? "start U_q" : "start U_k"), eig,
                       [this, k](Payload& p) { p.put(qk_start(problem_, k, qo_, name_)); },
                       [this, i](Payload& p) { p.get(starts_[i]); }});
      }
      return out;
    }
    if (round == 1) {
      out.push_back({fmt::format("{}: iterations", name_), 2.0 * qo_.iters * eig,
                     [this](Payload& p) {
                       const PairSolution sol = qk_refine(problem_, std::move(starts_[0]), std::move(starts_[1]), qo_,
                                                          name_);
                       p.put(sol.u_l), p.put(sol.u_r), p.put(sol.loss);
                     },
                     [this](Payload& p) { p.get(sol_.u_l), p.get(sol_.u_r), p.get(sol_.loss); }});
      if (qo_.local_safeguard) {
        out.push_back({fmt::format("{}: local starts", name_), 2.5 * eig,
                       [this](Payload& p) {
                         const MatrixD uq = qk_start(problem_, QkStart::LocalQ, qo_, name_);
                         const MatrixD uk = qk_start(problem_, QkStart::LocalK, qo_, name_);
                         p.put(uq), p.put(uk), p.put(qk_start_loss(problem_, uq, uk));
                       },
                       [this](Payload& p) { p.get(local_q_), p.get(local_k_), loss_local_ = p.get<double>(); }});
      }
      return out;
    }
    // The safeguard (qk_solve's) and the factors.
    out.push_back({fmt::format("{}: factors", name_), 0.2 * eig,
                   [this](Payload& p) {
                     bool used_local = false;
                     if (qo_.local_safeguard && loss_local_ < sol_.loss.back()) {
                       sol_ = qk_refine(problem_, std::move(local_q_), std::move(local_k_), qo_, name_);
                       used_local = true;
                     }
                     const QkResult res = qk_factors(problem_, *attn_, sol_);
                     p.put_rounded(res.f.q), p.put_rounded(res.f.k);
                     p.put(static_cast<std::int64_t>(res.loss.size()) - 1);
                     p.put(static_cast<char>(used_local));
                   },
                   [this](Payload& p) {
                     p.get_rounded(res_.q), p.get_rounded(res_.k);
                     iterations_ = p.get<std::int64_t>();
                     local_start_ = p.get<char>() != 0;
                   }});
    return out;
  }

  // On the owner: q_proj and k_proj each by itself (both fits, then their junction forms, as their notes
  // come on one process).
  void separate(Payload& p) {
    LocalOptions lo = ctx_.local();
    lo.junction = Junction::Identity;
    LowRank fq, fk;
    if (cross_) {
      fq = compensated_fit(dense_.wq, dense_.bq, *st_, *cross_, ctx_.rank_of(*q_), lo, q_->name);
      fk = compensated_fit(dense_.wk, dense_.bk, *st_, *cross_, ctx_.rank_of(*k_), lo, k_->name);
    } else {
      QkFactors sep = separate_qk(dense_, *st_, ctx_.rank_of(*q_), ctx_.rank_of(*k_), lo.lambda_rel, name_);
      fq = std::move(sep.q);
      fk = std::move(sep.k);
    }
    p.put(ctx_.fitted(*q_, std::move(fq), dense_.wq, dense_.bq, st_));
    p.put(ctx_.fitted(*k_, std::move(fk), dense_.wk, dense_.bk, st_));
  }

  void finish(model::Model&) override {
    if (separate_) {
      const char* how = cross_ ? "compensate" : "local";
      ctx_.install_for_passes(*q_, fq_.f);
      ctx_.install_for_passes(*k_, fk_.f);
      ctx_.defer(layer_, name(), {}, [this, q = q_, k = k_, fq = fq_, fk = fk_, how] {
        ctx_.install(*q, fq, how);
        ctx_.install(*k, fk, how);
      });
    } else {
      defer_finishing();
    }
    dense_ = {};
    problem_ = {};
    res_ = {};
    sol_ = {};
    local_q_ = local_k_ = {};
    starts_ = {};
    fq_ = fk_ = {};
  }

  // The factors serve the layer's later passes as fitted; the attention-map loss and each factor's
  // junction form and output error are deferred (they hold what they read: the dense weights, the
  // factors, a copy of the site's statistics).
  void defer_finishing() {
    ctx_.install_for_passes(*q_, res_.q);
    ctx_.install_for_passes(*k_, res_.k);
    auto dense = std::make_shared<const QkDense>(std::move(dense_));
    // The factors as every rank holds them (rounded to float32 by the factors job), kept in float32.
    auto q32 = std::make_shared<const Factors32>(res_.q), k32 = std::make_shared<const Factors32>(res_.k);
    auto stats = std::make_shared<const calib::SiteStats>(*st_);
    const double d = static_cast<double>(dense->wq.cols());
    auto loss = std::make_shared<JointLoss>(JointLoss{layer_, 0.0, 0.0});
    const bool diagnostics = ctx_.options().diagnostics;
    ctx_.defer(layer_, name(),
               {fmt::format("{}: attention-map loss", name_), 1.5 * d * d * d,
                [dense, q32, k32, stats, diagnostics, attn = attn_, qo = qo_, name = name_](Payload& p) {
                  p.put(qk_attention_loss(*dense, QkFactors{q32->widened(), k32->widened()}, *attn, *stats, qo.rope));
                  double local = std::numeric_limits<double>::quiet_NaN();
                  if (diagnostics) {
                    NoteCollector discard(/*silent=*/true);  // only compared against: not the run's notes
                    const QkFactors sep = separate_qk(*dense, *stats, qo.r_q, qo.r_k, qo.lambda_rel, name);
                    local = qk_attention_loss(*dense, sep, *attn, *stats, qo.rope);
                  }
                  p.put(local);
                },
                [loss](Payload& p) { loss->joint = p.get<double>(), loss->local = p.get<double>(); }},
               [this, loss, diagnostics, iterations = iterations_, local_start = local_start_] {
                 const JointLoss& l = *loss;
                 if (diagnostics) {
                   log_info("  layer {} attention-map loss: local {:.4e} joint {:.4e} (ratio {:.3f}){}", l.layer,
                            l.local, l.joint, l.local > 0 ? l.joint / l.local : 0.0,
                            local_start ? " [local start]" : "");
                 } else {
                   log_info("  layer {} attention-map loss: joint {:.4e} ({} iterations){}", l.layer, l.joint,
                            iterations, local_start ? " [local start]" : "");
                 }
                 ctx_.report().qk_losses.push_back(l);
               });
    const char* how = cross_ ? "joint-qk-compensate" : "joint-qk";
    for (const bool is_q : {true, false}) {
      model::Linear* lin = is_q ? q_ : k_;
      auto fit = std::make_shared<Fitted>();
      auto f = is_q ? q32 : k32;
      ctx_.defer(layer_, name(),
                 {lin->name + ": junction form", ctx_.finish_cost(*lin, f->B.cols(), true),
                  [this, lin, is_q, dense, f, stats](Payload& p) {
                    p.put_installed(is_q ? ctx_.fitted(*lin, f->widened(), dense->wq, dense->bq, stats.get())
                                         : ctx_.fitted(*lin, f->widened(), dense->wk, dense->bk, stats.get()));
                  },
                  [fit](Payload& p) { p.get_installed(*fit); }},
                 [this, lin, fit, how] { ctx_.install(*lin, *fit, how); });
    }
  }

  // The layer's work (begin to finish).
  model::Linear *q_ = nullptr, *k_ = nullptr;
  const calib::SiteStats* st_ = nullptr;
  const calib::CrossStats* cross_ = nullptr;
  const model::AttentionInfo* attn_ = nullptr;
  int layer_ = 0;
  QkDense dense_;
  std::string name_;
  bool separate_ = false;  // q_norm / k_norm: each by itself
  QkOptions qo_;
  QkProblem problem_;
  std::array<MatrixD, 2> starts_;  // Left, Right
  PairSolution sol_;               // the iterations from them
  MatrixD local_q_, local_k_;      // the local safeguard's starts
  double loss_local_ = 0;          // and the solver loss at them
  QkFactors res_;                  // the chosen solution's factors, before their junction form
  Fitted fq_, fk_;                 // q_norm / k_norm: each by itself
  std::int64_t iterations_ = 0;
  bool local_start_ = false;

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
