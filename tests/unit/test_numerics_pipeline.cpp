// Defined numerics through the whole compression (issue 5, item 3) on tiny synthetic checkpoints:
// dead ReLU units and too few calibration tokens give a model plus recorded notes; NaN/Inf in a
// weight, a norm or the activations give one error naming the tensor or the modules; a value the
// storage type cannot hold is refused; the output location is checked before any work.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "latentllm/checkpoint.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/error.hpp"
#include "latentllm/log.hpp"
#include "latentllm/model.hpp"
#include "model_fixtures.hpp"
#include "test_support.hpp"

namespace latentllm {
namespace {

namespace fs = std::filesystem;

class NumericsPipeline : public ::testing::Test {
 protected:
  void SetUp() override { set_log_callback(nullptr); }
  void TearDown() override { set_log_callback([](LogLevel, std::string_view) {}); }
};

// n windows of T tokens over a vocabulary of 40 (the OPT fixture).
std::vector<std::int32_t> ids_of(int n, int T, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n * T));
  for (auto& id : ids) id = static_cast<std::int32_t>(rng() % 40);
  return ids;
}

compress::CompressOptions options(const std::string& method, double ratio = 0.3) {
  compress::CompressOptions o;
  o.method = compress::parse_method(method);
  o.ratio = ratio;
  return o;
}

using test::error_of;

bool has_note(const compress::CompressReport& r, const std::string& module, const std::string& kind) {
  for (const auto& n : r.notes)
    if (n.module == module && n.kind == kind) return true;
  return false;
}

TEST_F(NumericsPipeline, DeadReluUnitsAreDroppedAndRecorded) {
  test::Checkpoint c = test::make_opt({}, 11);
  // fc1 units 0..5 of layer 0 never fire: zero rows and columns in fc2's input covariance.
  auto& b = c.data("model.decoder.layers.0.fc1.bias");
  for (int u = 0; u < 6; ++u) b[static_cast<std::size_t>(u)] = -1e4f;
  const auto dir = c.write("dead-relu");
  const auto ids = ids_of(4, 10, 1);
  {
    auto m = model::Model::load(dir);
    const auto rep = compress::compress_model(*m, ids, 10, options("asvd-l2"));
    EXPECT_TRUE(has_note(rep, "model.decoder.layers.0.fc2", "pinv-drop"));
    EXPECT_EQ(rep.notes.size(), 1u);
    ASSERT_FALSE(rep.notes.empty());
    EXPECT_EQ(rep.notes[0].detail,
              "6 of 24 entries of the input covariance diagonal at or below 1e-12 x the largest (never excited by "
              "the calibration data): dropped from P and its pseudo-inverse, B·A does not act on them");
    const MatrixF w = m->layer(0).linear("fc2").dense_weight();
    EXPECT_EQ(w.leftCols(6).cwiseAbs().maxCoeff(), 0.0f);  // the dead inputs are ignored
    EXPECT_TRUE(std::isfinite(m->windows_nll(ids, 10)));
  }
  {
    // Damped root covariance (and joint up-down): a well-defined result with nothing to record.
    auto m = model::Model::load(dir);
    const auto rep = compress::compress_model(*m, ids, 10, options("latentllm"));
    EXPECT_TRUE(rep.notes.empty()) << rep.notes.front().message();
    EXPECT_TRUE(std::isfinite(m->windows_nll(ids, 10)));
  }
}

TEST_F(NumericsPipeline, FewerTokensThanFeaturesIsRecordedOnce) {
  const auto dir = test::make_opt({}, 12).write("few-tokens");
  auto m = model::Model::load(dir);
  const auto ids = ids_of(1, 8, 2);  // 8 tokens; d = 16, ffn = 24
  const auto rep = compress::compress_model(*m, ids, 8, options("asvd-rootcov"));
  ASSERT_EQ(rep.notes.size(), 1u);
  EXPECT_EQ(rep.notes[0].message(),
            "calibration: 8 calibration tokens for 12 of 12 modules with more input features (up to 24 in "
            "model.decoder.layers.0.fc2): their input covariances are singular; the damping λ = 0.0001·mean(diag C) "
            "(--lambda) keeps the pre-conditioners invertible");
  EXPECT_TRUE(std::isfinite(m->windows_nll(ids, 8)));
  const auto j = rep.to_json().at("notes");
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0].at("kind"), "few-tokens");
  EXPECT_EQ(compress::note_from_json(j[0]), rep.notes[0]);
}

