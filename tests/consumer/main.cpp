// A program outside the tree that uses only the installed package (public headers, liblatentllm.a and
// its dependencies): compresses stories260K with a few calibration windows, writes the latent
// checkpoint, loads it back and compares perplexities and parameter counts. scripts/test_install builds
// it with find_package(latentllm) and with pkg-config.
//
// Usage: latentllm-consumer <shared folder> <output folder>
// Prints `dense`, `compressed` and `reloaded` lines, then `consumer: ok`; exit status 1 on any failure.
#include <cmath>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "latentllm/calib.hpp"
#include "latentllm/checkpoint.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/dataset.hpp"
#include "latentllm/error.hpp"
#include "latentllm/eval.hpp"
#include "latentllm/log.hpp"
#include "latentllm/model.hpp"
#include "latentllm/tensor.hpp"
#include "latentllm/tokenizer.hpp"

namespace fs = std::filesystem;
using namespace latentllm;

namespace {

constexpr int kCalibSeqlen = 128;
constexpr int kEvalSeqlen = 256;
constexpr int kEvalWindows = 8;

// Logits [n, V] of the windows of T tokens in ids. The matrices are allocated here and resized inside the
// library: that works only when this file is compiled with the library's Eigen configuration (the
// definitions and architecture flags the package passes on).
MatrixF logits_of(const model::Model& m, const std::vector<std::int32_t>& ids, int T) {
  MatrixF h(1, 1), logits(1, 1);  // [n, d], [n, V]
  m.embed(ids, T, h);
  for (int i = 0; i < m.num_layers(); ++i) m.layer_forward(i, h, T);
  m.head(h, logits);
  return logits;
}

double heldout_ppl(model::Model& m, const std::vector<std::int32_t>& ids) {
  return eval::perplexity_ids(m, ids, kEvalSeqlen, kEvalWindows, 4, "tinystories").ppl;
}

int run(const fs::path& shared, const fs::path& out) {
  const fs::path model_dir = shared / "models/stories260K/hf";
  const fs::path text = shared / "data/tinystories/TinyStories-valid.stories0001-0232.clean.txt";
  set_log_level(LogLevel::Warn);

  auto m = model::Model::load(model_dir);
  const auto tok = io::load_tokenizer(model_dir);
  const auto eval_ids = eval::eval_ids(*tok, io::Dataset::Text, text, kEvalSeqlen);
  const std::int64_t dense_params = eval::num_params(*m);
  const double dense_ppl = heldout_ppl(*m, eval_ids);
  fmt::print("dense: {} parameters, perplexity {:.4f}\n", dense_params, dense_ppl);

  calib::CalibOptions co;
  co.source = "text";
  co.data = text;
  co.nsamples = 8;
  co.seqlen = kCalibSeqlen;
  const auto calib_ids = calib::sample_calibration(*tok, co);
  compress::CompressOptions opt;  // LatentLLM: joint Q-K, V-O and up-down
  opt.ratio = 0.3;
  const auto report = compress::compress_model(*m, calib_ids, kCalibSeqlen, opt);
  const double compressed_ppl = heldout_ppl(*m, eval_ids);
  fmt::print("compressed: {} of {} module parameters, {} parameters, perplexity {:.4f}\n", report.params,
             report.dense_params, eval::num_params(*m), compressed_ppl);

  checkpoint::SaveOptions so;
  so.dtype = DType::F32;
  so.overwrite = true;
  checkpoint::save(*m, out / "latent", so);
  auto re = model::Model::load(out / "latent");
  const double reloaded_ppl = heldout_ppl(*re, eval_ids);
  const std::vector<std::int32_t> probe(eval_ids.begin(), eval_ids.begin() + 2 * 64);
  const bool same_logits = logits_of(*m, probe, 64) == logits_of(*re, probe, 64);
  fmt::print("reloaded: {} parameters, perplexity {:.4f}, logits {}\n", eval::num_params(*re), reloaded_ppl,
             same_logits ? "identical" : "DIFFERENT");

  // The f32 checkpoint runs the same computation; the budget holds; compression costs some perplexity.
  const bool ok = std::isfinite(dense_ppl) && reloaded_ppl == compressed_ppl && same_logits &&
                  eval::num_params(*re) == eval::num_params(*m) && eval::num_params(*m) < dense_params &&
                  report.params <= static_cast<std::int64_t>(0.7 * static_cast<double>(report.dense_params)) + 1 &&
                  compressed_ppl > dense_ppl && compressed_ppl < 10 * dense_ppl;
  fmt::print("consumer: {}\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    fmt::print(stderr, "usage: {} <shared folder> <output folder>\n", argv[0]);
    return 2;
  }
  try {
    return run(argv[1], argv[2]);
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
