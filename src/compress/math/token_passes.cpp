#include "compress/math/token_passes.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <type_traits>

#include "core/gemm.hpp"
#include "core/parallel.hpp"
#include "latentllm/error.hpp"

namespace latentllm::compress {
namespace {

// Fixed splits of the fold (independent of the thread count): rows of the cross, columns of the Gram.
constexpr int kBlocks = 4;

// Column edges of the upper triangle's blocks of about equal area.
int gram_edge(int d, int k) { return static_cast<int>(std::lround(d * std::sqrt(static_cast<double>(k) / kBlocks))); }

// sum += the row sums of m [rows, c] in double, column by column: contiguous and vectorized (Eigen's
// rowwise().sum() of a column-major matrix walks each row with a stride of `rows`, a cache miss per
// entry: 14 % of joint up-down's time on opt-tiny).
template <typename T>
void add_row_sums(const MatrixX<T>& m, VectorD& sum) {
  for (Eigen::Index j = 0; j < m.cols(); ++j) sum += m.col(j).template cast<double>();
}

}  // namespace

RegressionAccumulator::RegressionAccumulator(Eigen::Index in, Eigen::Index out, bool gram)
    : cross_(MatrixD::Zero(out, in)), sum_s_(VectorD::Zero(in)), sum_t_(VectorD::Zero(out)), has_gram_(gram) {
  if (gram) gram_ = MatrixD::Zero(in, in);
  exact_.resize(static_cast<std::size_t>(out * in + (gram ? in * (in + 1) / 2 : 0) + in + out + 1));
}

void RegressionAccumulator::add(const MatrixX<double>& s, const MatrixX<double>& t) { add_chunk(s, t); }
void RegressionAccumulator::add(const MatrixX<float>& s, const MatrixX<float>& t) { add_chunk(s, t); }

template <typename T>
void RegressionAccumulator::add_chunk(const MatrixX<T>& s, const MatrixX<T>& t) {
  constexpr bool f32 = std::is_same_v<T, float>;
  const auto in = cross_.cols(), out = cross_.rows(), c = s.cols();
  if (s.rows() != in || t.rows() != out || t.cols() != c) {
    throw Error(fmt::format("regression accumulator: chunk shapes (expected s [{}, c], t [{}, c], got [{}, {}], [{}, {}])",
                            in, out, s.rows(), s.cols(), t.rows(), t.cols()));
  }
  if (c == 0) return;
  open_ = true;
  // Float: the cross's row blocks go to part_[0, out·in) ([o1 − o0, in] each at offset o0·in), the
  // Gram's column blocks to part_[out·in, ...) as a column-major [in, in]; both then added in double.
  if constexpr (f32) part_.resize(static_cast<std::size_t>(out * in + (has_gram_ ? in * in : 0)));
  core::BlasSingleThreaded single;
  // Tasks: the row sums of s and of t first (serial on the caller they were 10-20 % of a fold), then the
  // cross's row blocks, then the Gram's column blocks; each task's work is fixed, so sums do not depend
  // on the thread count.
  core::parallel_for(2 * kBlocks + 2, 1, [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t task = t0; task < t1; ++task) {
      if (task < 2) {
        if (task == 0) add_row_sums(s, sum_s_);
        else add_row_sums(t, sum_t_);
        continue;
      }
      const std::int64_t b = task - 2;
      if (b < kBlocks) {  // cross rows [o0, o1) += t[o0:o1, :]·sᵀ
        const auto o0 = out * b / kBlocks, o1 = out * (b + 1) / kBlocks;
        const int m = static_cast<int>(o1 - o0);
        if (m == 0) continue;
        if constexpr (f32) {
          float* p = part_.data() + o0 * in;
          cblas_sgemm(CblasColMajor, CblasNoTrans, CblasTrans, m, static_cast<int>(in), static_cast<int>(c), 1.0f,
                      t.data() + o0, static_cast<int>(out), s.data(), static_cast<int>(in), 0.0f, p, m);
          cross_.middleRows(o0, m) += Eigen::Map<const MatrixX<float>>(p, m, in).cast<double>();
        } else {
          cblas_dgemm(CblasColMajor, CblasNoTrans, CblasTrans, m, static_cast<int>(in), static_cast<int>(c), 1.0,
                      t.data() + o0, static_cast<int>(out), s.data(), static_cast<int>(in), 1.0, cross_.data() + o0,
                      static_cast<int>(out));
        }
      } else if (has_gram_) {  // Gram columns: s as row-major [c, in]
        const int k = static_cast<int>(2 * kBlocks - 1 - b);  // widest blocks first
        const int w = static_cast<int>(in), j0 = gram_edge(w, k), j1 = gram_edge(w, k + 1);
        if constexpr (f32) {
          float* g = part_.data() + out * in;
          for (int j = j0; j < j1; ++j) std::fill_n(g + static_cast<std::int64_t>(j) * w, j + 1, 0.0f);
          core::ssyrk_upper_add_columns(s.data(), static_cast<int>(c), w, j0, j1, g);
          for (int j = j0; j < j1; ++j) {
            const float* gj = g + static_cast<std::int64_t>(j) * w;
            double* cj = gram_.data() + static_cast<std::int64_t>(j) * w;
            for (int i = 0; i <= j; ++i) cj[i] += gj[i];
          }
        } else {
          core::syrk_upper_add_columns(s.data(), static_cast<int>(c), w, j0, j1, gram_);
        }
      }
    }
  });
  n_ += static_cast<double>(c);
}

