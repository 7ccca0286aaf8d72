#include "compress/math/lowrank_sparse.hpp"

#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "compress/math/asvd.hpp"
#include "compress/math/preconditioner.hpp"
#include "latentllm/error.hpp"
#include "latentllm/eval.hpp"
#include "linalg/linalg.hpp"

namespace latentllm::compress {
namespace {

MatrixD sparse_step(const MatrixD& r, const MatrixD& c, const SparseTarget& t, const LowRankSparseOptions& o,
                    const MatrixD* start, std::string_view context) {
  return o.solver == SparseSolver::Fista ? sparse_fista(r, c, t, o.iters, context)
                                         : sparse_hard(r, c, t, o.iters, context, start);
}

// The alternation from D₀ with the pre-built P (root covariance of c, damped).
LowRankSparse alternate(const MatrixD& w, const MatrixD& c, const PreconditionerMatrix& p, int rank,
                        const SparseTarget& t, const LowRankSparseOptions& o, std::string_view context) {
  LowRankSparse f;
  f.rank = rank;
  f.ba = MatrixD::Zero(w.rows(), w.cols());         // [d', d]
  f.d = sparse_step(w, c, t, o, nullptr, context);  // [d', d]
  double loss = sparse_loss(w, f.d, c);
  f.loss.push_back(loss);
  if (rank == 0) return f;
  for (int k = 0; k < o.alternations; ++k) {
    // B·A given D: Eckart–Young on the whitened residual (asvd_with); kept only if the loss does not rise
    // (the damping makes it the optimum of a slightly different loss).
    MatrixD ba = asvd_with(w - f.d, p, rank, Junction::Identity, context).dense();  // [d', d]
    if (const double l = sparse_loss(w, ba + f.d, c); l <= loss) {
      f.ba = std::move(ba);
      loss = l;
    }
    // D given B·A, warm-started from the current D (hard shrinkage then cannot raise the loss).
    MatrixD d = sparse_step(w - f.ba, c, t, o, &f.d, context);  // [d', d]
    if (const double l = sparse_loss(w - f.ba, d, c); l <= loss) {
      f.d = std::move(d);
      loss = l;
    }
    f.loss.push_back(loss);
  }
  return f;
}

// P = (C + λI)^½ of the low-rank step (the root-covariance pre-conditioner of the local ASVD).
PreconditionerMatrix root_preconditioner(const MatrixD& c, double lambda_rel, std::string_view context) {
  LocalOptions lo;
  lo.lambda_rel = lambda_rel;
  return make_preconditioner(Preconditioner::RootCovariance, c, VectorD(), lo, context);
}

}  // namespace

SparseTarget keep_target(std::int64_t in, std::int64_t keep_per_row) {
  // ⌊s·d⌋ = d − keep exactly: the half entry absorbs the rounding of s·d.
  return {(static_cast<double>(in - keep_per_row) + 0.5) / static_cast<double>(in), SparsePattern::Unstructured};
}

LowRankSparseSplit lowrank_sparse_split(std::int64_t out, std::int64_t in, double sparsity, double fraction) {
  constexpr int vb = kLowRankSparseValueBytes;
  const SparseTarget pure{sparsity, SparsePattern::Unstructured};
  const std::int64_t budget = eval::sparse_storage_bytes(out * (in - pruned_per_row(in, pure)), out, in, vb);
  LowRankSparseSplit s;
  s.fraction = fraction;
  const auto rank = static_cast<std::int64_t>(std::floor(fraction * static_cast<double>(budget) /
                                                          static_cast<double>(vb * (out + in))));
  s.rank = static_cast<int>(std::min({rank, out, in}));
  // The bytes grow with the entries kept: the largest count per row that fits, by bisection.
  std::int64_t lo = 0, hi = in;
  while (lo < hi) {
    const std::int64_t mid = (lo + hi + 1) / 2;
    if (eval::lowrank_sparse_storage_bytes(out * mid, s.rank, out, in, vb) <= budget) lo = mid;
    else hi = mid - 1;
  }
  s.keep_per_row = lo;
  return s;
}

LowRankSparse lowrank_sparse(const MatrixD& w, const MatrixD& c, int rank, const SparseTarget& t,
                             const LowRankSparseOptions& o, std::string_view context) {
  if (t.pattern != SparsePattern::Unstructured) {
    throw Error(fmt::format("{}: low rank + sparse: pattern (expected unstructured, got {})", context,
                            sparse_pattern_name(t.pattern)));
  }
  if (rank > 0) check_rank(rank, w.rows(), w.cols(), context);
  const PreconditionerMatrix p = rank > 0 ? root_preconditioner(c, o.lambda_rel, context) : PreconditionerMatrix{};
  return alternate(w, c, p, rank, t, o, context);
}

LowRankSparse lowrank_sparse_budget(const MatrixD& w, const MatrixD& c, double sparsity, const LowRankSparseOptions& o,
                                    std::string_view context) {
  std::optional<PreconditionerMatrix> p;  // built at the first positive rank
  std::optional<LowRankSparse> best;
  int last_rank = -1;
  for (const double fraction : kLowRankSparseSplits) {
    const LowRankSparseSplit s = lowrank_sparse_split(w.rows(), w.cols(), sparsity, fraction);
    if (s.rank == last_rank || (s.rank > 0 && s.keep_per_row < 1)) continue;  // the same split again, or no D left
    last_rank = s.rank;
    if (s.rank > 0 && !p) p = root_preconditioner(c, o.lambda_rel, context);
    LowRankSparse f = alternate(w, c, s.rank > 0 ? *p : PreconditionerMatrix{}, s.rank,
                                keep_target(w.cols(), s.keep_per_row), o, context);
    f.split = fraction;
    if (!best || f.loss.back() < best->loss.back()) best = std::move(f);
  }
  // The split 0 is always run: pure sparse keeps d − ⌊S·d⌋ ≥ 1 entries a row for any S < 1.
  linalg::check_finite(best->ba, context, "low-rank part");
  linalg::check_finite(best->d, context, "sparse part");
  return std::move(*best);
}

}  // namespace latentllm::compress
