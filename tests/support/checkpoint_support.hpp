// Helpers of the golden tests that compress a model, save the checkpoint and compare logits: one home for
// the forward they compare against and for the compress → save (→ stop and resume) sequence.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "latentllm/calib.hpp"
#include "latentllm/checkpoint.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/model.hpp"
#include "latentllm/tensor.hpp"
#include "latentllm/tokenizer.hpp"

namespace latentllm::test {

// `nsamples` random windows of `seqlen` tokens of a plain text file, tokenized by the model's tokenizer
// (compress --calib text, seed 0): [nsamples·seqlen].
inline std::vector<std::int32_t> text_calibration(const std::filesystem::path& model_dir,
                                                  const std::filesystem::path& text, int nsamples, int seqlen) {
  calib::CalibOptions co;
  co.source = "text";
  co.data = text.string();
  co.nsamples = nsamples;
  co.seqlen = seqlen;
  return calib::sample_calibration(*io::load_tokenizer(model_dir), co);
}

// [n, V] the logits of ids ([n], windows of T tokens) through the embedding, every layer and the head.
inline MatrixF logits_of(const model::Model& m, const std::vector<std::int32_t>& ids, int T) {
  MatrixF h, logits;  // [n, d], [n, V]
  m.embed(ids, T, h);
  for (int i = 0; i < m.num_layers(); ++i) m.layer_forward(i, h, T);
  m.head(h, logits);
  return logits;
}

// Compresses the model in `model_dir` on `ids` (windows of seqlen tokens) with `base` and saves it in
// float32 to `out`. lazy: the model is loaded lazily and the checkpoint streams from the progress files;
// stop_after > 0: a first run stops after that many layers and a second one resumes it. With `probe`, an
// eager run also returns the compressed model's logits on it (logits_of) in *logits.
inline compress::CompressReport compress_and_save(const std::filesystem::path& model_dir,
                                                  const std::vector<std::int32_t>& ids, int seqlen,
                                                  const compress::CompressOptions& base, const std::filesystem::path& out,
                                                  bool lazy, int stop_after = 0,
                                                  const std::vector<std::int32_t>* probe = nullptr,
                                                  MatrixF* logits = nullptr) {
  compress::CompressOptions o = base;
  o.state_dir = out.string() + ".resume";
  if (stop_after > 0) {
    auto first = model::Model::load(model_dir, {.lazy = lazy});
    o.stop_after_layers = stop_after;
    compress::compress_model(*first, ids, seqlen, o);
    o.stop_after_layers = 0;
    o.resume = true;
  }
  auto m = model::Model::load(model_dir, {.lazy = lazy});
  auto report = compress::compress_model(*m, ids, seqlen, o);
  checkpoint::SaveOptions so;
  so.dtype = DType::F32;
  if (lazy) so.layer_factors_dir = o.state_dir;
  checkpoint::save(*m, out, so);
  if (probe != nullptr && logits != nullptr && !lazy) *logits = logits_of(*m, *probe, seqlen);
  std::filesystem::remove_all(o.state_dir);
  return report;
}

}  // namespace latentllm::test
