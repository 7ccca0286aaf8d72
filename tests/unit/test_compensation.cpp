// Error-compensating fits (compress/math/compensate.hpp, CompressOptions::error_compensation): the fit of
// one module against brute-force least squares on random data, its advantage over the local fit on
// the dense-output error, and the pipeline's dense stream (calib::CrossStats, run_layerwise): the cross
// moments pair the dense model's inputs with the compressed ones token by token, the compressed stream
// is untouched by it, the option off changes nothing, and --resume continues it bit for bit.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

#include <Eigen/QR>
#include <Eigen/SVD>

#include "compress/math/asvd.hpp"
#include "compress/math/compensate.hpp"
#include "latentllm/calib.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/error.hpp"
#include "latentllm/model.hpp"
#include "model_fixtures.hpp"
#include "test_support.hpp"

namespace latentllm {
namespace {

using model::Model;
using model::Site;
using namespace latentllm::test;

// ---- one module ---------------------------------------------------------------------------------

// Token-aligned dense inputs x and compressed inputs x̂ = x + a correlated error, [d, n] each.
struct Data {
  MatrixD x, xh;  // [d, n]
  MatrixD w;      // [d', d]
  VectorD b;      // [d'] or empty
};

Data make_data(int d, int dout, int n, bool bias, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> g;
  auto rnd = [&](Eigen::Index r, Eigen::Index c) { return MatrixD(MatrixD::NullaryExpr(r, c, [&] { return g(rng); })); };
  Data s;
  const MatrixD mix = rnd(d, d);
  s.x = mix * rnd(d, n);                                   // correlated features
  s.x.colwise() += VectorD(rnd(d, 1).col(0)) * 0.5;        // and a mean
  s.xh = s.x + 0.3 * rnd(d, d) * s.x + 0.2 * rnd(d, n);   // an upstream error that depends on x
  s.w = rnd(dout, d);
  if (bias) s.b = rnd(dout, 1).col(0);
  return s;
}

calib::SiteStats stats_of(const MatrixD& xh) { return calib::SiteStats::of_columns(xh); }

calib::CrossStats cross_of(const MatrixD& x, const MatrixD& xh) {
  calib::CrossStats c;
  c.reset(static_cast<int>(x.rows()));
  c.add(MatrixF(x.transpose().cast<float>()), MatrixF(xh.transpose().cast<float>()));
  return c;
}

// Exact statistics (the float round trip of CrossStats::add aside): for the identities below.
calib::CrossStats exact_cross(const MatrixD& x, const MatrixD& xh) {
  calib::CrossStats c;
  c.xh = x * xh.transpose();
  c.sum = x.rowwise().sum();
  c.n = x.cols();
  return c;
}

compress::LocalOptions options(double lambda_rel, bool update_bias = true) {
  compress::LocalOptions o;
  o.preconditioner = compress::Preconditioner::RootCovariance;
  o.junction = compress::Junction::Identity;
  o.lambda_rel = lambda_rel;
  o.update_bias = update_bias;
  return o;
}

// Brute force: stack the damping as extra samples, [X̂ − μ̂ | √λ·I] → [W·X + b − μ_t | √λ·W], solve the
// least squares by QR, and truncate the fitted values' SVD (classic reduced-rank regression: the best
// rank-r map projects W̃ on the leading left singular vectors of W̃·S).
struct Brute {
  MatrixD ba;  // [d', d]
  VectorD b;   // [d'] (empty without bias)
};
Brute brute_force(const Data& s, int r, double lambda_rel) {
  const auto n = s.x.cols(), d = s.x.rows();
  MatrixD t = s.w * s.x;  // [d', n]
  MatrixD src = s.xh;     // [d, n]
  VectorD mu_s, mu_t;
  if (s.b.size()) {
    t.colwise() += s.b;
    mu_s = src.rowwise().mean();
    mu_t = t.rowwise().mean();
    src.colwise() -= mu_s;
    t.colwise() -= mu_t;
  }
  const double lambda = lambda_rel * (src * src.transpose()).diagonal().mean();
  MatrixD sa(d, n + d), ta(t.rows(), n + d);
  sa << src, std::sqrt(lambda) * MatrixD::Identity(d, d);
  ta << t, std::sqrt(lambda) * s.w;
  const MatrixD full = sa.transpose().colPivHouseholderQr().solve(ta.transpose()).transpose();  // [d', d]  W̃
  Eigen::JacobiSVD<MatrixD> svd(full * sa, Eigen::ComputeThinU);
  const MatrixD u = svd.matrixU().leftCols(r);
  Brute out;
  out.ba = u * u.transpose() * full;
  if (s.b.size()) out.b = mu_t - out.ba * mu_s;
  return out;
}

double rel(const MatrixD& a, const MatrixD& b) { return (a - b).norm() / b.norm(); }

TEST(CompensatedFit, EqualsBruteForceLeastSquares) {
  for (const bool bias : {false, true}) {
    for (const double lambda : {0.0, 1e-4, 1e-1}) {
      for (const int r : {3, 8}) {  // truncated, and full rank (min(d, d') = 8): the least-squares map itself
        SCOPED_TRACE(::testing::Message() << "bias " << bias << " lambda " << lambda << " rank " << r);
        const Data s = make_data(12, 8, 300, bias, 11);
        const compress::LowRank f = compress::compensated_fit(s.w, s.b, stats_of(s.xh), exact_cross(s.x, s.xh), r,
                                                    options(lambda), "test");
        const Brute ref = brute_force(s, r, lambda);
        EXPECT_LT(rel(f.dense(), ref.ba), 1e-9);
        if (bias) {
          EXPECT_LT((f.bias - ref.b).norm() / ref.b.norm(), 1e-9);
        }
      }
    }
  }
}

// With x = x̂ (nothing compressed upstream) the compensating fit is the local root-covariance ASVD.
TEST(CompensatedFit, IsTheLocalFitWhenTheInputsAgree) {
  for (const bool bias : {false, true}) {
    SCOPED_TRACE(bias);
    const Data s = make_data(12, 10, 200, bias, 12);
    const calib::SiteStats st = stats_of(s.x);
    const compress::LowRank comp = compress::compensated_fit(s.w, s.b, st, exact_cross(s.x, s.x), 5, options(1e-3), "test");
    const compress::LowRank local = compress::asvd(s.w, s.b, st, 5, options(1e-3), "test");
    EXPECT_LT(rel(comp.dense(), local.dense()), 1e-9);
    if (bias) {
      EXPECT_LT((comp.bias - local.bias).norm() / local.bias.norm(), 1e-9);
    }
  }
}

// Σ_t ‖W·x_t + b − (B·A·x̂_t + b̂)‖², directly from the tokens.
double dense_output_error(const Data& s, const compress::LowRank& f) {
  MatrixD e = s.w * s.x - f.dense() * s.xh;  // [d', n]
  if (s.b.size()) e.colwise() += s.b;
  if (f.bias.size()) e.colwise() -= f.bias;
  return e.squaredNorm();
}

TEST(CompensatedFit, LowersTheDenseOutputErrorBelowTheLocalFit) {
  for (const bool bias : {false, true}) {
    SCOPED_TRACE(bias);
    const Data s = make_data(16, 12, 400, bias, 13);
    const calib::SiteStats st = stats_of(s.xh);
    const calib::CrossStats cross = cross_of(s.x, s.xh);  // through float inputs, as the pipeline
    const compress::LowRank comp = compress::compensated_fit(s.w, s.b, st, cross, 6, options(1e-4), "test");
    const compress::LowRank local = compress::asvd(s.w, s.b, st, 6, options(1e-4), "test");
    const double e_comp = dense_output_error(s, comp), e_local = dense_output_error(s, local);
    EXPECT_LT(e_comp, 0.9 * e_local) << "compensated " << e_comp << " local " << e_local;
    // The loss from the statistics is the direct one up to the constant Σ‖W·x + b‖².
    MatrixD t = s.w * s.x;
    if (bias) t.colwise() += s.b;
    const double offset = compress::compensated_loss_offset(s.w, s.b, comp, st, cross);
    EXPECT_NEAR(offset + t.squaredNorm(), e_comp, 1e-5 * t.squaredNorm());
    // And the local fit's own objective, ‖(W − B·A)·X̂‖, is where the local fit is better.
    MatrixD el = (s.w - local.dense()) * s.xh, ec = (s.w - comp.dense()) * s.xh;
    if (bias) {
      el.colwise() += s.b - local.bias;
      ec.colwise() += s.b - comp.bias;
    }
    EXPECT_LT(el.squaredNorm(), ec.squaredNorm());
  }
}

TEST(CompensatedFit, RefusesStatisticsOfOtherTokenCounts) {
  const Data s = make_data(6, 5, 50, false, 14);
  calib::CrossStats c = exact_cross(s.x, s.xh);
  c.n += 1;
  expect_contains(error_of<ConfigError>([&] {
                    compress::compensated_fit(s.w, s.b, stats_of(s.xh), c, 2, options(1e-4), "m.q_proj");
                  }),
                  {"m.q_proj: error-compensating fit token counts", "got 50 and 51"});
}

// x' = [x; 1]: [d+1, n].
MatrixD with_ones(const MatrixD& x) {
  MatrixD out(x.rows() + 1, x.cols());
  out << x, MatrixD::Ones(1, x.cols());
  return out;
}

TEST(CompensationMap, IsTheIdentityWhenTheInputsAgree) {
  const Data s = make_data(9, 4, 100, false, 15);
  for (const bool aug : {false, true}) {
    const MatrixD m = compress::compensation_map(stats_of(s.x), exact_cross(s.x, s.x), 1e-3, aug, "test");
    EXPECT_LT((m - MatrixD::Identity(m.rows(), m.cols())).norm(), 1e-10) << aug;
  }
}

// Joint Q-K's compensation: Ĝ = Mᵀ·G·M (λ = 0) is the least-squares bilinear map from x̂ to the dense
// attention scores, min Σ_{t,s} (x_tᵀ·G·x_s − x̂_tᵀ·Ĝ·x̂_s)²: its residual is orthogonal to every x̂_t·x̂_sᵀ.
TEST(CompensationMap, GivesTheLeastSquaresAttentionMapFromTheCompressedInputs) {
  for (const bool aug : {false, true}) {
    SCOPED_TRACE(aug);
    const Data s = make_data(6, 6, 60, false, 16);
    const MatrixD g = s.w;  // [d, d] (or the top-left block of the augmented one)
    MatrixD ga = MatrixD::Zero(7, 7);
    ga.topLeftCorner(6, 6) = g;
    ga.col(6).head(6) = s.w.col(0);  // a query bias meeting the keys
    ga.row(6).head(6) = s.w.row(1);  // a key bias meeting the queries
    const MatrixD x = aug ? with_ones(s.x) : s.x, xh = aug ? with_ones(s.xh) : s.xh;
    const MatrixD& gg = aug ? ga : g;
    const MatrixD m = compress::compensation_map(stats_of(s.xh), exact_cross(s.x, s.xh), 0.0, aug, "test");
    const MatrixD gh = m.transpose() * gg * m;
    const MatrixD r = xh.transpose() * gh * xh - x.transpose() * gg * x;  // [n, n] residual scores
    const MatrixD grad = xh * r * xh.transpose();
    const MatrixD scale = xh * (x.transpose() * gg * x) * xh.transpose();
    EXPECT_LT(grad.norm(), 1e-9 * scale.norm());
    // and it beats the uncompensated map G itself
    EXPECT_LT(r.norm(), (xh.transpose() * gg * xh - x.transpose() * gg * x).norm());
  }
}

TEST(CrossStats, MatchesDoubleSumsOverChunks) {
  std::mt19937 rng(3);
  std::normal_distribution<float> g;
  MatrixF x(5000, 7), xh(5000, 7);  // more than one chunk of 2048 rows
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    x.data()[i] = g(rng);
    xh.data()[i] = x.data()[i] + 0.1f * g(rng);
  }
  calib::CrossStats c;
  c.reset(7);
  c.add(x.topRows(3000), xh.topRows(3000));
  c.add(x.bottomRows(2000), xh.bottomRows(2000), 3000);
  const MatrixD ref = x.cast<double>().transpose() * xh.cast<double>();
  EXPECT_LT(rel(c.xh, ref), 1e-13);
  EXPECT_EQ(c.n, 5000);
  x(4100, 2) = std::numeric_limits<float>::quiet_NaN();
  calib::CrossStats bad;
  bad.reset(7);
  expect_contains(error_of<NumericError>([&] { bad.add(x, xh); }), {"token 4100, feature 2"});
}

// ---- the pipeline's dense stream --------------------------------------------------------------

constexpr Site kSites[] = {Site::AttnIn, Site::AttnOut, Site::MlpIn, Site::MlpMid};
constexpr int kT = 10, kWindows = 5;

struct Seen {
  int layer;
  Site site;
  MatrixF activations;  // [N·T, w]
  MatrixD xtx;
  calib::CrossStats cross;  // empty unless asked
};

// Replaces W by a rank-⌈min/2⌉ truncated SVD (the layer's output changes).
void factorize_half_rank(model::Linear& l) {
  const Eigen::MatrixXf w = l.dense_weight();
  Eigen::JacobiSVD<Eigen::MatrixXf> svd(w, Eigen::ComputeThinU | Eigen::ComputeThinV);
  const Eigen::Index r = (std::min(l.in, l.out) + 1) / 2;
  l.B = svd.matrixU().leftCols(r) * svd.singularValues().head(r).asDiagonal();
  l.A = svd.matrixV().leftCols(r).transpose();
  l.weight = {};
}

// One stage per site, recording what it was handed and factorizing its site's modules; with `cross`
// it asks for the dense cross moments.
class Recorder {
 public:
  explicit Recorder(bool cross) {
    for (const Site site : kSites) stages_.push_back(std::make_unique<SiteStage>(*this, site, cross));
  }
  std::vector<calib::Stage*> stages() {
    std::vector<calib::Stage*> out;
    for (auto& st : stages_) out.push_back(st.get());
    return out;
  }
  std::vector<Seen> seen;

