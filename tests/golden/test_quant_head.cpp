// The quantized LM head (compress --head-bits; docs/QUANT.md "The LM head") on a real model
// (stories260K, tied embeddings): the head is stored packed beside the float embedding, reloads to
// bit-identical logits (eager and lazy loads, prefill and decode), its decode and prefill products agree
// with the dequantized head, and the perplexity stays within a stated tolerance of the float head's.
// The CLI reports the head's bytes (compress --json, inspect --json).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "latentllm/calib.hpp"
#include "latentllm/checkpoint.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/export.hpp"
#include "latentllm/io.hpp"
#include "latentllm/log.hpp"
#include "latentllm/model.hpp"
#include "latentllm/tokenizer.hpp"
#include "model/head.hpp"
#include "model/weight_table.hpp"
#include "quant/pack.hpp"
#include "quant/prefill.hpp"
#include "checkpoint_support.hpp"
#include "test_support.hpp"

namespace latentllm {
namespace {

namespace fs = std::filesystem;
constexpr int kSeqlen = 64;

fs::path model_dir() { return test::shared_path("models/stories260K/hf"); }
fs::path text_path() { return test::shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt"); }

// stories260K compressed by latentllm at ratio 0.2 with 4-bit factors (groups of 32).
std::unique_ptr<model::Model> compressed() {
  auto m = model::Model::load(model_dir());
  const auto tok = io::load_tokenizer(model_dir());
  calib::CalibOptions co;
  co.source = "text";
  co.data = text_path();
  co.nsamples = 8;
  co.seqlen = kSeqlen;
  const auto ids = calib::sample_calibration(*tok, co);
  compress::CompressOptions opt = compress::preset_options(compress::Preset::Default, compress::Method::LatentLlm, 0.2);
  opt.quant = {.bits = 4, .group = 32, .gptq = true};
  compress::compress_model(*m, ids, kSeqlen, opt);
  return m;
}

fs::path saved(const model::Model& m, const std::string& tag, std::shared_ptr<const quant::PackedMatrix> head) {
  const auto dir = test::make_temp_dir(tag) / "latent";
  checkpoint::SaveOptions so;
  so.dtype = DType::F32;
  so.head = std::move(head);
  checkpoint::save(m, dir, so);
  return dir;
}

using test::logits_of;

// The first n_seq·T tokens of the held-out text (the calibration samples windows of the same file at
// random; these are the file's start, as ppl reads it).
std::vector<std::int32_t> eval_ids(int n_seq, int T) {
  const auto tok = io::load_tokenizer(model_dir());
  std::ifstream f(text_path());
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto ids = tok->encode(text.substr(0, 200000));
  ids.resize(static_cast<std::size_t>(n_seq * T));
  return ids;
}

double ppl(const model::Model& m, const std::vector<std::int32_t>& ids, int T) {
  const auto n_seq = static_cast<double>(ids.size()) / T;
  return std::exp(m.windows_nll(ids, T) / (n_seq * (T - 1)));
}

class QuantHead : public ::testing::Test {
 protected:
  void SetUp() override { set_log_callback([](LogLevel, std::string_view) {}); }
};

TEST_F(QuantHead, EightBitHeadIsPackedReloadsBitIdenticallyAndKeepsPerplexity) {
  const auto m = compressed();
  const auto head = model::quantize_table(m->head_weight(), {8, 32, quant::Grid::MinMax}, "lm_head");
  const auto dir_f = saved(*m, "head-float", nullptr);
  const auto dir_q = saved(*m, "head-q8", head);

  // Stored: the head's codes, scales and zero points, listed as a dense quantized module; the tied
  // embedding stays the float table.
  const auto config = nlohmann::json::parse(std::ifstream(dir_q / "config.json"));
  const auto& e = config["latent"]["modules"]["lm_head"];
  EXPECT_EQ(e["bits"], 8);
  EXPECT_EQ(e["group"], 32);
  EXPECT_FALSE(e.contains("rank"));
  const auto store = io::TensorStore::open(dir_q);
  ASSERT_TRUE(store.has("lm_head.qweight"));
  EXPECT_EQ(store.get("lm_head.qweight").dtype, DType::U8);
  EXPECT_EQ(store.get("lm_head.qweight").shape, (std::vector<std::int64_t>{512, 2, 32}));
  EXPECT_TRUE(store.has("model.embed_tokens.weight"));
  EXPECT_FALSE(store.has("lm_head.weight"));

  const auto re = model::Model::load(dir_q);
  const auto lazy = model::Model::load(dir_q, {.lazy = true});  // its head read as the eager one's
  for (int i = 0; i < lazy->num_layers(); ++i) lazy->load_layer(i);
  const auto fl = model::Model::load(dir_f);
  ASSERT_NE(re->head_weight().packed(), nullptr);
  ASSERT_NE(lazy->head_weight().packed(), nullptr);
  EXPECT_EQ(fl->head_weight().packed(), nullptr);
  EXPECT_EQ(re->head_weight().packed()->codes, head->codes);
  EXPECT_EQ(re->head_weight().packed()->scales, head->scales);
  EXPECT_EQ(re->head_weight().packed()->zeros, head->zeros);
  EXPECT_EQ(re->non_layer_params().back().first, "lm_head");  // a matrix of its own now

  // The embedding lookups are the float table's: the same hidden states before the head.
  const std::vector<std::int32_t> some = {3, 99, 511};
  MatrixF h1, h2;  // [3, d]
  re->embed(some, 3, h1);
  fl->embed(some, 3, h2);
  EXPECT_TRUE(h1 == h2);

  // Reload: the same logits bit for bit, eager or lazy, prefill (T rows: dequantized tiles into sgemm).
  const auto ids = eval_ids(2, kSeqlen);
  const MatrixF a = logits_of(*re, ids, kSeqlen), b = logits_of(*lazy, ids, kSeqlen);
  EXPECT_TRUE(a == b);
  // Against the float head: a quantized head, so the logits differ, within 8-bit rounding.
  const MatrixF f = logits_of(*fl, ids, kSeqlen);
  const float diff = (a - f).cwiseAbs().maxCoeff();
  EXPECT_GT(diff, 0.0f);
  EXPECT_LT(diff, 0.05f * f.cwiseAbs().maxCoeff());

  // Decode: one row through quant::gemv, the same in both loads, and within float rounding of the
  // prefill product (both the dequantized head times the same hidden state).
  model::KvCache c1(*re, 8, model::KvCacheMode::Auto), c2(*lazy, 8, model::KvCacheMode::Auto);
  MatrixF l1, l2;
  for (std::int32_t t : {5, 42, 7}) {
    re->forward_cached(std::vector<std::int32_t>{t}, c1, l1);
    lazy->forward_cached(std::vector<std::int32_t>{t}, c2, l2);
    EXPECT_TRUE(l1 == l2);
  }
  const std::vector<std::int32_t> three = {5, 42, 7};
  const MatrixF pre = logits_of(*re, three, 3);  // [3, V]
  EXPECT_LT((pre.row(2) - l1.row(l1.rows() - 1)).cwiseAbs().maxCoeff(), 1e-4f * (1.0f + pre.cwiseAbs().maxCoeff()));

  // Perplexity on 16 held-out windows: within 0.5 % of the float head's (measured: docs/QUANT.md).
  const auto eval = eval_ids(16, kSeqlen);
  const double p_f = ppl(*fl, eval, kSeqlen), p_q = ppl(*re, eval, kSeqlen);
  RecordProperty("ppl_float_head", std::to_string(p_f));
  RecordProperty("ppl_8bit_head", std::to_string(p_q));
  EXPECT_NE(p_f, p_q);
  EXPECT_LT(std::abs(p_q / p_f - 1.0), 0.005) << "float head " << p_f << ", 8-bit head " << p_q;
}

// export --format hf of a checkpoint with a quantized head: lm_head.weight is the dequantized head (each
// value rounded once from s·(c − z) in double), tie_word_embeddings false, and the export's logits are
// the checkpoint's within float rounding (the dense product of the same values).
TEST_F(QuantHead, HfExportWritesTheDequantizedHeadUntied) {
  const auto m = model::Model::load(model_dir());
  const auto head = model::quantize_table(m->head_weight(), {8, 32, quant::Grid::MinMax}, "lm_head");
  const auto dir = saved(*m, "head-hf", head);
  const auto out = test::make_temp_dir("head-hf-out") / "hf";
  format::ExportOptions eo;
  eo.format = "hf";
  eo.dtype = DType::F32;
  (void)format::export_checkpoint(dir, out, eo);
  const auto config = nlohmann::json::parse(std::ifstream(out / "config.json"));
  EXPECT_EQ(config["tie_word_embeddings"], false);
  EXPECT_FALSE(config.contains("latent"));
  const auto store = io::TensorStore::open(out);
  ASSERT_TRUE(store.has("lm_head.weight"));
  EXPECT_FALSE(store.has("lm_head.qweight"));
  const MatrixF want = quant::dequantize(quant::unpack(*head)).cast<float>();  // [V, d]
  const std::vector<float> got = store.get("lm_head.weight").to_f32();
  EXPECT_TRUE(Eigen::Map<const MatrixF>(got.data(), want.rows(), want.cols()) == want);
  const auto hf = model::Model::load(out);
  const auto q = model::Model::load(dir);
  const auto ids = eval_ids(1, kSeqlen);
  const MatrixF a = logits_of(*hf, ids, kSeqlen), b = logits_of(*q, ids, kSeqlen);
  EXPECT_LT((a - b).cwiseAbs().maxCoeff(), 1e-4f * (1.0f + b.cwiseAbs().maxCoeff()));
}

// The packed table's rows are what quant::rtn gives on the whole matrix (the block-wise quantizer
// concatenates), and the 4-bit head also loads and runs.
TEST_F(QuantHead, BlockwiseQuantizerMatchesTheWholeMatrixAndFourBitsLoads) {
  const auto m = model::Model::load(model_dir());
  const MatrixF& w = m->head_weight().matrix();  // [V, d]
  ASSERT_GT(w.size(), 0);
  for (const int bits : {8, 4}) {
    const quant::QuantSpec spec{bits, 32, quant::Grid::MinMax};
    const auto q = model::quantize_table(m->head_weight(), spec, "lm_head");
    const quant::PackedMatrix whole = quant::pack(quant::rtn(w.cast<double>(), spec, "lm_head"));
    EXPECT_EQ(q->codes, whole.codes) << bits;
    EXPECT_EQ(q->scales, whole.scales) << bits;
    EXPECT_EQ(q->zeros, whole.zeros) << bits;
  }
  // The decode product (quant::gemv, at most core::kGemvRows rows) and the prefill one (quant::xwtq)
  // of the packed table agree with the dequantized head to float rounding.
  const model::WeightTable t = model::WeightTable::packed(model::quantize_table(m->head_weight(), {8, 32, quant::Grid::MinMax}, "lm_head"));
  const MatrixF wq = quant::dequantize(quant::unpack(*t.packed())).cast<float>();  // [V, d]
  MatrixF x(6, w.cols());  // [6, d]
  for (Eigen::Index j = 0; j < x.size(); ++j) x.data()[j] = static_cast<float>(std::sin(0.7 * static_cast<double>(j)));
  const MatrixF want = x * wq.transpose();  // [6, V]
  for (const Eigen::Index n : {1, 6}) {
    MatrixF y;
    model::head_logits(MatrixF(x.topRows(n)), t, y);
    EXPECT_LT((y - want.topRows(n)).cwiseAbs().maxCoeff(), 1e-4f * (1.0f + want.cwiseAbs().maxCoeff())) << n;
  }
  const auto dir = saved(*m, "head-q4", model::quantize_table(m->head_weight(), {4, 32, quant::Grid::MinMax}, "lm_head"));
  const auto re = model::Model::load(dir);
  ASSERT_NE(re->head_weight().packed(), nullptr);
  EXPECT_EQ(re->head_weight().packed()->bits, 4);
  const auto eval = eval_ids(4, kSeqlen);
  const double p_f = ppl(*m, eval, kSeqlen), p_q = ppl(*re, eval, kSeqlen);
  RecordProperty("ppl_float_head", std::to_string(p_f));
  RecordProperty("ppl_4bit_head", std::to_string(p_q));
  EXPECT_LT(std::abs(p_q / p_f - 1.0), 0.2) << "float head " << p_f << ", 4-bit head " << p_q;
}

// compress --head-bits 8 alone (16-bit factors) through the CLI: the head's bytes in compress --json and
// inspect --json, the same figures, and ppl runs on the checkpoint.
TEST_F(QuantHead, CliReportsTheHeadBytes) {
  const auto tmp = test::make_temp_dir("head-cli");
  const std::string q = "'";
  std::string out;
  // In a subshell: its log on stderr goes away, only the JSON comes back (run_command adds 2>&1).
  const std::string cmd = "(" + q + test::cli_path().string() + q + " compress --model " + q + model_dir().string() + q +
                          " --calib text --calib-data " + q + text_path().string() + q +
                          " --nsamples 4 --seqlen 64 --ratio 0.2 --head-bits 8 --group 32 --json --out " + q +
                          (tmp / "out").string() + q + " 2>/dev/null)";
  ASSERT_EQ(test::run_command(cmd, out), 0) << out;
  const auto j = nlohmann::json::parse(out);
  ASSERT_TRUE(j.contains("lm_head")) << out;
  EXPECT_EQ(j["lm_head"]["bits"], 8);
  EXPECT_EQ(j["lm_head"]["params"], 512 * 64);
  EXPECT_EQ(j["lm_head"]["bytes"], quant::packed_bytes(512, 64, {8, 32, quant::Grid::MinMax}));  // 512·2·(32 + 4)
  EXPECT_FALSE(j.contains("compressed_modules"));  // the factors are not quantized
  std::string insp;
  ASSERT_EQ(test::run_command("(" + q + test::cli_path().string() + q + " inspect --json " + q + (tmp / "out").string() +
                                  q + " 2>/dev/null)", insp), 0) << insp;
  EXPECT_EQ(nlohmann::json::parse(insp)["lm_head"], j["lm_head"]);
}

}  // namespace
}  // namespace latentllm
