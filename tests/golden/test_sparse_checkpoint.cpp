// Sparse compression end to end on TinyStories-656K (--method sparse, wanda, sparsegpt, lowrank-sparse;
// appendix "Sparse Matrix"): every compressed module keeps exactly the asked number of entries (2:4 read group
// by group), the checkpoint reloads to bit-identical weights and logits with a finite perplexity, a lazy run
// (its modules only in the progress files) and a run stopped after a layer and resumed write the eager run's
// bytes, and the CLI states the sparsity and the bytes of a values + positions storage (lowrank-sparse: within
// those of sparse at the same --ratio, compress --json and inspect agreeing).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "latentllm/calib.hpp"
#include "latentllm/checkpoint.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/eval.hpp"
#include "latentllm/log.hpp"
#include "latentllm/model.hpp"
#include "latentllm/tokenizer.hpp"
#include "checkpoint_support.hpp"
#include "test_support.hpp"

namespace latentllm {
namespace {

namespace fs = std::filesystem;
constexpr int kSeqlen = 64;

fs::path model_dir() { return test::shared_path("models/TinyStories-656K"); }
fs::path stories() { return test::shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt"); }
std::string q(const fs::path& p) { return "'" + p.string() + "'"; }

std::string read(const fs::path& p) { return test::read_bytes(p); }

// 8 random windows of kSeqlen tokens of the TinyStories stories (test::text_calibration).
std::vector<std::int32_t> calibration() { return test::text_calibration(model_dir(), stories(), 8, kSeqlen); }

compress::CompressOptions options(compress::Method m, double ratio, compress::SparsePattern p) {
  compress::CompressOptions o = compress::preset_options(compress::Preset::Default, m, ratio);
  o.sparse.pattern = p;
  return o;
}

// Compresses TinyStories-656K and saves it (f32) to `out` (test::compress_and_save).
compress::CompressReport run(const compress::CompressOptions& base, const fs::path& out, bool lazy, int stop_after = 0) {
  return test::compress_and_save(model_dir(), calibration(), kSeqlen, base, out, lazy, stop_after);
}

using test::logits_of;

class SparseCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override { set_log_callback([](LogLevel, std::string_view) {}); }
};

TEST_F(SparseCheckpoint, HardKeepsTheAskedEntriesAndReloadsBitIdentically) {
  const auto tmp = test::make_temp_dir("sparse-hard");
  const auto opt = options(compress::Method::Sparse, 0.5, compress::SparsePattern::Unstructured);
  const auto report = run(opt, tmp / "eager", false);
  auto re = model::Model::load(tmp / "eager");
  std::int64_t nnz = 0;
  for (int i = 0; i < re->num_layers(); ++i)
    for (const auto& l : re->layer(i).linears) {
      ASSERT_FALSE(l.factored()) << l.name;
      const std::int64_t k = (l.weight.f32().array() != 0.0f).count();
      EXPECT_EQ(k, l.out * (l.in - l.in / 2)) << l.name;  // κ = d'·(d − ⌊0.5·d⌋) over the whole matrix
      nnz += k;
    }
  EXPECT_EQ(report.params, nnz);
  EXPECT_EQ(report.dense_params, 2 * nnz);
  for (const auto& mr : report.modules) {
    EXPECT_TRUE(std::isfinite(mr.loss) && mr.loss_rel > 0 && mr.loss_rel < 1) << mr.name << " " << mr.loss_rel;
    EXPECT_EQ(mr.how, "sparse (hard)");
  }
  // A second load gives the same weights and logits; the perplexity on the evaluation text is finite.
  auto again = model::Model::load(tmp / "eager");
  std::vector<std::int32_t> ids(2 * kSeqlen);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 37 + 5) % 2048);
  EXPECT_TRUE(logits_of(*re, ids, kSeqlen) == logits_of(*again, ids, kSeqlen));
  const auto text = io::load_tokenizer(model_dir())->encode(read(stories()));
  const auto ppl = eval::perplexity_ids(*re, text, 128, 8, 0, "stories");
  EXPECT_TRUE(std::isfinite(ppl.ppl) && ppl.ppl > 1.0) << ppl.ppl;
}

