// Forward pass of OPT and the Llama family on tiny synthetic checkpoints, checked against a naive
// double-precision reference written from the HF modeling files; Linear in all its forms; bad inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <random>

#include <nlohmann/json.hpp>

#include "latentllm/threads.hpp"
#include "latentllm/error.hpp"
#include "latentllm/eval.hpp"
#include "latentllm/io.hpp"
#include "latentllm/model.hpp"
#include "model_fixtures.hpp"
#include "test_support.hpp"

namespace latentllm {
namespace {

using model::Linear;
using model::Model;
using namespace latentllm::test;  // synthetic checkpoints and the reference forward

// ---------------------------------------------------------------------------------------------
// Linear

MatrixF random_matrix(std::int64_t r, std::int64_t c, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> n(0.0f, scale);
  MatrixF m(r, c);
  for (std::int64_t i = 0; i < m.size(); ++i) m.data()[i] = n(rng);
  return m;
}

Linear make_linear(std::string name, std::int64_t in, std::int64_t out) {
  Linear l;
  l.name = std::move(name);
  l.in = in;
  l.out = out;
  return l;
}

MatrixF reference_linear(const MatrixF& x, const Linear& l) {
  MatrixF y = x * l.dense_weight().transpose();
  if (l.bias.size() > 0) y.rowwise() += l.bias.transpose();
  return y;
}

TEST(Linear, DenseFactoredAndBlockIdentityMatchTheirDenseWeight) {
  std::mt19937 rng(1);
  const std::int64_t n = 37, in = 24, out = 18, r = 7;
  const MatrixF x = random_matrix(n, in, rng);
  Linear dense = make_linear("dense", in, out);
  dense.weight = random_matrix(out, in, rng);
  dense.bias = random_matrix(out, 1, rng).col(0);

  Linear fact = make_linear("fact", in, out);
  fact.B = random_matrix(out, r, rng);
  fact.A = random_matrix(r, in, rng);
  fact.bias = dense.bias;

  Linear block = make_linear("block", in, out);
  block.B = random_matrix(out, r, rng);
  block.A = random_matrix(r, in - r, rng);
  block.block_identity = true;
  for (std::int32_t j = 0; j < in; ++j) block.perm.push_back((j * 5 + 3) % static_cast<std::int32_t>(in));

  for (const Linear* l : {&dense, &fact, &block}) {
    MatrixF y;
    l->forward(x, y);
    ASSERT_EQ(y.rows(), n);
    ASSERT_EQ(y.cols(), out);
    EXPECT_LT((y - reference_linear(x, *l)).norm(), 1e-4f * y.norm()) << l->name;
  }
  // The block-identity dense weight really is B·[I | A] on the permuted columns.
  const MatrixF w = block.dense_weight();
  for (std::int64_t j = 0; j < r; ++j)
    EXPECT_LT((w.col(block.perm[static_cast<std::size_t>(j)]) - block.B.f32().col(j)).norm(), 1e-5f);
  EXPECT_EQ(dense.num_params(), out * in + out);
  EXPECT_EQ(fact.num_params(), out * r + r * in + out);
  EXPECT_EQ(block.num_params(), out * r + r * (in - r));
  EXPECT_EQ(block.rank(), r);
}

// The block-identity forward is y = B·(x[:, perm[:r]] + x[:, perm[r:]]·A₂ᵀ) with A stored as A₂ only
// ([r, in − r]): it copies the identity block's inputs instead of multiplying by I, and never forms
// B·A. Both are observable in float: B·A₂ overflows here while B·(A₂·x) does not, and an infinite
// input in an identity column gives ±∞ outputs, where a product with a dense [I | A₂] would give
// 0·∞ = NaN in every latent coordinate.
TEST(Linear, BlockIdentityForwardNeverMultipliesByTheIdentityNorFormsBA) {
  std::mt19937 rng(3);
  const std::int64_t n = 5, in = 12, out = 9, r = 4;
  Linear l = make_linear("block", in, out);
  l.block_identity = true;
  for (std::int32_t j = 0; j < in; ++j) l.perm.push_back((j * 7 + 2) % static_cast<std::int32_t>(in));
  l.B = random_matrix(out, r, rng, 1e20f);     // [out, r]
  l.A = random_matrix(r, in - r, rng, 1e20f);  // [r, in − r]: A₂ alone
  MatrixF x = random_matrix(n, in, rng);       // [n, in]
  for (std::int64_t j = r; j < in; ++j) x.col(l.perm[static_cast<std::size_t>(j)]) *= 1e-20f;
  EXPECT_FALSE(l.dense_weight().allFinite());  // B·A overflows float

  Eigen::MatrixXd z(n, r);  // [n, r] x_head + x_tail·A₂ᵀ, in double
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t k = 0; k < r; ++k) {
      double s = x(i, l.perm[static_cast<std::size_t>(k)]);
      for (std::int64_t t = 0; t < in - r; ++t) s += double(l.A.f32()(k, t)) * x(i, l.perm[static_cast<std::size_t>(r + t)]);
      z(i, k) = s;
    }
  const Eigen::MatrixXd expected = z * l.B.f32().cast<double>().transpose();  // [n, out]
  MatrixF y;
  l.forward(x, y);
  ASSERT_TRUE(y.allFinite());
  EXPECT_LT((y.cast<double>() - expected).norm(), 1e-5 * expected.norm());

