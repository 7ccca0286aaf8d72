// Defined numerics on degenerate inputs (issue 5, item 3): singular and rank-deficient covariances
// (fewer tokens than features, dead units, constant features, zero inputs), rank-deficient factors,
// NaN/Inf, ranks at and beyond min(d, d'). Each case gives the correct result, with every fallback
// recorded as a NumericNote, or one clear error naming the module.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "compress/math/asvd.hpp"
#include "compress/math/junction.hpp"
#include "compress/math/whitening.hpp"
#include "compress/math/joint_ud.hpp"
#include "compress/stages/notes.hpp"
#include "compress/math/preconditioner.hpp"
#include "latentllm/calib.hpp"
#include "latentllm/error.hpp"
#include "linalg/linalg.hpp"
#include "test_support.hpp"

namespace latentllm::compress {
namespace {

MatrixD gaussian(Eigen::Index rows, Eigen::Index cols, std::mt19937_64& rng) {
  std::normal_distribution<double> n(0.0, 1.0);
  MatrixD m(rows, cols);
  for (Eigen::Index j = 0; j < cols; ++j)
    for (Eigen::Index i = 0; i < rows; ++i) m(i, j) = n(rng);
  return m;
}

// A module W: [out, in] with inputs X: [in, n] (correlated) and their statistics.
struct Problem {
  MatrixD w, x, c;  // [out, in], [in, n], [in, in]
  VectorD bias, mean, abs_mean;
  double n = 0;
  calib::SiteStats stats() const {
    return calib::SiteStats{c, mean * n, abs_mean * n, static_cast<std::int64_t>(n)};
  }
  void refresh() {
    c = x * x.transpose();
    n = static_cast<double>(x.cols());
    mean = x.rowwise().mean();
    abs_mean = x.cwiseAbs().rowwise().mean();
  }
};

Problem make_problem(int out, int in, int n, unsigned seed) {
  std::mt19937_64 rng(seed);
  Problem p;
  p.w = gaussian(out, in, rng);
  p.bias = gaussian(out, 1, rng);
  p.x = gaussian(in, in, rng) * gaussian(in, n, rng);
  p.refresh();
  return p;
}

LocalOptions options(Preconditioner k, Junction j, double lambda_rel) {
  LocalOptions o;
  o.preconditioner = k;
  o.junction = j;
  o.lambda_rel = lambda_rel;
  return o;
}

// Σ_{i>r} σᵢ² of W·S^{1/2}: the least activation loss ‖(W − B·A)·S^{1/2}‖² at rank r.
double optimal_loss(const MatrixD& w, const MatrixD& s, int r) {
  const linalg::Svd d = linalg::svd(w * linalg::sym_power(s, 0.5, "test"), "test");
  return d.s.tail(d.s.size() - r).squaredNorm();
}

using test::error_of;

std::vector<std::string> kinds(const NoteCollector& c) {
  std::vector<std::string> k;
  for (const auto& n : c.notes()) k.push_back(n.kind);
  return k;
}

TEST(Notes, CollectedDeduplicatedAndScoped) {
  NoteCollector outer;
  {
    NoteCollector inner;
    record_note("m", "pinv-drop", "x");
    record_note("m", "pinv-drop", "x");  // identical: kept once
    record_note("m", "pinv-drop", "y");
    ASSERT_EQ(inner.notes().size(), 2u);
    EXPECT_EQ(inner.notes()[0].message(), "m: x");
    {
      NoteCollector silent(true);
      record_note("m", "rank-reduced", "z");
      EXPECT_EQ(silent.notes().size(), 1u);
    }
    EXPECT_EQ(inner.notes().size(), 2u);
  }
  EXPECT_TRUE(outer.notes().empty());
  record_note("n", "zero-covariance", "w");
  EXPECT_EQ(kinds(outer), std::vector<std::string>{"zero-covariance"});
}

TEST(Numerics, FewerTokensThanFeaturesIsDampedWithoutFallback) {
  // 6 tokens, 24 features: C has rank 6. The damping makes C + λI invertible: a finite, optimal
  // result for the damped loss, and nothing to record.
  const Problem p = make_problem(16, 24, 6, 1);
  for (Preconditioner k : {Preconditioner::RootCovariance, Preconditioner::Covariance, Preconditioner::DiagHessian}) {
    NoteCollector notes;
    const LowRank f = asvd(p.w, {}, p.stats(), 10, options(k, Junction::BlockIdentity, 1e-4), "m");
    EXPECT_EQ(f.rank(), 10) << preconditioner_name(k);
    EXPECT_TRUE(f.dense().allFinite());
    EXPECT_TRUE(notes.notes().empty()) << preconditioner_name(k);
  }
  MatrixD damped = p.c;
  damped.diagonal().array() += absolute_damping(p.c, 1e-4);
  const LowRank f = asvd(p.w, {}, p.stats(), 10, options(Preconditioner::RootCovariance,
                                                                 Junction::BlockIdentity, 1e-4), "m");
  const MatrixD e = p.w - f.dense();
  EXPECT_NEAR(activation_loss(e, damped), optimal_loss(p.w, damped, 10), 1e-8 * optimal_loss(p.w, damped, 10));
}

TEST(Numerics, FewerTokensUndampedReducesTheRankExactly) {
  // λ = 0: C has rank 6, so W·P has rank 6 and a rank-10 block identity does not exist. The module
  // gets rank 6 (a "rank-reduced" note) with the same, zero, activation loss; the null space of C is
  // dropped from P ("pinv-drop").
  const Problem p = make_problem(16, 24, 6, 2);
  NoteCollector notes;
  const LowRank f = asvd(p.w, {}, p.stats(), 10, options(Preconditioner::RootCovariance,
                                                                 Junction::BlockIdentity, 0.0), "layers.0.fc1");
  EXPECT_EQ(f.rank(), 6);
  EXPECT_EQ(f.A.rows(), 6);
  EXPECT_EQ(f.perm.size(), 24u);
  EXPECT_LT(activation_loss(p.w - f.dense(), p.c), 1e-18 * p.c.trace() * p.w.squaredNorm());
  EXPECT_EQ(kinds(notes), (std::vector<std::string>{"pinv-drop", "rank-reduced"}));
  EXPECT_EQ(notes.notes()[0].message(),
            "layers.0.fc1: 18 of 24 eigenvalues of C + λI at or below 1e-12 x the largest (never excited by the "
            "calibration data): dropped from P and its pseudo-inverse, B·A does not act on them");
  EXPECT_EQ(notes.notes()[1].module, "layers.0.fc1");
  EXPECT_NE(notes.notes()[1].detail.find("rank 6 instead of 10"), std::string::npos) << notes.notes()[1].detail;
  // Other junctions keep rank 10 (zero rows cost nothing to their existence) with the same product.
  const LowRank g = asvd(p.w, {}, p.stats(), 10, options(Preconditioner::RootCovariance, Junction::Identity,
                                                                 0.0), "m");
  EXPECT_EQ(g.rank(), 10);
  EXPECT_LT((g.dense() - f.dense()).norm(), 1e-9 * f.dense().norm());
}

TEST(Numerics, DeadFeaturesMatchTheProblemWithoutThem) {
  // Dead ReLU units: features 2 and 5 are always 0, so C has zero rows/columns. The result must be as
  // good as compressing the module without those inputs (their weights never matter).
  Problem p = make_problem(10, 12, 200, 3);
  p.x.row(2).setZero();
  p.x.row(5).setZero();
  p.refresh();
  std::vector<int> live;
  for (int i = 0; i < 12; ++i)
    if (i != 2 && i != 5) live.push_back(i);
  MatrixD w_live(10, 10), c_live(10, 10);
  for (int a = 0; a < 10; ++a) {
    w_live.col(a) = p.w.col(live[a]);
    for (int b = 0; b < 10; ++b) c_live(a, b) = p.c(live[a], live[b]);
  }
  const int r = 5;
  const double best = optimal_loss(w_live, c_live, r);
  for (Preconditioner k : {Preconditioner::RootCovariance, Preconditioner::DiagL2}) {
    for (double lambda : {1e-10, 0.0}) {
      NoteCollector notes;
      const LowRank f = asvd(p.w, {}, p.stats(), r, options(k, Junction::BlockIdentity, lambda), "m");
      ASSERT_TRUE(f.dense().allFinite());
      const double loss = activation_loss(p.w - f.dense(), p.c);
      if (k == Preconditioner::RootCovariance) {
        EXPECT_NEAR(loss, best, 1e-6 * best) << lambda;  // root-cov is optimal on the live features
      } else {
        EXPECT_GE(loss, best * (1 - 1e-9));
      }
      const bool drops = k == Preconditioner::DiagL2 || lambda == 0.0;  // DiagL2 has no damping
      EXPECT_EQ(kinds(notes), drops ? std::vector<std::string>{"pinv-drop"} : std::vector<std::string>{})
          << preconditioner_name(k) << " " << lambda;
      if (drops) {
        EXPECT_NE(notes.notes()[0].detail.find("2 of 12 "), std::string::npos) << notes.notes()[0].detail;
        // B·A does not act on the dead inputs.
        EXPECT_LT(f.dense().col(2).norm() + f.dense().col(5).norm(), 1e-9 * f.dense().norm());
      }
    }
  }
}

TEST(Numerics, ConstantFeatureOfABiasModule) {
  // A constant feature has a zero row/column in the centered covariance the bias update uses; the
  // updated bias absorbs it, so the output error equals the optimum without that feature.
  Problem p = make_problem(8, 10, 300, 4);
  p.x.row(3).setConstant(5.0);
  p.refresh();
  const int r = 4;
  LocalOptions o = options(Preconditioner::RootCovariance, Junction::BlockIdentity, 0.0);
  NoteCollector notes;
  const LowRank f = asvd(p.w, p.bias, p.stats(), r, o, "m");
  EXPECT_EQ(kinds(notes), std::vector<std::string>{"pinv-drop"});
  const MatrixD cc = p.stats().centered();
  const double loss = activation_loss(p.w - f.dense(), cc);
  EXPECT_NEAR(loss, optimal_loss(p.w, cc, r), 1e-6 * loss);
  // Direct output error over the tokens: W·x + b vs B·A·x + b̂.
  const MatrixD diff = (p.w - f.dense()) * p.x;
  const MatrixD y_err = diff.colwise() + (p.bias - f.bias);
  EXPECT_NEAR(y_err.squaredNorm(), loss, 1e-6 * loss);
}

TEST(Numerics, ZeroInputsFallBackToPlainSvd) {
  // No calibration signal: any factors have zero loss; P = I (plain SVD of W), recorded.
  const Problem p = make_problem(8, 12, 50, 5);
  const MatrixD zero = MatrixD::Zero(12, 12);
  const calib::SiteStats st{zero, VectorD::Zero(12), VectorD::Zero(12), 50};
  const LowRank plain = asvd(p.w, {}, p.stats(), 4, options(Preconditioner::Identity, Junction::Identity, 0),
                                    "m");
  for (Preconditioner k : all_preconditioners()) {
    NoteCollector notes;
    const LowRank f = asvd(p.w, {}, st, 4, options(k, Junction::Identity, 1e-4), "layers.1.v_proj");
    EXPECT_LT((f.dense() - plain.dense()).norm(), 1e-9 * plain.dense().norm()) << preconditioner_name(k);
    if (k == Preconditioner::Identity) {
      EXPECT_TRUE(notes.notes().empty());
      continue;
    }
    ASSERT_EQ(kinds(notes), std::vector<std::string>{"zero-covariance"}) << preconditioner_name(k);
    EXPECT_EQ(notes.notes()[0].module, "layers.1.v_proj");
  }
  // The joint solvers' root covariance is the same one.
  NoteCollector notes;
  const RootCovariance rc = root_covariance(zero, 1e-4, "j");
  EXPECT_EQ(rc.p, MatrixD::Identity(12, 12));
  EXPECT_EQ(rc.p_pinv, MatrixD::Identity(12, 12));
  EXPECT_EQ(kinds(notes), std::vector<std::string>{"zero-covariance"});
}

TEST(Numerics, RootCovarianceDropsUnexcitedDirections) {
  const Problem p = make_problem(4, 9, 3, 6);  // rank-3 covariance in 9 dimensions
  NoteCollector notes;
  const RootCovariance rc = root_covariance(p.c, 0.0, "model.layers.0.self_attn.q_proj, k_proj");
  EXPECT_TRUE(rc.p.allFinite() && rc.p_pinv.allFinite());
  EXPECT_EQ(rc.dropped, 6);
  EXPECT_LT((rc.p * rc.p_pinv * rc.p - rc.p).norm(), 1e-9 * rc.p.norm());  // Moore–Penrose
  EXPECT_LT((rc.p * rc.p - p.c).norm(), 1e-9 * p.c.norm());                 // P² = C on the kept directions
  ASSERT_EQ(kinds(notes), std::vector<std::string>{"pinv-drop"});
  EXPECT_EQ(notes.notes()[0].message(),
            "model.layers.0.self_attn.q_proj, k_proj: 6 of 9 eigenvalues of C + λI at or below 1e-12 x the largest "
            "(never excited by the calibration data): dropped from P and its pseudo-inverse, B·A does not act on "
            "them");
  NoteCollector none;
  (void)root_covariance(p.c, 1e-6, "j");  // damped: nothing below the floor
  EXPECT_TRUE(none.notes().empty());
}

TEST(Numerics, RankDeficientFactorPairKeepsTheProduct) {
  std::mt19937_64 rng(7);
  const MatrixD b = gaussian(9, 5, rng);
  MatrixD a = gaussian(5, 11, rng);
  a.row(4) = a.row(0) - 2.0 * a.row(1);  // rank 4
  NoteCollector notes;
  const LowRank f = to_block_identity(b, a, "m");
  EXPECT_EQ(f.rank(), 4);
  EXPECT_LT((f.dense() - b * a).norm(), 1e-12 * (b * a).norm());
  for (int j = 0; j < 4; ++j) EXPECT_EQ(f.dense_a()(j, f.perm[static_cast<std::size_t>(j)]), 1.0);
  EXPECT_LE(f.A.cwiseAbs().maxCoeff(), 1.05 + 1e-12);
  EXPECT_EQ(kinds(notes), std::vector<std::string>{"rank-reduced"});
  EXPECT_EQ(error_of<NumericError>([&] { to_block_identity(b, MatrixD::Zero(5, 11), "layers.2.fc2"); }),
            "layers.2.fc2: compression factor is zero, no identity block exists (expected rank >= 1, got 0)");
}

TEST(Numerics, RanksAtAndBeyondTheShape) {
  const Problem p = make_problem(8, 12, 100, 8);
  const LocalOptions o;
  // r = min(d, d') is exact (the identity block covers all of A's rows).
  const LowRank full = asvd(p.w, {}, p.stats(), 8, o, "m");
  EXPECT_LT((full.dense() - p.w).norm(), 1e-9 * p.w.norm());
  EXPECT_EQ(error_of<ConfigError>([&] { asvd(p.w, {}, p.stats(), 9, o, "layers.0.fc1"); }),
            "layers.0.fc1: rank out of range (expected 1..8 for a [8, 12] module, got 9)");
  EXPECT_EQ(error_of<ConfigError>([&] { asvd(p.w, {}, p.stats(), 0, o, "layers.0.fc1"); }),
            "layers.0.fc1: rank out of range (expected 1..8 for a [8, 12] module, got 0)");
  EXPECT_EQ(error_of<ConfigError>([&] { (void)local_rootcov(p.w, {}, p.stats(), 13, 1e-4, "layers.0.fc1"); }),
            "layers.0.fc1: rank out of range (expected 1..8 for a [8, 12] module, got 13)");
}

TEST(Numerics, NonFiniteInputsNameTheModule) {
  const Problem p = make_problem(8, 12, 100, 9);
  const LocalOptions o;
  MatrixD w = p.w;
  w(2, 3) = std::numeric_limits<double>::infinity();
  EXPECT_EQ(error_of<NumericError>([&] { asvd(w, {}, p.stats(), 4, o, "layers.0.fc1"); }),
            "layers.0.fc1: weight contains a non-finite value");
  VectorD b = p.bias;
  b(1) = std::nan("");
  EXPECT_EQ(error_of<NumericError>([&] { asvd(p.w, b, p.stats(), 4, o, "layers.0.fc1"); }),
            "layers.0.fc1: bias contains a non-finite value");
  MatrixD c = p.c;
  c(0, 0) = std::nan("");
  calib::SiteStats st = p.stats();
  st.xtx = c;
  EXPECT_EQ(error_of<NumericError>([&] { asvd(p.w, {}, st, 4, o, "layers.0.fc1"); }),
            "layers.0.fc1: input covariance contains a non-finite value");
  // Calibration statistics name the token and feature (the pipeline prepends the modules).
  calib::SiteStats s;
  s.reset(3);
  MatrixF x = MatrixF::Ones(4, 3);
  x(2, 1) = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(error_of<NumericError>([&] { s.add(x, 10); }),
            "non-finite calibration input (expected finite activations, got -inf at token 12, feature 1)");
}

TEST(Numerics, JointUpDownWithAZeroDownProjectionKeepsTheLocalSolution) {
  std::mt19937_64 rng(10);
  MlpDense w;
  w.act = model::Activation::Relu;
  w.w_up = gaussian(12, 6, rng);
  w.w_down = MatrixD::Zero(6, 12);
  const MatrixD x = gaussian(40, 6, rng);
  UdOptions o;
  o.ranks.up = 3;
  o.ranks.down = 3;
  o.iters = 2;
  NoteCollector notes;
  const UdResult r = joint_ud(w, x, o, "model.decoder.layers.0.fc1, fc2");
  EXPECT_EQ(r.best_iter, -1);  // the local solution
  EXPECT_TRUE(r.f.up.dense().allFinite());
  ASSERT_EQ(kinds(notes), std::vector<std::string>{"joint-skipped"});
  EXPECT_EQ(notes.notes()[0].module, "model.decoder.layers.0.fc1, fc2");
}

}  // namespace
}  // namespace latentllm::compress
