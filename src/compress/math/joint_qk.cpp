#include "compress/math/joint_qk.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include <Eigen/LU>
#include <Eigen/QR>

#include "compress/math/asvd.hpp"
#include "compress/math/bias.hpp"
#include "compress/stages/codecs.hpp"
#include "latentllm/error.hpp"
#include "model/rope.hpp"

namespace latentllm::compress {

namespace {

MatrixD augment(const MatrixD& w, const VectorD& b) { return with_bias_column(w, b); }
MatrixD augment(const LowRank& f) { return augmented_dense(f); }

void check_dense(const QkDense& w, const model::AttentionInfo& s, const calib::SiteStats& m, std::string_view context) {
  s.validate(context);
  const auto dq = static_cast<Eigen::Index>(s.num_heads) * s.head_dim;
  const auto dk = static_cast<Eigen::Index>(s.num_kv_heads) * s.head_dim;
  if (w.wq.rows() != dq || w.wq.cols() != s.hidden || w.wk.rows() != dk || w.wk.cols() != s.hidden) {
    throw ConfigError(fmt::format("{}: q/k_proj shapes (expected [{}, {}] and [{}, {}], got [{}, {}] and [{}, {}])",
                                  context, dq, s.hidden, dk, s.hidden, w.wq.rows(), w.wq.cols(), w.wk.rows(),
                                  w.wk.cols()));
  }
  if ((w.bq.size() > 0 && w.bq.size() != dq) || (w.bk.size() > 0 && w.bk.size() != dk)) {
    throw ConfigError(fmt::format("{}: q/k bias sizes (expected {} and {}, got {} and {})", context, dq, dk,
                                  w.bq.size(), w.bk.size()));
  }
  if (m.width() != s.hidden) {
    throw ConfigError(fmt::format("{}: input moments width (expected {}, got {})", context, s.hidden, m.width()));
  }
}

struct Offset {
  int delta;  // Δ = m − n
  double weight;
};

std::vector<Offset> offsets(const model::AttentionInfo& s, const RopeWindow& rw) {
  if (!s.rope) return {{0, 1.0}};
  if (rw.window < 0 || (!rw.weights.empty() && static_cast<int>(rw.weights.size()) != rw.window + 1)) {
    throw ConfigError(fmt::format("rope window: invalid (expected window ≥ 0 and {} weights, got {} and {})",
                                  rw.window + 1, rw.window, rw.weights.size()));
  }
  std::vector<Offset> out;
  for (int d = 0; d <= rw.window; ++d) {
    const double w = rw.weights.empty() ? 1.0 : rw.weights[static_cast<std::size_t>(d)];
    out.push_back({d, w});
    if (rw.symmetric && d > 0) out.push_back({-d, w});
  }
  return out;
}

// The score between query position m and key position n uses R_{n−m} = R_{−Δ}.
MatrixD offset_mid(const model::AttentionInfo& s, int delta) {
  if (!s.rope || delta == 0) return MatrixD();
  return model::rope_rotation(s.rope_spec, s.head_dim, -delta);
}

MatrixD head_rows(const MatrixD& w, int h, int d_h) { return w.middleRows(static_cast<Eigen::Index>(h) * d_h, d_h); }

}  // namespace

QkProblem qk_problem(const QkDense& w, const model::AttentionInfo& s, const calib::SiteStats& m, const QkOptions& opt,
                     std::string_view context) {
  check_dense(w, s, m, context);
  const bool has_bias = w.bq.size() > 0 || w.bk.size() > 0;
  QkProblem p;
  p.aug = opt.bias_aware && has_bias;
  p.bq = w.bq;
  p.bk = w.bk;
  const MatrixD wq = p.aug ? augment(w.wq, w.bq) : w.wq;  // [H·d_h, d']
  const MatrixD wk = p.aug ? augment(w.wk, w.bk) : w.wk;  // [H_kv·d_h, d']
  // Any F·Fᵀ = C + λI serves as P (whitening.hpp): ‖Fᵀ·Δ·F‖ = ‖P·Δ·P‖, the optimal U rotate with F.
  p.wh = whiten(p.aug ? m.augmented() : m.xtx, opt.lambda_rel, context);

  // G_i^(Δ) = (W_q,i·F)ᵀ·R_{−Δ}·(W_k,g·F), kept factored: never a [d, d] matrix per head.
  p.qt = p.wh.times(wq);  // [H·d_h, d']
  p.kt = p.wh.times(wk);  // [H_kv·d_h, d']
  for (int i = 0; i < s.num_heads; ++i) p.pair.left.push_back(head_rows(p.qt, i, s.head_dim));
  for (int g = 0; g < s.num_kv_heads; ++g) p.pair.right.push_back(head_rows(p.kt, g, s.head_dim));
  for (const Offset& o : offsets(s, opt.rope)) {
    const MatrixD mid = offset_mid(s, o.delta);
    for (int i = 0; i < s.num_heads; ++i) p.pair.terms.push_back({i, s.kv_head(i), mid, o.weight});
  }
  const int r_q = opt.r_q, r_k = opt.r_k;
  if (r_q < 1 || r_q > s.hidden || r_k < 1 || r_k > s.hidden) {
    throw ConfigError(fmt::format("{}: joint QK ranks (expected 1..{}, got r_q={} r_k={})", context, s.hidden, r_q, r_k));
  }
  return p;
}

MatrixD qk_start(const QkProblem& p, QkStart which, const QkOptions& opt, std::string_view context) {
  switch (which) {
    // Algorithm 1's initialization: U_q from Σ G Gᵀ, U_k from Σ GᵀG.
    case QkStart::Left: return top_eigenvectors(pair_left_gram(p.pair, MatrixD()), opt.r_q, context);
    case QkStart::Right: return top_eigenvectors(pair_right_gram(p.pair, MatrixD()), opt.r_k, context);
    // Separate root-cov compression keeps the top right-singular subspaces of W_q·P and W_k·P.
    case QkStart::LocalQ: return top_eigenvectors(p.qt.transpose() * p.qt, opt.r_q, context);
    case QkStart::LocalK: return top_eigenvectors(p.kt.transpose() * p.kt, opt.r_k, context);
  }
  throw Error(fmt::format("{}: unknown joint Q-K start", context));
}

PairSolution qk_refine(const QkProblem& p, MatrixD u_q, MatrixD u_k, const QkOptions& opt, std::string_view context) {
  return refine_pair(p.pair, std::move(u_q), std::move(u_k), opt.iters, context, opt.tol);
}

double qk_start_loss(const QkProblem& p, const MatrixD& u_q, const MatrixD& u_k) {
  return pair_total(p.pair) - pair_objective(p.pair, u_q, u_k);
}

QkResult qk_factors(const QkProblem& p, const model::AttentionInfo& s, const PairSolution& sol) {
  QkResult out;
  out.loss = sol.loss;
  // A' = Uᵀ·F⁻¹ (shared), B = W'·F·U (per head, stacked).
  const MatrixD aq = p.wh.times_pinv(sol.u_l.transpose());  // [r_q, d']
  const MatrixD ak = p.wh.times_pinv(sol.u_r.transpose());  // [r_k, d']
  out.f.q.B = p.qt * sol.u_l;                               // [H·d_h, r_q]
  out.f.k.B = p.kt * sol.u_r;                               // [H_kv·d_h, r_k]
  const int d = s.hidden;
  out.f.q.A = aq.leftCols(d);
  out.f.k.A = ak.leftCols(d);
  if (p.aug) {
    // The last column of A' is a latent bias: b̂ = B·a.
    out.f.q.bias = out.f.q.B * aq.col(d);
    out.f.k.bias = out.f.k.B * ak.col(d);
  } else {
    out.f.q.bias = p.bq;
    out.f.k.bias = p.bk;
  }
  return out;
}

namespace {

// The local safeguard's starts and the solver loss there.
struct LocalStarts {
  MatrixD u_q, u_k;  // [d', r_q], [d', r_k]
  double loss = 0;
  template <class S>
  static auto fields(S& s) { return std::tie(s.u_q, s.u_k, s.loss); }
};

QkResult choose(const QkProblem& p, const model::AttentionInfo& s, PairSolution sol, const LocalStarts* local,
                const QkOptions& opt, const std::string& context) {
  bool used_local = false;
  if (local != nullptr && local->loss < sol.loss.back()) {
    sol = qk_refine(p, local->u_q, local->u_k, opt, context);
    used_local = true;
  }
  QkResult out = qk_factors(p, s, sol);
  out.loss_local_start = local != nullptr ? local->loss : 0.0;
  out.used_local_start = used_local;
  return out;
}

}  // namespace

graph::Value<QkResult> declare_qk(graph::Graph& g, std::shared_ptr<const QkProblem> p, const model::AttentionInfo& s,
                                  const QkOptions& opt, const std::string& context) {
  const auto d = static_cast<double>(p->qt.cols() - (p->aug ? 1 : 0)), eig = d * d * d;
  auto start = [&](QkStart which, const char* what) {
    return g.task({fmt::format("{}: {}", context, what), eig},
                  [p, which, opt, context] { return qk_start(*p, which, opt, context); });
  };
  const auto left = start(QkStart::Left, "start U_q"), right = start(QkStart::Right, "start U_k");
  const auto sol = g.task({fmt::format("{}: iterations", context), 2.0 * opt.iters * eig},
                          [p, opt, context](const MatrixD& l, const MatrixD& r) { return qk_refine(*p, l, r, opt, context); },
                          left, right);
  const graph::Spec factors{fmt::format("{}: factors", context), 0.2 * eig};
  if (!opt.local_safeguard) {
    return g.task(factors, [p, &s, opt, context](const PairSolution& it) { return choose(*p, s, it, nullptr, opt, context); },
                  sol);
  }
  const auto local = g.task({fmt::format("{}: local starts", context), 2.5 * eig}, [p, opt, context] {
    LocalStarts l{qk_start(*p, QkStart::LocalQ, opt, context), qk_start(*p, QkStart::LocalK, opt, context), 0.0};
    l.loss = qk_start_loss(*p, l.u_q, l.u_k);
    return l;
  });
  return g.task(factors,
                [p, &s, opt, context](const PairSolution& it, const LocalStarts& l) { return choose(*p, s, it, &l, opt, context); },
                sol, local);
}

QkResult joint_qk(const QkDense& w, const model::AttentionInfo& s, const calib::SiteStats& m, const QkOptions& opt,
                  std::string_view context) {
  auto p = std::make_shared<const QkProblem>(qk_problem(w, s, m, opt, context));
  graph::Graph g(graph::this_process());
  graph::Value<QkResult> out;
  g.declare("joint-qk", [&](graph::Graph& gr) { out = declare_qk(gr, p, s, opt, std::string(context)); });
  g.run_site();
  g.end_layer();
  return out.get();
}

QkFactors separate_qk(const QkDense& w, const calib::SiteStats& m, int r_q, int r_k, double lambda_rel,
                      std::string_view context) {
  QkFactors f;
  f.q = local_rootcov(w.wq, w.bq, m, r_q, lambda_rel, context);
  f.k = local_rootcov(w.wk, w.bk, m, r_k, lambda_rel, context);
  return f;
}

double qk_attention_loss(const QkDense& dense, const QkFactors& f, const model::AttentionInfo& s, const calib::SiteStats& m,
                         const RopeWindow& rope) {
  check_dense(dense, s, m, "qk_attention_loss");
  const MatrixD c = m.augmented();  // [d+1, d+1]
  const int dh = s.head_dim;
  // Δ_i = Lᵀ·diag(R, −R)·K with L = [W'_q,i; Ŵ'_q,i], K = [W'_k,g; Ŵ'_k,g], so
  // ‖C^{1/2}Δ_iC^{1/2}‖² = tr(L C Lᵀ · R̄ · K C Kᵀ · R̄ᵀ): only [2d_h, 2d_h] products per head.
  auto stacked_gram = [&](const MatrixD& wd, const MatrixD& wf, int h) {
    MatrixD l(2 * dh, wd.cols());  // [2d_h, d+1]
    l.topRows(dh) = head_rows(wd, h, dh);
    l.bottomRows(dh) = head_rows(wf, h, dh);
    return MatrixD(l * c * l.transpose());
  };
  const MatrixD wq = augment(dense.wq, dense.bq), wk = augment(dense.wk, dense.bk);
  const MatrixD fq = augment(f.q), fk = augment(f.k);
  std::vector<MatrixD> kc;
  for (int g = 0; g < s.num_kv_heads; ++g) kc.push_back(stacked_gram(wk, fk, g));
  const std::vector<Offset> offs = offsets(s, rope);
  double loss = 0;
  for (int i = 0; i < s.num_heads; ++i) {
    const MatrixD lc = stacked_gram(wq, fq, i);
    for (const Offset& o : offs) {
      MatrixD rbar = MatrixD::Zero(2 * dh, 2 * dh);
      const MatrixD r = o.delta == 0 ? MatrixD::Identity(dh, dh) : offset_mid(s, o.delta);
      rbar.topLeftCorner(dh, dh) = r;
      rbar.bottomRightCorner(dh, dh) = -r;
      const MatrixD t = rbar * kc[static_cast<std::size_t>(s.kv_head(i))] * rbar.transpose();
      loss += o.weight * lc.cwiseProduct(t).sum();
    }
  }
  return loss;
}

}  // namespace latentllm::compress
