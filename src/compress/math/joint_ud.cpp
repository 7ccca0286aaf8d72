#include "compress/math/joint_ud.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include <Eigen/QR>

#include "compress/math/asvd.hpp"
#include "compress/stages/codecs.hpp"
#include "compress/stages/notes.hpp"
#include "compress/math/regression.hpp"
#include "compress/math/token_passes.hpp"
#include "latentllm/error.hpp"
#include "linalg/linalg.hpp"
#include "model/activation.hpp"

namespace latentllm::compress {

namespace {

template <typename T>
using Mat = MatrixX<T>;                          // column-major
template <typename T>
using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;
template <typename T>
using Cols = Eigen::Ref<const Mat<T>>;           // [rows, c] a chunk

template <typename T>
Mat<T> act_of(model::Activation a, const Mat<T>& z) {
  // ReLU vectorized (the scalar functor below is not: 8 % of joint up-down's time on opt-tiny). The
  // same values for finite inputs, up to the sign of a zero (the inputs are checked finite upstream).
  if (a == model::Activation::Relu) return z.cwiseMax(T(0));
  return z.unaryExpr([a](T v) { return model::activate(a, v); });
}
template <typename T>
Mat<T> slope_of(model::Activation a, const Mat<T>& z) {
  return z.unaryExpr([a](T v) { return model::activate_slope(a, v); });
}

// A linear map in the passes' precision: dense (B empty, A = W) or factored B·A; bias may be empty.
template <typename T>
struct Lin {
  Mat<T> B, A;  // [out, r], [r, in]; or B empty and A = W [out, in]
  Vec<T> bias;  // [out]
  static Lin dense(const MatrixD& w, const VectorD& b) { return {Mat<T>(), w.cast<T>(), b.cast<T>()}; }
  static Lin of(const LowRank& f) { return {f.B.cast<T>(), f.A.cast<T>(), f.bias.cast<T>()}; }
  // y = map(x) for the columns of xt: [in, c] -> [out, c]; never forms B·A.
  Mat<T> operator()(const Cols<T>& xt) const {
    Mat<T> y = B.size() > 0 ? Mat<T>(B * (A * xt)) : Mat<T>(A * xt);
    if (bias.size() > 0) y.colwise() += bias;
    return y;
  }
};

// The MLP (dense or factored) in the passes' precision; gate unused when not gated.
template <typename T>
struct Mlp {
  model::Activation act;
  bool gated;
  Lin<T> up, gate, down;
  static Mlp dense(const MlpDense& w) {
    return {w.act, w.gated, Lin<T>::dense(w.w_up, w.b_up), Lin<T>::dense(w.w_gate, w.b_gate),
            Lin<T>::dense(w.w_down, w.b_down)};
  }
  static Mlp of(const MlpDense& w, const MlpFactors& f) {
    return {w.act, w.gated, Lin<T>::of(f.up), Lin<T>::of(f.gate), Lin<T>::of(f.down)};
  }
};

// Pre-activations and hidden activations on a chunk, [f, c] each.
template <typename T>
struct Hidden {
  Mat<T> zu, zg, h;
};
template <typename T>
Hidden<T> hidden_of(const Mlp<T>& m, const Cols<T>& xt) {
  Hidden<T> hd;
  hd.zu = m.up(xt);
  if (m.gated) {
    hd.zg = m.gate(xt);
    hd.h = act_of(m.act, hd.zg).cwiseProduct(hd.zu);
  } else {
    hd.h = act_of(m.act, hd.zu);
  }
  return hd;
}
template <typename T>
Mat<T> forward(const Mlp<T>& m, const Cols<T>& xt) {
  return m.down(hidden_of(m, xt).h);
}

// argmin_H α‖T − Ŵ·H‖² + β‖H − H0‖² for the factored Ŵ = B·A (rank r), per token (column). With
// Ŵ = U·S·Vᵀ (thin, from QRs of B and Aᵀ): (αŴᵀŴ + βI)⁻¹ = (I − V·diag(αs²/(αs²+β))·Vᵀ)/β, so the
// [f, f] system is never formed (ridge step of the paper's Z' update). With R = αŴᵀT + βH0 = V·C + βH0
// (C = α·S·UᵀT) and VᵀV = I: H = H0 + V·(C − k ⊙ (C + β·VᵀH0))/β, k = αs²/(αs²+β). The
// decomposition is built once per iteration in double and applied to every chunk in T.
template <typename T>
class RidgeStep {
 public:
  RidgeStep(const LowRank& down, double alpha, double beta, std::string_view context) : beta_(static_cast<T>(beta)) {
    const int r = down.rank();
    const Eigen::HouseholderQR<MatrixD> qb(down.B), qa(down.A.transpose());
    const MatrixD q_b = qb.householderQ() * MatrixD::Identity(down.B.rows(), r);  // [d, r]
    const MatrixD q_a = qa.householderQ() * MatrixD::Identity(down.A.cols(), r);  // [f, r]
    const MatrixD r_b = qb.matrixQR().topRows(r).triangularView<Eigen::Upper>();
    const MatrixD r_a = qa.matrixQR().topRows(r).triangularView<Eigen::Upper>();
    const linalg::Svd core = linalg::svd(r_b * r_a.transpose(), context);  // [r, r]
    const VectorD s2 = core.s.array().square();
    // α·S·Uᵀ, applied to the targets with the down bias taken off.
    const MatrixD asu = alpha * core.s.asDiagonal() * (q_b * core.u).transpose();  // [r, d]
    asut_ = asu.cast<T>();
    v_ = (q_a * core.v).cast<T>();                                                  // [f, r]
    shrink_ = (alpha * s2.array() / (alpha * s2.array() + beta)).matrix().cast<T>();
    if (down.bias.size() > 0) asub_ = (asu * down.bias).cast<T>();
  }
  // t: [d, c] the targets (dense outputs), h0: [f, c].
  Mat<T> operator()(const Cols<T>& t, const Mat<T>& h0) const {
    Mat<T> c = asut_ * t;                                                // [r, c]
    if (asub_.size() > 0) c.colwise() -= asub_;
    const Mat<T> g = v_.transpose() * h0;                                // [r, c]
    const Mat<T> step = (c - shrink_.asDiagonal() * (c + beta_ * g)) / beta_;
    Mat<T> h = h0;
    h.noalias() += v_ * step;  // [f, c]
    return h;
  }

