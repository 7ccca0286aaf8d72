// The joint Q-K stage (paper §"Multi-head latent attention: Joint QK SVD", Algorithm 1; joint_qk.hpp).
// Qwen3-style per-head q_norm / k_norm sit between the factors and the attention map, which the
// bilinear objective does not model: there q_proj and k_proj are compressed locally, with a note.
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
  // Three rounds of jobs (run_site): the four starts (one [d, d] eigendecomposition each); the
  // iterations from them (two per iteration, a chain: one owner), beside which another stage's jobs at
  // the site (the local v_proj) run; the attention-map loss and each factor's junction form and output
  // error. With one rank they run in turn, the same computations as joint_qk.
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
      for (QkStart k : {QkStart::Left, QkStart::Right, QkStart::LocalQ, QkStart::LocalK}) {
        static constexpr const char* kWhat[] = {"start U_q", "start U_k", "local start U_q", "local start U_k"};
        const auto i = static_cast<std::size_t>(k);
        out.push_back({fmt::format("{}: {}", name_, kWhat[i]), eig,
                       [this, k](Payload& p) { p.put(qk_start(problem_, k, qo_, name_)); },
                       [this, i](Payload& p) { p.get(starts_[i]); }});
      }
      return out;
    }
    if (round == 1) {
      out.push_back({fmt::format("{}: iterations", name_), 2.0 * qo_.iters * eig,
                     [this](Payload& p) {
                       const QkResult res = qk_solve(problem_, *attn_, std::move(starts_), qo_, name_);
                       p.put(res.f.q), p.put(res.f.k), p.put(static_cast<std::int64_t>(res.loss.size()) - 1);
                       p.put(static_cast<char>(res.used_local_start));
                     },
                     [this](Payload& p) {
                       p.get(res_.q), p.get(res_.k);
                       iterations_ = p.get<std::int64_t>();
                       local_start_ = p.get<char>() != 0;
                     }});
      return out;
    }
    // The attention-map loss (with diagnostics also the local solution's) and each factor's junction
    // form and output error.
    out.push_back({fmt::format("{}: attention-map loss", name_), 1.5 * eig,
                   [this](Payload& p) {
                     JointLoss loss{layer_, qk_attention_loss(dense_, res_, *attn_, *st_, qo_.rope)};
                     if (ctx_.options().diagnostics) {
                       NoteCollector discard(/*silent=*/true);  // only compared against: not the run's notes
                       const QkFactors sep = separate_qk(dense_, *st_, qo_.r_q, qo_.r_k, qo_.lambda_rel, name_);
                       loss.local = qk_attention_loss(dense_, sep, *attn_, *st_, qo_.rope);
                     }
                     p.put(loss.joint), p.put(loss.local);
                   },
                   [this](Payload& p) { loss_ = JointLoss{layer_, p.get<double>(), p.get<double>()}; }});
    for (const bool is_q : {true, false}) {
      model::Linear* lin = is_q ? q_ : k_;
      out.push_back({lin->name, static_cast<double>(lin->out) * static_cast<double>(lin->in) * d,
                     [this, is_q, lin](Payload& p) {
                       p.put(is_q ? ctx_.fitted(*lin, res_.q, dense_.wq, dense_.bq, st_)
                                  : ctx_.fitted(*lin, res_.k, dense_.wk, dense_.bk, st_));
                     },
                     [this, is_q](Payload& p) { p.get(is_q ? fq_ : fk_); }});
    }
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
      ctx_.install(*q_, fq_, how);
      ctx_.install(*k_, fk_, how);
    } else {
      if (ctx_.options().diagnostics) {
        log_info("  layer {} attention-map loss: local {:.4e} joint {:.4e} (ratio {:.3f}){}", layer_, loss_.local,
                 loss_.joint, loss_.local > 0 ? loss_.joint / loss_.local : 0.0, local_start_ ? " [local start]" : "");
      } else {
        log_info("  layer {} attention-map loss: joint {:.4e} ({} iterations){}", layer_, loss_.joint, iterations_,
                 local_start_ ? " [local start]" : "");
      }
      ctx_.report().qk_losses.push_back(loss_);
      const char* how = cross_ ? "joint-qk-compensate" : "joint-qk";
      ctx_.install(*q_, fq_, how);
      ctx_.install(*k_, fk_, how);
    }
    dense_ = {};
    problem_ = {};
    res_ = {};
    fq_ = fk_ = {};
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
  std::array<MatrixD, 4> starts_;  // QkStart order
  QkFactors res_;                  // the iterations' factors, before their junction form
  Fitted fq_, fk_;
  JointLoss loss_;
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
