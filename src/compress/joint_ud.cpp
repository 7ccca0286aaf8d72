#include "compress/joint_ud.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <Eigen/QR>

#include "compress/asvd.hpp"
#include "compress/regression.hpp"
#include "compress/notes.hpp"
#include "latentllm/error.hpp"
#include "linalg/linalg.hpp"
#include "core/parallel.hpp"
#include "model/activation.hpp"

namespace latentllm::compress {

namespace {

// out(i, j) = f(column j of the inputs, i) for every element, over column blocks on the forward's
// threads: these [f, n] passes over all calibration tokens are memory-bound, and any split gives the
// same result. fn(c0, c1) fills columns [c0, c1).
template <typename Fn>
void for_column_blocks(Eigen::Index cols, Fn&& fn) {
  core::parallel_for(cols, 1024, [&](std::int64_t c0, std::int64_t c1) { fn(c0, c1 - c0); });
}

MatrixD act_of(model::Activation a, const MatrixD& z) {
  MatrixD out(z.rows(), z.cols());
  for_column_blocks(z.cols(), [&](Eigen::Index c0, Eigen::Index nc) {
    out.middleCols(c0, nc) = z.middleCols(c0, nc).unaryExpr([a](double v) { return model::activate(a, v); });
  });
  return out;
}
MatrixD slope_of(model::Activation a, const MatrixD& z) {
  MatrixD out(z.rows(), z.cols());
  for_column_blocks(z.cols(), [&](Eigen::Index c0, Eigen::Index nc) {
    out.middleCols(c0, nc) = z.middleCols(c0, nc).unaryExpr([a](double v) { return model::activate_slope(a, v); });
  });
  return out;
}

// y = W·x + b for the columns of xt: [in, n] -> [out, n].
MatrixD apply(const MatrixD& w, const VectorD& b, const MatrixD& xt) {
  MatrixD y = w * xt;
  if (b.size() > 0) y.colwise() += b;
  return y;
}
MatrixD apply(const LowRank& f, const MatrixD& xt) {
  MatrixD y = f.B * (f.A * xt);  // never forms B·A
  if (f.bias.size() > 0) y.colwise() += f.bias;
  return y;
}

// Pre-activations and hidden activations of the compressed MLP, [f, n] each.
struct Hidden {
  MatrixD zu, zg, h;
};
Hidden hidden_of(const MlpDense& w, const MlpFactors& f, const MatrixD& xt) {
  Hidden hd;
  hd.zu = apply(f.up, xt);
  if (w.gated) {
    hd.zg = apply(f.gate, xt);
    hd.h = act_of(w.act, hd.zg).cwiseProduct(hd.zu);
  } else {
    hd.h = act_of(w.act, hd.zu);
  }
  return hd;
}

// Rank-r least-squares map from the columns of src to those of tgt (with a free bias if `bias`).
LowRank fit(const MatrixD& src, const MatrixD& tgt, int r, bool bias, double lambda_rel, std::string_view context) {
  return reduced_rank_regression(regression_stats(src, tgt), r, bias, lambda_rel, context);
}

// argmin_H α‖T − Ŵ·H‖² + β‖H − H0‖² for the factored Ŵ = B·A (rank r), T: [d, n], H0: [f, n].
// With Ŵ = U·S·Vᵀ (thin, from QRs of B and Aᵀ): (αŴᵀŴ + βI)⁻¹ = (I − V·diag(αs²/(αs²+β))·Vᵀ)/β,
// so the [f, f] system is never formed (ridge step of the paper's Z' update). With R = αŴᵀT + βH0 =
// V·C + βH0 (C = α·S·UᵀT) and VᵀV = I: H = H0 + V·(C − k ⊙ (C + β·VᵀH0))/β, k = αs²/(αs²+β) —
// two [f, r]×[r, n] products instead of three, and R is never formed.
MatrixD ridge_hidden(const LowRank& down, const MatrixD& t, const MatrixD& h0, double alpha, double beta,
                     std::string_view context) {
  const int r = down.rank();
  const Eigen::HouseholderQR<MatrixD> qb(down.B), qa(down.A.transpose());
  const MatrixD q_b = qb.householderQ() * MatrixD::Identity(down.B.rows(), r);  // [d, r]
  const MatrixD q_a = qa.householderQ() * MatrixD::Identity(down.A.cols(), r);  // [f, r]
  const MatrixD r_b = qb.matrixQR().topRows(r).triangularView<Eigen::Upper>();
  const MatrixD r_a = qa.matrixQR().topRows(r).triangularView<Eigen::Upper>();
  const linalg::Svd core = linalg::svd(r_b * r_a.transpose(), context);  // [r, r]
  const MatrixD u = q_b * core.u, v = q_a * core.v;                     // [d, r], [f, r]
  const VectorD s2 = core.s.array().square();
  const VectorD shrink = (alpha * s2.array() / (alpha * s2.array() + beta)).matrix();
  const MatrixD c = alpha * core.s.asDiagonal() * (u.transpose() * t);    // [r, n]
  const MatrixD g = v.transpose() * h0;                                   // [r, n]
  const MatrixD step = (c - shrink.asDiagonal() * (c + beta * g)) / beta;  // [r, n]
  MatrixD h = h0;
  h.noalias() += v * step;  // [f, n]
  return h;
}

// Paper's Z update for ReLU, per element: min β(z' − σ(z))² + γ(z − w)², the better of the branches
// z ≥ 0 (σ(z) = z) and z ≤ 0 (σ(z) = 0), each a clipped quadratic.
MatrixD relu_case_split(const MatrixD& zp, const MatrixD& w, double beta, double gamma) {
  MatrixD z(zp.rows(), zp.cols());
  for_column_blocks(z.cols(), [&](Eigen::Index c0, Eigen::Index nc) {
    for (Eigen::Index j = c0; j < c0 + nc; ++j) {
      for (Eigen::Index i = 0; i < z.rows(); ++i) {
        const double p = zp(i, j), u = w(i, j);
        const double zpos = std::max(0.0, (beta * p + gamma * u) / (beta + gamma));
        const double cpos = beta * (p - zpos) * (p - zpos) + gamma * (zpos - u) * (zpos - u);
        const double zneg = std::min(u, 0.0);
        const double cneg = beta * p * p + gamma * (zneg - u) * (zneg - u);
        z(i, j) = cpos <= cneg ? zpos : zneg;
      }
    }
  });
  return z;
}

MatrixD target_minus_bias(const MatrixD& y, const LowRank& down) {
  MatrixD t = y;
  if (down.bias.size() > 0) t.colwise() -= down.bias;
  return t;
}

// Σ_t ‖y_t − (Ŵ·h_t + b)‖² for the factored Ŵ = B·A and bias b of `down`, from the regression
// stats of (H, Y) and yy = ‖Y‖²: the square expanded, so no [d, n] residual is formed. The
// expansion cancels about log10(‖Y‖² / loss) of double's 16 digits (3 for a 0.1 % loss).
double loss_from_stats(const RegressionStats& st, double yy, const LowRank& down) {
  const MatrixD w = down.dense();                                     // [d, f]
  double l = yy - 2.0 * (w.array() * st.cross.array()).sum() + (w * st.cov).cwiseProduct(w).sum();
  if (down.bias.size() > 0) {
    const VectorD& b = down.bias;
    l += -2.0 * b.dot(st.sum_t) + 2.0 * b.dot(w * st.sum_s) + st.n * b.squaredNorm();
  }
  return std::max(l, 0.0);
}

struct Ctx {
  const MlpDense& w;
  const MatrixD& xt;  // [d, n]
  const MatrixD& y;   // [d, n] dense output
  const UdOptions& opt;
  std::string_view context;
  double yy = y.squaredNorm();  // ‖Y‖²