TEST_F(NumericsPipeline, NonFiniteWeightsAreRefusedWhenTheModelLoads) {
  // Every command loads the model first: a NaN/Inf anywhere in it is one error naming the tensor.
  test::Checkpoint c = test::make_opt({}, 13);
  c.data("model.decoder.layers.1.fc1.weight")[7] = std::nanf("");
  EXPECT_EQ(error_of<NumericError>([&] { (void)model::Model::load(c.write("nan-weight")); }),
            "model.decoder.layers.1.fc1.weight: non-finite value at [0, 7] (expected finite, got nan)");
  test::Checkpoint d = test::make_opt({}, 14);
  d.data("model.decoder.layers.0.self_attn_layer_norm.weight")[3] = -INFINITY;
  EXPECT_EQ(error_of<NumericError>([&] { (void)model::Model::load(d.write("inf-norm")); }),
            "model.decoder.layers.0.self_attn_layer_norm.weight: non-finite value at [3] (expected finite, got -inf)");
}

TEST_F(NumericsPipeline, NonFiniteActivationsNameTheModules) {
  // A NaN that reaches the calibration inputs (here a norm weight changed in memory after the load
  // checks): the error names the modules the input feeds, the token and the feature.
  auto m = model::Model::load(test::make_opt({}, 15).write("nan-act"));
  for (auto& [name, v] : m->layer(0).norms)
    if (name == "self_attn_layer_norm.weight") v(3) = std::nanf("");
  EXPECT_EQ(error_of<NumericError>([&] { compress::compress_model(*m, ids_of(2, 10, 4), 10, options("asvd-rootcov")); }),
            "model.decoder.layers.0.self_attn.q_proj, k_proj, v_proj: non-finite calibration input (expected finite "
            "activations, got nan at token 0, feature 3)");
}

TEST_F(NumericsPipeline, ValuesBeyondTheStorageTypeAreRefused) {
  test::Checkpoint c = test::make_opt({}, 16);
  c.data("model.decoder.embed_tokens.weight")[39 * 16 + 2] = 1e5f;  // a token the calibration never uses
  const auto dir = c.write("f16-overflow");
  auto m = model::Model::load(dir);
  std::vector<std::int32_t> ids = ids_of(3, 10, 5);
  for (auto& id : ids) id = id % 39;
  (void)compress::compress_model(*m, ids, 10, options("asvd-rootcov"));
  const fs::path out = test::make_temp_dir("f16-out") / "ckpt";
  checkpoint::SaveOptions so;
  so.dtype = DType::F16;
  EXPECT_EQ(error_of<NumericError>([&] { checkpoint::save(*m, out, so); }),
            "model.decoder.embed_tokens.weight: value at [39, 2] overflows F16 (expected |x| <= 65504, got 100000); "
            "store the checkpoint with --dtype f32 or bf16");
  EXPECT_TRUE(fs::is_empty(out.parent_path())) << "nothing written";
  so.dtype = DType::BF16;
  checkpoint::save(*m, out, so);
  EXPECT_TRUE(fs::exists(out / "model.safetensors"));
  // 65519 still rounds to 65504 in F16 (round to nearest even): representable, accepted.
  c.data("model.decoder.embed_tokens.weight")[39 * 16 + 2] = 65519.0f;
  auto m2 = model::Model::load(c.write("f16-edge"));
  so.dtype = DType::F16;
  checkpoint::save(*m2, out.parent_path() / "edge", so);
}

TEST_F(NumericsPipeline, OutputLocationIsCheckedAndReplacedAtomically) {
  const fs::path tmp = test::make_temp_dir("out-check");
  std::ofstream(tmp / "file") << "x";
  EXPECT_EQ(error_of<IoError>([&] { checkpoint::check_output_writable(tmp / "file" / "out"); }),
            (tmp / "file" / "out").string() + ": cannot create the parent directory " + (tmp / "file").string() +
                " (Not a directory)");
  EXPECT_EQ(error_of<IoError>([&] { checkpoint::check_output_writable("/proc/latentllm-out"); }).rfind(
                "/proc/latentllm-out: output directory is not writable (cannot create a file in /proc: ", 0),
            0u);
  checkpoint::check_output_writable(tmp / "new" / "deeper" / "out");  // parents are created
  EXPECT_TRUE(fs::is_directory(tmp / "new" / "deeper"));
  EXPECT_TRUE(fs::is_empty(tmp / "new" / "deeper")) << "the probe file is removed";

  // --force exchanges a complete checkpoint for a complete one; debris of killed runs is removed.
  auto m = model::Model::load(test::make_opt({}, 17).write("atomic"));
  const fs::path out = tmp / "ckpt";
  checkpoint::SaveOptions so;
  checkpoint::save(*m, out, so);
  fs::create_directories(tmp / "ckpt.partial-999999999");  // no such process
  std::ofstream(tmp / "ckpt.partial-999999999" / "model.safetensors") << "half";
  std::ofstream(tmp / "ckpt" / "marker") << "old";
  so.overwrite = true;
  checkpoint::save(*m, out, so);
  EXPECT_FALSE(fs::exists(out / "marker")) << "the old checkpoint was replaced";
  EXPECT_TRUE(fs::exists(out / "model.safetensors"));
  EXPECT_FALSE(fs::exists(tmp / "ckpt.partial-999999999"));
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(tmp)) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"ckpt", "file", "new"}));
}

}  // namespace
}  // namespace latentllm
