// calib::run_layerwise (issue 3, item 2): the inputs and statistics each stage of layer i sees are
// those of the calibration windows forwarded through the ALREADY-COMPRESSED layers 0..i−1 (and,
// within layer i, through the modules compressed by the earlier stages), recomputed here
// independently from the final model, and they differ from the dense model's.
#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <string>
#include <vector>

#include <Eigen/SVD>

#include "latentllm/threads.hpp"
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

constexpr Site kSites[] = {Site::AttnIn, Site::AttnOut, Site::MlpIn, Site::MlpMid};
constexpr int kT = 10, kWindows = 5;

// What the pipeline handed the compressor for one stage.
struct Seen {
  int layer;
  Site site;
  MatrixF activations;  // [N·T, w]
  MatrixD xtx;          // [w, w]
  VectorD sum;          // [w]
  std::int64_t n;
};

// Replaces W by its rank-⌈min/2⌉ truncated SVD B·A (a real factorization: the layer's output changes).
void factorize_half_rank(model::Linear& l) {
  const Eigen::MatrixXf w = l.dense_weight();  // [out, in]
  Eigen::JacobiSVD<Eigen::MatrixXf> svd(w, Eigen::ComputeThinU | Eigen::ComputeThinV);
  const Eigen::Index r = (std::min(l.in, l.out) + 1) / 2;
  l.B = svd.matrixU().leftCols(r) * svd.singularValues().head(r).asDiagonal();  // [out, r]
  l.A = svd.matrixV().leftCols(r).transpose();                                  // [r, in]
  l.weight = {};
}

// One stage per site: records the stage's inputs, then factorizes the modules its site feeds. With
// rewrite_attn_in, the AttnOut stage also rewrites the modules AttnIn feeds (as joint V-O rewrites
// v_proj), saying so in rewrites() when `declared`.
class FactorizingRecorder {
 public:
  explicit FactorizingRecorder(bool rewrite_attn_in = false, bool declared = false) {
    for (const Site site : kSites) stages_.push_back(std::make_unique<SiteStage>(*this, site, rewrite_attn_in, declared));
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
    SiteStage(FactorizingRecorder& rec, Site site, bool rewrite_attn_in, bool declared)
        : rec_(rec), site_(site), rewrite_attn_in_(rewrite_attn_in), declared_(declared) {}
    std::string_view name() const override { return "recorder"; }
    Site site() const override { return site_; }
    bool needs_activations() const override { return true; }
    std::vector<Site> rewrites() const override {
      if (declared_ && site_ == Site::AttnOut) return {Site::AttnIn, site_};
      return {site_};
    }
    void run(const calib::StageInput& in, Model& m) override {
      const calib::SiteStats& st = in.stats_of(site_);
      rec_.seen.push_back({in.layer, site_, *in.activations, st.xtx, st.sum, st.n});
      auto& layer = m.layer(in.layer);
      for (auto& l : layer.linears)
        if (l.site == site_) factorize_half_rank(l);
      if (!rewrite_attn_in_ || site_ != Site::AttnOut) return;
      for (auto& l : layer.linears)
        if (l.site == Site::AttnIn) l.B.f32() *= 0.5f;
    }

   private:
    FactorizingRecorder& rec_;
    Site site_;
    bool rewrite_attn_in_, declared_;
  };
  std::vector<std::unique_ptr<SiteStage>> stages_;
};

// Site inputs of layer `layer` when the windows run through `m` as it is: [N·T, w] per site.
class SiteInputs : public model::ForwardObserver {
 public:
  explicit SiteInputs(int layer) : layer_(layer) {}
  void on_input(int layer, Site site, const MatrixF& x) override {
    if (layer == layer_) x_[site] = x;
  }
  std::map<Site, MatrixF>& inputs() { return x_; }

 private:
  int layer_;
  std::map<Site, MatrixF> x_;
};

// Forwards ids through layers 0..layer−1 of `m`; returns layer `layer`'s site inputs and (in h) its input.
std::map<Site, MatrixF> site_inputs(const Model& m, const std::vector<std::int32_t>& ids, int layer, MatrixF& h) {
  m.embed(ids, kT, h);
  for (int j = 0; j < layer; ++j) m.layer_forward(j, h, kT);
  SiteInputs obs(layer);
  MatrixF scratch = h;
  m.layer_forward(layer, scratch, kT, &obs);
  return obs.inputs();
}