  // True output loss of f, given its hidden activations h = hidden_of(w, f, xt).h: [f, n].
  double loss(const MlpFactors& f, const MatrixD& h) const { return (y - apply(f.down, h)).squaredNorm(); }
  // The down projection's view of hidden activations h: the regression stats of (h, Y), from which
  // the output-aware refit and the loss of any down factor on h follow without another [f, n] pass.
  RegressionStats on_hidden(const MatrixD& h) const { return regression_stats(h, y); }
  double loss(const LowRank& down, const RegressionStats& st) const { return loss_from_stats(st, yy, down); }
  // Output-aware refit of the down projection: rank-r_d regression of the DENSE output Y on the
  // compressed hidden activations, so it absorbs the upstream (up/gate) error.
  LowRank refit_down(const RegressionStats& st) const {
    return reduced_rank_regression(st, opt.ranks.down, w.b_down.size() > 0, opt.lambda_rel, context);
  }
};

// Keeps the best candidate seen.
struct Best {
  MlpFactors f;
  double loss = std::numeric_limits<double>::infinity();
  int iter = -1;
  bool offer(const MlpFactors& cand, double l, int it) {
    if (!(l < loss)) return false;
    f = cand;
    loss = l;
    iter = it;
    return true;
  }
};

// The paper's auxiliary-variable iterations (ReLU, not gated). Ŵ_u·X and the hidden activations
// of each iterate are computed once and shared by the Z update, the losses and the down refit.
void paper_iterations(const Ctx& c, MlpFactors cur, Best& best, UdResult& out) {
  UdOptions o = c.opt;
  // β, γ are relative to the mean squared singular value of the starting Ŵ_d, so the trade-off of
  // the ridge step (αŴ_dᵀŴ_d + βI) does not depend on the scale of W_d (docs/JOINT.md).
  const double gain = cur.down.dense().squaredNorm() / cur.down.rank();
  o.beta *= gain;
  o.gamma *= gain;
  const bool bu = c.w.b_up.size() > 0, bd = c.w.b_down.size() > 0;
  MatrixD ux = apply(cur.up, c.xt);  // [f, n] Ŵ_u·X of the current up factor
  MatrixD z = ux;                    // [f, n]
  MatrixD zp;                        // [f, n]
  if (o.track_aux_loss) {
    out.aux_loss.push_back(o.alpha * (c.y - apply(cur.down, act_of(model::Activation::Relu, z))).squaredNorm());
  }
  for (int it = 1; it <= o.iters; ++it) {
    zp = ridge_hidden(cur.down, target_minus_bias(c.y, cur.down), act_of(model::Activation::Relu, z), o.alpha, o.beta,
                      c.context);
    z = relu_case_split(zp, ux, o.beta, o.gamma);
    cur.up = fit(c.xt, z, o.ranks.up, bu, o.lambda_rel, c.context);
    cur.down = fit(zp, c.y, o.ranks.down, bd, o.lambda_rel, c.context);
    ux = apply(cur.up, c.xt);
    if (o.track_aux_loss) {
      out.aux_loss.push_back(o.alpha * (c.y - apply(cur.down, zp)).squaredNorm() +
                             o.beta * (zp - act_of(model::Activation::Relu, z)).squaredNorm() +
                             o.gamma * (z - ux).squaredNorm());
    }
    const MatrixD h = act_of(model::Activation::Relu, ux);  // hidden activations of cur
    if (!o.refit_down) {
      const double l = c.loss(cur, h);
      best.offer(cur, l, it);
      out.loss.push_back(l);
      continue;
    }
    const RegressionStats st = c.on_hidden(h);
    const double l = c.loss(cur.down, st);
    best.offer(cur, l, it);
    MlpFactors r = cur;
    r.down = c.refit_down(st);
    const double lr = c.loss(r.down, st);
    best.offer(r, lr, it);
    out.loss.push_back(std::min(l, lr));
  }
}

// Gauss-Newton target for a pre-activation: z + η·s(h* − h)/(s² + ε), ε relative to mean s².
MatrixD gn_target(const MatrixD& z, const MatrixD& s, const MatrixD& dh, double eta) {
  const double eps = 1e-2 * std::max(s.squaredNorm() / static_cast<double>(std::max<Eigen::Index>(1, s.size())), 1e-300);
  MatrixD out(z.rows(), z.cols());
  for_column_blocks(z.cols(), [&](Eigen::Index c0, Eigen::Index nc) {
    const auto sc = s.middleCols(c0, nc).array();
    out.middleCols(c0, nc) =
        (z.middleCols(c0, nc).array() + eta * (sc * dh.middleCols(c0, nc).array() / (sc.square() + eps))).matrix();
  });
  return out;
}

// The extension (any activation, gated or not): see the header and docs/JOINT.md. `hd` holds the
// hidden activations of `cur`; each candidate's are computed once for its down refit and its loss.
void extension_iterations(const Ctx& c, MlpFactors cur, double cur_loss, Hidden hd, Best& best, UdResult& out) {
  const UdOptions& o = c.opt;
  const bool bu = c.w.b_up.size() > 0, bg = c.w.b_gate.size() > 0;
  for (int it = 1; it <= o.iters; ++it) {
    const double gain = cur.down.dense().squaredNorm() / cur.down.rank();  // relative β as in the paper path
    if (!(gain > 0 && std::isfinite(gain))) break;  // a zero down factor: no ridge step (joint_ud notes it)
    const MatrixD hstar =
        ridge_hidden(cur.down, target_minus_bias(c.y, cur.down), hd.h, o.alpha, o.beta * gain, c.context);
    const MatrixD su = c.w.gated ? act_of(c.w.act, hd.zg) : slope_of(c.w.act, hd.zu);  // ∂h/∂z_u
    bool accepted = false;
    for (double eta : {1.0, 0.5, 0.25}) {
      MlpFactors cand = cur;
      cand.up = fit(c.xt, gn_target(hd.zu, su, hstar - hd.h, eta), o.ranks.up, bu, o.lambda_rel, c.context);
      if (c.w.gated) {
        const MatrixD zu = apply(cand.up, c.xt);
        const MatrixD h = act_of(c.w.act, hd.zg).cwiseProduct(zu);
        const MatrixD sg = slope_of(c.w.act, hd.zg).cwiseProduct(zu);  // ∂h/∂z_g
        cand.gate = fit(c.xt, gn_target(hd.zg, sg, hstar - h, eta), o.ranks.gate, bg, o.lambda_rel, c.context);
      }
      Hidden hc = hidden_of(c.w, cand, c.xt);
      const RegressionStats st = c.on_hidden(hc.h);
      cand.down = c.refit_down(st);
      const double l = c.loss(cand.down, st);
      if (l < cur_loss) {
        cur = std::move(cand);
        hd = std::move(hc);
        cur_loss = l;
        accepted = true;
        break;
      }
    }
    out.loss.push_back(cur_loss);
    if (accepted) best.offer(cur, cur_loss, it);
    else break;  // no step improves: a further iteration would repeat the same attempt
  }
}

void check_mlp(const MlpDense& w, const MatrixD& x, const UdOptions& o, std::string_view context) {
  const auto f = w.w_up.rows(), d = w.w_up.cols();
  const bool ok = w.w_down.rows() == d && w.w_down.cols() == f && x.cols() == d &&
                  (!w.gated || (w.w_gate.rows() == f && w.w_gate.cols() == d));
  if (!ok) {
    throw ConfigError(fmt::format("{}: MLP shapes (expected up [f, d], down [d, f], x [n, d]; got up [{}, {}], "
                                  "down [{}, {}], x [{}, {}])", context, f, d, w.w_down.rows(), w.w_down.cols(),
                                  x.rows(), x.cols()));
  }
  if (o.iters < 0 || !(o.alpha > 0 && o.beta > 0 && o.gamma > 0)) {
    throw ConfigError(fmt::format("{}: joint UD options (expected iters ≥ 0 and α, β, γ > 0, got {} {} {} {})", context,
                                  o.iters, o.alpha, o.beta, o.gamma));
  }
}

}  // namespace

MatrixD mlp_forward(const MlpDense& w, const MatrixD& xt) {
  const MatrixD zu = apply(w.w_up, w.b_up, xt);  // [f, n]
  const MatrixD h = w.gated ? MatrixD(act_of(w.act, apply(w.w_gate, w.b_gate, xt)).cwiseProduct(zu)) : act_of(w.act, zu);
  return apply(w.w_down, w.b_down, h);
}

MatrixD mlp_forward(const MlpDense& w, const MlpFactors& f, const MatrixD& xt) {
  return apply(f.down, hidden_of(w, f, xt).h);
}

double mlp_output_loss(const MlpDense& w, const MlpFactors& f, const MatrixD& x) {
  const MatrixD xt = x.transpose();
  return (mlp_forward(w, xt) - mlp_forward(w, f, xt)).squaredNorm();
}

MlpFactors local_mlp(const MlpDense& w, const MatrixD& x, const MlpRanks& r, double lambda_rel, bool sequential,
                     std::string_view context) {
  const calib::SiteStats m = calib::SiteStats::of_rows(x);
  MlpFactors f;
  f.up = local_rootcov(w.w_up, w.b_up, m, r.up, lambda_rel, context);
  if (w.gated) f.gate = local_rootcov(w.w_gate, w.b_gate, m, r.gate, lambda_rel, context);
  const MatrixD xt = x.transpose();
  MatrixD h;
  if (sequential) {
    h = hidden_of(w, f, xt).h;
  } else {
    const MatrixD zu = apply(w.w_up, w.b_up, xt);
    h = w.gated ? MatrixD(act_of(w.act, apply(w.w_gate, w.b_gate, xt)).cwiseProduct(zu)) : act_of(w.act, zu);
  }
  f.down = local_rootcov(w.w_down, w.b_down, calib::SiteStats::of_columns(h), r.down, lambda_rel, context);
  return f;
}

UdResult joint_ud(const MlpDense& w, const MatrixD& x, const UdOptions& opt, std::string_view context) {
  check_mlp(w, x, opt, context);
  const MatrixD xt = x.transpose();  // [d, n]
  const MatrixD y = mlp_forward(w, xt);  // [d, n] dense output
  const Ctx c{w, xt, y, opt, context};
  UdResult out;
  out.output_energy = (y.colwise() - y.rowwise().mean()).squaredNorm();
  Best best;
  MlpFactors start = local_mlp(w, x, opt.ranks, opt.lambda_rel, true, context);
  Hidden hd = hidden_of(w, start, xt);  // of start, and of cur (the same up and gate)
  const RegressionStats st = c.on_hidden(hd.h);
  out.loss_local = c.loss(start.down, st);
  best.offer(start, out.loss_local, -1);
  MlpFactors cur = start;
  double cur_loss = out.loss_local;
  if (opt.refit_down) {
    cur.down = c.refit_down(st);
    cur_loss = c.loss(cur.down, st);
    best.offer(cur, cur_loss, 0);
  }
  out.loss.push_back(cur_loss);
  // The ridge step's β, γ are relative to the mean squared singular value of the down factor; when it
  // is zero (a zero down_proj, or hidden activations that are all zero) the step is undefined and
  // nothing can improve on the local solution: keep it.
  const bool paper = opt.paper_admm && w.act == model::Activation::Relu && !w.gated;
  const LowRank& first_down = paper ? start.down : cur.down;  // where each path starts
  const double gain = first_down.dense().squaredNorm() / first_down.rank();
  if (opt.iters > 0 && !(gain > 0 && std::isfinite(gain))) {
    record_note(context, "joint-skipped",
                fmt::format("joint up-down iterations skipped: the compressed down projection is zero (squared "
                            "norm per rank {:g}), so the local solution is kept", gain));
    out.f = std::move(best.f);
    out.best_iter = best.iter;
    return out;
  }
  if (paper) paper_iterations(c, start, best, out);  // the paper starts from the local solution
  else extension_iterations(c, cur, cur_loss, std::move(hd), best, out);
  out.f = std::move(best.f);
  out.best_iter = best.iter;
  return out;
}

UdResult joint_ud(const MlpDense& w, const MatrixF& x, const UdOptions& opt, std::string_view context) {
  return joint_ud(w, MatrixD(x.cast<double>()), opt, context);
}

}  // namespace latentllm::compress
