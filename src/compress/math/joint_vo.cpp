#include "compress/math/joint_vo.hpp"

#include "compress/math/asvd.hpp"
#include "compress/math/bias.hpp"
#include "compress/math/pair_solver.hpp"
#include "compress/math/whitening.hpp"
#include "latentllm/error.hpp"

namespace latentllm::compress {

namespace {

void check_dense(const VoDense& w, const model::AttentionInfo& s, const calib::SiteStats& m, std::string_view context) {
  s.validate(context);
  const auto dv = static_cast<Eigen::Index>(s.num_kv_heads) * s.head_dim;
  const auto dq = static_cast<Eigen::Index>(s.num_heads) * s.head_dim;
  if (w.wv.rows() != dv || w.wv.cols() != s.hidden || w.wo.rows() != s.hidden || w.wo.cols() != dq) {
    throw ConfigError(fmt::format("{}: v/o_proj shapes (expected [{}, {}] and [{}, {}], got [{}, {}] and [{}, {}])",
                                  context, dv, s.hidden, s.hidden, dq, w.wv.rows(), w.wv.cols(), w.wo.rows(),
                                  w.wo.cols()));
  }
  if ((w.bv.size() > 0 && w.bv.size() != dv) || (w.bo.size() > 0 && w.bo.size() != s.hidden)) {
    throw ConfigError(fmt::format("{}: v/o bias sizes (expected {} and {}, got {} and {})", context, dv, s.hidden,
                                  w.bv.size(), w.bo.size()));
  }
  if (m.width() != s.hidden) {
    throw ConfigError(fmt::format("{}: input moments width (expected {}, got {})", context, s.hidden, m.width()));
  }
}

// Rows of the kv-head map repeated for every query head: [H·d_h, cols] from [H_kv·d_h, cols].
MatrixD expand_kv(const MatrixD& wkv, const model::AttentionInfo& s) {
  const int dh = s.head_dim;
  MatrixD e(static_cast<Eigen::Index>(s.num_heads) * dh, wkv.cols());
  for (int i = 0; i < s.num_heads; ++i) e.middleRows(i * dh, dh) = wkv.middleRows(s.kv_head(i) * dh, dh);
  return e;
}

VectorD augmented_mean(const calib::SiteStats& m) {  // [μ; 1]
  VectorD mu(m.width() + 1);
  mu.head(m.width()) = m.mean();
  mu(m.width()) = 1.0;
  return mu;
}

}  // namespace

VoResult joint_vo(const VoDense& w, const model::AttentionInfo& s, const calib::SiteStats& m, const VoOptions& opt,
                  std::string_view context) {
  check_dense(w, s, m, context);
  const int d = s.hidden, dh = s.head_dim;
  if (opt.r_v < 1 || opt.r_v > d || opt.r_o < 1 || opt.r_o > d) {
    throw ConfigError(fmt::format("{}: joint VO ranks (expected 1..{}, got r_v={} r_o={})", context, d, opt.r_v, opt.r_o));
  }
  // The v bias is folded through the augmented input (it passes the attention unchanged).
  const bool aug = opt.bias_aware && w.bv.size() > 0;
  const MatrixD wv = aug ? with_bias_column(w.wv, w.bv) : w.wv;  // [H_kv·d_h, d']
  // Any F·Fᵀ = C + λI serves as P (whitening.hpp): H_i = W_o,i·W_v,g·F, the optimal V rotates with F.
  const Whitening wh = whiten(aug ? m.augmented() : m.xtx, opt.lambda_rel, context);
  const MatrixD vt = wh.times(wv);  // [H_kv·d_h, d']

  // H_i = W_o,i·(W_v,g·P) = L_iᵀ·R_g with L_i = W_o,iᵀ: [d_h, d], R_g: [d_h, d'].
  PairProblem p;
  for (int i = 0; i < s.num_heads; ++i) p.left.push_back(w.wo.middleCols(i * dh, dh).transpose());
  for (int g = 0; g < s.num_kv_heads; ++g) p.right.push_back(vt.middleRows(g * dh, dh));
  for (int i = 0; i < s.num_heads; ++i) p.terms.push_back({i, s.kv_head(i), MatrixD(), 1.0});
  if (opt.o_moments != nullptr) {
    if (opt.o_moments->width() != s.num_heads * dh) {
      throw ConfigError(fmt::format("{}: o_proj input moments width (expected {}, got {})", context, s.num_heads * dh,
                                    opt.o_moments->width()));
    }
    // Attention-aware: J = tr(U_oᵀ(W_oC_oW_oᵀ − ΣH_iH_iᵀ)U_o) + Σ‖U_oᵀH_iV‖², total = tr(W_oC_oW_oᵀ).
    const MatrixD out_cov = w.wo * opt.o_moments->xtx * w.wo.transpose();  // [d, d]
    const MatrixD plain = pair_left_gram(p, MatrixD());
    p.total_offset = out_cov.trace() - pair_total(p);
    p.left_offset = out_cov - plain;
  }
  const PairSolution sol = solve_pair(p, opt.r_o, opt.r_v, opt.iters, context, opt.tol);

  VoResult out;
  out.loss = sol.loss;
  const MatrixD av = wh.times_pinv(sol.u_r.transpose());  // [r_v, d']
  out.f.v.B = vt * sol.u_r;                               // [H_kv·d_h, r_v]
  out.f.v.A = av.leftCols(d);
  out.f.v.bias = aug ? VectorD(out.f.v.B * av.col(d)) : w.bv;
  out.f.o.B = sol.u_l;                   // [d, r_o]
  out.f.o.A = sol.u_l.transpose() * w.wo;  // [r_o, H·d_h]
  if (w.bo.size() > 0) {
    out.f.o.bias = w.bo;
    if (opt.bias_aware) {
      // Mean output error under the local approximation (attention averages of x have mean μ).
      const VectorD mu = augmented_mean(m);
      const VectorD z = expand_kv(with_bias_column(w.wv, w.bv), s) * mu;  // [H·d_h]
      const VectorD zh = expand_kv(augmented_dense(out.f.v), s) * mu;
      out.f.o.bias += w.wo * z - out.f.o.dense() * zh;
    }
  }
  return out;
}

VoFactors separate_vo(const VoDense& w, const calib::SiteStats& m, const calib::SiteStats& o_m, int r_v, int r_o,
                      double lambda_rel, std::string_view context) {
  VoFactors f;
  f.v = local_rootcov(w.wv, w.bv, m, r_v, lambda_rel, context);
  f.o = local_rootcov(w.wo, w.bo, o_m, r_o, lambda_rel, context);
  return f;
}



double vo_output_loss(const VoDense& dense, const VoFactors& f, const model::AttentionInfo& s, const calib::SiteStats& m) {
  check_dense(dense, s, m, "vo_output_loss");
  // y − ŷ = D·x' with D = W_o·E − Ŵ_o·Ê, plus (b_o − b̂_o) in the constant column.
  MatrixD dmat = dense.wo * expand_kv(with_bias_column(dense.wv, dense.bv), s) -
                 f.o.dense() * expand_kv(augmented_dense(f.v), s);  // [d, d+1]
  if (dense.bo.size() > 0) dmat.col(s.hidden) += dense.bo;
  if (f.o.bias.size() > 0) dmat.col(s.hidden) -= f.o.bias;
  return (dmat * m.augmented()).cwiseProduct(dmat).sum();
}



}  // namespace latentllm::compress