double rel_diff(const MatrixD& a, const MatrixD& b) { return (a - b).norm() / b.norm(); }
MatrixD gram(const MatrixF& x) { return x.cast<double>().transpose() * x.cast<double>(); }  // XᵀX in double

struct Run {
  Checkpoint ckpt;
  std::unique_ptr<Model> dense, compressed;
  FactorizingRecorder rec;
  std::vector<std::int32_t> ids;
};

std::unique_ptr<Run> run(const calib::PipelineOptions& opt) {
  auto r = std::make_unique<Run>();
  LlamaDims s;
  s.layers = 3;
  r->ckpt = make_llama(s, 71);
  const auto dir = r->ckpt.write("pipeline");
  r->dense = Model::load(dir);
  r->compressed = Model::load(dir);
  r->ids = random_ids(kT * kWindows, s.V, 5);
  calib::run_layerwise(*r->compressed, r->ids, kT, r->rec.stages(), opt);
  return r;
}

TEST(Pipeline, EachStageSeesTheWindowsThroughTheCompressedModulesBeforeIt) {
  calib::PipelineOptions opt;
  opt.batch_windows = 2;  // several layer_forward calls per stage, the last one partial
  const auto r = run(opt);
  const Model& m = *r->compressed;
  ASSERT_EQ(r->rec.seen.size(), 3u * 4u);
  for (int i = 0; i < m.num_layers(); ++i)
    for (const auto& l : m.layer(i).linears) ASSERT_TRUE(l.factored()) << l.name;

  for (const auto& st : r->rec.seen) {
    SCOPED_TRACE(::testing::Message() << "layer " << st.layer << " site " << static_cast<int>(st.site));
    // Recomputed from the final model: layers 0..i−1 are compressed, and in layer i the modules of
    // the earlier stages, the only ones a site's input depends on, are compressed too.
    MatrixF h_comp, h_dense;
    const auto comp = site_inputs(m, r->ids, st.layer, h_comp).at(st.site);
    const auto dense = site_inputs(*r->dense, r->ids, st.layer, h_dense).at(st.site);
    ASSERT_EQ(st.n, kT * kWindows);
    ASSERT_EQ(st.activations.rows(), comp.rows());
    ASSERT_EQ(st.activations.cols(), comp.cols());
    EXPECT_LT((st.activations - comp).norm(), 1e-5f * comp.norm());
    EXPECT_LT(rel_diff(st.xtx, gram(comp)), 1e-5);
    EXPECT_LT((st.sum - comp.cast<double>().colwise().sum().transpose()).norm(), 1e-5 * st.sum.norm() + 1e-9);
    // Dense inputs would be different: everywhere except layer 0's attention input, which no
    // compressed module precedes.
    if (st.layer == 0 && st.site == Site::AttnIn) {
      EXPECT_LT(rel_diff(st.xtx, gram(dense)), 1e-6);
    } else {
      EXPECT_GT(rel_diff(st.xtx, gram(dense)), 1e-2);
    }
  }
}

// With sequential_within_layer off (SparseGPT), every stage of layer i sees the dense layer i, but
// still after the compressed layers 0..i−1.
TEST(Pipeline, WithoutIntraLayerStagesSeeTheDenseLayerAfterTheCompressedOnes) {
  calib::PipelineOptions opt;
  opt.sequential_within_layer = false;
  const auto r = run(opt);
  ASSERT_EQ(r->rec.seen.size(), 3u * 4u);
  for (const auto& st : r->rec.seen) {
    SCOPED_TRACE(::testing::Message() << "layer " << st.layer << " site " << static_cast<int>(st.site));
    // The dense model with layers 0..i−1 taken from the compressed one.
    auto hybrid = Model::load(r->ckpt.write("pipeline-hybrid"));
    for (int j = 0; j < st.layer; ++j) hybrid->layer(j) = r->compressed->layer(j);
    MatrixF h_hybrid, h_dense;
    const auto expected = site_inputs(*hybrid, r->ids, st.layer, h_hybrid).at(st.site);
    const auto dense = site_inputs(*r->dense, r->ids, st.layer, h_dense).at(st.site);
    EXPECT_LT(rel_diff(st.xtx, gram(expected)), 1e-5);
    if (st.layer > 0) {
      EXPECT_GT(rel_diff(st.xtx, gram(dense)), 1e-2);
    }
  }
}