// opt-tiny's modules have biases: --method sparse fits D on the centered covariance and updates the bias
// (b̂ = b + (W − D)·μ, appendix "Bias Update"); Wanda keeps the bias as published. The run is lazy, so the
// updated biases travel through the progress files.
TEST_F(SparseCheckpoint, SparseUpdatesBiasesAndWandaKeepsThem) {
  const auto tmp = test::make_temp_dir("sparse-bias");
  const fs::path opt_tiny = test::shared_path("models/opt-tiny");
  auto src = model::Model::load(opt_tiny);
  for (const auto method : {compress::Method::Sparse, compress::Method::Wanda}) {
    const fs::path out = tmp / std::string(compress::method_name(method));
    compress::CompressOptions o = options(method, 0.5, compress::SparsePattern::Unstructured);
    o.state_dir = out.string() + ".resume";
    auto m = model::Model::load(opt_tiny, {.lazy = true});
    const auto report = compress::compress_model(*m, calibration(), kSeqlen, o);
    checkpoint::SaveOptions so;
    so.dtype = DType::F32;
    so.layer_factors_dir = o.state_dir;
    checkpoint::save(*m, out, so);
    auto re = model::Model::load(out);
    int changed = 0, biased = 0;
    for (int i = 0; i < re->num_layers(); ++i)
      for (std::size_t k = 0; k < re->layer(i).linears.size(); ++k) {
        const auto& a = src->layer(i).linears[k];
        const auto& b = re->layer(i).linears[k];
        if (a.bias.size() == 0) continue;
        ++biased;
        changed += !(a.bias == b.bias);
        EXPECT_EQ((b.weight.f32().array() != 0.0f).count(), b.out * (b.in - b.in / 2)) << b.name;
      }
    ASSERT_GT(biased, 0);
    if (method == compress::Method::Sparse) EXPECT_EQ(changed, biased);
    else EXPECT_EQ(changed, 0);
    for (const auto& mr : report.modules) EXPECT_TRUE(std::isfinite(mr.loss) && mr.loss_rel < 1) << mr.name;
  }
}

// The sparse modules live in the progress files (dense <module>.weight): a lazy run and a run stopped after
// layer 0 and resumed write the eager run's checkpoint byte for byte.
TEST_F(SparseCheckpoint, LazyAndResumedRunsWriteTheEagerBytes) {
  const auto tmp = test::make_temp_dir("sparse-resume");
  const auto opt = options(compress::Method::Sparse, 0.4, compress::SparsePattern::Unstructured);
  const auto eager = run(opt, tmp / "eager", false);
  const auto lazy = run(opt, tmp / "lazy", true);
  const auto resumed = run(opt, tmp / "resumed", true, 1);
  for (const char* dir : {"lazy", "resumed"}) {
    EXPECT_EQ(read(tmp / dir / "model.safetensors"), read(tmp / "eager" / "model.safetensors")) << dir;
    EXPECT_EQ(read(tmp / dir / "config.json"), read(tmp / "eager" / "config.json")) << dir;
  }
  EXPECT_EQ(resumed.to_json().at("modules"), eager.to_json().at("modules"));
}

// lowrank-sparse: the same through the progress files; every module within the bytes of pure sparse at its
// ratio, and no module above pure sparse's layer-wise loss (the split 0 is pure sparse, and the split of lowest
// loss is kept).
TEST_F(SparseCheckpoint, LowRankSparseResumesAndStaysWithinTheSparseBytes) {
  const auto tmp = test::make_temp_dir("lowrank-sparse-resume");
  auto opt = options(compress::Method::LowRankSparse, 0.4, compress::SparsePattern::Unstructured);
  opt.sparse.iters = 20;
  const auto eager = run(opt, tmp / "eager", false);
  const auto lazy = run(opt, tmp / "lazy", true);
  const auto resumed = run(opt, tmp / "resumed", true, 1);
  for (const char* dir : {"lazy", "resumed"}) {
    EXPECT_EQ(read(tmp / dir / "model.safetensors"), read(tmp / "eager" / "model.safetensors")) << dir;
    EXPECT_EQ(read(tmp / dir / "config.json"), read(tmp / "eager" / "config.json")) << dir;
  }
  EXPECT_EQ(resumed.to_json().at("modules"), eager.to_json().at("modules"));
  auto sparse_opt = options(compress::Method::Sparse, 0.4, compress::SparsePattern::Unstructured);
  sparse_opt.sparse.iters = 20;
  const auto sparse = run(sparse_opt, tmp / "sparse", false);
  ASSERT_EQ(eager.modules.size(), sparse.modules.size());
  for (std::size_t i = 0; i < eager.modules.size(); ++i) {
    const auto& m = eager.modules[i];
    const std::int64_t factors = eval::factored_params(m.out, m.in, m.rank, false);
    EXPECT_LE(eval::lowrank_sparse_storage_bytes(m.params - factors, m.rank, m.out, m.in, 2),
              eval::sparse_storage_bytes(sparse.modules[i].params, m.out, m.in, 2)) << m.name;
    // The first module sees the same inputs in both runs: its loss at most pure sparse's.
    if (i == 0) {
      EXPECT_LE(m.loss, sparse.modules[i].loss * (1 + 1e-4)) << m.name;
    }
  }
}