  x(0, l.perm[0]) = std::numeric_limits<float>::infinity();  // identity column 0 of row 0
  l.forward(x, y);
  for (std::int64_t o = 0; o < out; ++o) {
    ASSERT_FALSE(std::isnan(y(0, o))) << o;
    EXPECT_EQ(y(0, o), std::copysign(std::numeric_limits<float>::infinity(), l.B.f32()(o, 0))) << o;
  }
  EXPECT_TRUE(y.bottomRows(n - 1).allFinite());
}

TEST(Linear, WrongInputWidthThrows) {
  Linear l = make_linear("m.q_proj", 4, 3);
  l.weight = MatrixF::Ones(3, 4);
  MatrixF y;
  EXPECT_THROW(l.forward(MatrixF::Ones(2, 5), y), Error);
}

// windows_nll over n_seq windows of T must equal the reference summed window by window.
template <typename RefFn>
void expect_matches_reference(const Model& m, std::int64_t V, int T, int n_seq, RefFn ref) {
  const auto ids = random_ids(static_cast<std::size_t>(T * n_seq), V, 7);
  double expected = 0;
  for (int w = 0; w < n_seq; ++w) expected += ref(std::vector<std::int32_t>(ids.begin() + w * T, ids.begin() + (w + 1) * T));
  const double got = m.windows_nll(ids, T);
  EXPECT_NEAR(got, expected, 1e-4 * std::abs(expected)) << "T=" << T << " n_seq=" << n_seq;
}

TEST(OptModel, PreLayerNormMatchesReference) {
  OptDims s;
  const auto c = make_opt(s, 11);
  const auto m = Model::load(c.write("opt-pre"));
  EXPECT_EQ(m->family(), "opt");
  EXPECT_EQ(m->num_layers(), 2);
  expect_matches_reference(*m, s.V, 12, 3, [&](const auto& ids) { return reference_opt_nll(c, s, ids); });
  expect_matches_reference(*m, s.V, 5, 2, [&](const auto& ids) { return reference_opt_nll(c, s, ids); });
}

TEST(OptModel, PostLayerNormWithProjectionsAndBarePrefixMatchesReference) {
  OptDims s;
  s.pre_ln = false;
  s.p = 10;  // word_embed_proj_dim ≠ hidden_size: project_in / project_out, as OPT-350M
  s.prefix = "decoder.";
  const auto c = make_opt(s, 12);
  const auto m = Model::load(c.write("opt-post"));
  expect_matches_reference(*m, s.V, 9, 2, [&](const auto& ids) { return reference_opt_nll(c, s, ids); });
}

TEST(LlamaModel, GqaRopeSwiGluMatchesReference) {
  LlamaDims s;
  const auto c = make_llama(s, 21);
  const auto m = Model::load(c.write("llama"));
  EXPECT_EQ(m->family(), "llama");
  // T = 70 spans two attention row blocks (64), so the block-causal path is exercised.
  expect_matches_reference(*m, s.V, 70, 2, [&](const auto& ids) { return reference_llama_nll(c, s, ids); });
}

TEST(LlamaModel, Qwen2BiasesAndUntiedHeadMatchReference) {
  LlamaDims s;
  s.arch = "Qwen2ForCausalLM";
  s.type = "qwen2";
  s.qkv_bias = true;
  s.tie = false;
  const auto c = make_llama(s, 22);
  const auto m = Model::load(c.write("qwen2"));
  expect_matches_reference(*m, s.V, 8, 3, [&](const auto& ids) { return reference_llama_nll(c, s, ids); });
  bool has_head = false;
  for (const auto& [k, v] : eval::param_breakdown(*m)) has_head |= k == "lm_head" && v == s.V * s.d;
  EXPECT_TRUE(has_head);
}

TEST(LlamaModel, EmbeddingStoredOnlyAsLmHeadIsFound) {
  LlamaDims s;
  s.head_only = true;
  const auto c = make_llama(s, 23);
  const auto m = Model::load(c.write("headonly"));
  expect_matches_reference(*m, s.V, 6, 1, [&](const auto& ids) { return reference_llama_nll(c, s, ids); });
}

LlamaDims mistral_dims(std::int64_t sliding_window) {
  LlamaDims s;
  s.arch = "MistralForCausalLM";
  s.type = "mistral";
  s.tie = false;
  s.sliding_window = sliding_window;
  return s;
}

TEST(MistralModel, WithoutSlidingWindowMatchesReference) {
  const LlamaDims s = mistral_dims(0);  // config.json "sliding_window": null
  const auto c = make_llama(s, 24);
  const auto m = Model::load(c.write("mistral"));
  EXPECT_EQ(m->config().sliding_window, 0);
  expect_matches_reference(*m, s.V, 70, 2, [&](const auto& ids) { return reference_llama_nll(c, s, ids); });
}

// Windows longer than sliding_window: each query attends to its last sliding_window keys, as HF's
// mask. T = 70 spans two attention row blocks, so the second block starts its keys past 0.
TEST(MistralModel, SlidingWindowMasksOlderKeysAsTheReference) {
  for (const std::int64_t w : {5, 40}) {
    const LlamaDims s = mistral_dims(w);
    const auto c = make_llama(s, 25);
    const auto m = Model::load(c.write("mistral-swa"));
    EXPECT_EQ(m->config().sliding_window, w);
    expect_matches_reference(*m, s.V, 70, 2, [&](const auto& ids) { return reference_llama_nll(c, s, ids); });
    expect_matches_reference(*m, s.V, 12, 3, [&](const auto& ids) { return reference_llama_nll(c, s, ids); });
    // The mask matters here: without it the reference differs, so ignoring the window would fail above.
    const auto ids = random_ids(70, s.V, 7);
    const double windowed = reference_llama_nll(c, s, ids), plain = reference_llama_nll(c, mistral_dims(0), ids);
    EXPECT_GT(std::abs(windowed - plain), 1e-3 * std::abs(plain)) << "window " << w;
  }
}

// T ≤ sliding_window: the window masks nothing, bit-identical to the same weights without a window.
TEST(MistralModel, WindowsWithinSlidingWindowEqualPlainCausalAttention) {
  auto c = make_llama(mistral_dims(12), 26);
  const auto windowed = Model::load(c.write("mistral-w12"));
  c.config["sliding_window"] = nullptr;
  const auto plain = Model::load(c.write("mistral-nowindow"));
  const auto ids = random_ids(3 * 12, 48, 8);
  EXPECT_EQ(windowed->windows_nll(ids, 12), plain->windows_nll(ids, 12));
  // T = 14: query 12 no longer sees key 0 (query 13's output predicts nothing), so the NLL changes.
  EXPECT_NE(windowed->windows_nll(std::span(ids).first(28), 14), plain->windows_nll(std::span(ids).first(28), 14));
}

TEST(Model, ParameterBreakdownCountsEveryTensorOnce) {
  OptDims s;
  const auto c = make_opt(s, 31);
  const auto m = Model::load(c.write("params"));
  std::int64_t stored = 0;
  for (const auto& [name, t] : c.tensors) stored += static_cast<std::int64_t>(t.second.size());
  EXPECT_EQ(eval::num_params(*m), stored);
  const auto breakdown = eval::param_breakdown(*m);
  std::map<std::string, std::int64_t> b(breakdown.begin(), breakdown.end());
  EXPECT_EQ(b["attn"], s.layers * 4 * (s.d * s.d + s.d));
  EXPECT_EQ(b["mlp"], s.layers * (2 * s.d * s.ffn + s.ffn + s.d));
  EXPECT_EQ(b["embed"], s.V * s.p + (s.pos + 2) * s.d);
  EXPECT_EQ(b.count("lm_head"), 0u);  // tied
}

TEST(Model, FusedHeadNllEqualsLogSoftmaxOfHeadLogits) {
  OptDims s;
  s.V = 1500;  // several vocabulary blocks of the fused head
  const auto m = Model::load(make_opt(s, 32).write("fused"));
  const int T = 10;
  const auto ids = random_ids(3 * T, s.V, 4);
  MatrixF h, logits;
  m->embed(ids, T, h);
  for (int i = 0; i < m->num_layers(); ++i) m->layer_forward(i, h, T);
  m->head(h, logits);
  ASSERT_EQ(logits.rows(), 3 * T);
  ASSERT_EQ(logits.cols(), s.V);
  double expected = 0;
  for (int r = 0; r < 3 * T; ++r) {
    if (r % T == T - 1) continue;
    const double mx = logits.row(r).maxCoeff();
    double z = 0;
    for (std::int64_t v = 0; v < s.V; ++v) z += std::exp(logits(r, v) - mx);
    expected += std::log(z) + mx - logits(r, ids[static_cast<std::size_t>(r + 1)]);
  }
  EXPECT_NEAR(m->windows_nll(ids, T), expected, 1e-6 * expected);
}

TEST(Model, OneAndTwoThreadsGiveBitIdenticalNll) {
  LlamaDims s;
  s.V = 700;
  const auto m = Model::load(make_llama(s, 33).write("threads"));
  // Enough windows that the GEMMs, the attention and the head are all split.
  const auto ids = random_ids(12 * 96, s.V, 6);
  core::set_num_threads(1);
  const double one = m->windows_nll(ids, 96);
  core::set_num_threads(2);
  const double two = m->windows_nll(ids, 96);
  const double two_again = m->windows_nll(ids, 96);
  core::set_num_threads(0);
  // Bit-identical: tasks have fixed boundaries and aligned scratch, so neither the thread count nor
  // which thread runs a task changes a single rounding.
  EXPECT_EQ(two, two_again);
  EXPECT_EQ(one, two);
}

// Records which sites a layer reports, with their widths.
class SiteRecorder : public model::ForwardObserver {
 public:
  void on_input(int layer, model::Site site, const MatrixF& x) override {
    calls.push_back({layer, site, x.rows(), x.cols()});
  }
  struct Call {
    int layer;
    model::Site site;
    std::int64_t rows, cols;
  };
  std::vector<Call> calls;
};

TEST(Model, ObserverSeesEachSiteOnceWithTheModuleInputWidth) {
  LlamaDims s;
  const auto m = Model::load(make_llama(s, 41).write("observer"));
  const auto ids = random_ids(20, s.V, 3);
  MatrixF h;
  m->embed(ids, 10, h);
  SiteRecorder rec;
  m->layer_forward(1, h, 10, &rec);
  ASSERT_EQ(rec.calls.size(), 4u);
  const model::Site order[] = {model::Site::AttnIn, model::Site::AttnOut, model::Site::MlpIn, model::Site::MlpMid};
  const std::int64_t widths[] = {s.d, s.H * s.d_h, s.d, s.ffn};
  for (std::size_t k = 0; k < 4; ++k) {
    EXPECT_EQ(rec.calls[k].layer, 1);
    EXPECT_EQ(rec.calls[k].site, order[k]);
    EXPECT_EQ(rec.calls[k].rows, 20);
    EXPECT_EQ(rec.calls[k].cols, widths[k]);
    // The module fed by that site has that input width.
    for (const auto& l : m->layer(1).linears)
      if (l.site == order[k]) {
        EXPECT_EQ(l.in, widths[k]) << l.name;
      }
  }
}

// A recorder that asks the forward to stop after `last` (ForwardObserver::done_after).
class StoppingRecorder : public SiteRecorder {
 public:
  explicit StoppingRecorder(model::Site last) : last_(last) {}
  bool done_after(model::Site site) const override { return site == last_; }