 private:
  T beta_;
  Mat<T> asut_, v_;  // [r, d], [f, r]
  Vec<T> shrink_, asub_;
};

// Paper's Z update for ReLU, per element: min β(z' − σ(z))² + γ(z − w)², the better of the branches
// z ≥ 0 (σ(z) = z) and z ≤ 0 (σ(z) = 0), each a clipped quadratic. A plain loop over the elements, so
// that the compiler vectorizes it (through Eigen's binaryExpr with a lambda it stayed scalar).
template <typename T>
Mat<T> relu_case_split(const Mat<T>& zp, const Mat<T>& w, double beta_d, double gamma_d) {
  const T beta = static_cast<T>(beta_d), gamma = static_cast<T>(gamma_d), sum = beta + gamma;
  Mat<T> z(zp.rows(), zp.cols());
  const T* pp = zp.data();
  const T* wp = w.data();
  T* zo = z.data();
  const Eigen::Index n = zp.size();
  for (Eigen::Index i = 0; i < n; ++i) {
    const T p = pp[i], u = wp[i];
    const T zpos = std::max(T(0), (beta * p + gamma * u) / sum);
    const T cpos = beta * (p - zpos) * (p - zpos) + gamma * (zpos - u) * (zpos - u);
    const T zneg = std::min(u, T(0));
    const T cneg = beta * p * p + gamma * (zneg - u) * (zneg - u);
    zo[i] = cpos <= cneg ? zpos : zneg;
  }
  return z;
}

// Gauss-Newton target for a pre-activation: z + η·s(h* − h)/(s² + ε), with ε 1 % of the chunk's mean
// s² (a guard against vanishing slopes, relative to their scale).
template <typename T>
Mat<T> gn_target(const Mat<T>& z, const Mat<T>& s, const Mat<T>& dh, double eta) {
  const double ms = s.template cast<double>().squaredNorm() / static_cast<double>(std::max<Eigen::Index>(1, s.size()));
  const T eps = static_cast<T>(1e-2 * std::max(ms, 1e-300)), e = static_cast<T>(eta);
  return (z.array() + e * (s.array() * dh.array() / (s.array().square() + eps))).matrix();
}

// Σ over a chunk's columns of ‖·‖², summed in double.
template <typename T>
double sq_norm(const Mat<T>& m) {
  return m.colwise().squaredNorm().template cast<double>().sum();
}

// Σ_t ‖y_t − (Ŵ·h_t + b)‖² for the factored Ŵ = B·A and bias b of `down`, from the regression stats
// of (H, Y) and yy = ‖Y‖²: the square expanded, so no [d, n] residual is formed. The expansion cancels
// about log10(‖Y‖² / loss) of double's 16 digits (3 for a 0.1 % loss).
double loss_from_stats(const RegressionStats& st, double yy, const LowRank& down) {
  const MatrixD w = down.dense();  // [d, f]
  double l = yy - 2.0 * (w.array() * st.cross.array()).sum() + (w * st.cov).cwiseProduct(w).sum();
  if (down.bias.size() > 0) {
    const VectorD& b = down.bias;
    l += -2.0 * b.dot(st.sum_t) + 2.0 * b.dot(w * st.sum_s) + st.n * b.squaredNorm();
  }
  return std::max(l, 0.0);
}

template <typename T>
Mat<T> rows_of(const MatrixRowF& m, Eigen::Index t0, Eigen::Index c) {  // [f, c] from token rows
  return m.middleRows(t0, c).transpose().template cast<T>();
}

// The problem: dense MLP, token rows (inputs, dense outputs), input statistics, options.
template <typename T>
struct Ctx {
  const MlpDense& w;
  TokenRows<T> tokens;
  const UdOptions& opt;
  std::string_view context;
  RegressionStats x_stats;  // of the inputs: cov [d, d], sum_s [d] (the sources of the up/gate fits)
  double yy = 0;            // ‖Y‖²
  graph::Graph& g;          // the runtime of the decisions taken from the statistics (on)

