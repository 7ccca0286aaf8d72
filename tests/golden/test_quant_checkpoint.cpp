// Quantized latent checkpoints (docs/FORMAT.md "Quantized tensors", docs/QUANT.md) on a real model
// (stories260K): compress with --bits stores every compressed module's factors packed, the checkpoint
// reloads to bit-identical logits (prefill and the one-row decode product), the reader refuses each
// malformed quantized entry with its message, and --method gptq keeps every rank.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "io/latent_format.hpp"
#include "latentllm/calib.hpp"
#include "latentllm/checkpoint.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/error.hpp"
#include "latentllm/io.hpp"
#include "latentllm/log.hpp"
#include "latentllm/model.hpp"
#include "latentllm/tokenizer.hpp"
#include "quant/pack.hpp"
#include "checkpoint_support.hpp"
#include "test_support.hpp"

namespace latentllm {
namespace {

namespace fs = std::filesystem;
constexpr int kSeqlen = 64;

fs::path model_dir() { return test::shared_path("models/stories260K/hf"); }

std::unique_ptr<model::Model> compressed(compress::Method method, int bits, bool gptq) {
  auto m = model::Model::load(model_dir());
  const auto tok = io::load_tokenizer(model_dir());
  calib::CalibOptions co;
  co.source = "text";
  co.data = test::shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt");
  co.nsamples = 8;
  co.seqlen = kSeqlen;
  const auto ids = calib::sample_calibration(*tok, co);
  compress::CompressOptions opt = compress::preset_options(compress::Preset::Default, method, 0.2);
  opt.quant = {.bits = bits, .group = 32, .gptq = gptq};
  compress::compress_model(*m, ids, kSeqlen, opt);
  return m;
}

fs::path saved(const model::Model& m, const std::string& tag) {
  const auto dir = test::make_temp_dir(tag) / "latent";
  checkpoint::SaveOptions so;
  so.dtype = DType::F32;  // the tensors outside the modules (embeddings, norms) as in memory
  checkpoint::save(m, dir, so);
  return dir;
}

using test::logits_of;

std::vector<std::int32_t> probe_ids(std::size_t n) {
  std::vector<std::int32_t> ids(n);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 37 + 5) % 512);
  return ids;
}

class QuantCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override { set_log_callback([](LogLevel, std::string_view) {}); }
};

TEST_F(QuantCheckpoint, FactorsArePackedAndReloadBitIdentically) {
  const auto m = compressed(compress::Method::LatentLlm, 4, true);
  for (int i = 0; i < m->num_layers(); ++i)
    for (const auto& l : m->layer(i).linears) {
      ASSERT_TRUE(l.B.packed() && l.A.packed()) << l.name;
      EXPECT_EQ(l.bits(), 4);
      EXPECT_EQ(l.group(), 32);
      EXPECT_TRUE(l.weight.empty()) << l.name;  // no dense weight beside the packed factors
    }
  const auto dir = saved(*m, "quant-reload");
  const auto re = model::Model::load(dir);
  for (int i = 0; i < m->num_layers(); ++i)
    for (std::size_t k = 0; k < m->layer(i).linears.size(); ++k) {
      const auto& a = m->layer(i).linears[k];
      const auto& b = re->layer(i).linears[k];
      ASSERT_TRUE(b.B.packed() && b.A.packed()) << b.name;
      EXPECT_EQ(a.B.packed()->codes, b.B.packed()->codes) << a.name;
      EXPECT_EQ(a.A.packed()->scales, b.A.packed()->scales) << a.name;
      EXPECT_EQ(a.A.packed()->zeros, b.A.packed()->zeros) << a.name;
      EXPECT_EQ(a.perm, b.perm) << a.name;
    }
  // Prefill (xwtq, more rows than one row block) and two short windows (column blocks).
  for (const int T : {64, 300}) {
    const auto ids = probe_ids(2 * static_cast<std::size_t>(T));
    const MatrixF x = logits_of(*m, ids, T), y = logits_of(*re, ids, T);
    EXPECT_TRUE(x == y) << "T " << T << " max |Δlogit| " << (x - y).cwiseAbs().maxCoeff();
  }
  // Decode: one row through quant::gemv.
  model::KvCache c1(*re, 8, model::KvCacheMode::Auto), c2(*m, 8, model::KvCacheMode::Auto);
  MatrixF l1, l2;
  for (std::int32_t t : {5, 42, 7}) {
    re->forward_cached(std::vector<std::int32_t>{t}, c1, l1);
    m->forward_cached(std::vector<std::int32_t>{t}, c2, l2);
    EXPECT_TRUE(l1 == l2);
  }
}