 private:
  model::Site last_;
};

void expect_stops_after_each_site(const Model& m, std::int64_t vocab) {
  const auto ids = random_ids(20, vocab, 4);
  MatrixF h0;
  m.embed(ids, 10, h0);
  const model::Site order[] = {model::Site::AttnIn, model::Site::AttnOut, model::Site::MlpIn, model::Site::MlpMid};
  for (std::size_t k = 0; k < 4; ++k) {
    MatrixF h = h0;
    StoppingRecorder rec(order[k]);
    m.layer_forward(0, h, 10, &rec);
    ASSERT_EQ(rec.calls.size(), k + 1) << m.family();
    EXPECT_EQ(rec.calls.back().site, order[k]) << m.family();
  }
  // Without a stop the whole layer runs: every site, and the same output as with no observer.
  MatrixF h = h0, ref = h0;
  SiteRecorder all;
  m.layer_forward(0, h, 10, &all);
  m.layer_forward(0, ref, 10);
  EXPECT_EQ(all.calls.size(), 4u) << m.family();
  EXPECT_EQ(h, ref) << m.family();
}

TEST(Model, ObserverCanStopTheLayerAfterItsLastSite) {
  LlamaDims ls;
  expect_stops_after_each_site(*Model::load(make_llama(ls, 42).write("observer-stop-llama")), ls.V);
  OptDims os;
  expect_stops_after_each_site(*Model::load(make_opt(os, 43).write("observer-stop-opt")), os.V);
}

// Keeps the inputs a layer reports, and stops after `last` when given.
class InputCapture : public model::ForwardObserver {
 public:
  explicit InputCapture(std::optional<model::Site> last = std::nullopt) : last_(last) {}
  void on_input(int, model::Site site, const MatrixF& x) override { inputs.emplace_back(site, x); }
  bool done_after(model::Site site) const override { return last_ == site; }
  std::vector<std::pair<model::Site, MatrixF>> inputs;

