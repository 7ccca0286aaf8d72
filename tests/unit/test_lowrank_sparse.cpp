// Low rank + sparse (src/compress/math/lowrank_sparse.cpp, appendix "Sparse Matrix"): the losses of every
// alternation equal an independent float64 transcription (scripts/check_sparse.py, golden file
// tests/data/sparse/sparse_cases.json) within 1e-6 relative, the budget's splits equal its; the loss never
// rises over the alternations (hard or fista); at rank 0 (the split 0) the result is the pure sparse solution; the budget
// keeps the split of lowest loss, within the bytes of pure sparse at the ratio.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "compress/math/lowrank_sparse.hpp"
#include "latentllm/eval.hpp"

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

LowRankSparseOptions options_of(const nlohmann::json& k) {
  LowRankSparseOptions o;
  o.iters = k["iters"].get<int>();
  o.alternations = k["alternations"].get<int>();
  o.lambda_rel = k["lambda_rel"].get<double>();
  return o;
}

TEST(LowRankSparse, LossesAndSplitsMatchTheFloat64Transcription) {
  const Golden g;
  ASSERT_FALSE(g.j["lowrank_sparse"].empty());
  for (const auto& k : g.j["lowrank_sparse"]) {
    const std::string at = "sparsity " + k["sparsity"].dump() + " fraction " + k["fraction"].dump();
    const LowRankSparseSplit s =
        lowrank_sparse_split(g.w.rows(), g.w.cols(), k["sparsity"].get<double>(), k["fraction"].get<double>());
    EXPECT_EQ(s.rank, k["rank"].get<int>()) << at;
    EXPECT_EQ(s.keep_per_row, k["keep_per_row"].get<std::int64_t>()) << at;
    const LowRankSparse f = lowrank_sparse(g.w, g.c, s.rank, keep_target(g.w.cols(), s.keep_per_row), options_of(k),
                                           "fixture");
    const auto want = k["losses"].get<std::vector<double>>();
    ASSERT_EQ(f.loss.size(), want.size()) << at;
    for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(f.loss[i], want[i], 1e-6 * want[i]) << at << " step " << i;
    EXPECT_NEAR(sparse_loss(g.w, f.dense(), g.c), f.loss.back(), 1e-9 * f.loss.back()) << at;
    EXPECT_LE((f.d.array() != 0.0).count(), g.w.rows() * s.keep_per_row) << at;
  }
}

TEST(LowRankSparse, TheLossNeverRisesOverTheAlternations) {
  const Golden g;
  LowRankSparseOptions o;
  o.alternations = 8;
  for (const double sparsity : {0.3, 0.5, 0.7})
    for (const double fraction : {0.25, 0.5, 0.75}) {
      const LowRankSparseSplit s = lowrank_sparse_split(g.w.rows(), g.w.cols(), sparsity, fraction);
      if (s.rank == 0 || s.keep_per_row == 0) continue;
      const LowRankSparse f = lowrank_sparse(g.w, g.c, s.rank, keep_target(g.w.cols(), s.keep_per_row), o, "fixture");
      ASSERT_EQ(f.loss.size(), 9u);
      for (std::size_t i = 1; i < f.loss.size(); ++i) EXPECT_LE(f.loss[i], f.loss[i - 1]) << sparsity << " " << fraction;
      EXPECT_LT(f.loss.back(), f.loss.front()) << "the alternation improves on its sparse start";
    }
}

// FISTA's sparse step starts from its own threshold search, not the last D: the guard alone keeps the loss
// from rising.
TEST(LowRankSparse, TheLossNeverRisesWithFistaEither) {
  const Golden g;
  LowRankSparseOptions o;
  o.solver = SparseSolver::Fista;
  o.iters = 10;
  o.alternations = 3;
  const LowRankSparseSplit s = lowrank_sparse_split(g.w.rows(), g.w.cols(), 0.5, 0.25);
  ASSERT_GT(s.rank, 0);
  const LowRankSparse f = lowrank_sparse(g.w, g.c, s.rank, keep_target(g.w.cols(), s.keep_per_row), o, "fixture");
  ASSERT_EQ(f.loss.size(), 4u);
  for (std::size_t i = 1; i < f.loss.size(); ++i) EXPECT_LE(f.loss[i], f.loss[i - 1]);
  EXPECT_NEAR(sparse_loss(g.w, f.dense(), g.c), f.loss.back(), 1e-9 * f.loss.back());
  EXPECT_LE((f.d.array() != 0.0).count(), g.w.rows() * s.keep_per_row);
}