 private:
  class SiteStage : public calib::Stage {
   public:
    SiteStage(Recorder& rec, Site site, bool cross) : rec_(rec), site_(site), cross_(cross) {}
    std::string_view name() const override { return "recorder"; }
    Site site() const override { return site_; }
    bool needs_activations() const override { return true; }
    bool needs_dense_cross() const override { return cross_; }
    void run(const calib::StageInput& in, Model& m) override {
      EXPECT_EQ(in.cross != nullptr, cross_);
      rec_.seen.push_back({in.layer, site_, *in.activations, in.stats_of(site_).xtx,
                           in.cross ? *in.cross : calib::CrossStats{}});
      for (auto& l : m.layer(in.layer).linears)
        if (l.site == site_) factorize_half_rank(l);
    }

   private:
    Recorder& rec_;
    Site site_;
    bool cross_;
  };
  std::vector<std::unique_ptr<SiteStage>> stages_;
};

class Inputs : public model::ForwardObserver {
 public:
  explicit Inputs(int layer) : layer_(layer) {}
  void on_input(int layer, Site site, const MatrixF& x) override {
    if (layer == layer_) x_[site] = x;
  }
  std::map<Site, MatrixF> x_;

 private:
  int layer_;
};

// The dense model's inputs of layer `layer`'s sites.
std::map<Site, MatrixF> dense_inputs(const Model& m, const std::vector<std::int32_t>& ids, int layer) {
  MatrixF h;
  m.embed(ids, kT, h);
  for (int j = 0; j < layer; ++j) m.layer_forward(j, h, kT);
  Inputs obs(layer);
  m.layer_forward(layer, h, kT, &obs);
  return obs.x_;
}

struct PipelineRun {
  std::vector<Seen> seen;
  std::unique_ptr<Model> m;
};

PipelineRun run_recorder(bool cross, calib::PipelineOptions opt, std::filesystem::path* dir_out = nullptr,
                 std::vector<std::int32_t>* ids_out = nullptr) {
  LlamaDims s;
  s.layers = 3;
  const auto dir = make_llama(s, 81).write("compensation-pipeline");
  const auto ids = random_ids(kT * kWindows, s.V, 4);
  Recorder rec(cross);
  PipelineRun r;
  r.m = Model::load(dir);
  opt.batch_windows = 2;  // batches of 2, 2 and 1 windows
  calib::run_layerwise(*r.m, ids, kT, rec.stages(), opt);
  r.seen = rec.seen;
  if (dir_out) *dir_out = dir;
  if (ids_out) *ids_out = ids;
  return r;
}

void expect_cross_pairs_dense_with_compressed(const calib::PipelineOptions& opt) {
  std::filesystem::path dir;
  std::vector<std::int32_t> ids;
  const PipelineRun r = run_recorder(true, opt, &dir, &ids);
  const auto dense = Model::load(dir);
  ASSERT_EQ(r.seen.size(), 12u);
  for (const Seen& s : r.seen) {
    SCOPED_TRACE(::testing::Message() << "layer " << s.layer << " site " << static_cast<int>(s.site));
    const MatrixF x = dense_inputs(*dense, ids, s.layer).at(s.site);  // [N·T, w]
    const MatrixD ref = x.cast<double>().transpose() * s.activations.cast<double>();
    ASSERT_EQ(s.cross.n, kT * kWindows);
    EXPECT_LT(rel(s.cross.xh, ref), 1e-5);
    EXPECT_LT((s.cross.sum - x.cast<double>().colwise().sum().transpose()).norm(), 1e-5 * s.cross.sum.norm());
    // Paired token by token: the dense inputs of other tokens give other moments.
    MatrixF shifted = x;
    shifted.topRows(x.rows() - 1) = x.bottomRows(x.rows() - 1);
    EXPECT_GT(rel(s.cross.xh, shifted.cast<double>().transpose() * s.activations.cast<double>()), 1e-2);
    // x̂ differs from x after the first compressed module (without intra-layer passes, a layer's
    // sites all see its dense modules: x̂ = x throughout layer 0).
    if (s.layer > 0 || (opt.sequential_within_layer && s.site != Site::AttnIn)) {
      EXPECT_GT((x - s.activations).norm(), 1e-3f * x.norm());
    }
  }
}

TEST(DenseStream, CrossMomentsPairTheDenseAndCompressedInputsOfEachToken) {
  expect_cross_pairs_dense_with_compressed({});
}

TEST(DenseStream, AlsoWithPassesOnCopiesAndWithoutIntraLayerPasses) {
  calib::PipelineOptions copies;
  copies.resume_limit_bytes = 0;  // every pass, dense and compressed, on per-batch copies
  expect_cross_pairs_dense_with_compressed(copies);
  calib::PipelineOptions sparse;
  sparse.sequential_within_layer = false;
  expect_cross_pairs_dense_with_compressed(sparse);
}

// The dense stream swaps the layer's dense modules in and out: the compressed stream's inputs,
// statistics and factors are bit-identical with and without it.
TEST(DenseStream, LeavesTheCompressedStreamBitIdentical) {
  for (const bool intra : {true, false}) {
    SCOPED_TRACE(intra);
    calib::PipelineOptions opt;
    opt.sequential_within_layer = intra;
    const PipelineRun with = run_recorder(true, opt), without = run_recorder(false, opt);
    ASSERT_EQ(with.seen.size(), without.seen.size());
    for (std::size_t k = 0; k < with.seen.size(); ++k) {
      EXPECT_EQ(with.seen[k].activations, without.seen[k].activations);
      EXPECT_EQ(with.seen[k].xtx, without.seen[k].xtx);
    }
    for (int i = 0; i < with.m->num_layers(); ++i)
      for (std::size_t j = 0; j < with.m->layer(i).linears.size(); ++j) {
        EXPECT_EQ(with.m->layer(i).linears[j].B, without.m->layer(i).linears[j].B);
        EXPECT_EQ(with.m->layer(i).linears[j].A, without.m->layer(i).linears[j].A);
      }
  }
}

// ---- whole-model compression ------------------------------------------------------------------

struct Compressed {
  std::unique_ptr<Model> m;
  compress::CompressReport report;
};

Compressed compress_with(const std::filesystem::path& dir, const std::vector<std::int32_t>& ids,
                         compress::CompressOptions o) {
  Compressed c;
  c.m = Model::load(dir);
  c.report = compress::compress_model(*c.m, ids, kT, o);
  return c;
}

bool same_factors(const Model& a, const Model& b) {
  for (int i = 0; i < a.num_layers(); ++i)
    for (std::size_t j = 0; j < a.layer(i).linears.size(); ++j) {
      const auto &x = a.layer(i).linears[j], &y = b.layer(i).linears[j];
      if (x.B != y.B || x.A != y.A || x.bias != y.bias || x.perm != y.perm) return false;
    }
  return true;
}

// Off, or on for a method without the root covariance: the factors of before, bit for bit. On with
// it: different factors, marked "compensate" in the report (except modules of joint stages).
TEST(ErrorCompensation, ChangesOnlyRootCovarianceFits) {
  OptDims s;  // biases everywhere
  s.layers = 2;
  const auto dir = make_opt(s, 82).write("compensation-methods");
  const auto ids = random_ids(kT * kWindows, s.V, 6);
  for (const auto method : {compress::Method::AsvdL2, compress::Method::AsvdRootCov, compress::Method::LatentLlm}) {
    SCOPED_TRACE(compress::method_name(method));
    compress::CompressOptions o;
    o.method = method;
    o.ratio = 0.3;
    const Compressed off = compress_with(dir, ids, o);
    o.error_compensation = true;
    const Compressed on = compress_with(dir, ids, o);
    const bool rootcov = method != compress::Method::AsvdL2;
    EXPECT_EQ(same_factors(*off.m, *on.m), !rootcov);
    int compensated = 0, joint_qk = 0;
    for (const auto& r : on.report.modules) {
      compensated += r.how == "compensate";
      joint_qk += r.how == "joint-qk-compensate";
    }
    // asvd-rootcov: all 6 modules a layer; latentllm (joint qk, ud): v_proj and out_proj, and q_proj and
    // k_proj by the compensated joint Q-K.
    EXPECT_EQ(compensated, method == compress::Method::AsvdRootCov ? 12 : method == compress::Method::LatentLlm ? 4 : 0);
    EXPECT_EQ(joint_qk, method == compress::Method::LatentLlm ? 4 : 0);
    EXPECT_EQ(on.report.times.dense_forward > 0, rootcov);
  }
}

// Without intra-layer passes only the layer's input site compensates (stage_local.cpp: a later site's
// inputs come from the layer's dense modules, whose compensated factors already undo the upstream error).
TEST(ErrorCompensation, WithoutIntraLayerPassesOnlyTheAttentionInputCompensates) {
  OptDims s;
  s.layers = 2;
  const auto dir = make_opt(s, 84).write("compensation-no-intra");
  const auto ids = random_ids(kT * kWindows, s.V, 8);
  compress::CompressOptions o;
  o.method = compress::Method::AsvdRootCov;
  o.ratio = 0.3;
  o.error_compensation = true;
  o.pipeline.sequential_within_layer = false;
  const Compressed c = compress_with(dir, ids, o);
  for (const auto& r : c.report.modules) {
    const bool attn_in = r.name.find("q_proj") != std::string::npos || r.name.find("k_proj") != std::string::npos ||
                         r.name.find("v_proj") != std::string::npos;
    EXPECT_EQ(r.how, attn_in ? "compensate" : "local") << r.name;
  }
}

// --resume continues the dense stream: a run stopped after layer 1 and resumed gives the factors of
// an uninterrupted run, bit for bit.
TEST(ErrorCompensation, ResumesTheDenseStreamBitForBit) {
  LlamaDims s;
  s.layers = 3;
  const auto dir = make_llama(s, 83).write("compensation-resume");
  const auto ids = random_ids(kT * kWindows, s.V, 7);
  compress::CompressOptions o;
  o.method = compress::Method::AsvdRootCov;
  o.ratio = 0.3;
  o.error_compensation = true;
  const Compressed whole = compress_with(dir, ids, o);
  o.state_dir = make_temp_dir("compensation-resume-state");
  o.stop_after_layers = 1;
  (void)compress_with(dir, ids, o);
  o.stop_after_layers = 0;
  o.resume = true;
  const Compressed resumed = compress_with(dir, ids, o);
  EXPECT_EQ(resumed.report.layers_resumed, 1);
  EXPECT_TRUE(same_factors(*whole.m, *resumed.m));
  // A state of the same run without compensation does not match (the option is in the fingerprint).
  o.error_compensation = false;
  expect_contains(error_of<ConfigError>([&] { (void)compress_with(dir, ids, o); }), {"resume state of a different run"});
}

}  // namespace
}  // namespace latentllm
