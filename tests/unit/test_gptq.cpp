// GPTQ (src/quant/gptq.cpp): the same codes as an independent float64 transcription of the paper's
// algorithm (scripts/gptq_reference.py, golden file tests/data/quant/gptq_cases.json) but for rounding
// ties, for any lazy-block size; the error-compensation identity; a lower output error than round to
// nearest on the same statistics; act-order as a permutation; dead inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "quant/gptq.hpp"

namespace latentllm::quant {
namespace {

MatrixD gaussian(Eigen::Index rows, Eigen::Index cols, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n(0.0, 1.0);
  MatrixD m(rows, cols);
  for (Eigen::Index i = 0; i < rows; ++i)
    for (Eigen::Index j = 0; j < cols; ++j) m(i, j) = n(rng);
  return m;
}

// H = X·Xᵀ of correlated inputs of unequal scales: X [cols, n].
MatrixD second_moment(Eigen::Index cols, Eigen::Index n, std::uint64_t seed) {
  const MatrixD mix = MatrixD::Identity(cols, cols) + 0.4 * gaussian(cols, cols, seed);
  VectorD scale(cols);
  for (Eigen::Index i = 0; i < cols; ++i) scale(i) = std::exp(std::sin(0.7 * static_cast<double>(i)));
  const MatrixD x = scale.asDiagonal() * mix * gaussian(cols, n, seed + 1);  // [cols, n]
  return x * x.transpose();
}

// W₀ − W' with W₀ = W after the dead-input rule.
double identity_loss(const MatrixD& w, const MatrixD& h, const GptqResult& res) {
  MatrixD w0 = w, h0 = h;
  for (Eigen::Index j = 0; j < h.rows(); ++j) {
    if (h(j, j) == 0.0) {
      h0(j, j) = 1.0;
      w0.col(j).setZero();
    }
  }
  h0.diagonal().array() += res.damping;
  return output_error(w0, dequantize(res.q), h0);
}

struct Golden {
  nlohmann::json j;
  MatrixD w, h;
  Golden() {
    std::ifstream in(std::string(LATENTLLM_TEST_DATA_DIR) + "/quant/gptq_cases.json");
    j = nlohmann::json::parse(in);
    const int rows = j["rows"], cols = j["cols"];
    w.resize(rows, cols);
    h.resize(cols, cols);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) w(r, c) = j["w"][r * cols + c].get<double>();
    for (int r = 0; r < cols; ++r)
      for (int c = 0; c < cols; ++c) h(r, c) = j["h"][r * cols + c].get<double>();
  }
};

// The script's codes, scales and zeros exactly, and its loss to 1e-10, for lazy blocks of 128 (one
// block), 16 and 1 columns. A code may differ only where the script's t = w/s + z is within 1e-9 of a
// tie (k + 1/2): such codes are counted, and a case with any is compared by its loss alone.
TEST(Gptq, MatchesTheIndependentFloat64Script) {
  const Golden g;
  int ties = 0, cases = 0;
  for (const auto& c : g.j["cases"]) {
    const QuantSpec spec{c["bits"], c["group"], c["grid"] == "minmax" ? Grid::MinMax : Grid::IntegerZero};
    for (int block : {128, 16, 1}) {
      SCOPED_TRACE(fmt::format("{} block {}", c["name"].get<std::string>(), block));
      GptqOptions opt;
      opt.percdamp = c["percdamp"];
      opt.act_order = c["act_order"];
      opt.static_groups = c["static_groups"];
      opt.block = block;
      const GptqResult res = gptq(g.w, g.h, spec, opt, "golden");
      EXPECT_EQ(res.dead, 1);
      EXPECT_NEAR(res.damping, c["damping"].get<double>(), 1e-12 * res.damping);
      int differ = 0, case_ties = 0;
      for (std::size_t k = 0; k < res.q.codes.size(); ++k) {
        if (res.q.codes[k] == c["codes"][k].get<int>()) continue;
        ++differ;
        const double t = c["t"][k];
        case_ties += std::fabs(t - std::floor(t) - 0.5) < 1e-9;
      }
      EXPECT_EQ(differ, case_ties) << "codes differing away from a rounding tie";
      ties += case_ties;
      if (differ == 0) {
        EXPECT_EQ(res.q.scales, c["scales"].get<std::vector<std::uint16_t>>());
        EXPECT_EQ(res.q.zeros, c["zeros"].get<std::vector<std::uint16_t>>());
      }
      EXPECT_NEAR(res.loss, c["loss"].get<double>(), (differ == 0 ? 1e-10 : 1e-3) * res.loss);
      ++cases;
    }
  }
  EXPECT_EQ(cases, 18);
  RecordProperty("rounding_ties", ties);
  EXPECT_EQ(ties, 0) << "the fixture has no near-ties; a tie here means the fixture changed";
}

// GPTQ's loss is ‖E‖² of the scaled errors, and W₀ − W' = E·U with U·(H₀ + λI)·Uᵀ = I, so it equals the
// damped output error tr((W₀ − W')(H₀ + λI)(W₀ − W')ᵀ): this holds only if every column's error was
// compensated through the right row of U, lazily or not.
TEST(Gptq, ErrorCompensationIdentity) {
  const MatrixD w = gaussian(16, 96, 1);
  MatrixD h = second_moment(96, 300, 2);
  h.row(10).setZero();
  h.col(10).setZero();  // a dead input
  for (const auto& [bits, group, act] : std::vector<std::tuple<int, int, bool>>{{4, 32, false}, {3, 24, true},
                                                                               {2, 96, true}, {8, 16, false}}) {
    GptqOptions opt;
    opt.act_order = act;
    opt.static_groups = act;
    opt.block = 40;
    const GptqResult res = gptq(w, h, {bits, group, Grid::MinMax}, opt, "identity");
    EXPECT_EQ(res.dead, 1);
    EXPECT_NEAR(res.loss, identity_loss(w, h, res), 1e-9 * res.loss) << bits << " " << group;
  }
}

// On the same H and the same grids, the error-compensating sweep has a lower output error than
// rounding each weight to nearest (the reason GPTQ exists).
TEST(Gptq, LowerOutputErrorThanRoundToNearest) {
  const MatrixD w = gaussian(32, 128, 3);
  const MatrixD h = second_moment(128, 512, 4);
  for (Grid grid : {Grid::MinMax, Grid::IntegerZero}) {
    for (int bits : {2, 3, 4, 8}) {
      const QuantSpec spec{bits, 32, grid};
      const double e_rtn = output_error(w, dequantize(rtn(w, spec, "rtn")), h);
      const double e_gptq = output_error(w, dequantize(gptq(w, h, spec, {}, "gptq").q), h);
      EXPECT_LT(e_gptq, e_rtn) << grid_name(grid) << " " << bits;
      // From 3 bits on by a wide margin; at 2 bits the grids are too coarse for much compensation.
      if (bits >= 3) {
        EXPECT_LT(e_gptq, 0.7 * e_rtn) << grid_name(grid) << " " << bits;
      }
      RecordProperty(fmt::format("gptq_over_rtn_{}_{}", grid_name(grid), bits), fmt::format("{:.3f}", e_gptq / e_rtn));
    }
  }
}

// With H = I (uncorrelated inputs of one scale) nothing is compensated: U is diagonal, and GPTQ's codes
// are round to nearest's on the same grids.
TEST(Gptq, IdentityStatisticsGiveRoundToNearest) {
  const MatrixD w = gaussian(8, 64, 5);
  const QuantSpec spec{3, 16, Grid::MinMax};
  const GptqResult res = gptq(w, MatrixD::Identity(64, 64), spec, {}, "identity");
  const QuantizedMatrix r = rtn(w, spec, "rtn");
  EXPECT_EQ(res.q.codes, r.codes);
  EXPECT_EQ(res.q.scales, r.scales);
  EXPECT_EQ(res.q.zeros, r.zeros);
}

// Act-order sweeps by decreasing diag H and puts the codes back: the same as sweeping, in the
// identity order, the matrix whose columns are already in that order (one group per row).
TEST(Gptq, ActOrderIsASweepInPermutedOrder) {
  const MatrixD w = gaussian(10, 48, 6);
  const MatrixD h = second_moment(48, 200, 7);
  GptqOptions act;
  act.act_order = true;
  const QuantSpec spec{4, 48, Grid::MinMax};
  const GptqResult a = gptq(w, h, spec, act, "act");
  MatrixD wp(10, 48), hp(48, 48);
  for (int j = 0; j < 48; ++j) {
    wp.col(j) = w.col(a.perm[j]);
    for (int i = 0; i < 48; ++i) hp(i, j) = h(a.perm[i], a.perm[j]);
    if (j > 0) {
      EXPECT_GE(h(a.perm[j - 1], a.perm[j - 1]), h(a.perm[j], a.perm[j]));
    }
  }
  const GptqResult p = gptq(wp, hp, spec, {}, "plain");
  for (int r = 0; r < 10; ++r) {
    for (int j = 0; j < 48; ++j) EXPECT_EQ(a.q.codes[r * 48 + a.perm[j]], p.q.codes[r * 48 + j]);
  }
  EXPECT_NEAR(a.loss, p.loss, 1e-12 * p.loss);
}

// A dead input's weights do not matter: changing them changes no code of the other columns.
TEST(Gptq, DeadInputsAreIgnored) {
  MatrixD w = gaussian(6, 32, 8);
  MatrixD h = second_moment(32, 100, 9);
  h.row(3).setZero();
  h.col(3).setZero();
  const QuantSpec spec{4, 32, Grid::IntegerZero};
  const GptqResult a = gptq(w, h, spec, {}, "a");
  w.col(3) *= 100.0;
  const GptqResult b = gptq(w, h, spec, {}, "b");
  EXPECT_EQ(a.q.codes, b.q.codes);
  EXPECT_EQ(a.dead, 1);
  const MatrixD wq = dequantize(a.q);
  for (int r = 0; r < 6; ++r) EXPECT_EQ(wq(r, 3), 0.0);  // the zeroed column, on a grid holding 0
}

}  // namespace
}  // namespace latentllm::quant