TEST(LowRankSparse, SplitZeroIsPureSparse) {
  const Golden g;
  for (const double sparsity : {0.3, 0.5}) {
    const LowRankSparseSplit s = lowrank_sparse_split(g.w.rows(), g.w.cols(), sparsity, 0.0);
    EXPECT_EQ(s.rank, 0);
    EXPECT_EQ(s.keep_per_row, g.w.cols() - pruned_per_row(g.w.cols(), {sparsity, SparsePattern::Unstructured}));
    const LowRankSparse f = lowrank_sparse(g.w, g.c, 0, keep_target(g.w.cols(), s.keep_per_row), {}, "fixture");
    const MatrixD d = sparse_hard(g.w, g.c, {sparsity, SparsePattern::Unstructured}, 100, "fixture");  // [d', d]
    EXPECT_EQ(f.dense(), d);
    EXPECT_EQ(f.ba, MatrixD::Zero(g.w.rows(), g.w.cols()));
  }
}

TEST(LowRankSparse, TheBudgetKeepsTheLowestLossWithinTheBytesOfPureSparse) {
  const Golden g;
  for (const double sparsity : {0.3, 0.5}) {
    const LowRankSparse best = lowrank_sparse_budget(g.w, g.c, sparsity, {}, "fixture");
    const std::int64_t budget = eval::sparse_storage_bytes(
        g.w.rows() * (g.w.cols() - pruned_per_row(g.w.cols(), {sparsity, SparsePattern::Unstructured})), g.w.rows(),
        g.w.cols(), kLowRankSparseValueBytes);
    const std::int64_t nnz = (best.d.array() != 0.0).count();
    EXPECT_LE(eval::lowrank_sparse_storage_bytes(nnz, best.rank, g.w.rows(), g.w.cols(), kLowRankSparseValueBytes),
              budget);
    for (const double fraction : kLowRankSparseSplits) {
      const LowRankSparseSplit s = lowrank_sparse_split(g.w.rows(), g.w.cols(), sparsity, fraction);
      EXPECT_LE(eval::lowrank_sparse_storage_bytes(g.w.rows() * s.keep_per_row, s.rank, g.w.rows(), g.w.cols(),
                                                   kLowRankSparseValueBytes), budget);
      const LowRankSparse f = lowrank_sparse(g.w, g.c, s.rank, keep_target(g.w.cols(), s.keep_per_row), {}, "fixture");
      EXPECT_LE(best.loss.back(), f.loss.back()) << sparsity << " " << fraction;
    }
  }
}

// A matrix that is what B·A + D models, rank 2 plus one large entry per row, under correlated inputs: the
// budget gives the factors a share (rank > 0) and ends below half the loss of pure sparse at the same bytes
// (four alternations from the sparse start stop short of the exact split). The fixture
// above and the models of bench/results/sparse_equal_bytes.md never choose a rank; this is the case that does.
TEST(LowRankSparse, ALowRankPlusSparseMatrixTakesARank) {
  const std::int64_t out = 24, in = 32, n = 96;
  const auto value = [](std::int64_t i, std::int64_t k) {  // a fixed pseudo-random value in [−1, 1)
    return static_cast<double>((i * 7919 + k * 104729 + 13) % 2000) / 1000.0 - 1.0;
  };
  MatrixD u(out, 2), v(in, 2), x(in, n);  // [d', 2], [d, 2], [d, n]
  for (std::int64_t i = 0; i < out; ++i)
    for (std::int64_t k = 0; k < 2; ++k) u(i, k) = value(i, k);
  for (std::int64_t i = 0; i < in; ++i)
    for (std::int64_t k = 0; k < 2; ++k) v(i, k) = value(i + 100, k);
  for (std::int64_t i = 0; i < in; ++i)
    for (std::int64_t k = 0; k < n; ++k) x(i, k) = value(i + 200, k) + 0.5 * value(i + 201, k);
  MatrixD w = u * v.transpose();  // [d', d]
  for (std::int64_t i = 0; i < out; ++i) w(i, (i * 5) % in) += 4.0;
  const MatrixD c = x * x.transpose() / static_cast<double>(n);  // [d, d]
  const double sparsity = 0.5;
  const LowRankSparse best = lowrank_sparse_budget(w, c, sparsity, {}, "fixture");
  const LowRankSparse pure = lowrank_sparse(w, c, 0, {sparsity, SparsePattern::Unstructured}, {}, "fixture");
  EXPECT_GE(best.rank, 2);
  EXPECT_GT(best.split, 0.0);
  EXPECT_LT(best.loss.back(), 0.5 * pure.loss.back());
  const std::int64_t budget = eval::sparse_storage_bytes(
      out * (in - pruned_per_row(in, {sparsity, SparsePattern::Unstructured})), out, in, kLowRankSparseValueBytes);
  const std::int64_t nnz = (best.d.array() != 0.0).count();
  EXPECT_LE(eval::lowrank_sparse_storage_bytes(nnz, best.rank, out, in, kLowRankSparseValueBytes), budget);
}

TEST(LowRankSparse, KeepTargetPrunesTheRest) {
  for (const std::int64_t in : {32, 128, 384, 4096})
    for (const std::int64_t keep : {std::int64_t{1}, in / 3, in - 1, in})
      EXPECT_EQ(pruned_per_row(in, keep_target(in, keep)), in - keep) << in << " " << keep;
}

}  // namespace
}  // namespace latentllm::compress