// The one-row product (gemv) and the prefill product (dequantized tiles into sgemm) of a quantized
// module agree to float rounding with the dequantized float module.
TEST_F(QuantCheckpoint, DecodeAndPrefillAgreeWithTheDequantizedModule) {
  const auto m = compressed(compress::Method::LatentLlm, 8, false);
  const model::Linear& q = m->layer(1).linears[0];
  const model::Linear f = q.dequantized();
  ASSERT_FALSE(f.quantized());
  for (const Eigen::Index n : {1, 5, 300}) {  // gemv; xwtq by column blocks; dequantized row blocks
    MatrixF x(n, q.in);
    for (Eigen::Index j = 0; j < x.size(); ++j) x.data()[j] = static_cast<float>(std::sin(0.3 * static_cast<double>(j)));
    MatrixF yq, yf;
    q.forward(x, yq);
    f.forward(x, yf);
    EXPECT_LT((yq - yf).cwiseAbs().maxCoeff(), 1e-4f * (1.0f + yf.cwiseAbs().maxCoeff())) << n << " rows";
  }
}

TEST_F(QuantCheckpoint, DenseGptqKeepsEveryRankAndReloads) {
  const auto m = compressed(compress::Method::Gptq, 4, true);
  for (const auto& l : m->layer(0).linears) {
    ASSERT_TRUE(l.weight.packed()) << l.name;
    EXPECT_FALSE(l.factored()) << l.name;
  }
  const auto dir = saved(*m, "quant-gptq");
  const auto config = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  const auto& e = config["latent"]["modules"]["model.layers.0.self_attn.q_proj"];
  EXPECT_FALSE(e.contains("rank"));
  EXPECT_EQ(e["bits"], 4);
  const auto re = model::Model::load(dir);
  const auto ids = probe_ids(128);
  EXPECT_TRUE(logits_of(*m, ids, 64) == logits_of(*re, ids, 64));
}

// One malformed entry or tensor per failure mode, each refused with its message.
TEST_F(QuantCheckpoint, ReaderRefusesMalformedEntries) {
  const auto m = compressed(compress::Method::LatentLlm, 4, true);
  const auto dir = saved(*m, "quant-bad");
  const auto cfg_path = dir / "config.json";
  const auto good = nlohmann::json::parse(std::ifstream(cfg_path));
  const std::string mod = "model.layers.0.self_attn.q_proj";
  auto expect_refused = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& what) {
    nlohmann::json c = good;
    edit(c);
    std::ofstream(cfg_path) << c.dump();
    try {
      model::Model::load(dir);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_refused([&](nlohmann::json& c) { c["latent"]["modules"][mod]["bits"] = 5; },
                 "latent.modules." + mod + ": bits (expected 2, 3, 4 or 8, got 5)");
  expect_refused([&](nlohmann::json& c) { c["latent"]["modules"][mod]["group"] = 12; },
                 "group (expected a positive multiple of 8, got 12)");
  expect_refused([&](nlohmann::json& c) { c["latent"]["modules"][mod].erase("group"); }, "group");
  // A group size the stored tensors do not have: their shapes disagree (quant::read_packed).
  expect_refused([&](nlohmann::json& c) { c["latent"]["modules"][mod]["group"] = 64; },
                 mod + ".B.qweight: packed codes shape (expected [rows, 1, 32]");
  // Fewer bits than stored: the codes' byte count disagrees.
  expect_refused([&](nlohmann::json& c) { c["latent"]["modules"][mod]["bits"] = 2; },
                 mod + ".B.qweight: packed codes shape (expected [rows, 1, 8]");
  std::ofstream(cfg_path) << good.dump();
  EXPECT_NO_THROW(model::Model::load(dir));
}

TEST(LatentTensorNames, SpellAndParseEveryPart) {
  using io::Factor;
  using io::Piece;
  EXPECT_EQ(io::latent_tensor_name("m.q_proj", Factor::B), "m.q_proj.B.weight");
  EXPECT_EQ(io::latent_tensor_name("m.q_proj", Factor::A, Piece::Codes), "m.q_proj.A.qweight");
  EXPECT_EQ(io::latent_tensor_name("m.q_proj", Factor::Weight, Piece::Scales), "m.q_proj.scales");
  EXPECT_EQ(io::latent_tensor_name("m.q_proj", Factor::B, Piece::Zeros), "m.q_proj.B.qzeros");
  EXPECT_EQ(io::latent_tensor_name("m.q_proj", Factor::B, Piece::Values, io::Naming::Progress), "m.q_proj.B");
  EXPECT_EQ(io::latent_tensor_name("m.q_proj", Factor::Weight, Piece::Values, io::Naming::Progress), "m.q_proj.weight");
  for (const Factor f : {Factor::Weight, Factor::B, Factor::A})
    for (const Piece p : {Piece::Values, Piece::Codes, Piece::Scales, Piece::Zeros}) {
      const auto t = io::parse_latent_tensor_name(io::latent_tensor_name("model.layers.3.mlp.up_proj", f, p));
      ASSERT_TRUE(t);
      EXPECT_EQ(t->module, "model.layers.3.mlp.up_proj");
      EXPECT_EQ(t->factor, f);
      EXPECT_EQ(t->piece, p);
    }
  EXPECT_FALSE(io::parse_latent_tensor_name("m.q_proj.bias"));
  EXPECT_FALSE(io::parse_latent_tensor_name(".weight"));
}

}  // namespace
}  // namespace latentllm