struct Outcome {
  std::vector<Seen> seen;
  std::unique_ptr<Model> m;
};

Outcome run_with(FactorizingRecorder& rec, bool resume, std::int64_t limit = -1) {
  LlamaDims s;
  s.layers = 3;
  Outcome o;
  o.m = Model::load(make_llama(s, 72).write("pipeline-resume"));
  calib::PipelineOptions opt;
  opt.batch_windows = 2;
  opt.resume_passes = resume;
  opt.resume_limit_bytes = limit;
  calib::run_layerwise(*o.m, random_ids(kT * kWindows, s.V, 8), kT, rec.stages(), opt);
  o.seen = rec.seen;
  return o;
}

// Every stage saw the same inputs, bit for bit, and the layers ended the same.
void expect_same(const Outcome& a, const Outcome& b) {
  ASSERT_EQ(a.seen.size(), b.seen.size());
  for (std::size_t k = 0; k < a.seen.size(); ++k) {
    SCOPED_TRACE(::testing::Message() << "layer " << a.seen[k].layer << " site " << static_cast<int>(a.seen[k].site));
    EXPECT_EQ(a.seen[k].activations, b.seen[k].activations);
    EXPECT_EQ(a.seen[k].xtx, b.seen[k].xtx);
    EXPECT_EQ(a.seen[k].sum, b.seen[k].sum);
  }
  for (int i = 0; i < a.m->num_layers(); ++i)
    for (std::size_t j = 0; j < a.m->layer(i).linears.size(); ++j) {
      EXPECT_EQ(a.m->layer(i).linears[j].B, b.m->layer(i).linears[j].B) << a.m->layer(i).linears[j].name;
      EXPECT_EQ(a.m->layer(i).linears[j].A, b.m->layer(i).linears[j].A) << a.m->layer(i).linears[j].name;
    }
}

// Stages out of the sites' forward order, or reading a later site, are refused before any work.
TEST(Pipeline, StagesMustFollowTheForwardOrder) {
  LlamaDims s;
  s.layers = 1;
  auto m = Model::load(make_llama(s, 74).write("pipeline-order"));
  FactorizingRecorder rec;
  auto st = rec.stages();
  std::swap(st[1], st[2]);  // MlpIn before AttnOut
  const auto ids = random_ids(kT * 2, s.V, 1);
  EXPECT_EQ(test::error_of<ConfigError>([&] { calib::run_layerwise(*m, ids, kT, st); }),
            "calibration stages: recorder at attn-out after a stage at mlp-in (expected the sites' forward order)");
  EXPECT_TRUE(rec.seen.empty());
}

// Passes that resume where the previous stage stopped (each module runs once per layer) give the
// same result as passes that restart at the layer's input, also when some states exceed the
// memory limit (those passes run on copies) and when a stage rewrites an earlier site's modules.
TEST(Pipeline, ResumedPassesMatchRestartedOnesBitForBit) {
  FactorizingRecorder r1, r2, r3;
  const Outcome restarted = run_with(r1, false);
  expect_same(run_with(r2, true), restarted);
  // 4 bytes × 50 tokens × (d 16 + site width): AttnIn and MlpIn (16) fit in 7000, AttnOut (24) and MlpMid (20) do not.
  expect_same(run_with(r3, true, 7000), restarted);

  FactorizingRecorder d1(true, true), d2(true, true);
  expect_same(run_with(d2, true), run_with(d1, false));
}

// The check above can fail: a compressor that rewrites AttnIn's modules at AttnOut without saying
// so makes the resumed MlpIn pass read stale attention outputs.
TEST(Pipeline, AnUndeclaredEarlierRewriteChangesTheResumedPasses) {
  FactorizingRecorder u1(true, false), u2(true, false);
  const Outcome restarted = run_with(u1, false), resumed = run_with(u2, true);
  ASSERT_EQ(restarted.seen.size(), resumed.seen.size());
  EXPECT_EQ(resumed.seen[1].xtx, restarted.seen[1].xtx);  // layer 0 AttnOut: before the rewrite
  EXPECT_NE(resumed.seen[2].xtx, restarted.seen[2].xtx);  // layer 0 MlpIn: stale in the resumed run
}

