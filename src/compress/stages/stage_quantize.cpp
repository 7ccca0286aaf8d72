// The dense quantization stage of `--method rtn` and `--method gptq`: every module of its site keeps its
// full rank and is stored quantized (the baselines users compare low rank against, docs/QUANT.md):
// round to nearest on each group's min–max grid, or GPTQ (Frantar et al. 2022) on the module's input
// second moment C = Σ x·xᵀ, which the calibration gathers for every method. Each module is quantized
// when its site's statistics arrive and installed at once, so the layer's later sites and layers see
// the quantized modules' outputs, as GPTQ's sequential protocol does.
#include <algorithm>

#include "compress/math/asvd.hpp"
#include "compress/stages/stage.hpp"
#include "latentllm/log.hpp"
#include "quant/gptq.hpp"
#include "quant/pack.hpp"

namespace latentllm::compress {
namespace {

class QuantizeStage final : public CompressStage {
 public:
  QuantizeStage(StageContext& ctx, model::Site site, std::vector<model::Role> roles)
      : CompressStage(ctx), site_(site), roles_(std::move(roles)) {}
  std::string_view name() const override { return "quantize"; }
  model::Site site() const override { return site_; }

  void declare(graph::Graph&, const calib::StageInput& in, model::Model& m) override {
    const calib::SiteStats& st = in.stats_of(site_);
    for (model::Linear& lin : m.layer(in.layer).linears)
      if (lin.site == site_ && std::find(roles_.begin(), roles_.end(), lin.role) != roles_.end() && !lin.quantized())
        quantize(lin, st);
  }

 private:
  void quantize(model::Linear& lin, const calib::SiteStats& st) {
    const CompressOptions& o = ctx_.options();
    const bool gptq = uses_gptq(o);
    const quant::QuantSpec spec{o.quant.bits, o.quant.group, gptq ? quant::Grid::IntegerZero : quant::Grid::MinMax};
    const MatrixD w = weight_double(lin);  // [out, in]
    const quant::QuantizedMatrix q =
        gptq ? quant::gptq(w, st.xtx, spec, quant::GptqOptions{}, lin.name).q : quant::rtn(w, spec, lin.name);
    const double n = static_cast<double>(st.n);
    const VectorD mean = st.mean(), none;
    ModuleReport r;
    r.name = lin.name;
    r.out = lin.out;
    r.in = lin.in;
    r.dense_params = r.params = lin.out * lin.in;
    r.how = gptq ? "gptq" : "rtn";
    r.loss = output_error_f32(w - quant::dequantize(q), none, st.xtx, mean, n);
    const double energy = output_error_f32(w, to_double(lin.bias), st.xtx, mean, n);
    r.loss_rel = energy > 0 ? r.loss / energy : 0.0;
    log_info("  {} {}-bit loss {:.4e} (rel {:.4f}) [{}]", lin.name, o.quant.bits, r.loss, r.loss_rel, r.how);
    ctx_.report().modules.push_back(std::move(r));
    take_dense(lin);  // the dense weight's memory (and a mapped view's pages) released
    lin.weight = std::make_shared<const quant::PackedMatrix>(quant::pack(q));
  }

  model::Site site_;
  std::vector<model::Role> roles_;
};

}  // namespace

std::unique_ptr<CompressStage> make_quantize_stage(StageContext& ctx, model::Site site, std::vector<model::Role> roles) {
  return std::make_unique<QuantizeStage>(ctx, site, std::move(roles));
}

}  // namespace latentllm::compress
