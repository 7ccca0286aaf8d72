// calib::run_layerwise (issue 3, item 2): the inputs and statistics each stage of layer i sees are
// those of the calibration windows forwarded through the ALREADY-COMPRESSED layers 0..i−1 (and,
// within layer i, through the modules compressed by the earlier stages), recomputed here
// independently from the final model, and they differ from the dense model's.
#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <vector>

#include <Eigen/SVD>

#include "latentllm/calib.hpp"
#include "latentllm/error.hpp"
#include "latentllm/model.hpp"
#include "model_fixtures.hpp"

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
  MatrixF layer_input;  // [N·T, d]
};

// Replaces W by its rank-⌈min/2⌉ truncated SVD B·A (a real factorization: the layer's output changes).
void factorize_half_rank(model::Linear& l) {
  const Eigen::MatrixXf w = l.dense_weight();  // [out, in]
  Eigen::JacobiSVD<Eigen::MatrixXf> svd(w, Eigen::ComputeThinU | Eigen::ComputeThinV);
  const Eigen::Index r = (std::min(l.in, l.out) + 1) / 2;
  l.B = svd.matrixU().leftCols(r) * svd.singularValues().head(r).asDiagonal();  // [out, r]
  l.A = svd.matrixV().leftCols(r).transpose();                                  // [r, in]
  l.weight.resize(0, 0);
}

// Records every stage's inputs, then factorizes the modules that stage's site feeds.
class FactorizingRecorder : public calib::LayerCompressor {
 public:
  std::vector<Site> stages(const Model&) const override { return {std::begin(kSites), std::end(kSites)}; }
  bool needs_activations(Site) const override { return true; }
  void compress(const calib::StageInput& in, Model& m) override {
    seen.push_back({in.layer, in.site, *in.activations, in.stats->xtx, in.stats->sum, in.stats->n, *in.layer_input});
    auto& layer = m.layer(in.layer);
    for (auto& l : layer.linears)
      if (layer.site_of(l.name) == in.site) factorize_half_rank(l);
  }
  std::vector<Seen> seen;
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
  calib::run_layerwise(*r->compressed, r->ids, kT, r->rec, opt);
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
    EXPECT_LT((st.layer_input - h_comp).norm(), 1e-5f * h_comp.norm());
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
    EXPECT_LT((st.layer_input - h_hybrid).norm(), 1e-5f * h_hybrid.norm());
    if (st.layer > 0) {
      EXPECT_GT(rel_diff(st.xtx, gram(dense)), 1e-2);
    }
  }
}

// SiteStats::add widens in parallel blocks and runs one dsyrk per chunk of 4096 rows: the moments
// equal the double-precision sums, and are bit-identical for 1 and 2 threads.
TEST(SiteStats, MomentsMatchDoubleSumsForAnyThreadCount) {
  const MatrixF x = MatrixF::Random(10100, 13);  // three chunks, the last one partial
  const MatrixD xd = x.cast<double>();
  calib::SiteStats one, two;
  model::set_num_threads(1);
  one.reset(13);
  one.add(x.topRows(600));
  one.add(x.bottomRows(9500));
  model::set_num_threads(2);
  two.reset(13);
  two.add(x.topRows(600));
  two.add(x.bottomRows(9500));
  model::set_num_threads(0);
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