  // fn() on kStatsOwner, the rank the passes' statistics are added on (token_passes.hpp), its result on
  // every rank: every decision taken from the statistics (a candidate accepted, an iterate's loss) is
  // the owner's, the same on every rank.
  template <typename F>
  auto on(F fn) const { return g.on(kStatsOwner, std::string(context), std::move(fn)); }

  Eigen::Index f() const { return w.w_up.rows(); }
  Eigen::Index d() const { return w.w_up.cols(); }
  // Rank-r fit of the pass's targets on the inputs: cross from acc, cov from x_stats.
  LowRank fit_from_inputs(RegressionAccumulator& acc, int r, bool bias) const {
    RegressionStats st = acc.take();
    st.cov = x_stats.cov;
    st.sum_s = x_stats.sum_s;
    return reduced_rank_regression(st, r, bias, opt.lambda_rel, context);
  }
  // Output-aware refit of the down projection: rank-r_d regression of the DENSE output Y on the
  // compressed hidden activations, so it absorbs the upstream (up/gate) error.
  LowRank refit_down(const RegressionStats& st) const {
    return reduced_rank_regression(st, opt.ranks.down, w.b_down.size() > 0, opt.lambda_rel, context);
  }
  // The regression stats of (hidden activations of f, Y) over all tokens: one pass (on kStatsOwner; empty
  // elsewhere).
  RegressionStats on_hidden(const MlpFactors& fs) const {
    const Mlp<T> m = Mlp<T>::of(w, fs);
    RegressionAccumulator acc(f(), d(), true);
    token_pass<T>(tokens, {&acc}, 0, [&](Eigen::Index, const Cols<T>& xt, const Cols<T>& yt, ChunkOut<T>& out) {
      out.pairs.emplace_back(hidden_of(m, xt).h, yt);
    });
    return g.exchange().rank() == kStatsOwner ? acc.take() : RegressionStats{};
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

// The paper's auxiliary-variable iterations (ReLU, not gated). Z persists between iterations (float
// per token). Pass k makes the Z' and Z updates and gathers both fits' statistics; it evaluates
// Ŵ_u·X of iterate k − 1 anyway, so it also gives that iterate's true output loss (and, tracked, its
// auxiliary objective). One last pass gives the last iterate's loss and the statistics of its hidden
// activations, for the output-aware down refit of the answer (the refit never feeds the iterations).
template <typename T>
void paper_iterations(const Ctx<T>& c, MlpFactors cur, Best& best, UdResult& out) {
  UdOptions o = c.opt;
  // β, γ are relative to the mean squared singular value of the starting Ŵ_d, so the trade-off of
  // the ridge step (αŴ_dᵀŴ_d + βI) does not depend on the scale of W_d (docs/JOINT.md).
  const double gain = cur.down.dense().squaredNorm() / cur.down.rank();
  o.beta *= gain;
  o.gamma *= gain;
  const bool bu = c.w.b_up.size() > 0, bd = c.w.b_down.size() > 0;
  const auto relu = model::Activation::Relu;
  MatrixRowF z(c.tokens.size(), c.f());  // [n, f]; Z = Ŵ_u·X before the first iteration
  MatrixRowF zp_kept;                    // [n, f] Z' when tracking the auxiliary objective
  if (o.track_aux_loss) zp_kept.resize(c.tokens.size(), c.f());
  // Scalars of a pass over iterate `cur`: [0] its true output loss, [1] its auxiliary objective.
  auto evaluate = [&](const Lin<T>& down, const Cols<T>& xt, const Cols<T>& yt, Eigen::Index t0, int it,
                      const Mat<T>& ux, ChunkOut<T>& r) {
    // Iterate 0 is the local start, whose loss is known (out.loss_local): only the auxiliary
    // objective, when tracked, needs its pass (a down projection of every chunk, 1/9 of the pass).
    if (it == 0 && !o.track_aux_loss) return;
    const Mat<T> h = act_of(relu, ux);
    r.scalars = {sq_norm<T>(yt - down(h)), 0.0};
    if (o.track_aux_loss && it == 0) r.scalars[1] = o.alpha * r.scalars[0];  // Z = Ŵ_u·X, no Z' yet
    if (o.track_aux_loss && it > 0) {
      const Mat<T> zc = rows_of<T>(z, t0, xt.cols()), zpc = rows_of<T>(zp_kept, t0, xt.cols());
      r.scalars[1] = o.alpha * sq_norm<T>(yt - down(zpc)) + o.beta * sq_norm<T>(zpc - act_of(relu, zc)) +
                     o.gamma * sq_norm<T>(zc - ux);
    }
  };
  auto record = [&](const std::vector<double>& s, int it) {
    if (it > 0) {
      best.offer(cur, s.at(0), it);
      out.loss.push_back(s.at(0));
    }
    if (o.track_aux_loss) out.aux_loss.push_back(s.at(1));
  };
  for (int it = 1; it <= o.iters; ++it) {
    const RidgeStep<T> ridge(cur.down, o.alpha, o.beta, c.context);
    const Lin<T> up = Lin<T>::of(cur.up), down = Lin<T>::of(cur.down);
    RegressionAccumulator up_acc(c.d(), c.f(), false), down_acc(c.f(), c.d(), true);
    const auto s = token_pass<T>(c.tokens, {&up_acc, &down_acc}, 2,
                                 [&](Eigen::Index t0, const Cols<T>& xt, const Cols<T>& yt, ChunkOut<T>& r) {
                                   const Mat<T> ux = up(xt);  // [f, c] Ŵ_u·X of iterate it − 1
                                   evaluate(down, xt, yt, t0, it - 1, ux, r);
                                   const Mat<T> zc = it == 1 ? ux : rows_of<T>(z, t0, xt.cols());
                                   Mat<T> zpc = ridge(yt, act_of(relu, zc));
                                   Mat<T> zn = relu_case_split(zpc, ux, o.beta, o.gamma);
                                   z.middleRows(t0, xt.cols()) = zn.transpose().template cast<float>();
                                   if (o.track_aux_loss) zp_kept.middleRows(t0, xt.cols()) = zpc.transpose().template cast<float>();
                                   r.pairs.emplace_back(xt, std::move(zn));
                                   r.pairs.emplace_back(std::move(zpc), yt);
                                 });
    record(s, it - 1);
    std::tie(cur.up, cur.down) = c.on([&] {
      LowRank up = c.fit_from_inputs(up_acc, o.ranks.up, bu);
      return std::pair{std::move(up), reduced_rank_regression(down_acc.take(), o.ranks.down, bd, o.lambda_rel, c.context)};
    });
  }
  RegressionAccumulator h_acc(c.f(), c.d(), true);
  const Lin<T> up = Lin<T>::of(cur.up), down = Lin<T>::of(cur.down);
  const auto s = token_pass<T>(c.tokens, {&h_acc}, 2,
                               [&](Eigen::Index t0, const Cols<T>& xt, const Cols<T>& yt, ChunkOut<T>& r) {
                                 const Mat<T> ux = up(xt);
                                 evaluate(down, xt, yt, t0, o.iters, ux, r);
                                 r.pairs.emplace_back(act_of(relu, ux), yt);
                               });
  record(s, o.iters);
  if (!o.refit_down || o.iters == 0) return;
  MlpFactors refit = cur;
  double lr = 0;
  std::tie(refit.down, lr) = c.on([&] {
    const RegressionStats st = h_acc.take();
    LowRank down = c.refit_down(st);
    const double loss = loss_from_stats(st, c.yy, down);
    return std::pair{std::move(down), loss};
  });
  best.offer(refit, lr, o.iters);
  out.loss.back() = std::min(out.loss.back(), lr);
}

// One Gauss-Newton candidate of the extension: up (then gate) refit towards the ridge hidden target
// with step η, down refit on its hidden activations. Returns its loss; one pass per refit module.
template <typename T>
double extension_candidate(const Ctx<T>& c, const MlpFactors& cur, const RidgeStep<T>& ridge, double eta,
                           MlpFactors& cand) {
  const UdOptions& o = c.opt;
  const Mlp<T> m = Mlp<T>::of(c.w, cur);
  cand = cur;
  RegressionAccumulator up_acc(c.d(), c.f(), false);
  token_pass<T>(c.tokens, {&up_acc}, 0, [&](Eigen::Index, const Cols<T>& xt, const Cols<T>& yt, ChunkOut<T>& r) {
    const Hidden<T> hd = hidden_of(m, xt);
    const Mat<T> dh = ridge(yt, hd.h) - hd.h;                                           // h* − h
    const Mat<T> su = m.gated ? act_of(m.act, hd.zg) : slope_of(m.act, hd.zu);  // ∂h/∂z_u
    r.pairs.emplace_back(xt, gn_target(hd.zu, su, dh, eta));
  });
  cand.up = c.on([&] { return c.fit_from_inputs(up_acc, o.ranks.up, c.w.b_up.size() > 0); });
  if (m.gated) {
    const Lin<T> up_new = Lin<T>::of(cand.up);
    RegressionAccumulator gate_acc(c.d(), c.f(), false);
    token_pass<T>(c.tokens, {&gate_acc}, 0, [&](Eigen::Index, const Cols<T>& xt, const Cols<T>& yt, ChunkOut<T>& r) {
      const Hidden<T> hd = hidden_of(m, xt);
      const Mat<T> hstar = ridge(yt, hd.h);
      const Mat<T> zu = up_new(xt);
      const Mat<T> h = act_of(m.act, hd.zg).cwiseProduct(zu);
      const Mat<T> sg = slope_of(m.act, hd.zg).cwiseProduct(zu);  // ∂h/∂z_g
      r.pairs.emplace_back(xt, gn_target<T>(hd.zg, sg, hstar - h, eta));
    });
    cand.gate = c.on([&] { return c.fit_from_inputs(gate_acc, o.ranks.gate, c.w.b_gate.size() > 0); });
  }
  const RegressionStats st = c.on_hidden(cand);
  double loss = 0;
  std::tie(cand.down, loss) = c.on([&] {
    LowRank down = c.refit_down(st);
    const double l = loss_from_stats(st, c.yy, down);
    return std::pair{std::move(down), l};
  });
  return loss;
}

// The extension (any activation, gated or not): see the header and docs/JOINT.md.
template <typename T>
void extension_iterations(const Ctx<T>& c, MlpFactors cur, double cur_loss, Best& best, UdResult& out) {
  const UdOptions& o = c.opt;
  for (int it = 1; it <= o.iters; ++it) {
    const double gain = cur.down.dense().squaredNorm() / cur.down.rank();  // relative β as in the paper path
    if (!(gain > 0 && std::isfinite(gain))) break;  // a zero down factor: no ridge step (joint_ud notes it)
    const RidgeStep<T> ridge(cur.down, o.alpha, o.beta * gain, c.context);
    bool accepted = false;
    for (double eta : {1.0, 0.5, 0.25}) {
      MlpFactors cand;
      const double l = extension_candidate(c, cur, ridge, eta, cand);
      if (l < cur_loss) {
        cur = std::move(cand);
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

void check_mlp(const MlpDense& w, Eigen::Index x_rows, Eigen::Index x_cols, const UdOptions& o,
               std::string_view context) {
  const auto f = w.w_up.rows(), d = w.w_up.cols();
  const bool ok = w.w_down.rows() == d && w.w_down.cols() == f && x_cols == d &&
                  (!w.gated || (w.w_gate.rows() == f && w.w_gate.cols() == d));
  if (!ok) {
    throw ConfigError(fmt::format("{}: MLP shapes (expected up [f, d], down [d, f], x [n, d]; got up [{}, {}], "
                                  "down [{}, {}], x [{}, {}])", context, f, d, w.w_down.rows(), w.w_down.cols(),
                                  x_rows, x_cols));
  }
  if (o.iters < 0 || !(o.alpha > 0 && o.beta > 0 && o.gamma > 0) || o.chunk_tokens < 0 || o.unit_tokens < 0) {
    throw ConfigError(fmt::format("{}: joint UD options (expected iters ≥ 0, chunk_tokens ≥ 0, unit_tokens ≥ 0 and "
                                  "α, β, γ > 0, got {} {} {} {} {} {})", context, o.iters, o.chunk_tokens,
                                  o.unit_tokens, o.alpha, o.beta, o.gamma));
  }
}

// Tokens per chunk: about 4 M elements (double) or 8 M (float) of an [f, c] chunk matrix, so the float
// path's per-chunk addition into the double sums stays small next to the chunk's products.
Eigen::Index chunk_of(const UdOptions& o, Eigen::Index f) {
  if (o.chunk_tokens > 0) return o.chunk_tokens;
  const Eigen::Index elems = o.f32_passes ? (8 << 20) : (4 << 20);
  return std::clamp<Eigen::Index>((elems / std::max<Eigen::Index>(f, 1)) / 256 * 256, 256, 4096);
}

// The dense outputs (into y), the input statistics, ‖Y‖² and the output energy ‖Y − mean Y‖², over
// every rank's tokens.
template <typename T>
void prepare(const MlpDense& w, const MatrixRow<T>& x, MatrixRow<T>& y, Ctx<T>& c, UdResult& out) {
  RegressionAccumulator x_acc(w.w_up.cols(), 0, true);
  const Mlp<T> dense = Mlp<T>::dense(w);
  const TokenRows<T> self{x, x, c.tokens.chunk, c.tokens.unit, c.tokens.context};  // y is written as the pass goes
  const auto dy = static_cast<std::size_t>(y.cols());
  // Scalars: ‖Y‖², then Σ Y [d'].
  const auto s = token_pass<T>(self, {&x_acc}, 1 + dy, [&](Eigen::Index t0, const Cols<T>& xt, const Cols<T>&, ChunkOut<T>& r) {
    const Mat<T> yc = forward(dense, xt);  // [d', c]
    y.middleRows(t0, xt.cols()) = yc.transpose();
    r.scalars.assign(1 + dy, 0.0);
    r.scalars[0] = sq_norm<T>(yc);
    Eigen::Map<VectorD> sum(r.scalars.data() + 1, yc.rows());  // column by column: contiguous
    for (Eigen::Index j = 0; j < yc.cols(); ++j) sum += yc.col(j).template cast<double>();
    r.pairs.emplace_back(xt, Mat<T>(0, xt.cols()));
  });
  c.yy = s[0];
  // The input statistics only on the owner (the sources of its regressions); the energy from their count.
  out.output_energy = c.on([&] {
    c.x_stats = x_acc.take();
    const double n = c.x_stats.n;
    const VectorD mean = n > 0 ? VectorD(Eigen::Map<const VectorD>(s.data() + 1, y.cols()) / n)
                               : VectorD::Zero(y.cols());
    return std::max(c.yy - n * mean.squaredNorm(), 0.0);
  });
}

template <typename T>
UdResult solve(const MlpDense& w, const MatrixRow<T>& x, const UdOptions& opt, std::string_view context,
               graph::Graph& g) {
  check_mlp(w, x.rows(), x.cols(), opt, context);
  MatrixRow<T> y(x.rows(), w.w_down.rows());  // [n, d] dense outputs
  const Eigen::Index chunk = chunk_of(opt, w.w_up.rows());
  const std::string stats_context = fmt::format("{}: {}", context, kStatsContext);
  Ctx<T> c{w, TokenRows<T>{x, y, chunk, ud_unit_tokens(opt, w.w_up.rows()), stats_context}, opt, context, {}, 0.0, g};
  UdResult out;
  prepare(w, x, y, c, out);
  // The local root-cov start, sequential: down from the hidden activations of the compressed up/gate.
  MlpFactors start;
  std::tie(start.up, start.gate) = c.on([&] {
    calib::SiteStats xs;
    xs.xtx = c.x_stats.cov;
    xs.sum = c.x_stats.sum_s;
    xs.n = static_cast<std::int64_t>(c.x_stats.n);
    std::pair<LowRank, LowRank> f;
    f.first = local_rootcov(w.w_up, w.b_up, xs, opt.ranks.up, opt.lambda_rel, context);
    if (w.gated) f.second = local_rootcov(w.w_gate, w.b_gate, xs, opt.ranks.gate, opt.lambda_rel, context);
    return f;
  });
  const RegressionStats st = c.on_hidden(start);
  MlpFactors cur = start;
  double cur_loss = 0;
  // The local down, its loss, and with refit_down the output-aware refit and its loss.
  const auto [down, down_loss, refit, refit_loss] = c.on([&] {
    calib::SiteStats hs;
    hs.xtx = st.cov;
    hs.sum = st.sum_s;
    hs.n = static_cast<std::int64_t>(st.n);
    std::tuple<LowRank, double, LowRank, double> r;
    std::get<0>(r) = local_rootcov(w.w_down, w.b_down, hs, opt.ranks.down, opt.lambda_rel, context);
    std::get<1>(r) = loss_from_stats(st, c.yy, std::get<0>(r));
    if (opt.refit_down) {
      std::get<2>(r) = c.refit_down(st);
      std::get<3>(r) = loss_from_stats(st, c.yy, std::get<2>(r));
    }
    return r;
  });
  start.down = down, out.loss_local = down_loss;
  cur.down = start.down, cur_loss = out.loss_local;
  if (opt.refit_down) cur.down = refit, cur_loss = refit_loss;
  Best best;
  best.offer(start, out.loss_local, -1);
  if (opt.refit_down) best.offer(cur, cur_loss, 0);
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
  } else if (paper) {
    paper_iterations(c, start, best, out);  // the paper starts from the local solution
  } else {
    extension_iterations(c, cur, cur_loss, best, out);
  }
  out.f = std::move(best.f);
  out.best_iter = best.iter;
  return out;
}

}  // namespace

Eigen::Index ud_unit_tokens(const UdOptions& opt, Eigen::Index f) {
  constexpr Eigen::Index kUnitTokens = 4096;
  if (opt.unit_tokens > 0) return opt.unit_tokens;
  const Eigen::Index c = chunk_of(opt, f);
  return (kUnitTokens + c - 1) / c * c;
}

MatrixD mlp_forward(const MlpDense& w, const MatrixD& xt) { return forward<double>(Mlp<double>::dense(w), xt); }

MatrixD mlp_forward(const MlpDense& w, const MlpFactors& f, const MatrixD& xt) {
  return forward<double>(Mlp<double>::of(w, f), xt);
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
  const MatrixD h = hidden_of<double>(sequential ? Mlp<double>::of(w, f) : Mlp<double>::dense(w), xt).h;
  f.down = local_rootcov(w.w_down, w.b_down, calib::SiteStats::of_columns(h), r.down, lambda_rel, context);
  return f;
}

UdResult joint_ud(const MlpDense& w, const MatrixD& x, const UdOptions& opt, std::string_view context,
                  graph::Graph* g) {
  graph::Graph local(graph::processes());
  graph::Graph& run = g != nullptr ? *g : local;
  if (opt.f32_passes) return solve<float>(w, MatrixRowF(x.cast<float>()), opt, context, run);
  return solve<double>(w, MatrixRowD(x), opt, context, run);
}

UdResult joint_ud(const MlpDense& w, const MatrixF& x, const UdOptions& opt, std::string_view context,
                  graph::Graph* g) {
  graph::Graph local(graph::processes());
  graph::Graph& run = g != nullptr ? *g : local;
  if (opt.f32_passes) return solve<float>(w, MatrixRowF(x), opt, context, run);
  return solve<double>(w, MatrixRowD(x.cast<double>()), opt, context, run);
}

}  // namespace latentllm::compress