// The methods' own declarations (Stage::rewrites of stage_joint_vo.cpp, stage_joint_ud.cpp): joint V-O
// rewrites v_proj at the o_proj stage and joint up-down the down projection at the MlpIn stage;
// resumed and restarted passes still give the same factors, bit for bit.
TEST(Pipeline, EveryMethodCompressesTheSameResumedOrRestarted) {
  LlamaDims s;
  s.layers = 2;
  const auto dir = make_llama(s, 73).write("pipeline-methods");
  const auto ids = random_ids(kT * kWindows, s.V, 9);
  for (const auto method : {compress::Method::AsvdRootCov, compress::Method::LatentLlm}) {
    SCOPED_TRACE(compress::method_name(method));
    std::unique_ptr<Model> m[2];
    for (int resume = 0; resume < 2; ++resume) {
      m[resume] = Model::load(dir);
      compress::CompressOptions o;
      o.method = method;
      o.ratio = 0.3;
      o.joint.vo = true;
      o.pipeline.resume_passes = resume == 1;
      (void)compress::compress_model(*m[resume], ids, kT, o);
    }
    for (int i = 0; i < s.layers; ++i)
      for (std::size_t j = 0; j < m[0]->layer(i).linears.size(); ++j) {
        const auto& a = m[0]->layer(i).linears[j];
        const auto& b = m[1]->layer(i).linears[j];
        ASSERT_TRUE(a.factored()) << a.name;
        EXPECT_EQ(a.B, b.B) << a.name;
        EXPECT_EQ(a.A, b.A) << a.name;
        EXPECT_EQ(a.bias, b.bias) << a.name;
      }
  }
}

// SiteStats::add widens in parallel blocks and runs one dsyrk per chunk of 4096 rows: the moments
// equal the double-precision sums, and are bit-identical for 1 and 2 threads.
TEST(SiteStats, MomentsMatchDoubleSumsForAnyThreadCount) {
  const MatrixF x = MatrixF::Random(10100, 13);  // three chunks, the last one partial
  const MatrixD xd = x.cast<double>();
  calib::SiteStats one, two;
  core::set_num_threads(1);
  one.reset(13);
  one.add(x.topRows(600));
  one.add(x.bottomRows(9500));
  core::set_num_threads(2);
  two.reset(13);
  two.add(x.topRows(600));
  two.add(x.bottomRows(9500));
  core::set_num_threads(0);
  const MatrixD ref = xd.transpose() * xd;
  EXPECT_LT((one.xtx - ref).cwiseAbs().maxCoeff(), 1e-12 * ref.cwiseAbs().maxCoeff());
  EXPECT_EQ(one.xtx, one.xtx.transpose());
  EXPECT_LT((one.sum - xd.colwise().sum().transpose()).cwiseAbs().maxCoeff(), 1e-9);
  EXPECT_LT((one.abs_sum - xd.cwiseAbs().colwise().sum().transpose()).cwiseAbs().maxCoeff(), 1e-9);
  EXPECT_EQ(one.n, 10100);
  EXPECT_EQ(one.xtx, two.xtx);
  EXPECT_EQ(one.sum, two.sum);
  EXPECT_EQ(one.abs_sum, two.abs_sum);
}

