#include "compress/token_passes.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "core/gemm.hpp"
#include "core/parallel.hpp"
#include "latentllm/error.hpp"

namespace latentllm::compress {
namespace {

// Fixed splits of the fold (independent of the thread count): rows of the cross, columns of the Gram.
constexpr int kBlocks = 4;

// Column edges of the upper triangle's blocks of about equal area.
int gram_edge(int d, int k) { return static_cast<int>(std::lround(d * std::sqrt(static_cast<double>(k) / kBlocks))); }

}  // namespace

RegressionAccumulator::RegressionAccumulator(Eigen::Index in, Eigen::Index out, bool gram)
    : cross_(MatrixD::Zero(out, in)), sum_s_(VectorD::Zero(in)), sum_t_(VectorD::Zero(out)), has_gram_(gram) {
  if (gram) gram_ = MatrixD::Zero(in, in);
}

void RegressionAccumulator::add(const MatrixD& s, const MatrixD& t) {
  const auto in = cross_.cols(), out = cross_.rows(), c = s.cols();
  if (s.rows() != in || t.rows() != out || t.cols() != c) {
    throw Error(fmt::format("regression accumulator: chunk shapes (expected s [{}, c], t [{}, c], got [{}, {}], [{}, {}])",
                            in, out, s.rows(), s.cols(), t.rows(), t.cols()));
  }
  if (c == 0) return;
  core::BlasSingleThreaded single;
  core::parallel_for(2 * kBlocks, 1, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b) {
      if (b < kBlocks) {  // cross rows [o0, o1) += t[o0:o1, :]·sᵀ
        const auto o0 = out * b / kBlocks, o1 = out * (b + 1) / kBlocks;
        if (o1 > o0) {
          cblas_dgemm(CblasColMajor, CblasNoTrans, CblasTrans, static_cast<int>(o1 - o0), static_cast<int>(in),
                      static_cast<int>(c), 1.0, t.data() + o0, static_cast<int>(out), s.data(), static_cast<int>(in),
                      1.0, cross_.data() + o0, static_cast<int>(out));
        }
      } else if (has_gram_) {  // Gram columns: s as row-major [c, in]
        const int k = static_cast<int>(2 * kBlocks - 1 - b);  // widest blocks first
        core::syrk_upper_add_columns(s.data(), static_cast<int>(c), static_cast<int>(in), gram_edge(static_cast<int>(in), k),
                                     gram_edge(static_cast<int>(in), k + 1), gram_);
      }
    }
  });
  sum_s_ += s.rowwise().sum();
  sum_t_ += t.rowwise().sum();
  n_ += static_cast<double>(c);
}

RegressionStats RegressionAccumulator::stats() const {
  RegressionStats st;
  st.cross = cross_;
  if (has_gram_) {
    st.cov = gram_;
    core::mirror_upper(st.cov);
  }
  st.sum_s = sum_s_;
  st.sum_t = sum_t_;
  st.n = n_;
  return st;
}

std::vector<double> token_pass(const TokenRows& tokens, const std::vector<RegressionAccumulator*>& accs,
                               const ChunkBody& body) {
  const Eigen::Index n = tokens.size(), c = tokens.chunk, d = tokens.x.cols(), dy = tokens.y.cols();
  std::vector<double> scalars;
  ChunkOut outs[2];
  for (Eigen::Index k0 = 0; k0 < tokens.chunks(); k0 += 2) {
    const Eigen::Index pair = std::min<Eigen::Index>(2, tokens.chunks() - k0);
    {
      core::BlasSingleThreaded single;
      core::parallel_for(pair, 1, [&](std::int64_t a, std::int64_t b) {
        for (std::int64_t j = a; j < b; ++j) {
          const Eigen::Index k = k0 + j, t0 = k * c, len = std::min(c, n - t0);
          // Row-major [len, d] rows are the column-major [d, len] matrix of the chunk's tokens.
          const Eigen::Map<const MatrixD> xt(tokens.x.data() + t0 * d, d, len);
          const Eigen::Map<const MatrixD> yt(tokens.y.data() + t0 * dy, dy, len);
          outs[j] = ChunkOut{};
          body(k, t0, xt, yt, outs[j]);
        }
      });
    }
    for (Eigen::Index j = 0; j < pair; ++j) {  // fold in chunk order
      for (std::size_t a = 0; a < accs.size() && a < outs[j].pairs.size(); ++a) {
        if (outs[j].pairs[a].first.size() > 0) accs[a]->add(outs[j].pairs[a].first, outs[j].pairs[a].second);
      }
      if (scalars.size() < outs[j].scalars.size()) scalars.resize(outs[j].scalars.size(), 0.0);
      for (std::size_t s = 0; s < outs[j].scalars.size(); ++s) scalars[s] += outs[j].scalars[s];
    }
  }
  return scalars;
}

}  // namespace latentllm::compress
