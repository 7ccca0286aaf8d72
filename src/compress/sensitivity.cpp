// The dense pre-pass of global rank allocation: the spectrum of W·P for every module, P the root
// covariance of its dense inputs (include/latentllm/compress.hpp, "Global rank allocation").
#include <algorithm>
#include <chrono>
#include <map>
#include <memory>

#include "compress/notes.hpp"
#include "compress/whitening.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/error.hpp"
#include "latentllm/log.hpp"
#include "linalg/linalg.hpp"

namespace latentllm::compress {
namespace {

// σ_i² of W·F, F·Fᵀ = C + λI (the singular values of W·P for any such F, whitening.hpp), descending:
// the eigenvalues of the Gram of the shorter side. w: [d', d], c: [d, d].
std::vector<double> whitened_spectrum(const MatrixD& w, const MatrixD& c, double lambda_rel, std::string_view context) {
  const Whitening wh = whiten(c, lambda_rel, context);
  const MatrixD wf = wh.times(w);  // [d', d]
  const MatrixD gram = wf.rows() <= wf.cols() ? linalg::gram_rows(wf) : linalg::gram_rows(wf.transpose());  // [k, k]
  const VectorD values = linalg::sym_eigvals(gram, context);  // [k] descending
  std::vector<double> s(static_cast<std::size_t>(values.size()));
  for (Eigen::Index i = 0; i < values.size(); ++i) s[static_cast<std::size_t>(i)] = std::max(0.0, values(i));
  return s;
}

// Reads one site's statistics and records the spectra of its modules; rewrites nothing, so the
// pipeline's passes run the dense layer once.
class SpectrumStage final : public calib::Stage {
 public:
  SpectrumStage(model::Site site, const CompressOptions& opt, std::map<std::string, ModuleSpectrum>& out)
      : site_(site), opt_(opt), out_(out) {}
  std::string_view name() const override { return "spectrum"; }
  model::Site site() const override { return site_; }
  std::vector<model::Site> rewrites() const override { return {}; }

  void run(const calib::StageInput& in, model::Model& m) override {
    const calib::SiteStats& st = in.stats_of(site_);
    NoteCollector silent(true);  // the compression itself records the whitening's notes
    for (const model::Linear& lin : m.layer(in.layer).linears) {
      if (lin.site != site_) continue;
      // As the local ASVD: a bias module whose bias is updated sees only the centered inputs.
      const bool centered = lin.bias.size() > 0 && opt_.local.update_bias;
      const MatrixD c = centered ? st.centered() : st.xtx;  // [d, d]
      ModuleSpectrum s{lin.name, lin.role, lin.out, lin.in, {}};
      s.sigma2 = whitened_spectrum(lin.weight.cast<double>(), c, opt_.local.lambda_rel, lin.name);
      out_[lin.name] = std::move(s);
    }
  }

 private:
  model::Site site_;
  const CompressOptions& opt_;
  std::map<std::string, ModuleSpectrum>& out_;
};

}  // namespace

std::vector<ModuleSpectrum> measure_spectra(model::Model& m, std::span<const std::int32_t> ids, int seqlen,
                                            const CompressOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  if (opt.alloc_max_tokens > 0 && static_cast<std::int64_t>(ids.size()) > opt.alloc_max_tokens) {
    const std::int64_t windows = std::max<std::int64_t>(1, opt.alloc_max_tokens / seqlen);
    ids = ids.first(static_cast<std::size_t>(windows * seqlen));  // the first windows: a random sample already
  }
  log_info("rank allocation: dense pre-pass over {} layers ({} calibration tokens) for the spectra of W·P",
           m.num_layers(), ids.size());
  std::map<std::string, ModuleSpectrum> found;
  std::vector<std::unique_ptr<calib::Stage>> stages;
  for (model::Site s : {model::Site::AttnIn, model::Site::AttnOut, model::Site::MlpIn, model::Site::MlpMid})
    stages.push_back(std::make_unique<SpectrumStage>(s, opt, found));
  std::vector<calib::Stage*> ptrs;
  for (const auto& s : stages) ptrs.push_back(s.get());
  calib::PipelineOptions po;
  po.log_prefix = "rank allocation pre-pass: ";
  po.sequential_within_layer = false;  // nothing changes within a layer: one pass taps every site
  po.batch_windows = opt.pipeline.batch_windows;
  // Float products summed in double (1.4-2.2x faster, entries within 4e-6 of Σ|x_i·x_j|;
  // bench/results/covariance.md): the spectra only rank singular values against each other.
  po.covariance_f32 = true;
  po.resume_limit_bytes = opt.pipeline.resume_limit_bytes;
  with_context("rank allocation pre-pass", [&] { calib::run_layerwise(m, ids, seqlen, ptrs, po); });
  std::vector<ModuleSpectrum> out;
  for (int i = 0; i < m.num_layers(); ++i) {
    for (const auto& lin : m.layer_spec(i).linears) {
      const auto it = found.find(lin.name);
      if (it == found.end()) throw Error(fmt::format("{}: the pre-pass measured no spectrum", lin.name));
      out.push_back(std::move(it->second));
    }
  }
  log_info("rank allocation: pre-pass done in {:.1f}s", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return out;
}

}  // namespace latentllm::compress