// With float products (ssyrk per block of 1024 tokens, each block's sum added in double) every entry
// of XᵀX is within 4e-6 of Σ|x_i|·|x_j| of the double sum (rounding of a 1024-term float sum: about
// √1024·2⁻²⁴ ≈ 2e-6 typical; measured below 1e-6), across the 16 column blocks and a partial block;
// the sums are the double ones, and 1 and 2 threads give the same bits. add_upper() leaves the strict
// lower triangle alone and one symmetrize() after a stream of them gives add()'s bits.
TEST(SiteStats, FloatProductsStayWithinTheirRoundingBound) {
  const int w = 301;  // columns split 75/31/24/.../10 between 16 tasks
  MatrixF x = MatrixF::Random(2500, w);
  x.col(7).array() += 3.0f;  // a feature with a large mean: the worst case for cancellation
  const MatrixD xd = x.cast<double>();
  calib::SiteStats one, two, exact;
  core::set_num_threads(1);
  one.reset(w);
  one.add(x.topRows(1100), 0, true);
  one.add(x.bottomRows(1400), 1100, true);
  core::set_num_threads(2);
  two.reset(w);
  two.add(x.topRows(1100), 0, true);
  two.add(x.bottomRows(1400), 1100, true);
  core::set_num_threads(0);
  exact.reset(w);
  exact.add(x);
  const MatrixD ref = xd.transpose() * xd;
  const MatrixD scale = xd.cwiseAbs().transpose() * xd.cwiseAbs();
  const double err = ((one.xtx - ref).cwiseAbs().array() / scale.array()).maxCoeff();
  EXPECT_LT(err, 4e-6);
  EXPECT_GT(err, 1e-12);  // the float route is really taken
  EXPECT_EQ(one.xtx, one.xtx.transpose());
  EXPECT_EQ(one.xtx, two.xtx);
  EXPECT_EQ(one.sum, exact.sum);
  EXPECT_EQ(one.abs_sum, exact.abs_sum);
  EXPECT_EQ(one.n, 2500);
  calib::SiteStats upper;
  upper.reset(w);
  upper.add_upper(x.topRows(1100), 0, true);
  upper.add_upper(x.bottomRows(1400), 1100, true);
  EXPECT_EQ(upper.xtx(200, 3), 0.0);  // still the reset's zero below the diagonal
  upper.symmetrize();
  EXPECT_EQ(upper.xtx, one.xtx);
}

// A stage that reads no statistics of its site (the pre-pass's output-side spectra) gets the site's
// activations without the [w, w] products: the statistics are not there to read, and the covariance's
// FLOPs count nothing for it.
TEST(Pipeline, ASiteNobodyReadsIsTappedWithoutStatistics) {
  class ActivationsOnly : public calib::Stage {
   public:
    std::string_view name() const override { return "activations-only"; }
    Site site() const override { return Site::MlpMid; }
    std::vector<Site> reads() const override { return {}; }
    bool needs_activations() const override { return true; }
    std::vector<Site> rewrites() const override { return {}; }
    void run(const calib::StageInput& in, Model&) override {
      x.push_back(*in.activations);
      EXPECT_THROW(in.stats_of(Site::MlpMid), Error);
    }
    std::vector<MatrixF> x;
  } stage;
  LlamaDims s;
  s.layers = 2;
  const Checkpoint ckpt = make_llama(s, 72);
  auto m = Model::load(ckpt.write("pipeline-nostats"));
  const auto ids = random_ids(kT * kWindows, s.V, 6);
  calib::Stage* stages[] = {&stage};
  const calib::PipelineTimes t = calib::run_layerwise(*m, ids, kT, stages, calib::PipelineOptions{});
  ASSERT_EQ(stage.x.size(), 2u);
  MatrixF h;
  for (int layer = 0; layer < 2; ++layer) EXPECT_EQ(stage.x[layer], site_inputs(*m, ids, layer, h).at(Site::MlpMid));
  EXPECT_EQ(t.covariance_flops, 0.0);
}