void RegressionAccumulator::end_unit(std::string_view context) {
  if (!open_) return;
  const auto in = cross_.cols(), out = cross_.rows();
  exact_.check_adds(context, 1);
  auto add = [&](const double* v, std::int64_t n, std::int64_t at) {
    exact_.add(std::span<const double>(v, static_cast<std::size_t>(n)), static_cast<std::size_t>(at), context);
  };
  std::int64_t at = out * in;
  add(cross_.data(), at, 0);
  if (has_gram_) {
    exact_.add_upper(gram_, static_cast<std::size_t>(at), context);
    at += in * (in + 1) / 2;
  }
  add(sum_s_.data(), in, at);
  add(sum_t_.data(), out, at + in);
  add(&n_, 1, at + in + out);
  exact_.count_add();
  cross_.setZero();
  if (has_gram_) gram_.triangularView<Eigen::Upper>().setZero();
  sum_s_.setZero();
  sum_t_.setZero();
  n_ = 0;
  open_ = false;
}

void RegressionAccumulator::merge(const RegressionAccumulator& other) { exact_.add(other.exact_); }

void RegressionAccumulator::combine_ranks(std::string_view context) {
  end_unit(context);
  holds_sums_ = exact_.reduce_to(kStatsOwner);
  exact_.check_adds(context);
  reduced_ = true;
}

RegressionStats RegressionAccumulator::take() {
  if (reduced_ && !holds_sums_) {
    throw Error(fmt::format("regression accumulator: statistics reduced to rank {} (expected to take them there, "
                            "got another rank)", kStatsOwner));
  }
  reduced_ = false;
  end_unit();
  const auto in = cross_.cols(), out = cross_.rows();
  auto read = [&](double* v, std::int64_t n, std::int64_t at) {
    exact_.read(std::span<double>(v, static_cast<std::size_t>(n)), static_cast<std::size_t>(at));
  };
  RegressionStats st;
  std::int64_t at = out * in;
  read(cross_.data(), at, 0);
  st.cross = std::move(cross_);
  if (has_gram_) {
    exact_.read_upper(gram_, static_cast<std::size_t>(at));
    at += in * (in + 1) / 2;
    st.cov = std::move(gram_);
    core::mirror_upper(st.cov);
  }
  read(sum_s_.data(), in, at);
  read(sum_t_.data(), out, at + in);
  read(&n_, 1, at + in + out);
  st.sum_s = std::move(sum_s_);
  st.sum_t = std::move(sum_t_);
  st.n = n_;
  part_ = {};
  exact_.clear();
  return st;
}

