// The batched decoding step (Model::forward_batch, continuous batching in `latentllm serve`): every
// sequence of a batch gets, bit for bit, the logits of decoding it alone with forward_cached, whatever
// else is in the batch and however the batch changes between steps; for OPT (learned positions) and
// the Llama family (RoPE at each row's own position), float32 and 16-bit stored weights, dense and
// latent caches, quantized weights.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <span>
#include <vector>

#include "latentllm/error.hpp"
#include "latentllm/model.hpp"
#include "quant/pack.hpp"
#include "quant/quant.hpp"
#include "test_support.hpp"

namespace latentllm {
namespace {

using model::KvCache;
using model::KvCacheMode;
using model::LoadOptions;

// k_proj and v_proj of every layer replaced by random factors B·A at half their width (a latent
// checkpoint's form, so that a latent cache has latents to keep).
void factor_kv(model::Model& m) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  for (int i = 0; i < m.num_layers(); ++i) {
    for (const model::Role role : {model::Role::K, model::Role::V}) {
      model::Linear& l = m.layer(i).linear(role);
      const std::int64_t r = l.out / 2;
      MatrixF B(l.out, r), A(r, l.in);  // [out, r], [r, in]
      for (float& v : B.reshaped()) v = nd(rng);
      for (float& v : A.reshaped()) v = nd(rng);
      l.weight = model::Weight();
      l.B = B;
      l.A = A;
    }
  }
}

// Every decoder-layer weight quantized (4-bit RTN, groups of 32) and held packed, as a quantized checkpoint
// loads: decoding then multiplies by the packed codes (quant::gemv per row).
void quantize_layers(model::Model& m) {
  quant::QuantSpec spec;
  spec.group = 32;
  for (int i = 0; i < m.num_layers(); ++i) {
    for (model::Linear& l : m.layer(i).linears) {
      const MatrixD w = l.weight.to_f32().cast<double>();
      l.weight = model::Weight(std::make_shared<const quant::PackedMatrix>(quant::pack(quant::rtn(w, spec, l.name))));
    }
  }
}

int argmax(const MatrixF& logits, std::int64_t row) {
  Eigen::Index j = 0;
  logits.row(row).maxCoeff(&j);
  return static_cast<int>(j);
}

// Five prompts of different lengths, prefilled alone; then decoding steps in which the batch holds
// changing subsets of the sequences (three, five, two, one, five, three, in changing orders). Each step's batched logits
// must equal those of the same sequence's solo forward_cached bit for bit. Returns the steps compared.
int check_batch_equals_solo(const model::Model& m, KvCacheMode mode) {
  const auto V = static_cast<int>(m.config().vocab_size);
  const std::vector<std::vector<std::int32_t>> prompts = {{1, 5, 9, 14, 2}, {3, 8}, {7, 11, 4, 6, 10, 12, 13}, {2, 4},
                                                           {15, 1, 6}};
  const int capacity = 32;
  std::vector<std::unique_ptr<KvCache>> solo, batch;
  std::vector<int> next;
  MatrixF logits;
  for (const auto& p : prompts) {
    solo.push_back(std::make_unique<KvCache>(m, capacity, mode));
    batch.push_back(std::make_unique<KvCache>(m, capacity, mode));
    m.forward_cached(p, *solo.back(), logits, true);
    MatrixF again;
    m.forward_cached(p, *batch.back(), again, true);
    next.push_back(argmax(logits, 0) % V);
  }
  // Up to five rows: more than gemm16's kGemvRows, where a product without RowwiseProducts changes kernel.
  const std::vector<std::vector<int>> steps = {{0, 1, 2}, {0, 1, 2, 3, 4}, {2, 0}, {1}, {4, 0, 1, 2, 3}, {2, 1, 0}};
  int compared = 0;
  for (const auto& members : steps) {
    std::vector<std::int32_t> ids;
    std::vector<KvCache*> caches;
    for (int b : members) {
      ids.push_back(next[static_cast<std::size_t>(b)]);
      caches.push_back(batch[static_cast<std::size_t>(b)].get());
    }
    MatrixF batched;  // [B, V]
    m.forward_batch(ids, caches, batched);
    EXPECT_EQ(batched.rows(), static_cast<Eigen::Index>(members.size()));
    for (std::size_t j = 0; j < members.size(); ++j) {
      const auto b = static_cast<std::size_t>(members[j]);
      MatrixF alone;  // [1, V]
      const std::int32_t id = next[b];
      m.forward_cached(std::span<const std::int32_t>(&id, 1), *solo[b], alone, true);
      EXPECT_EQ(batch[b]->length(), solo[b]->length());
      const double diff = (batched.row(static_cast<Eigen::Index>(j)) - alone.row(0)).cwiseAbs().maxCoeff();
      EXPECT_EQ(diff, 0.0) << "sequence " << b << " at position " << solo[b]->length() - 1;
      next[b] = argmax(alone, 0);
      ++compared;
    }
  }
  return compared;
}

struct Case {
  const char* model;
  LoadOptions::Weights weights;
  bool latent;
  bool quantized = false;
};

class BatchDecode : public ::testing::TestWithParam<Case> {};

TEST_P(BatchDecode, EachSequenceIsBitIdenticalToDecodingItAlone) {
  const Case c = GetParam();
  LoadOptions o;
  o.weights = c.weights;
  auto m = model::Model::load(test::shared_path(c.model), o);
  if (c.quantized) quantize_layers(*m);
  if (c.latent) factor_kv(*m);
  const KvCacheMode mode = c.latent ? KvCacheMode::Latent : KvCacheMode::Dense;
  if (c.latent) {
    const KvCache probe(*m, 4, mode);
    ASSERT_EQ(probe.layer(0).v_form, model::KvForm::Latent);
  }
  EXPECT_EQ(check_batch_equals_solo(*m, mode), 19);
}

INSTANTIATE_TEST_SUITE_P(
    Models, BatchDecode,
    ::testing::Values(Case{"models/opt-tiny", LoadOptions::Weights::Stored, false},
                      Case{"models/opt-tiny", LoadOptions::Weights::F32, false},
                      Case{"models/opt-tiny", LoadOptions::Weights::F32, true},
                      Case{"models/opt-tiny", LoadOptions::Weights::F32, false, true},
                      Case{"models/stories260K/hf", LoadOptions::Weights::F32, false},
                      Case{"models/stories260K/hf", LoadOptions::Weights::F32, true}),
    [](const ::testing::TestParamInfo<Case>& i) {
      return std::string(i.param.model[7] == 'o' ? "OptTiny" : "Stories260K") +
             (i.param.weights == LoadOptions::Weights::Stored ? "Stored16" : "F32") + (i.param.latent ? "Latent" : "Dense") + (i.param.quantized ? "Quantized4" : "");
    });

TEST(BatchDecode, MismatchedIdsAndCachesAreAClearError) {
  const auto m = model::Model::load(test::shared_path("models/opt-tiny"));
  KvCache cache(*m, 8);
  std::vector<KvCache*> caches = {&cache};
  const std::vector<std::int32_t> ids = {1, 2};
  MatrixF logits;
  EXPECT_THROW(m->forward_batch(ids, caches, logits), ConfigError);
  KvCache full(*m, 1);
  const std::vector<std::int32_t> one = {1};
  m->forward_cached(one, full, logits);
  std::vector<KvCache*> full_caches = {&full};
  EXPECT_THROW(m->forward_batch(one, full_caches, logits), ConfigError);
}

}  // namespace
}  // namespace latentllm