 private:
  std::optional<model::Site> last_;
};

// A layer forward resumed from every site in turn (Model::layer_resume), or from the layer's input
// straight to MlpIn and then to the end, reports each site once with bit-identical inputs, and ends
// at the uninterrupted forward's output.
void expect_resume_matches_whole_forward(const Model& m, std::int64_t vocab) {
  const auto ids = random_ids(30, vocab, 6);
  MatrixF h0;
  m.embed(ids, 10, h0);
  MatrixF ref = h0;
  InputCapture whole;
  m.layer_forward(0, ref, 10, &whole);
  ASSERT_EQ(whole.inputs.size(), 4u);

  model::LayerState s;
  s.resid = h0;
  for (const auto& [site, x] : whole.inputs) {
    InputCapture step(site);
    m.layer_resume(0, s, 10, &step);
    ASSERT_EQ(step.inputs.size(), 1u) << m.family();
    EXPECT_EQ(step.inputs[0].first, site) << m.family();
    EXPECT_EQ(step.inputs[0].second, x) << m.family();
    ASSERT_EQ(s.at, site) << m.family();
    EXPECT_EQ(s.x, x) << m.family();
  }
  InputCapture rest;
  m.layer_resume(0, s, 10, &rest);
  EXPECT_TRUE(rest.inputs.empty()) << m.family();
  EXPECT_FALSE(s.at.has_value()) << m.family();
  EXPECT_EQ(s.resid, ref) << m.family();

  model::LayerState skip;
  skip.resid = h0;
  InputCapture to_mlp(model::Site::MlpIn);
  m.layer_resume(0, skip, 10, &to_mlp);
  EXPECT_EQ(to_mlp.inputs.size(), 3u) << m.family();
  EXPECT_EQ(skip.x, whole.inputs[2].second) << m.family();
  m.layer_resume(0, skip, 10);
  EXPECT_EQ(skip.resid, ref) << m.family();
}

TEST(Model, LayerResumedAtEverySiteMatchesTheWholeForward) {
  LlamaDims ls;
  ls.H_kv = 1;
  expect_resume_matches_whole_forward(*Model::load(make_llama(ls, 44).write("resume-llama")), ls.V);
  OptDims os;
  expect_resume_matches_whole_forward(*Model::load(make_opt(os, 45).write("resume-opt")), os.V);
  os.pre_ln = false;  // OPT-350M style: the norms after the residual adds
  expect_resume_matches_whole_forward(*Model::load(make_opt(os, 46).write("resume-opt-post-ln")), os.V);
}

TEST(Model, LatentCheckpointRunsTheFactoredModules) {
  LlamaDims s;
  auto c = make_llama(s, 51);
  const auto dense = Model::load(c.write("latent-dense"));
  // Replace one module by an exact factorization of rank min(in, out) = d and one by a block-identity
  // factorization B·[I | A] whose dense product we then write as the dense model's weight.
  std::mt19937 rng(5);
  const std::int64_t r = 5, in = s.d, out = s.ffn;
  const MatrixF B = random_matrix(out, r, rng, 0.3f), A = random_matrix(r, in - r, rng, 0.3f);
  std::vector<std::int32_t> perm;
  for (std::int32_t j = 0; j < in; ++j) perm.push_back((j * 3 + 1) % static_cast<std::int32_t>(in));
  Linear bl = make_linear("model.layers.0.mlp.up_proj", in, out);
  bl.B = B;
  bl.A = A;
  bl.perm = perm;
  bl.block_identity = true;
  const MatrixF w = bl.dense_weight();
  c.data("model.layers.0.mlp.up_proj.weight").assign(w.data(), w.data() + w.size());
  const auto dense2 = Model::load(c.write("latent-dense2"));

  c.tensors.erase("model.layers.0.mlp.up_proj.weight");
  c.tensors["model.layers.0.mlp.up_proj.B.weight"] = {{out, r}, std::vector<float>(B.data(), B.data() + B.size())};
  c.tensors["model.layers.0.mlp.up_proj.A.weight"] = {{r, in - r}, std::vector<float>(A.data(), A.data() + A.size())};
  c.config["latent"] = {{"format", "latentllm"}, {"format_version", 1},
                        {"modules", {{"model.layers.0.mlp.up_proj",
                                      {{"rank", r}, {"in", in}, {"out", out}, {"junction", "block-identity"},
                                       {"perm", perm}}}}}};
  const auto latent = Model::load(c.write("latent"));
  const Linear& l = latent->layer(0).linear("mlp.up_proj");
  EXPECT_TRUE(l.factored());
  EXPECT_EQ(l.rank(), r);
  EXPECT_EQ(l.weight.size(), 0);  // no dense copy kept
  EXPECT_EQ(l.A.rows(), r);       // A₂ only: the identity block is not stored
  EXPECT_EQ(l.A.cols(), in - r);
  EXPECT_EQ(eval::num_params(*latent), eval::num_params(*dense2) - (out * in - (out * r + r * (in - r))));
  const auto ids = random_ids(24, s.V, 9);
  EXPECT_NEAR(latent->windows_nll(ids, 12), dense2->windows_nll(ids, 12), 1e-4 * dense2->windows_nll(ids, 12));
  EXPECT_NE(dense->windows_nll(ids, 12), dense2->windows_nll(ids, 12));
}

// ---------------------------------------------------------------------------------------------
// Bad inputs

template <typename E>
std::string load_error(const std::filesystem::path& dir) {
  return test::error_of<E>([&] { Model::load(dir); });
}

TEST(ModelErrors, MissingTensorIsNamed) {
  auto c = make_opt(OptDims{}, 61);
  c.tensors.erase("model.decoder.layers.1.fc2.weight");
  const auto msg = load_error<FormatError>(c.write("missing"));
  EXPECT_NE(msg.find("model.decoder.layers.1.fc2.weight"), std::string::npos) << msg;
}

TEST(ModelErrors, ShapeDisagreeingWithConfigIsNamedWithBothShapes) {
  LlamaDims s;
  auto c = make_llama(s, 62);
  std::mt19937 rng(1);
  c.add("model.layers.0.self_attn.k_proj.weight", {s.H * s.d_h, s.d}, rng);  // MHA-sized k
  const auto msg = load_error<FormatError>(c.write("shape"));
  EXPECT_NE(msg.find("model.layers.0.self_attn.k_proj.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("12, 16"), std::string::npos) << msg;  // expected [H_kv·d_h, d]
  EXPECT_NE(msg.find("24, 16"), std::string::npos) << msg;
}

TEST(ModelErrors, NonFiniteWeightIsNamed) {
  auto c = make_opt(OptDims{}, 63);
  c.data("model.decoder.layers.0.self_attn.v_proj.weight")[17] = std::nanf("");
  const auto msg = load_error<NumericError>(c.write("nan"));
  EXPECT_NE(msg.find("model.decoder.layers.0.self_attn.v_proj.weight"), std::string::npos) << msg;
}

TEST(ModelErrors, UnsupportedArchitectureListsTheSupportedOnes) {
  auto c = make_opt(OptDims{}, 64);
  c.config["architectures"] = {"GPTNeoXForCausalLM"};
  c.config["model_type"] = "gpt_neox";
  const auto msg = load_error<ConfigError>(c.write("arch"));
  EXPECT_NE(msg.find("GPTNeoXForCausalLM"), std::string::npos) << msg;
  EXPECT_NE(msg.find("OPTForCausalLM"), std::string::npos) << msg;
  EXPECT_NE(msg.find("LlamaForCausalLM"), std::string::npos) << msg;
}

// Untied (tie_word_embeddings false) without lm_head: HF would initialise a random head; we refuse,
// naming the missing tensor. Tied, the same file loads and uses the embedding as the head.
TEST(ModelErrors, UntiedModelWithoutLmHeadNamesTheMissingTensor) {
  LlamaDims s;
  s.tie = false;
  auto c = make_llama(s, 67);
  c.tensors.erase("lm_head.weight");
  const auto msg = load_error<FormatError>(c.write("untied-nohead"));
  EXPECT_NE(msg.find("missing tensor lm_head.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(expected with tie_word_embeddings false, got only model.embed_tokens.weight)"),
            std::string::npos) << msg;

  OptDims o;
  auto opt = make_opt(o, 68);
  opt.config["tie_word_embeddings"] = false;
  const auto opt_msg = load_error<FormatError>(opt.write("opt-untied-nohead"));
  EXPECT_NE(opt_msg.find("missing tensor lm_head.weight"), std::string::npos) << opt_msg;

  c.config["tie_word_embeddings"] = true;
  s.tie = true;
  const auto m = Model::load(c.write("tied-nohead"));
  expect_matches_reference(*m, s.V, 6, 1, [&](const auto& ids) { return reference_llama_nll(c, s, ids); });
}

TEST(ModelErrors, UntiedModelWithoutEmbeddingNamesTheMissingTensor) {
  LlamaDims s;
  s.tie = false;
  auto c = make_llama(s, 69);
  c.tensors.erase("model.embed_tokens.weight");
  const auto msg = load_error<FormatError>(c.write("untied-noembed"));
  EXPECT_NE(msg.find("missing tensor model.embed_tokens.weight"), std::string::npos) << msg;
}

TEST(ModelErrors, TokenIdOutOfVocabularyThrows) {
  OptDims s;
  const auto m = Model::load(make_opt(s, 65).write("ids"));
  std::vector<std::int32_t> ids(8, 1);
  ids[3] = static_cast<std::int32_t>(s.V);
  EXPECT_THROW(m->windows_nll(ids, 8), FormatError);
  // Windows longer than OPT's learned positions are refused.
  EXPECT_THROW(m->windows_nll(std::vector<std::int32_t>(2 * (s.pos + 1), 1), static_cast<int>(s.pos + 1)), ConfigError);
}

TEST(ModelErrors, LatentModuleWithoutFactorsIsNamed) {
  auto c = make_opt(OptDims{}, 66);
  c.config["latent"] = {{"format", "latentllm"}, {"format_version", 1},
                        {"modules", {{"model.decoder.layers.0.fc1", {{"rank", 4}, {"in", 16}, {"out", 24}}}}}};
  const auto msg = load_error<FormatError>(c.write("latent-missing"));
  EXPECT_NE(msg.find("model.decoder.layers.0.fc1.B.weight"), std::string::npos) << msg;
}

}  // namespace
}  // namespace latentllm
