// The dense pre-pass of global rank allocation: the spectrum of W·P for every module, P the root
// covariance of its dense inputs (include/latentllm/compress.hpp, "Global rank allocation").
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <optional>

#include "compress/stages/notes.hpp"
#include "compress/plan/sensitivity.hpp"
#include "compress/stages/stage.hpp"
#include "compress/math/whitening.hpp"
#include "graph/graph.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/error.hpp"
#include "latentllm/log.hpp"
#include "linalg/linalg.hpp"
#include "model/linear_fused.hpp"
#include "quant/quant.hpp"

namespace latentllm::compress {
namespace {

std::vector<double> descending_nonnegative(const VectorD& values) {  // eigenvalues, already descending
  std::vector<double> s(static_cast<std::size_t>(values.size()));
  for (Eigen::Index i = 0; i < values.size(); ++i) s[static_cast<std::size_t>(i)] = std::max(0.0, values(i));
  return s;
}

// ‖W − Q_q(W)‖²_F / ‖W‖²_F of round to nearest on each group's min–max grid, for q in kQuantBits
// (--bpw's estimate of what quantizing this module costs; allocate_ranks_bits).
std::vector<double> rounding_errors(const MatrixD& w, int group, std::string_view context) {
  std::vector<double> out;
  const double energy = w.squaredNorm();
  for (int bits : kQuantBits) {
    const quant::QuantSpec spec{bits, group, quant::Grid::MinMax};
    const double e = (w - quant::dequantize(quant::rtn(w, spec, context))).squaredNorm();
    out.push_back(energy > 0 ? e / energy : 0.0);
  }
  return out;
}

}  // namespace

std::vector<double> whitened_spectrum(const MatrixD& w, const Whitening& wh, std::string_view context) {
  const MatrixD wf = wh.times(w);  // [d', d]
  const MatrixD gram = wf.rows() <= wf.cols() ? linalg::gram_rows(wf) : linalg::gram_rows(wf.transpose());  // [k, k]
  return descending_nonnegative(linalg::sym_eigvals(gram, context));
}

std::vector<double> output_spectrum(const OutputStats& s, const MatrixF& w, bool centered, double lambda_rel,
                                    std::string_view context) {
  return descending_nonnegative(linalg::sym_eigvals(damped_output_gram(s, w, centered, lambda_rel), context));
}

std::vector<double> output_spectrum(const MatrixF& w, const MatrixF& x, bool centered, double lambda_rel,
                                    std::string_view context) {
  if (x.cols() != w.cols() || w.rows() > w.cols()) {
    throw Error(fmt::format("{}: output-side spectrum (expected w [d', d] with d' <= d and x [n, d], got w [{}, {}], "
                            "x [{}, {}])", context, w.rows(), w.cols(), x.rows(), x.cols()));
  }
  OutputStats s;
  s.add(w, x, 0);
  s.finish();
  return output_spectrum(s, w, centered, lambda_rel, context);
}

namespace {

constexpr std::array<model::Site, 4> kSites = {model::Site::AttnIn, model::Site::AttnOut, model::Site::MlpIn,
                                               model::Site::MlpMid};

// Which rank measures the spectra of (layer i, site kSites[s]): owners[i·4 + s]. A site's modules share
// its whitening, so the site is the unit; its modelled cost is the whitening's eigendecomposition
// (in³, unless fitted from its outputs: out³ per module) and per module the product with the whitening
// and the eigenvalues of its Gram.
std::vector<int> site_owners(const model::Model& m, const std::array<bool, 4>& output_side) {
  std::vector<double> costs;
  for (int i = 0; i < m.num_layers(); ++i) {
    for (std::size_t s = 0; s < kSites.size(); ++s) {
      double c = 0, in = 0;
      for (const auto& lin : m.layer_spec(i).linears) {
        if (lin.site != kSites[s]) continue;
        const double o = static_cast<double>(lin.out), n = static_cast<double>(lin.in), k = std::min(o, n);
        in = n;
        c += output_side[s] ? o * o * o : o * n * n + k * k * k;
      }
      costs.push_back(c + (output_side[s] ? 0.0 : in * in * in));
    }
  }
  return graph::processes().owners_by_cost(costs);
}

// Reads one site's statistics, or with the output side the statistics of its modules' outputs (from the
// tapped batches), and records the spectra of its modules; rewrites nothing, so the pipeline's passes
// run the dense layer once. Under K ranks only the site's owner rank decomposes (the statistics are
// combined on every rank, a collective); measure_spectra then broadcasts the spectra.
class SpectrumStage final : public calib::Stage {
 public:
  SpectrumStage(model::Site site, bool output_side, const CompressOptions& opt, const std::vector<int>& owners,
                std::map<std::string, ModuleSpectrum>& out)
      : site_(site), output_side_(output_side), opt_(opt), owners_(owners), out_(out) {}
  std::string_view name() const override { return "spectrum"; }
  model::Site site() const override { return site_; }
  std::vector<model::Site> reads() const override { return output_side_ ? std::vector<model::Site>{} : std::vector{site_}; }
  bool consumes_batches() const override { return output_side_; }
  double consume(const model::DecoderLayer& layer, int i, const MatrixF& x, std::int64_t first_token) override {
    return outputs_.add(layer, i, x, first_token, [&](const model::Linear& lin) { return lin.site == site_; });
  }
  std::vector<model::Site> rewrites() const override { return {}; }