// A consuming stage (Stage::consume; the output side of a wide module) gets its site's batches in
// token order, each layer's before its run, with the layer's modules as they stand, and nothing else:
// batch by batch they make up the site's inputs, and what it reports counts as its FLOPs.
TEST(Pipeline, AConsumingStageGetsItsSitesBatchesInOrderBeforeItRuns) {
  class Consumer : public calib::Stage {
   public:
    std::string_view name() const override { return "consumer"; }
    Site site() const override { return Site::MlpMid; }
    std::vector<Site> reads() const override { return {}; }
    bool consumes_batches() const override { return true; }
    std::vector<Site> rewrites() const override { return {}; }
    double consume(const model::DecoderLayer& layer, int i, const MatrixF& x, std::int64_t first_token) override {
      EXPECT_EQ(&layer, &m->layer(i));
      if (static_cast<int>(x_by_layer.size()) == i) x_by_layer.emplace_back(0, x.cols());
      MatrixF& all = x_by_layer.at(static_cast<std::size_t>(i));
      EXPECT_EQ(first_token, all.rows());  // in order, none skipped
      all.conservativeResize(all.rows() + x.rows(), Eigen::NoChange);
      all.bottomRows(x.rows()) = x;
      ++batches;
      return 1.0;
    }
    void run(const calib::StageInput& in, Model&) override {
      EXPECT_EQ(static_cast<int>(x_by_layer.size()), in.layer + 1);  // its batches came first
      EXPECT_EQ(in.activations, nullptr);
      EXPECT_THROW(in.stats_of(Site::MlpMid), Error);
    }
    const Model* m = nullptr;
    std::vector<MatrixF> x_by_layer;
    int batches = 0;
  } stage;
  LlamaDims s;
  s.layers = 2;
  auto m = Model::load(make_llama(s, 73).write("pipeline-consume"));
  stage.m = m.get();
  const auto ids = random_ids(kT * kWindows, s.V, 7);
  calib::Stage* stages[] = {&stage};
  calib::PipelineOptions po;
  po.batch_windows = 2;  // 5 windows: batches of 2, 2 and 1
  const calib::PipelineTimes t = calib::run_layerwise(*m, ids, kT, stages, po);
  ASSERT_EQ(stage.x_by_layer.size(), 2u);
  EXPECT_EQ(stage.batches, 6);
  EXPECT_EQ(t.consume_flops, 6.0);
  EXPECT_EQ(t.covariance_flops, 0.0);
  MatrixF h;
  for (int layer = 0; layer < 2; ++layer) {  // other batch shapes than site_inputs': float rounding apart
    const MatrixF& got = stage.x_by_layer[static_cast<std::size_t>(layer)];
    const MatrixF want = site_inputs(*m, ids, layer, h).at(Site::MlpMid);
    ASSERT_EQ(got.rows(), want.rows());
    EXPECT_LT((got - want).norm(), 1e-5f * want.norm());
  }
}

// The ETA: the remaining layers' share of the planned work (global ranks make layers unequal), by count
// without weights; a resumed run counts only the layers it ran.
TEST(Pipeline, EtaWeighsTheRemainingLayers) {
  calib::PipelineOptions o;
  EXPECT_DOUBLE_EQ(calib::eta_seconds(o, 4, 0, 10.0), 30.0);  // 3 layers left at 10 s each
  o.layer_weights = {2, 1, 1, 2};
  EXPECT_DOUBLE_EQ(calib::eta_seconds(o, 4, 0, 10.0), 20.0);  // weight 4 left for 2 done
  EXPECT_DOUBLE_EQ(calib::eta_seconds(o, 4, 2, 40.0), 20.0);  // 2 left for 4 done
  EXPECT_DOUBLE_EQ(calib::eta_seconds(o, 4, 3, 60.0), 0.0);
  o.start_layer = 1;
  EXPECT_DOUBLE_EQ(calib::eta_seconds(o, 4, 1, 10.0), 30.0);  // 3 left for the 1 run
  o.layer_weights = {1, 1};  // not one per layer: by count
  EXPECT_DOUBLE_EQ(calib::eta_seconds(o, 4, 1, 10.0), 20.0);
}

TEST(SiteStats, FinitenessCheckWithoutStatisticsNamesItsToken) {
  MatrixF x = MatrixF::Ones(50, 6);
  EXPECT_NO_THROW(calib::check_finite_rows(x, 0));
  x(41, 5) = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(test::error_of<NumericError>([&] { calib::check_finite_rows(x, 7); }),
            "non-finite calibration input (expected finite activations, got -inf at token 48, feature 5)");
}

TEST(SiteStats, NonFiniteWithFloatProductsNamesItsToken) {
  MatrixF x = MatrixF::Ones(3000, 4);
  x(2500, 1) = std::numeric_limits<float>::infinity();
  calib::SiteStats s;
  s.reset(4);
  const auto what = test::error_of<NumericError>([&] { s.add(x, 10, true); });
  EXPECT_EQ(what, "non-finite calibration input (expected finite activations, got inf at token 2510, feature 1)");
}

TEST(SiteStats, NonFiniteInALaterChunkNamesItsToken) {
  MatrixF x = MatrixF::Ones(9000, 4);
  x(8500, 3) = std::numeric_limits<float>::quiet_NaN();
  calib::SiteStats s;
  s.reset(4);
  try {
    s.add(x, 100);
    ADD_FAILURE() << "no exception";
  } catch (const NumericError& e) {
    EXPECT_STREQ(e.what(), "non-finite calibration input (expected finite activations, got nan at token 8600, "
                           "feature 3)");
  }
}

}  // namespace
}  // namespace latentllm

