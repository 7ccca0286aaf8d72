// The output side of a wide module (compress/math/output_side.hpp): the local root-covariance ASVD from the
// statistics of the module's outputs gives the input side's factors, bias update and loss; the route
// is taken only where it is exact; and the pipeline hands a consuming stage its site's batches.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "compress/math/asvd.hpp"
#include "compress/stages/notes.hpp"
#include "compress/math/output_side.hpp"
#include "joint_test_data.hpp"
#include "latentllm/calib.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/error.hpp"
#include "latentllm/model.hpp"
#include "model_fixtures.hpp"
#include "test_support.hpp"

namespace latentllm::compress {
namespace {

constexpr int kN = 4000, kD = 96, kOut = 24, kRank = 10;

// A wide module and its inputs, float-exact so that both routes see the same numbers.
struct Wide {
  MatrixF w;   // [d', d]
  MatrixF x;   // [n, d] rows = tokens, with a mean
  VectorD b;   // [d']
  MatrixD wd;  // w in double
  calib::SiteStats st;  // of x, in double
};

Wide make_wide(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Wide p;
  p.x = test::correlated_inputs(rng, kN, kD, 3.0).cast<float>();
  p.w = test::gaussian(rng, kOut, kD).cast<float>();
  p.b = test::gaussian_vec(rng, kOut);
  p.wd = p.w.cast<double>();
  p.st = calib::SiteStats::of_rows(p.x.cast<double>());
  return p;
}

// Its output statistics, from two batches of different sizes.
OutputStats outputs_of(const Wide& p) {
  OutputStats s;
  s.add(p.w, p.x.topRows(1500), 0);
  s.add(p.w, p.x.bottomRows(kN - 1500), 1500);
  s.finish();
  return s;
}

LocalOptions rootcov(Junction j) {
  LocalOptions o;
  o.preconditioner = Preconditioner::RootCovariance;
  o.junction = j;
  o.lambda_rel = 1e-4;
  return o;
}

double rel(const MatrixD& a, const MatrixD& b) { return (a - b).norm() / b.norm(); }

// Both routes, with and without a (updated) bias, both junction forms: the same B·A and bias to the
// float rounding of the outputs' products (1e-4 relative), the loss of its own factors to 1e-5 (the
// formula tr G₀ − tr U_rᵀ·G₀·U_r is exact), the energy of the report. Centering alone moves B·A by
// far more than the tolerance, so a route that ignored the mean would fail.
TEST(OutputSide, SameFactorsBiasAndLossAsTheInputSide) {
  const Wide p = make_wide(11);
  const OutputStats s = outputs_of(p);
  ASSERT_EQ(s.tokens(), kN);
  const VectorD mean = p.st.mean();
  const auto n = static_cast<double>(p.st.n);
  for (const bool with_bias : {false, true}) {
    const VectorD b = with_bias ? p.b : VectorD();
    for (const Junction j : {Junction::Identity, Junction::BlockIdentity}) {
      SCOPED_TRACE(::testing::Message() << "bias " << with_bias << " junction " << junction_name(j));
      const LocalOptions o = rootcov(j);
      const LowRank in = asvd(p.wd, b, p.st, kRank, o, "t");
      const OutputSideFit out = output_side_asvd(p.wd, p.w, b, s, kRank, o, "t");
      EXPECT_EQ(out.f.rank(), kRank);
      EXPECT_EQ(out.f.block_identity(), j == Junction::BlockIdentity);
      EXPECT_LT(rel(out.f.dense(), in.dense()), 1e-4);
      ASSERT_EQ(out.f.bias.size(), b.size());
      if (with_bias) {
        EXPECT_LT((out.f.bias - in.bias).norm(), 1e-4 * in.bias.norm());
      }
      const VectorD delta = with_bias ? VectorD(b - out.f.bias) : VectorD();
      const double own = output_error(p.wd - out.f.dense(), delta, p.st.xtx, mean, n);
      EXPECT_NEAR(out.loss, own, 1e-5 * own);
      const VectorD delta_in = with_bias ? VectorD(b - in.bias) : VectorD();
      const double input_side = output_error(p.wd - in.dense(), delta_in, p.st.xtx, mean, n);
      EXPECT_NEAR(out.loss, input_side, 1e-4 * input_side);
      const double energy = output_error(p.wd, b, p.st.xtx, mean, n);
      EXPECT_NEAR(out.energy, energy, 1e-6 * energy);
      EXPECT_GT(energy, 10 * out.loss);  // a real truncation, far from the trivial fits
    }
  }
  LocalOptions keep = rootcov(Junction::Identity);
  keep.update_bias = false;  // uncentered: a different optimum when the inputs have a mean
  EXPECT_GT(rel(output_side_asvd(p.wd, p.w, p.b, s, kRank, keep, "t").f.dense(),
                output_side_asvd(p.wd, p.w, p.b, s, kRank, rootcov(Junction::Identity), "t").f.dense()),
            1e-2);
}

// No input energy: the input side's spectral route whitens by I, so the plain SVD of W, with its note.
TEST(OutputSide, ZeroInputsGiveThePlainSvdWithItsNote) {
  const Wide p = make_wide(12);
  OutputStats s;
  s.add(p.w, MatrixF::Zero(50, kD), 0);
  s.finish();
  NoteCollector notes(true);
  const OutputSideFit out = output_side_asvd(p.wd, p.w, VectorD(), s, kRank, rootcov(Junction::Identity), "m.down");
  const linalg::Svd svd = linalg::svd(p.wd, "t");
  const MatrixD best = svd.u.leftCols(kRank) * svd.s.head(kRank).asDiagonal() * svd.v.leftCols(kRank).transpose();
  EXPECT_LT(rel(out.f.dense(), best), 1e-10);
  EXPECT_EQ(out.loss, 0.0);
  ASSERT_EQ(notes.notes().size(), 1u);
  EXPECT_EQ(notes.notes()[0].kind, "zero-covariance");
}

TEST(OutputSide, RefusesUndampedStatisticsAndWrongShapes) {
  const Wide p = make_wide(13);
  const OutputStats s = outputs_of(p);
  LocalOptions o = rootcov(Junction::Identity);
  o.lambda_rel = 0;
  test::expect_error<Error>([&] { output_side_asvd(p.wd, p.w, VectorD(), s, kRank, o, "m.down"); },
                            {"m.down: output-side fit without damping"});
  test::expect_error<Error>(
      [&] { output_side_asvd(p.wd, MatrixF(kOut, kD - 1), VectorD(), s, kRank, rootcov(Junction::Identity), "m.down"); },
      {"m.down: output-side fit (expected a [24, 96] weight"});
  OutputStats t;
  t.add(p.w, p.x.topRows(10), 0);
  test::expect_error<Error>([&] { t.add(p.w, MatrixF(5, kD + 1), 10); }, {"input width (expected 96, got 97)"});
}

// Only where it is exact and no less accurate than the input side.
TEST(OutputSide, IsTakenOnlyWhereItIsExact) {
  CompressOptions o = preset_options(Preset::Default, Method::LatentLlm, 0.2);
  EXPECT_TRUE(local_output_side(o, 4096, 14336));    // Llama-3-8B down_proj
  EXPECT_FALSE(local_output_side(o, 14336, 4096));   // up_proj
  EXPECT_FALSE(local_output_side(o, 4096, 4096));    // q_proj
  EXPECT_FALSE(local_output_side(preset_options(Preset::Paper, Method::LatentLlm, 0.2), 4096, 14336));  // f64 C
  EXPECT_FALSE(local_output_side(preset_options(Preset::Default, Method::AsvdL2, 0.2), 4096, 14336));
  EXPECT_TRUE(local_output_side(preset_options(Preset::Default, Method::AsvdRootCov, 0.2), 4096, 14336));
  CompressOptions undamped = o;
  undamped.local.lambda_rel = 0;
  EXPECT_FALSE(local_output_side(undamped, 4096, 14336));
  o.output_side = false;
  EXPECT_FALSE(local_output_side(o, 4096, 14336));
}

// A whole model with a wide MLP (d 16, ffn 48): down_proj takes the output side and every module ends
// up with the input side's factors to float rounding (the later layer sees the earlier one's slightly
// different outputs); the reported losses agree alike.
TEST(OutputSide, CompressesAModelAsTheInputSideDoes) {
  test::LlamaDims dims;
  dims.ffn = 48;
  const auto dir = test::make_llama(dims, 91).write("output-side-model");
  const auto ids = test::random_ids(10 * 40, dims.V, 3);
  auto run = [&](bool output_side) {
    CompressOptions o = preset_options(Preset::Default, Method::AsvdRootCov, 0.3);
    o.output_side = output_side;
    auto m = model::Model::load(dir);
    CompressReport r = compress_model(*m, ids, 10, o);
    return std::pair{std::move(m), std::move(r)};
  };
  const auto [on, on_report] = run(true);
  const auto [off, off_report] = run(false);
  int output_side = 0;
  for (const auto& r : on_report.modules) output_side += r.how == "local, output side";
  EXPECT_EQ(output_side, dims.layers);  // the down projections
  EXPECT_GT(on_report.times.consume_flops, 0.0);
  EXPECT_LT(on_report.times.covariance_flops, off_report.times.covariance_flops);
  ASSERT_EQ(on_report.modules.size(), off_report.modules.size());
  for (std::size_t k = 0; k < on_report.modules.size(); ++k) {
    EXPECT_NEAR(on_report.modules[k].loss, off_report.modules[k].loss, 1e-3 * off_report.modules[k].loss)
        << on_report.modules[k].name;
  }
  for (int i = 0; i < on->num_layers(); ++i)
    for (std::size_t j = 0; j < on->layer(i).linears.size(); ++j) {
      const auto &a = on->layer(i).linears[j], &b = off->layer(i).linears[j];
      const MatrixD da = a.dense_weight().cast<double>(), db = b.dense_weight().cast<double>();
      EXPECT_LT(rel(da, db), 1e-3) << a.name;
    }
}

}  // namespace
}  // namespace latentllm::compress