TEST_F(SparseCheckpoint, TwoFourCheckpointsSatisfyThePatternInEveryGroup) {
  const auto tmp = test::make_temp_dir("sparse-24");
  for (const auto method : {compress::Method::Sparse, compress::Method::Wanda, compress::Method::SparseGpt}) {
    const fs::path out = tmp / std::string(compress::method_name(method));
    run(options(method, 0.5, compress::SparsePattern::TwoFour), out, false);
    auto re = model::Model::load(out);
    for (int i = 0; i < re->num_layers(); ++i)
      for (const auto& l : re->layer(i).linears)
        for (Eigen::Index r = 0; r < l.weight.rows(); ++r)
          for (Eigen::Index g = 0; g < l.weight.cols(); g += 4) {
            const int nz = (l.weight.f32().row(r).segment(g, 4).array() != 0.0f).count();
            ASSERT_LE(nz, 2) << compress::method_name(method) << " " << l.name << " row " << r << " group " << g / 4;
          }
  }
}

// The CLI: compress states the sparsity and the values + positions bytes (--json too), inspect reads them
// back from the checkpoint.
TEST_F(SparseCheckpoint, CliAndInspectStateSparsityAndBytes) {
  const auto out = test::make_temp_dir("sparse-cli") / "out";
  std::string log;
  const std::string cmd = "(" + test::cli_path().string() + " compress --model " + q(model_dir()) +
                          " --method wanda --ratio 0.5 --calib text --calib-data " + q(stories()) +
                          " --nsamples 4 --seqlen 64 --json -q --out " + q(out) + " 2>/dev/null)";
  ASSERT_EQ(test::run_command(cmd, log), 0) << log;
  const auto j = nlohmann::json::parse(log);
  const auto& sp = j.at("sparse");
  EXPECT_NEAR(sp.at("sparsity").get<double>(), 0.5, 1e-12);
  // 2-byte values and a d'·d-bit mask: 2·nnz + dense/8 bytes (each module's mask whole bytes).
  const std::int64_t dense = sp.at("dense_params"), nnz = sp.at("nonzeros");
  EXPECT_EQ(nnz, dense / 2);
  EXPECT_EQ(sp.at("storage_bytes").get<std::int64_t>(), 2 * nnz + dense / 8);
  EXPECT_EQ(j.at("options").at("method"), "wanda");
  EXPECT_EQ(j.at("options").at("pattern"), "unstructured");
  ASSERT_EQ(test::run_command(test::cli_path().string() + " inspect " + q(out) + " 2>&1", log), 0) << log;
  EXPECT_NE(log.find("sparsity 0.5000"), std::string::npos) << log;
  EXPECT_NE(log.find("as values + positions"), std::string::npos) << log;
  // export --format hf: the dense weights with their zeros under the source's identity, the same logits.
  const auto hf = out.parent_path() / "hf";
  ASSERT_EQ(test::run_command(test::cli_path().string() + " export -q --format hf --model " + q(out) + " --out " +
                                  q(hf),
                              log), 0) << log;
  auto a = model::Model::load(out), b = model::Model::load(hf);
  EXPECT_FALSE(b->config().raw.contains("latent"));
  std::vector<std::int32_t> ids(kSeqlen);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 11 + 3) % 2048);
  EXPECT_TRUE(logits_of(*a, ids, kSeqlen) == logits_of(*b, ids, kSeqlen));
}

// lowrank-sparse through the CLI: compress --json and inspect --json report the same non-zeros, factor
// parameters and bytes (the checkpoint's dense B·A + D no longer shows them: latent.sparse_parts does).
TEST_F(SparseCheckpoint, CliAndInspectAgreeOnLowRankSparse) {
  const auto out = test::make_temp_dir("lowrank-sparse-cli") / "out";
  std::string log;
  const std::string cmd = "(" + test::cli_path().string() + " compress --model " + q(model_dir()) +
                          " --method lowrank-sparse --sparse-iters 20 --ratio 0.5 --calib text --calib-data " +
                          q(stories()) + " --nsamples 4 --seqlen 64 --json -q --out " + q(out) + " 2>/dev/null)";
  ASSERT_EQ(test::run_command(cmd, log), 0) << log;
  const auto j = nlohmann::json::parse(log);
  const auto& sp = j.at("sparse");
  EXPECT_EQ(j.at("options").at("method"), "lowrank-sparse");
  EXPECT_FALSE(j.at("options").contains("pattern"));
  ASSERT_TRUE(sp.contains("factor_params"));
  // Within the bytes of sparse at --ratio 0.5: 2-byte values of half the entries and a d'·d-bit mask.
  const std::int64_t dense = sp.at("dense_params");
  EXPECT_LE(sp.at("storage_bytes").get<std::int64_t>(), dense + dense / 8);
  ASSERT_EQ(test::run_command(test::cli_path().string() + " inspect --json " + q(out) + " 2>/dev/null", log), 0)
      << log;
  const auto inspected = nlohmann::json::parse(log);
  const auto& in = inspected.at("sparse_modules");
  for (const char* key : {"nonzeros", "factor_params", "storage_bytes", "dense_params"})
    EXPECT_EQ(in.at(key), sp.at(key)) << key;
}

}  // namespace
}  // namespace latentllm
