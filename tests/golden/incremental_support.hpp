// Shared by the KV-cache tests (test_generate.cpp, test_latent_kv.cpp): logits by the full forward and
// by prefill + one token per forward_cached call, their comparison, a TinyStories prompt, and a latent
// copy of a fixture compressed by latentllm through the library API.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "latentllm/calib.hpp"
#include "latentllm/checkpoint.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/log.hpp"
#include "latentllm/model.hpp"
#include "latentllm/tokenizer.hpp"
#include "test_support.hpp"

namespace latentllm::test {

// Incremental logits agree with the full forward to float32 round-off: the products sum in another
// order (one query row against the cache instead of 64-row blocks; the latent routes sum q̃·c_k instead
// of q·k). Stated relative to the largest logit of the sequence.
inline constexpr double kIncrementalRelTol = 2e-5;

// Logits [T, V] of one window by the full-sequence forward.
inline MatrixF full_logits(const model::Model& m, const std::vector<std::int32_t>& ids) {
  const int T = static_cast<int>(ids.size());
  MatrixF h, logits;  // [T, d], [T, V]
  m.embed(ids, T, h);
  for (int i = 0; i < m.num_layers(); ++i) m.layer_forward(i, h, T);
  m.head(h, logits);
  return logits;
}

// Logits [T, V] by prefill of the first `prefill` ids, then one id per forward_cached call.
inline MatrixF incremental_logits(const model::Model& m, const std::vector<std::int32_t>& ids, int prefill,
                                  model::KvCacheMode mode) {
  const int T = static_cast<int>(ids.size());
  model::KvCache cache(m, T, mode);
  MatrixF out(T, m.config().vocab_size), step;  // [T, V], [n, V]
  m.forward_cached(std::span<const std::int32_t>(ids.data(), static_cast<std::size_t>(prefill)), cache, step);
  out.topRows(prefill) = step;
  for (int t = prefill; t < T; ++t) {
    m.forward_cached(std::span<const std::int32_t>(&ids[static_cast<std::size_t>(t)], 1), cache, step);
    out.row(t) = step.row(0);
  }
  EXPECT_EQ(cache.length(), T);
  return out;
}

// Max |incremental − full| over every position and each prefill length, checked against the tolerance;
// returned for the report.
inline double check_incremental(const model::Model& m, const std::vector<std::int32_t>& ids, model::KvCacheMode mode,
                                std::initializer_list<int> prefills, const std::string& what) {
  const MatrixF full = full_logits(m, ids);
  const double scale = std::max(1.0, static_cast<double>(full.cwiseAbs().maxCoeff()));
  double worst = 0;
  for (int prefill : prefills) {
    const double diff = (incremental_logits(m, ids, prefill, mode) - full).cwiseAbs().maxCoeff();
    EXPECT_LE(diff, kIncrementalRelTol * scale) << what << " prefill " << prefill;
    worst = std::max(worst, diff);
  }
  std::printf("[ info ] %s, %s cache: max |incremental - full| logit = %.3g (max |logit| %.3g) over %zu positions\n",
              what.c_str(), std::string(model::kv_cache_mode_name(mode)).c_str(), worst, scale, ids.size());
  return worst;
}

// The first n ids of a TinyStories-like prompt.
inline std::vector<std::int32_t> story_ids(const io::Tokenizer& tok, std::size_t n) {
  std::string text;
  for (int i = 0; i < 4; ++i) {
    text += "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her "
            "friends. One day, she saw a big red ball near the tree and ran to it. ";
  }
  auto ids = tok.encode(text);
  EXPECT_GE(ids.size(), n);
  ids.resize(std::min(n, ids.size()));
  return ids;
}

// A latent copy of the model in `dir`, compressed by latentllm (default joint parts) at `ratio` with the
// library API on 8 TinyStories windows of 64 tokens, saved and loaded back.
inline std::unique_ptr<model::Model> latent_copy(const std::filesystem::path& dir, double ratio, const std::string& tag) {
  set_log_callback([](LogLevel, std::string_view) {});
  auto m = model::Model::load(dir);
  const auto tok = io::load_tokenizer(dir);
  calib::CalibOptions co;
  co.source = "text";
  co.data = shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt");
  co.nsamples = 8;
  co.seqlen = 64;
  const auto ids = calib::sample_calibration(*tok, co);
  compress::CompressOptions opt;
  opt.method = compress::parse_method("latentllm");
  opt.ratio = ratio;
  compress::compress_model(*m, ids, co.seqlen, opt);
  const std::filesystem::path out = make_temp_dir(tag) / "latent";
  checkpoint::save(*m, out, {});
  return model::Model::load(out);
}

}  // namespace latentllm::test