template <typename T>
std::vector<double> token_pass(const TokenRows<T>& tokens, const std::vector<RegressionAccumulator*>& accs,
                               std::size_t scalars, const ChunkBody<T>& body) {
  const Eigen::Index n = tokens.size(), c = tokens.chunk, u = tokens.unit, d = tokens.x.cols(), dy = tokens.y.cols();
  if (c < 1 || u < 1) throw Error(fmt::format("token pass: chunk and unit (expected >= 1 token, got {} and {})", c, u));
  struct Chunk {
    Eigen::Index t0, len;
    bool ends_unit;
  };
  std::vector<Chunk> chunks;
  for (Eigen::Index u0 = 0; u0 < n; u0 += u) {
    const Eigen::Index u1 = std::min(n, u0 + u);
    for (Eigen::Index t0 = u0; t0 < u1; t0 += c) chunks.push_back({t0, std::min(c, u1 - t0), t0 + c >= u1});
  }
  calib::ExactSums exact;  // [scalars] the finished units' scalars
  exact.resize(scalars);
  std::vector<double> unit(scalars, 0.0);  // the current unit's, summed in chunk order
  ChunkOut<T> outs[2];
  const auto n_chunks = static_cast<Eigen::Index>(chunks.size());
  for (Eigen::Index k0 = 0; k0 < n_chunks; k0 += 2) {
    const Eigen::Index pair = std::min<Eigen::Index>(2, n_chunks - k0);
    {
      core::BlasSingleThreaded single;
      core::parallel_for(pair, 1, [&](std::int64_t a, std::int64_t b) {
        for (std::int64_t j = a; j < b; ++j) {
          const Chunk& ch = chunks[static_cast<std::size_t>(k0 + j)];
          // Row-major [len, d] rows are the column-major [d, len] matrix of the chunk's tokens.
          const Eigen::Map<const MatrixX<T>> xt(tokens.x.data() + ch.t0 * d, d, ch.len);
          const Eigen::Map<const MatrixX<T>> yt(tokens.y.data() + ch.t0 * dy, dy, ch.len);
          outs[j] = ChunkOut<T>{};
          body(ch.t0, xt, yt, outs[j]);
        }
      });
    }
    for (Eigen::Index j = 0; j < pair; ++j) {  // fold in chunk order
      for (std::size_t a = 0; a < accs.size() && a < outs[j].pairs.size(); ++a) {
        if (outs[j].pairs[a].first.size() > 0) accs[a]->add(outs[j].pairs[a].first, outs[j].pairs[a].second);
      }
      if (outs[j].scalars.size() > scalars) {
        throw Error(fmt::format("token pass: scalars of a chunk (expected at most {}, got {})", scalars,
                                outs[j].scalars.size()));
      }
      for (std::size_t s = 0; s < outs[j].scalars.size(); ++s) unit[s] += outs[j].scalars[s];
      if (!chunks[static_cast<std::size_t>(k0 + j)].ends_unit) continue;
      for (RegressionAccumulator* acc : accs) acc->end_unit(tokens.context);
      exact.check_adds(tokens.context, 1);
      exact.add(unit, 0, tokens.context);
      exact.count_add();
      std::fill(unit.begin(), unit.end(), 0.0);
    }
  }
  for (RegressionAccumulator* acc : accs) acc->combine_ranks(tokens.context);
  exact.sum_ranks();
  exact.check_adds(tokens.context);
  std::vector<double> out(scalars);
  exact.read(out, 0);
  return out;
}

template std::vector<double> token_pass(const TokenRows<double>&, const std::vector<RegressionAccumulator*>&, std::size_t,
                                        const ChunkBody<double>&);
template std::vector<double> token_pass(const TokenRows<float>&, const std::vector<RegressionAccumulator*>&, std::size_t,
                                        const ChunkBody<float>&);

}  // namespace latentllm::compress