  void run(const calib::StageInput& in, model::Model& m) override {
    NoteCollector silent(true);  // the compression itself records the whitening's notes
    std::optional<Whitening> whitening[2];  // of C and of the centered C: one per site, shared by its modules
    const auto s_index = static_cast<std::size_t>(std::find(kSites.begin(), kSites.end(), site_) - kSites.begin());
    const bool mine = owners_[static_cast<std::size_t>(in.layer) * kSites.size() + s_index] == graph::processes().rank();
    for (const model::Linear& lin : m.layer(in.layer).linears) {
      if (lin.site != site_) continue;
      // As the local ASVD: a bias module whose bias is updated sees only the centered inputs.
      const bool centered = lin.bias.size() > 0 && opt_.local.update_bias;
      ModuleSpectrum s{lin.name, lin.role, lin.out, lin.in, {}, {}};
      // --bpw's rounding errors, on the site's owner with its spectrum (measure_spectra broadcasts both).
      if (mine && opt_.quant.bpw > 0) s.quant_rel = rounding_errors(weight_double(lin), opt_.quant.group, lin.name);
      if (output_side_) {
        const OutputStats& os = outputs_.finished(lin.name);  // a collective: every rank
        if (mine) {
          MatrixF widened;  // [out, in] when lin keeps a 16-bit matrix
          s.sigma2 = output_spectrum(os, model::weight_f32(lin, widened), centered, opt_.local.lambda_rel, lin.name);
        }
      } else if (mine) {
        std::optional<Whitening>& wh = whitening[centered ? 1 : 0];
        if (!wh) {
          const calib::SiteStats& st = in.stats_of(site_);
          wh = whiten(centered ? st.centered() : st.xtx, opt_.local.lambda_rel, lin.name);  // [d, d]
        }
        s.sigma2 = whitened_spectrum(weight_double(lin), *wh, lin.name);
      }
      out_[lin.name] = std::move(s);
    }
    outputs_.clear();
  }

 private:
  model::Site site_;
  bool output_side_;
  const CompressOptions& opt_;
  const std::vector<int>& owners_;
  std::map<std::string, ModuleSpectrum>& out_;
  LayerOutputs outputs_;  // output side
};

// Whether every module of `site` (layer 0's shapes: the layers are alike) takes the output side.
bool site_output_side(const model::Model& m, model::Site site) {
  bool any = false, all = true;
  for (const auto& lin : m.layer_spec(0).linears) {
    if (lin.site != site) continue;
    any = true;
    all = all && output_side_cheaper(lin.out, lin.in);
  }
  return any && all;
}

}  // namespace

std::vector<ModuleSpectrum> measure_spectra(model::Model& m, std::span<const std::int32_t> ids, int seqlen,
                                            const CompressOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int> lengths = opt.pipeline.lengths;  // sequences of their own lengths (multimodal), or none
  MatrixF first_embeddings;                         // [rows kept, d] of opt.pipeline.input_embeddings
  if (opt.alloc_max_tokens > 0 && static_cast<std::int64_t>(ids.size()) > opt.alloc_max_tokens) {
    std::int64_t keep = 0;
    if (lengths.empty()) {
      keep = std::max<std::int64_t>(1, opt.alloc_max_tokens / seqlen) * seqlen;
    } else {  // whole sequences, at least one
      std::size_t k = 0;
      while (k < lengths.size() && (k == 0 || keep + lengths[k] <= opt.alloc_max_tokens)) keep += lengths[k++];
      lengths.resize(k);
    }
    ids = ids.first(static_cast<std::size_t>(keep));  // the first windows: a random sample already
    if (opt.pipeline.input_embeddings) first_embeddings = opt.pipeline.input_embeddings->topRows(keep);
  }
  log_info("rank allocation: dense pre-pass over {} layers ({} calibration tokens) for the spectra of W·P",
           m.num_layers(), ids.size());
  std::map<std::string, ModuleSpectrum> found;
  std::array<bool, 4> output_side{};
  for (std::size_t s = 0; s < kSites.size(); ++s) output_side[s] = site_output_side(m, kSites[s]);
  const std::vector<int> owners = site_owners(m, output_side);
  std::vector<std::unique_ptr<calib::Stage>> stages;
  for (std::size_t s = 0; s < kSites.size(); ++s) {
    stages.push_back(std::make_unique<SpectrumStage>(kSites[s], output_side[s], opt, owners, found));
  }
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
  po.lengths = lengths;
  po.input_embeddings = first_embeddings.size() > 0 ? &first_embeddings : opt.pipeline.input_embeddings;
  with_context("rank allocation pre-pass", [&] { calib::run_layerwise(m, ids, seqlen, ptrs, po); });
  std::vector<ModuleSpectrum> out;
  for (int i = 0; i < m.num_layers(); ++i) {
    for (const auto& lin : m.layer_spec(i).linears) {
      const auto it = found.find(lin.name);
      if (it == found.end()) throw Error(fmt::format("{}: the pre-pass measured no spectrum", lin.name));
      const auto s = static_cast<std::size_t>(std::find(kSites.begin(), kSites.end(), lin.site) - kSites.begin());
      if (s < kSites.size()) {
        const int owner = owners[static_cast<std::size_t>(i) * kSites.size() + s];
        graph::processes().broadcast_value(it->second.sigma2, owner);
        if (opt.quant.bpw > 0) graph::processes().broadcast_value(it->second.quant_rel, owner);
      }
      out.push_back(std::move(it->second));
    }
  }
  log_info("rank allocation: pre-pass done in {:.1f}s", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return out;
}

}  // namespace latentllm::compress
