// The per-layer progress of `compress --resume` (src/compress/run/resume.hpp) at the file level: a kill
// at any point between its writes leaves a state that restores exactly the last finished layer.
#include <gtest/gtest.h>

#include <fstream>

#include "compress/run/resume.hpp"
#include "latentllm/error.hpp"
#include "latentllm/files.hpp"
#include "latentllm/log.hpp"
#include "latentllm/model.hpp"
#include "model_fixtures.hpp"

namespace latentllm::compress {
namespace {

namespace fs = std::filesystem;

// Factors a layer's q_proj by a fixed rank-2 pair, as the compressor would.
void factor_q(model::Model& m, int layer, float scale) {
  model::Linear& q = m.layer(layer).linear("self_attn.q_proj");
  q.B = MatrixF::Constant(q.out, 2, scale);
  q.A = MatrixF::Constant(2, q.in, 1.0f);
  q.weight = {};
}

TEST(ResumeState, AKillBetweenTheWritesRestoresTheLastFinishedLayer) {
  set_log_callback(nullptr);
  const auto ckpt = test::make_opt({}, 21).write("resume-state");
  auto m = model::Model::load(ckpt);
  CompressReport report;
  report.add_note({"calibration", "few-tokens", "x"});
  const MatrixF h0 = MatrixF::Constant(20, 16, 0.5f), h1 = MatrixF::Constant(20, 16, 1.5f);
  MatrixF hidden;
  CompressReport restored;
  // A kill after layer 1's factors and hidden states were written, before its progress.json (hidden-0
  // is removed only after progress.json names hidden-1): put back the files of the state after layer 0.
  const ResumeState again(test::make_temp_dir("resume-state-2") / "s", "fp");
  again.create();
  factor_q(*m, 0, 2.0f);
  again.save_layer(*m, 0, h0, nullptr, report);
  const std::string p0 = core::read_file(again.dir() / "progress.json");
  const std::string hidden0 = core::read_file(again.dir() / "hidden-0.safetensors");
  factor_q(*m, 1, 3.0f);
  again.save_layer(*m, 1, h1, nullptr, report);
  EXPECT_FALSE(fs::exists(again.dir() / "hidden-0.safetensors")) << "superseded hidden states are removed";
  std::ofstream(again.dir() / "progress.json", std::ios::trunc) << p0;
  std::ofstream(again.dir() / "hidden-0.safetensors", std::ios::trunc | std::ios::binary) << hidden0;
  auto fresh2 = model::Model::load(ckpt);
  EXPECT_EQ(again.restore(*fresh2, hidden, nullptr, restored), 1);
  EXPECT_EQ(hidden, h0) << "the hidden states after layer 0, not layer 1's";
  EXPECT_TRUE(fresh2->layer(0).linear("self_attn.q_proj").factored());
  EXPECT_FALSE(fresh2->layer(1).linear("self_attn.q_proj").factored());
  ASSERT_EQ(restored.notes.size(), 1u);
  EXPECT_EQ(restored.notes[0], (NumericNote{"calibration", "few-tokens", "x"}));

  // After the complete write: both layers and layer 1's hidden states.
  again.save_layer(*m, 1, h1, nullptr, report);
  auto fresh3 = model::Model::load(ckpt);
  CompressReport r3;
  EXPECT_EQ(again.restore(*fresh3, hidden, nullptr, r3), 2);
  EXPECT_EQ(hidden, h1);
  EXPECT_EQ(fresh3->layer(1).linear("self_attn.q_proj").B, m->layer(1).linear("self_attn.q_proj").B);
}

TEST(ResumeState, UnwritableLocationFailsClearly) {
  const fs::path tmp = test::make_temp_dir("resume-unwritable");
  std::ofstream(tmp / "file") << "x";
  const ResumeState state(tmp / "file" / "out.resume", "fp");
  try {
    state.create();
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()),
              (tmp / "file" / "out.resume").string() + ": cannot create the progress directory (Not a directory)");
  }
}

}  // namespace
}  // namespace latentllm::compress
