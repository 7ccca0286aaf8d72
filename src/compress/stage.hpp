// The compressor as a sequence of calibration stages (calib::Stage): a method is a registry row
// (methods.cpp) whose stage list plan_stages returns, each stage in its own file, sharing one StageContext.
//
//   stage      file                 site it waits for   modules          rewrites
//   local      stage_local.cpp      its site            by role           its site
//   joint-qk   stage_joint_qk.cpp   AttnIn              Q, K              AttnIn
//   joint-vo   stage_joint_vo.cpp   AttnOut (+AttnIn)   V, O              AttnIn, AttnOut
//   joint-ud   stage_joint_ud.cpp   MlpIn (activations) Gate, Up, Down    MlpIn, MlpMid
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "compress/low_rank.hpp"
#include "latentllm/calib.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/model.hpp"

namespace latentllm::compress {

// What the stages of one compression run share: the options, the planned ranks, the report.
class StageContext {
 public:
  StageContext(const CompressOptions& opt, const RankPlan& plan, CompressReport& report);

  const CompressOptions& options() const { return opt_; }
  // The local options of the method (its pre-conditioner, the junction, λ, α).
  const LocalOptions& local() const { return local_; }
  CompressReport& report() { return report_; }
  int rank_of(const model::Linear& lin) const;

  // Puts f into the junction form the options ask for, reports it (its output error over the inputs
  // `st` against the dense w, b; st null: the weight error ‖W − B·A‖² only, unlogged) under `how`,
  // and installs it in lin in place of the dense weight.
  void install(model::Linear& lin, LowRank f, const MatrixD& w, const VectorD& b, const calib::SiteStats* st,
               std::string_view how);
  // The same with the output error already known (the output side, output_side.hpp): loss = Σ ‖W·x + b
  // − B·A·x − b̂‖² and energy = Σ ‖W·x + b‖² over the calibration inputs.
  void install_measured(model::Linear& lin, LowRank f, double loss, double energy, std::string_view how);

 private:
  const CompressOptions& opt_;
  LocalOptions local_;
  // Reports f (already in its junction form) with its loss (and energy; < 0: unlogged weight error) and
  // installs it.
  void report_and_install(model::Linear& lin, const LowRank& f, double loss, double energy, std::string_view how);

  CompressReport& report_;
  std::map<std::string, std::int64_t> ranks_;
};

// A stage of the compressor: times compress() (CompressReport::part_seconds, the part observer) and
// moves the numerical notes it records into the report.
class CompressStage : public calib::Stage {
 public:
  explicit CompressStage(StageContext& ctx) : ctx_(ctx) {}
  void run(const calib::StageInput& in, model::Model& m) final;

 protected:
  virtual void compress(const calib::StageInput& in, model::Model& m) = 0;
  StageContext& ctx_;
};

// Local ASVD (the method's pre-conditioner) of the not yet compressed modules with these roles at `site`.
// With the root covariance, the wide modules among them (output_side.hpp) are fitted from their
// outputs, without the site's covariance, when local_output_side allows it.
std::unique_ptr<CompressStage> make_local_stage(StageContext& ctx, const model::Model& m, model::Site site,
                                                std::vector<model::Role> roles);
std::unique_ptr<CompressStage> make_joint_qk_stage(StageContext& ctx);
std::unique_ptr<CompressStage> make_joint_vo_stage(StageContext& ctx);
std::unique_ptr<CompressStage> make_joint_ud_stage(StageContext& ctx);

// The stages of ctx's method for model m, in the sites' forward order: its registry row's (methods.cpp).
std::vector<std::unique_ptr<CompressStage>> plan_stages(StageContext& ctx, const model::Model& m);

// ---- helpers of the stage files ---------------------------------------------------------------

// One module's factors as the rank that owns its decomposition computed them (module-parallel stages
// under K ranks, docs/SCALE.md): loss and energy when the fit measured them itself (≥ 0), and the
// numerical notes it recorded.
struct ModuleFit {
  LowRank f;
  double loss = -1, energy = -1;
  std::vector<NumericNote> notes;
};
// Every rank gets root's fit (a collective; nothing with one rank).
void broadcast_fit(ModuleFit& fit, int root);
// The modelled cost of decomposing a module alone: the eigendecomposition of its input covariance and
// the SVD of the whitened weight, or from its outputs (output side) the [out, out] ones.
double fit_cost(const model::Linear& lin, bool output_side);

MatrixD to_double(const MatrixF& m);
VectorD to_double(const VectorF& v);
// The [out, in] weight of an unfactored module in double: from float32, or from the 16-bit matrix a model
// with stored weights keeps (widened by blocks of rows, never whole in float32), exact either way.
MatrixD weight_double(const model::Linear& lin);
// "model.layers.0.self_attn.q_proj, k_proj": the modules a joint stage compresses together.
std::string joined_name(std::initializer_list<const model::Linear*> mods);

}  // namespace latentllm::compress
