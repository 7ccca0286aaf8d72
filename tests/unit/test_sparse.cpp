// The sparse solvers (src/compress/math/sparse.cpp, appendix "Sparse Matrix"): the layer-wise losses of an
// independent float64 transcription (scripts/check_sparse.py, golden file tests/data/sparse/sparse_cases.json)
// within 1e-6 relative; hard shrinkage below Wanda and SparseGPT on the same quadratic at the same sparsity;
// 2:4 outputs read group by group; FISTA's threshold search reaching the sparsity; the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <random>

#include <nlohmann/json.hpp>

#include "compress/math/sparse.hpp"
#include "latentllm/error.hpp"

namespace latentllm::compress {
namespace {

struct Golden {
  nlohmann::json j;
  MatrixD w, c;  // [d', d], [d, d]
  Golden() {
    std::ifstream in(std::string(LATENTLLM_TEST_DATA_DIR) + "/sparse/sparse_cases.json");
    j = nlohmann::json::parse(in);
    const int rows = j["rows"], cols = j["cols"];
    w.resize(rows, cols);
    c.resize(cols, cols);
    for (int r = 0; r < rows; ++r)
      for (int k = 0; k < cols; ++k) w(r, k) = j["w"][r * cols + k].get<double>();
    for (int r = 0; r < cols; ++r)
      for (int k = 0; k < cols; ++k) c(r, k) = j["c"][r * cols + k].get<double>();
  }
};

MatrixD solve(const std::string& method, const MatrixD& w, const MatrixD& c, const SparseTarget& t, int iters) {
  if (method == "wanda") return wanda(w, c, t, "fixture");
  if (method == "hard") return sparse_hard(w, c, t, iters, "fixture");
  if (method == "fista") return sparse_fista(w, c, t, iters, "fixture");
  return sparsegpt(w, c, t, 0.01, "fixture");
}

SparsePattern pattern_of(const nlohmann::json& k) {
  return k["pattern"] == "2:4" ? SparsePattern::TwoFour : SparsePattern::Unstructured;
}

std::int64_t nonzeros(const MatrixD& d) { return (d.array() != 0.0).count(); }

TEST(Sparse, LossesMatchTheFloat64Transcription) {
  const Golden g;
  for (const auto& k : g.j["cases"]) {
    const SparseTarget t{k["sparsity"].get<double>(), pattern_of(k)};
    const std::string method = k["method"];
    const MatrixD d = solve(method, g.w, g.c, t, k["iters"].get<int>());
    const double want = k["loss"].get<double>();
    EXPECT_NEAR(sparse_loss(g.w, d, g.c), want, 1e-6 * want) << method << " " << k["pattern"] << " " << k["sparsity"];
    EXPECT_EQ(nonzeros(d), k["nnz"].get<std::int64_t>()) << method << " " << k["pattern"] << " " << k["sparsity"];
  }
}

// The same quadratic tr((W − D)·C·(W − D)ᵀ) for every method: hard shrinkage with the full covariance
// starts from Wanda's mask and never raises the loss, and ends below SparseGPT's diagonal mask selection.
TEST(Sparse, HardReachesALowerLayerLossThanWandaAndSparseGpt) {
  const Golden g;
  for (const SparseTarget t : {SparseTarget{0.5, SparsePattern::Unstructured}, SparseTarget{0.3, SparsePattern::Unstructured},
                               SparseTarget{0.7, SparsePattern::Unstructured}, SparseTarget{0.5, SparsePattern::TwoFour}}) {
    const MatrixD hard = sparse_hard(g.w, g.c, t, 100, "fixture"), wa = wanda(g.w, g.c, t, "fixture");
    const MatrixD sg = sparsegpt(g.w, g.c, t, 0.01, "fixture");
    EXPECT_EQ(nonzeros(hard), nonzeros(wa)) << t.sparsity;  // the same number of kept entries
    EXPECT_LE(nonzeros(sg), nonzeros(wa)) << t.sparsity;
    const double lh = sparse_loss(g.w, hard, g.c), lw = sparse_loss(g.w, wa, g.c), ls = sparse_loss(g.w, sg, g.c);
    EXPECT_LT(lh, lw) << t.sparsity;
    EXPECT_LT(lh, ls) << t.sparsity;
  }
}

// Every group of 4 consecutive inputs of every row holds at most 2 non-zero entries.
TEST(Sparse, TwoFourOutputsSatisfyThePatternInEveryGroup) {
  const Golden g;
  const SparseTarget t{0.5, SparsePattern::TwoFour};
  for (const char* method : {"hard", "wanda", "sparsegpt"}) {
    const MatrixD d = solve(method, g.w, g.c, t, 100);
    for (Eigen::Index i = 0; i < d.rows(); ++i)
      for (Eigen::Index k = 0; k < d.cols(); k += 4) {
        int nz = 0;
        for (Eigen::Index j = k; j < k + 4; ++j) nz += d(i, j) != 0.0;
        EXPECT_LE(nz, 2) << method << " row " << i << " group " << k / 4;
      }
  }
}

TEST(Sparse, FistaReachesTheRequestedSparsity) {
  const Golden g;
  for (const double s : {0.3, 0.5, 0.8}) {
    const MatrixD d = sparse_fista(g.w, g.c, {s, SparsePattern::Unstructured}, 100, "fixture");
    const double reached = 1.0 - static_cast<double>(nonzeros(d)) / static_cast<double>(d.size());
    // The target every method shares: ⌊s·d⌋ zeros per row's worth, κ = d'·(d − ⌊s·d⌋) kept.
    const double asked = static_cast<double>(pruned_per_row(d.cols(), {s, SparsePattern::Unstructured})) /
                         static_cast<double>(d.cols());
    EXPECT_GE(reached, asked) << s;         // never fewer zeros than asked
    EXPECT_LT(reached, asked + 0.01) << s;  // and the threshold found close to it
  }
}

TEST(Sparse, HardShrinkKeepsTheLargestEntries) {
  MatrixD v(2, 4);
  v << 1, -5, 2, 2,  //
      -3, 0.5, 4, -2;
  const MatrixD u = hard_shrink(v, {0.5, SparsePattern::Unstructured});  // κ = 4 of 8
  MatrixD want(2, 4);  // the tie of |2| goes to the lower row-major index: (0, 2) before (0, 3) and (1, 3)
  want << 0, -5, 2, 0,  //
      -3, 0, 4, 0;
  EXPECT_EQ(u, want);
  const MatrixD p = hard_shrink(v, {0.5, SparsePattern::TwoFour});
  MatrixD want24(2, 4);
  want24 << 0, -5, 2, 0,  //
      -3, 0, 4, 0;
  EXPECT_EQ(p, want24);
}

TEST(Sparse, ErrorsNameTheModule) {
  const Golden g;
  MatrixD w = g.w;
  w(2, 3) = std::numeric_limits<double>::quiet_NaN();
  try {
    (void)sparse_hard(w, g.c, {0.5, SparsePattern::Unstructured}, 10, "model.layers.3.mlp.up_proj");
    FAIL() << "no error";
  } catch (const NumericError& e) {
    EXPECT_STREQ(e.what(), "model.layers.3.mlp.up_proj: weight contains a non-finite value");
  }
  try {
    (void)wanda(MatrixD::Ones(2, 6), MatrixD::Identity(6, 6), {0.5, SparsePattern::TwoFour}, "model.layers.0.mlp.down_proj");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "model.layers.0.mlp.down_proj: --pattern 2:4 (expected input features a multiple of 4, got 6)");
  }
  EXPECT_THROW((void)sparse_fista(g.w, g.c, {0.5, SparsePattern::TwoFour}, 10, "m"), ConfigError);
}

}  // namespace
}  // namespace latentllm::compress