namespace latentllm {
namespace {

// Multimodal calibration (PipelineOptions::lengths, input_embeddings): sequences of unequal lengths run
// one per forward call, so each sequence's site inputs are those of the sequence alone (no padding, no
// attention across sequences), and the layer-0 input may replace the token embeddings.
TEST(Pipeline, SequencesOfUnequalLengthsEachRunOnTheirOwn) {
  class Capture : public calib::Stage {
   public:
    std::string_view name() const override { return "capture"; }
    Site site() const override { return Site::MlpIn; }
    std::vector<Site> reads() const override { return {}; }
    bool needs_activations() const override { return true; }
    std::vector<Site> rewrites() const override { return {}; }
    void run(const calib::StageInput& in, Model&) override { x.push_back(*in.activations); }
    std::vector<MatrixF> x;  // [Σ len, d] per layer
  };
  LlamaDims s;
  s.layers = 2;
  auto m = Model::load(make_llama(s, 74).write("pipeline-lengths"));
  const std::vector<int> lengths = {7, 12, 3};
  const auto ids = random_ids(22, s.V, 11);
  Capture all;
  calib::Stage* stages[] = {&all};
  calib::PipelineOptions po;
  po.lengths = lengths;
  (void)calib::run_layerwise(*m, ids, 0, stages, po);
  ASSERT_EQ(all.x.size(), 2u);
  // Each sequence alone, as one window of its own length: the same rows, bit for bit.
  std::int64_t r0 = 0;
  for (const int len : lengths) {
    Capture one;
    calib::Stage* st[] = {&one};
    const std::vector<std::int32_t> part(ids.begin() + r0, ids.begin() + r0 + len);
    (void)calib::run_layerwise(*m, part, len, st, calib::PipelineOptions{});
    for (int layer = 0; layer < 2; ++layer) EXPECT_EQ(MatrixF(all.x[layer].middleRows(r0, len)), one.x[layer]);
    r0 += len;
  }
  // The embeddings given as the layer-0 input: the same as embedding the ids.
  MatrixF emb(22, s.d);
  r0 = 0;
  for (const int len : lengths) {
    MatrixF h;
    m->embed(std::span<const std::int32_t>(ids).subspan(static_cast<std::size_t>(r0), static_cast<std::size_t>(len)),
             len, h);
    emb.middleRows(r0, len) = h;
    r0 += len;
  }
  Capture given;
  calib::Stage* st2[] = {&given};
  po.input_embeddings = &emb;
  (void)calib::run_layerwise(*m, ids, 0, st2, po);
  EXPECT_EQ(given.x[1], all.x[1]);
  // Lengths that do not add up to the tokens are refused.
  po.lengths = {7, 12};
  EXPECT_THROW(calib::run_layerwise(*m, ids, 0, st2, po), ConfigError);
}

// compress_model on sequences of unequal lengths: equal lengths give the windows' checkpoint bit for bit.
TEST(Pipeline, EqualLengthSequencesCompressAsWindows) {
  LlamaDims s;
  s.layers = 2;
  const auto dir = make_llama(s, 75).write("pipeline-lengths-compress");
  const auto ids = random_ids(kT * kWindows, s.V, 12);
  std::unique_ptr<Model> m[2];
  for (int k = 0; k < 2; ++k) {
    m[k] = Model::load(dir);
    compress::CompressOptions o = compress::preset_options(compress::Preset::Default, compress::Method::LatentLlm, 0.3);
    o.pipeline.batch_windows = 1;
    if (k == 1) o.pipeline.lengths = std::vector<int>(kWindows, kT);
    (void)compress::compress_model(*m[k], ids, kT, o);
  }
  for (int i = 0; i < s.layers; ++i)
    for (std::size_t j = 0; j < m[0]->layer(i).linears.size(); ++j) {
      EXPECT_EQ(m[0]->layer(i).linears[j].B, m[1]->layer(i).linears[j].B);
      EXPECT_EQ(m[0]->layer(i).linears[j].A, m[1]->layer(i).linears[j].A);
    }
}

}  // namespace
}  // namespace latentllm
