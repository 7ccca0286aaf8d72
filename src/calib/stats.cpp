#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "core/gemm.hpp"
#include "latentllm/calib.hpp"
#include "latentllm/error.hpp"
#include "linalg/linalg.hpp"
#include "model/ops.hpp"
#include "core/parallel.hpp"
#include "dist/comm.hpp"

namespace latentllm::calib {
namespace {

constexpr Eigen::Index kRowSplitMaxWidth = 2048;  // the second half's accumulator: at most 32 MiB

[[noreturn]] void throw_non_finite(const MatrixF& x, std::int64_t first_token) {
  Eigen::Index t = 0, f = 0;
  (!x.array().isFinite()).cast<int>().maxCoeff(&t, &f);
  throw NumericError(fmt::format("non-finite calibration input (expected finite activations, got {} at token {}, "
                                 "feature {})", x(t, f), first_token + t, f));
}

// C's upper triangle += xᵀ·x (x: [rows, w] row-major double) on the forward's threads with
// single-threaded BLAS. OpenBLAS's own threads stay asleep: woken by a threaded dsyrk, they spin
// (sched_yield) for a while after it returns and take cycles from the next batch's forward on a
// small machine (measured on 2 cores: the calibration forward's GEMMs at 44 % of the sgemm peak
// with them spinning, 59 % without). Narrow sites split the rows in two halves, the second one
// into `half` (a [w, w] accumulator the caller adds once); wide ones split the triangle's columns
// into 4 blocks of equal area. Both splits are fixed, so results do not depend on the thread count.
void syrk_on_forward_threads(const double* x, Eigen::Index rows, Eigen::Index w, MatrixD& c, MatrixD& half) {
  const int n = static_cast<int>(rows), d = static_cast<int>(w);
  core::BlasSingleThreaded single;
  if (w <= kRowSplitMaxWidth) {
    if (half.rows() != w) half = MatrixD::Zero(w, w);
    const int n0 = n / 2;
    core::parallel_for(2, 1, [&](std::int64_t t0, std::int64_t t1) {
      for (auto t = t0; t < t1; ++t) {
        if (t == 0) core::syrk_upper_add_columns(x, n0, d, 0, d, c);
        else core::syrk_upper_add_columns(x + static_cast<std::int64_t>(n0) * d, n - n0, d, 0, d, half);
      }
    });
    return;
  }
  constexpr int kBlocks = 4;
  core::parallel_for(kBlocks, 1, [&](std::int64_t t0, std::int64_t t1) {
    for (auto t = t0; t < t1; ++t) {
      const auto edge = [&](std::int64_t k) {
        return static_cast<int>(std::lround(d * std::sqrt(static_cast<double>(k) / kBlocks)));
      };
      const std::int64_t b = kBlocks - 1 - t;  // the last columns first: the narrowest blocks finish the load
      core::syrk_upper_add_columns(x, n, d, edge(b), edge(b + 1), c);
    }
  });
}

// Σ x, Σ |x| of rows [r0, r0 + rows) of x in double, in fixed blocks of 256 rows added in order, on
// the pool's threads (bit-identical for any thread count); with dst, those rows are also widened into
// it ([rows, w] row-major). A NaN or Inf anywhere makes its block's Σ|x| non-finite (floats cannot
// overflow it in double): throws naming the token.
void sum_rows(const MatrixF& x, Eigen::Index r0, Eigen::Index rows, double* dst, SiteStats& st,
              std::int64_t first_token) {
  constexpr Eigen::Index kBlock = 256;
  const auto w = x.cols();
  const Eigen::Index blocks = (rows + kBlock - 1) / kBlock;
  MatrixD part(2 * w, blocks);  // per block: Σ x, then Σ |x|
  core::parallel_for(blocks, 1, [&](std::int64_t b0, std::int64_t b1) {
    for (auto b = b0; b < b1; ++b) {
      double* s = part.col(b).data();
      double* a = s + w;
      std::fill(s, s + 2 * w, 0.0);
      for (Eigen::Index t = b * kBlock; t < std::min(rows, (b + 1) * kBlock); ++t) {
        const float* src = x.data() + (r0 + t) * w;
        if (dst) std::copy(src, src + w, dst + t * w);  // widened
        for (Eigen::Index j = 0; j < w; ++j) {
          const double v = src[j];
          s[j] += v;
          a[j] += std::abs(v);
        }
      }
    }
  });
  if (!part.bottomRows(w).allFinite()) throw_non_finite(x, first_token);
  for (Eigen::Index b = 0; b < blocks; ++b) {
    st.sum += part.col(b).head(w);
    st.abs_sum += part.col(b).tail(w);
  }
}

// The upper triangle of xtx += xᵀx with float products: per block of kRows tokens, kBlocks column
// blocks of equal area, each on one of the pool's threads with single-threaded BLAS: ssyrk (beta 0)
// into the task's own float panel [j1, j1 − j0], which the task then adds to the double accumulator.
// Fixed splits, so the sums do not depend on the thread count. The panels (w²/2 floats in all, one
// block's worth at a time per thread) replace a [w, w] float copy (256 MiB at w = 8192) per call.
void add_f32_upper(SiteStats& st, const MatrixF& x, std::int64_t first_token) {
  constexpr Eigen::Index kRows = 1024;
  constexpr int kBlocks = 16;
  const int w = static_cast<int>(x.cols());
  sum_rows(x, 0, x.rows(), nullptr, st, first_token);
  const auto edge = [&](std::int64_t k) {
    return static_cast<int>(std::lround(w * std::sqrt(static_cast<double>(k) / kBlocks)));
  };
  core::BlasSingleThreaded single;
  core::parallel_for(kBlocks, 1, [&](std::int64_t t0, std::int64_t t1) {
    for (auto t = t0; t < t1; ++t) {
      const std::int64_t b = kBlocks - 1 - t;  // the last (narrowest) columns first
      const int j0 = edge(b), j1 = edge(b + 1);
      if (j0 == j1) continue;
      std::vector<float> panel(static_cast<std::size_t>(j1) * (j1 - j0));  // [j1, j1 − j0] column-major
      for (Eigen::Index r0 = 0; r0 < x.rows(); r0 += kRows) {
        const int rows = static_cast<int>(std::min(kRows, x.rows() - r0));
        core::ssyrk_upper_panel(x.data() + r0 * w, rows, w, j0, j1, panel.data());
        for (int j = j0; j < j1; ++j) {
          const float* pj = panel.data() + static_cast<std::int64_t>(j - j0) * j1;
          double* cj = st.xtx.data() + static_cast<std::int64_t>(j) * w;
          for (int i = 0; i <= j; ++i) cj[i] += pj[i];
        }
      }
    }
  });
  st.n += x.rows();
}

constexpr double kScale = 18446744073709551616.0;  // 2^64 = 2^ExactSums::kFractionBits
// 2^111: |v| < 2^47 before scaling; with at most 2^15 adds the sum stays below 2^126.
constexpr double kLimit = 2596148429267413814265248164610048.0;
constexpr double kTwo64 = 18446744073709551616.0;          // 2^64

// v on the grid 2^-64, as a 128-bit two's complement integer (v·2^56 rounded to nearest; both steps
// exact but the rounding, so the same v gives the same bits on every machine).
unsigned __int128 to_fixed(double v) {
  const double s = std::nearbyint(v * kScale);
  const double hi = std::floor(s / kTwo64);  // exact: a power-of-two scale and an integer part
  const double lo = s - hi * kTwo64;         // exact, in [0, 2^64)
  const auto h = static_cast<std::int64_t>(hi);
  return (static_cast<unsigned __int128>(static_cast<std::uint64_t>(h)) << 64) | static_cast<std::uint64_t>(lo);
}

double from_fixed(std::uint64_t lo, std::uint64_t hi) {
  const auto v = static_cast<__int128>((static_cast<unsigned __int128>(hi) << 64) | lo);
  return static_cast<double>(v) / kScale;  // correctly rounded, then an exact power-of-two scale
}

[[noreturn]] void throw_out_of_range(double v, std::string_view context) {
  throw NumericError(fmt::format("{}: a partial sum outside the exact accumulator's range (expected |v| < 2^47 = "
                                 "1.4e14 per added partial sum, got {})", context, v));
}

}  // namespace

void ExactSums::resize(std::size_t n) {
  words_.assign(2 * n, 0);
  adds_ = 0;
}

void ExactSums::clear() {
  std::vector<std::uint64_t>().swap(words_);
  adds_ = 0;
}

namespace {

// words[i] += fixed(v[i]) for i < n; false when some |v[i]| is out of range (those are skipped).
bool add_fixed(std::uint64_t* words, const double* v, std::int64_t n) {
  bool ok = true;
  for (std::int64_t i = 0; i < n; ++i) {
    if (!(std::abs(v[i]) * kScale < kLimit)) {
      ok = false;
      continue;
    }
    std::uint64_t* w = words + 2 * i;
    const unsigned __int128 s = ((static_cast<unsigned __int128>(w[1]) << 64) | w[0]) + to_fixed(v[i]);
    w[0] = static_cast<std::uint64_t>(s);
    w[1] = static_cast<std::uint64_t>(s >> 64);
  }
  return ok;
}

[[noreturn]] void throw_first_out_of_range(const double* v, std::int64_t n, std::string_view context) {
  for (std::int64_t i = 0; i < n; ++i)
    if (!(std::abs(v[i]) * kScale < kLimit)) throw_out_of_range(v[i], context);
  throw_out_of_range(0.0, context);
}

}  // namespace

void ExactSums::add(std::span<const double> v, std::size_t offset, std::string_view context) {
  if (offset + v.size() > size()) {
    throw Error(fmt::format("{}: exact sums (expected at most {} entries, got {} from {})", context, size(),
                            v.size(), offset));
  }
  // Fixed chunks on the pool's threads; integer sums, so any split gives the same bits.
  const auto n = static_cast<std::int64_t>(v.size());
  constexpr std::int64_t kChunk = 1 << 16;
  std::vector<char> ok(static_cast<std::size_t>((n + kChunk - 1) / kChunk), 1);
  core::parallel_for(static_cast<std::int64_t>(ok.size()), 1, [&](std::int64_t c0, std::int64_t c1) {
    for (auto c = c0; c < c1; ++c) {
      const std::int64_t i0 = c * kChunk, i1 = std::min(n, i0 + kChunk);
      ok[static_cast<std::size_t>(c)] = add_fixed(words_.data() + 2 * (offset + static_cast<std::size_t>(i0)),
                                                  v.data() + i0, i1 - i0);
    }
  });
  if (std::find(ok.begin(), ok.end(), 0) != ok.end()) throw_first_out_of_range(v.data(), n, context);
}

void ExactSums::add_upper(const MatrixD& m, std::size_t offset, std::string_view context) {
  const auto w = static_cast<std::int64_t>(m.rows());
  if (offset + static_cast<std::size_t>(w * (w + 1) / 2) > size()) {
    throw Error(fmt::format("{}: exact sums (expected at most {} entries, got a [{}, {}] triangle from {})", context,
                            size(), w, w, offset));
  }
  std::vector<char> ok(static_cast<std::size_t>(w), 1);
  core::parallel_for(w, 1, [&](std::int64_t j0, std::int64_t j1) {
    for (auto j = j0; j < j1; ++j) {
      ok[static_cast<std::size_t>(j)] =
          add_fixed(words_.data() + 2 * (offset + static_cast<std::size_t>(j * (j + 1) / 2)), m.col(j).data(), j + 1);
    }
  });
  for (std::int64_t j = 0; j < w; ++j)
    if (!ok[static_cast<std::size_t>(j)]) throw_first_out_of_range(m.col(j).data(), j + 1, context);
}

void ExactSums::read(std::span<double> out, std::size_t offset) const {
  // Entry by entry, on the pool's threads for long spans (joint up-down's [f, d] crosses).
  core::parallel_for(static_cast<std::int64_t>(out.size()), 1 << 16, [&](std::int64_t i0, std::int64_t i1) {
    for (auto i = static_cast<std::size_t>(i0); i < static_cast<std::size_t>(i1); ++i)
      out[i] = from_fixed(words_[2 * (offset + i)], words_[2 * (offset + i) + 1]);
  });
}

void ExactSums::read_upper(MatrixD& m, std::size_t offset) const {
  const auto w = m.rows();
  core::parallel_for(w, 1, [&](std::int64_t j0, std::int64_t j1) {
    for (auto j = j0; j < j1; ++j) {
      read(std::span<double>(m.col(j).data(), static_cast<std::size_t>(j + 1)),
           offset + static_cast<std::size_t>(j * (j + 1) / 2));
    }
  });
}

void ExactSums::add(const ExactSums& other) {
  if (other.size() != size()) {
    throw Error(fmt::format("exact sums: sizes (expected {} entries, got {})", size(), other.size()));
  }
  core::parallel_for(static_cast<std::int64_t>(size()), 1 << 16, [&](std::int64_t i0, std::int64_t i1) {
    for (auto i = i0; i < i1; ++i) {
      std::uint64_t* w = words_.data() + 2 * i;
      const std::uint64_t* o = other.words_.data() + 2 * i;
      const unsigned __int128 s = ((static_cast<unsigned __int128>(w[1]) << 64) | w[0]) +
                                  ((static_cast<unsigned __int128>(o[1]) << 64) | o[0]);
      w[0] = static_cast<std::uint64_t>(s);
      w[1] = static_cast<std::uint64_t>(s >> 64);
    }
  });
  adds_ = std::min(adds_ + other.adds_, kMaxAdds + 1);
}

void ExactSums::check_adds(std::string_view context, int more) const {
  if (adds_ + more > kMaxAdds) {
    throw NumericError(fmt::format("{}: more partial sums than the exact accumulator takes (expected at most {}, got {})",
                                   context, kMaxAdds, adds_ + more));
  }
}

void ExactSums::sum_ranks() {
  dist::sum_int128(words_);
  std::int64_t adds = adds_;
  dist::sum_int64(std::span<std::int64_t>(&adds, 1));
  adds_ = static_cast<int>(std::min<std::int64_t>(adds, kMaxAdds + 1));
}

bool ExactSums::reduce_to(int root) {
  dist::reduce_int128(words_, root);
  std::int64_t adds = adds_;
  dist::sum_int64(std::span<std::int64_t>(&adds, 1));
  adds_ = static_cast<int>(std::min<std::int64_t>(adds, kMaxAdds + 1));
  return dist::rank() == root;
}

void check_finite_rows(const MatrixF& x, std::int64_t first_token) {
  if (!model::all_finite(x.data(), x.size())) throw_non_finite(x, first_token);
}

void SiteStats::reset(int width) {
  xtx = MatrixD::Zero(width, width);
  sum = VectorD::Zero(width);
  abs_sum = VectorD::Zero(width);
  n = 0;
  exact.clear();
}

namespace {

// The entries of SiteStats::exact: xtx's upper triangle, then sum, then abs_sum.
std::size_t triangle(Eigen::Index w) { return static_cast<std::size_t>(w * (w + 1) / 2); }

// st's exact sums, started from its double values when they were released (a finished SiteStats
// that goes on accumulating).
void start_exact(SiteStats& st) {
  const auto w = st.xtx.rows();
  if (st.exact.size() != 0) return;
  st.exact.resize(triangle(w) + 2 * static_cast<std::size_t>(w));
  if (st.n == 0) return;
  st.exact.add_upper(st.xtx, 0, "calibration statistics");
  st.exact.add(std::span<const double>(st.sum.data(), static_cast<std::size_t>(w)), triangle(w), "calibration statistics");
  st.exact.add(std::span<const double>(st.abs_sum.data(), static_cast<std::size_t>(w)), triangle(w) + w,
               "calibration statistics");
}

}  // namespace

void SiteStats::add(const MatrixF& x, std::int64_t first_token, bool f32_products) {
  add_upper(x, first_token, f32_products);
  symmetrize();
}

void SiteStats::add_upper(const MatrixF& x, std::int64_t first_token, bool f32_products) {
  const auto w = x.cols();
  if (w != xtx.rows()) {
    throw Error(fmt::format("calibration statistics: input width (expected {}, got {})", xtx.rows(), w));
  }
  start_exact(*this);
  exact.check_adds("calibration statistics", 1);
  // This batch's partial sums from zero, then added exactly (ExactSums).
  xtx.triangularView<Eigen::Upper>().setZero();
  sum.setZero();
  abs_sum.setZero();
  const std::int64_t n0 = n;
  add_partial(x, first_token, f32_products);
  n = n0 + x.rows();
  const std::string_view context = "calibration statistics";
  exact.add_upper(xtx, 0, context);
  exact.add(std::span<const double>(sum.data(), static_cast<std::size_t>(w)), triangle(w), context);
  exact.add(std::span<const double>(abs_sum.data(), static_cast<std::size_t>(w)), triangle(w) + w, context);
  exact.count_add();
}

void SiteStats::add_partial(const MatrixF& x, std::int64_t first_token, bool f32_products) {
  const auto w = x.cols();
  if (f32_products) return add_f32_upper(*this, x, first_token);
  // Chunks of rows are widened to double on the forward's threads, in blocks whose partial sums are
  // added in block order (bit-identical for any thread count), then one dsyrk per chunk: with a long
  // inner dimension it runs near its peak, and the widening no longer waits on one core.
  constexpr Eigen::Index kChunk = 4096;
  const Eigen::Index chunk = std::min(kChunk, x.rows());
  // [rows, w] row-major; not zero-filled (every entry is written before it is read).
  const std::unique_ptr<double[]> buf(new double[static_cast<std::size_t>(chunk * w)]);
  MatrixD half;  // [w, w] the second halves' upper triangle (syrk_on_forward_threads)
  for (Eigen::Index r0 = 0; r0 < x.rows(); r0 += kChunk) {
    const Eigen::Index rows = std::min(kChunk, x.rows() - r0);
    sum_rows(x, r0, rows, buf.get(), *this, first_token);
    syrk_on_forward_threads(buf.get(), rows, w, xtx, half);
  }
  if (half.size() > 0) xtx.triangularView<Eigen::Upper>() += half;
  n += x.rows();
}

void SiteStats::symmetrize() {
  const auto w = xtx.rows();
  if (exact.size() != 0) {
    exact.read_upper(xtx, 0);
    exact.read(std::span<double>(sum.data(), static_cast<std::size_t>(w)), triangle(w));
    exact.read(std::span<double>(abs_sum.data(), static_cast<std::size_t>(w)), triangle(w) + w);
    exact.clear();
  }
  core::mirror_upper(xtx);
}

void SiteStats::combine_ranks() {
  start_exact(*this);
  exact.sum_ranks();
  dist::sum_int64(std::span<std::int64_t>(&n, 1));
  symmetrize();
}

VectorD SiteStats::mean() const { return n > 0 ? VectorD(sum / static_cast<double>(n)) : VectorD(sum); }

VectorD SiteStats::abs_mean() const {
  return n > 0 ? VectorD(abs_sum / static_cast<double>(n)) : VectorD(abs_sum);
}

SiteStats SiteStats::of_columns(const MatrixD& h) {
  SiteStats st;
  st.xtx = linalg::gram_rows(h);  // [w, w]
  st.sum = h.rowwise().sum();
  st.abs_sum = h.cwiseAbs().rowwise().sum();
  st.n = h.cols();
  return st;
}

SiteStats SiteStats::of_rows(const MatrixD& x) { return of_columns(x.transpose()); }

MatrixD SiteStats::augmented() const {
  const auto w = xtx.rows();
  MatrixD c(w + 1, w + 1);  // [w+1, w+1]
  c.topLeftCorner(w, w) = xtx;
  c.topRightCorner(w, 1) = sum;
  c.bottomLeftCorner(1, w) = sum.transpose();
  c(w, w) = static_cast<double>(n);
  return c;
}

MatrixD SiteStats::centered() const {
  if (n == 0) return xtx;
  const VectorD mu = mean();
  return xtx - static_cast<double>(n) * mu * mu.transpose();
}

void CrossStats::reset(int width) {
  xh = MatrixD::Zero(width, width);
  sum = VectorD::Zero(width);
  n = 0;
  exact.resize(static_cast<std::size_t>(width) * static_cast<std::size_t>(width + 1));
}

namespace {

// CrossStats::exact: xh (column-major, as stored), then sum.
void read_cross(CrossStats& c) {
  const auto w = c.xh.rows();
  const auto ww = static_cast<std::size_t>(w * w);
  c.exact.read(std::span<double>(c.xh.data(), ww), 0);
  c.exact.read(std::span<double>(c.sum.data(), static_cast<std::size_t>(w)), ww);
}

}  // namespace

void CrossStats::combine_ranks() {
  exact.sum_ranks();
  dist::sum_int64(std::span<std::int64_t>(&n, 1));
  read_cross(*this);
}

void CrossStats::add(const MatrixF& x, const MatrixF& x_hat, std::int64_t first_token) {
  const auto w = x.cols();
  if (w != xh.rows() || x_hat.cols() != w || x_hat.rows() != x.rows()) {
    throw Error(fmt::format("calibration cross statistics: inputs (expected two [n, {}] of the same n, got [{}, {}] "
                            "and [{}, {}])", xh.rows(), x.rows(), x.cols(), x_hat.rows(), x_hat.cols()));
  }
  // This call's partial sums from zero, added exactly (ExactSums) and read back.
  xh.setZero();
  sum.setZero();
  // Chunks widened to double, one dgemm each (Eigen on BLAS): Σ x x̂ᵀ with a long inner dimension.
  constexpr Eigen::Index kChunk = 2048;
  for (Eigen::Index r0 = 0; r0 < x.rows(); r0 += kChunk) {
    const Eigen::Index rows = std::min(kChunk, x.rows() - r0);
    const MatrixD xd = x.middleRows(r0, rows).cast<double>();      // [rows, w]
    const MatrixD hd = x_hat.middleRows(r0, rows).cast<double>();  // [rows, w]
    const VectorD s = xd.colwise().sum().transpose();               // [w]
    if (!s.allFinite()) throw_non_finite(x.middleRows(r0, rows), first_token + r0);
    sum += s;
    xh.noalias() += xd.transpose() * hd;
  }
  n += x.rows();
  const auto ww = static_cast<std::size_t>(w * w);
  exact.add(std::span<const double>(xh.data(), ww), 0, "calibration cross statistics");
  exact.add(std::span<const double>(sum.data(), static_cast<std::size_t>(w)), ww, "calibration cross statistics");
  exact.count_add();
  read_cross(*this);
}

}  // namespace latentllm::calib
