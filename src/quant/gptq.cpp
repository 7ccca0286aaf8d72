#include "quant/gptq.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "latentllm/error.hpp"
#include "linalg/linalg.hpp"

namespace latentllm::quant {

namespace {

void check_inputs(const MatrixD& w, const MatrixD& h, const QuantSpec& spec, const GptqOptions& opt,
                  std::string_view context) {
  check_spec(spec, context);
  if (h.rows() != w.cols() || h.cols() != w.cols()) {
    throw ConfigError(fmt::format(
        "{}: input second moment H (expected [{}, {}] for a weight of {} columns, got [{}, {}])", context,
        w.cols(), w.cols(), w.cols(), h.rows(), h.cols()));
  }
  if (!std::isfinite(opt.percdamp) || opt.percdamp < 0.0) {
    throw ConfigError(fmt::format("{}: GPTQ damping (expected a finite percdamp >= 0, got {})", context, opt.percdamp));
  }
  if (opt.block < 1) {
    throw ConfigError(fmt::format("{}: GPTQ block size (expected at least 1 column, got {})", context, opt.block));
  }
  if (opt.act_order && !opt.static_groups && spec.group < w.cols()) {
    throw ConfigError(fmt::format("{}: GPTQ act-order with groups of {} columns needs static groups (expected "
                                  "static_groups, got act_order alone)", context, spec.group));
  }
  linalg::check_finite(w, context, "weight");
  linalg::check_finite(h, context, "input second moment H");
}

// The lazy-update block: G a multiple of it, or it a multiple of G, so that a group fitted when the
// sweep reaches its first column lies in blocks that have received every earlier column's update.
int effective_block(int block, int group) {
  if (group % block == 0) return block;
  return group * std::max(1, block / group);
}

// The sweep order: decreasing diag H₀, ties in increasing index (act-order), else the identity.
std::vector<int> sweep_order(const VectorD& diag, bool act_order) {
  std::vector<int> perm(static_cast<std::size_t>(diag.size()));
  std::iota(perm.begin(), perm.end(), 0);
  if (act_order) std::stable_sort(perm.begin(), perm.end(), [&](int a, int b) { return diag(a) > diag(b); });
  return perm;
}

// Every row's grid of every group, fitted on w: [rows, cols] before the sweep (static groups).
std::vector<GroupGrid> static_grids(const MatrixD& w, const QuantSpec& spec, std::string_view context) {
  const std::int64_t n_g = spec.groups(w.cols());
  std::vector<GroupGrid> grids(static_cast<std::size_t>(w.rows() * n_g));
  for (Eigen::Index r = 0; r < w.rows(); ++r) {
    for (std::int64_t g = 0; g < n_g; ++g) {
      const std::int64_t c0 = g * spec.group, n = std::min<std::int64_t>(spec.group, w.cols() - c0);
      grids[static_cast<std::size_t>(r * n_g + g)] = fit_grid(&w(r, c0), n, w.rows(), spec, context);
    }
  }
  return grids;
}

// The state of one sweep: the permuted, updated weights and where the codes and grids go.
struct Sweep {
  MatrixD wp;                     // [rows, cols] W₀ with columns in sweep order, updated as the sweep goes
  MatrixD u;                      // [cols, cols] upper Cholesky factor of (H₀ + λI)⁻¹ in sweep order
  std::vector<int> perm;          // [cols]
  std::vector<GroupGrid> grids;   // [rows, n_g]: static grids, or the current group's (non-static)
  bool static_groups = false;
  QuantizedMatrix* q = nullptr;
  double loss = 0.0;
};

// Fits (non-static) or looks up each row's grid of the group of sweep column j.
const GroupGrid& grid_for(Sweep& s, std::int64_t row, std::int64_t j, std::string_view context) {
  const QuantSpec& spec = s.q->spec;
  const std::int64_t n_g = s.q->groups();
  const std::int64_t g = s.perm[static_cast<std::size_t>(j)] / spec.group;  // the column's own group
  auto& grid = s.grids[static_cast<std::size_t>(row * n_g + g)];
  if (!s.static_groups && j % spec.group == 0) {
    // Without act-order sweep column j is column j: the group is columns [j, j + G), as updated so far.
    const std::int64_t n = std::min<std::int64_t>(spec.group, s.wp.cols() - j);
    grid = fit_grid(&s.wp(row, j), n, s.wp.rows(), spec, context);
  }
  return grid;
}

// Quantizes sweep columns [i1, i2) (one lazy block), then updates the columns after it. In the paper's
// Algorithm 1, [H⁻¹] after its line "H⁻¹ ← Cholesky(H⁻¹)ᵀ" is the upper factor U used here.
void sweep_block(Sweep& s, std::int64_t i1, std::int64_t i2, MatrixD& err, std::string_view context) {
  const std::int64_t rows = s.wp.rows(), cols = s.wp.cols();
  const int maxq = s.q->spec.maxq();
  for (std::int64_t j = i1; j < i2; ++j) {
    const double d = s.u(j, j);
    const std::int64_t col = s.perm[static_cast<std::size_t>(j)];
    for (std::int64_t r = 0; r < rows; ++r) {
      const GroupGrid& grid = grid_for(s, r, j, context);
      const int c = code_of(s.wp(r, j), grid, maxq);
      s.q->codes[static_cast<std::size_t>(r * cols + col)] = static_cast<std::uint8_t>(c);
      const double e = (s.wp(r, j) - value_of(c, grid)) / d;  // E_{:,j} = (W_{:,j} − Q_{:,j}) / U_jj
      err(r, j - i1) = e;
      s.loss += e * e;
    }
    // Compensate within the block at once: W_{:,j+1:i2} −= E_{:,j}·U_{j,j+1:i2}.
    if (j + 1 < i2) {
      const std::int64_t n = i2 - j - 1;
      s.wp.middleCols(j + 1, n).noalias() -= err.col(j - i1) * s.u.row(j).segment(j + 1, n);
    }
  }
  // The lazy batch update of every later column: one product for the block.
  if (i2 < cols) {
    s.wp.rightCols(cols - i2).noalias() -= err.leftCols(i2 - i1) * s.u.block(i1, i2, i2 - i1, cols - i2);
  }
}

// Writes each row's grids into the result's scales and zeros.
void store_grids(const Sweep& s, QuantizedMatrix& q) {
  for (std::size_t k = 0; k < s.grids.size(); ++k) {
    q.scales[k] = s.grids[k].scale_f16;
    q.zeros[k] = s.grids[k].zero_f16;
  }
}

}  // namespace

GptqResult gptq(const MatrixD& w, const MatrixD& h, const QuantSpec& spec, const GptqOptions& opt,
                std::string_view context) {
  check_inputs(w, h, spec, opt, context);
  const Eigen::Index rows = w.rows(), cols = w.cols();
  GptqResult res;
  // A dead input (diag H = 0) never reaches the output: H_jj = 1 and W[:, j] = 0 (W₀, H₀). Memory: besides
  // the caller's W and H, one [cols, cols] matrix (H₀ in sweep order, then factored in place) and one
  // [rows, cols] (W₀ in sweep order); with static groups W₀ in column order too, while the grids are fitted.
  VectorD diag = h.diagonal();  // [cols] diag H₀
  std::vector<bool> dead(static_cast<std::size_t>(cols));
  for (Eigen::Index j = 0; j < cols; ++j) {
    dead[static_cast<std::size_t>(j)] = diag(j) == 0.0;
    if (diag(j) == 0.0) {
      diag(j) = 1.0;
      ++res.dead;
    }
  }
  res.q.rows = rows;
  res.q.cols = cols;
  res.q.spec = spec;
  res.q.codes.assign(static_cast<std::size_t>(rows * cols), 0);
  res.q.scales.assign(static_cast<std::size_t>(rows * res.q.groups()), 0);
  res.q.zeros.assign(res.q.scales.size(), 0);

  Sweep s;
  s.q = &res.q;
  s.static_groups = opt.static_groups;
  s.perm = sweep_order(diag, opt.act_order);
  const auto& perm = s.perm;
  s.wp.resize(rows, cols);
  for (Eigen::Index j = 0; j < cols; ++j) {
    const int pj = perm[static_cast<std::size_t>(j)];
    if (dead[static_cast<std::size_t>(pj)]) {
      s.wp.col(j).setZero();
    } else {
      s.wp.col(j) = w.col(pj);
    }
  }
  if (opt.static_groups) {
    MatrixD w0(rows, cols);  // [rows, cols] W₀ in column order: a group is G consecutive input columns
    for (Eigen::Index j = 0; j < cols; ++j) w0.col(perm[static_cast<std::size_t>(j)]) = s.wp.col(j);
    s.grids = static_grids(w0, spec, context);
  } else {
    s.grids.resize(res.q.scales.size());
  }
  MatrixD hp(cols, cols);  // [cols, cols] H₀ in sweep order, read from H's upper triangle
  for (Eigen::Index j = 0; j < cols; ++j) {
    const int pj = perm[static_cast<std::size_t>(j)];
    for (Eigen::Index i = 0; i < cols; ++i) {
      const int pi = perm[static_cast<std::size_t>(i)];
      hp(i, j) = pi <= pj ? h(pi, pj) : h(pj, pi);
    }
    hp(j, j) = diag(pj);
  }
  res.damping = cols > 0 ? opt.percdamp * hp.diagonal().mean() : 0.0;
  hp.diagonal().array() += res.damping;
  auto u = linalg::inverse_cholesky_upper(std::move(hp), context);
  if (!u) {
    throw NumericError(fmt::format("{}: H + damping·I is not positive definite (expected a larger percdamp than {}, "
                                   "got damping {})", context, opt.percdamp, res.damping));
  }
  s.u = std::move(*u);

  const int block = effective_block(opt.block, spec.group);
  MatrixD err(rows, block);  // [rows, block] the scaled errors of the current block
  for (Eigen::Index i1 = 0; i1 < cols; i1 += block) {
    sweep_block(s, i1, std::min<Eigen::Index>(i1 + block, cols), err, context);
  }
  store_grids(s, res.q);
  res.loss = s.loss;
  res.perm = std::move(s.perm);
  return res;
}

}  // namespace latentllm::quant
