// The compressor as a sequence of calibration stages (calib::Stage): a method is a registry row
// (methods.cpp) whose stage list plan_stages returns, each stage in its own file, sharing one StageContext.
//
//   stage      file                 site it waits for   modules          rewrites
//   local      stage_local.cpp      its site            by role           its site
//   joint-qk   stage_joint_qk.cpp   AttnIn              Q, K              AttnIn
//   joint-qkv  stage_joint_qkv.cpp  AttnIn              Q, K, V           AttnIn
//   joint-vo   stage_joint_vo.cpp   AttnOut (+AttnIn)   V, O              AttnIn, AttnOut
//   joint-ud   stage_joint_ud.cpp   MlpIn (activations) Gate, Up, Down    MlpIn, MlpMid
//   quantize   stage_quantize.cpp   its site            by role           its site
//   sparse     stage_sparse.cpp     its site            by role           its site
#pragma once

#include <functional>
#include <map>
#include <set>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compress/math/low_rank.hpp"
#include "compress/stages/notes.hpp"
#include "graph/graph.hpp"
#include "latentllm/calib.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/model.hpp"
#include "quant/factors.hpp"
#include "quant/pack.hpp"

namespace latentllm::compress {

// A module's factors in their junction form with their output error: loss = Σ ‖W·x + b − B·A·x − b̂‖²
// and energy = Σ ‖W·x + b‖² over the calibration inputs (energy < 0: the weight error ‖W − B·A‖²
// only, unlogged).
// With CompressOptions::quant, the module's factors quantized (quantize_fitted): qb, qa hold B and A packed
// and f their dequantized values, so that loss is the quantized module's.
struct Fitted {
  LowRank f;
  double loss = 0, energy = -1;
  std::shared_ptr<const quant::PackedMatrix> qb, qa;  // [d', r], [r, d] or [r, d − r]; null unless quantized
  // --bpw at full rank: B·A quantized as one dense [d', d] matrix instead of qb, qa (as many weights, one
  // rounding instead of two).
  std::shared_ptr<const quant::PackedMatrix> qw;
  // The module's own weights when its stored factors hold more (-1: f's B and A): --joint qkv's k_proj and
  // v_proj share q_proj's A, --split-heads' B holds zeros outside its head blocks (docs/JOINT.md).
  std::int64_t params = -1;
};

// What the stages of one compression run share: the options, the planned ranks, the report.
class StageContext {
 public:
  StageContext(const CompressOptions& opt, const RankPlan& plan, CompressReport& report);

  const CompressOptions& options() const { return opt_; }
  // The local options of the method (its pre-conditioner, the junction, λ, α).
  const LocalOptions& local() const { return local_; }
  CompressReport& report() { return report_; }
  int rank_of(const model::Linear& lin) const;
  // The bits of lin's factors: the plan's (--bpw), else the run's --bits (16: not quantized).
  int bits_of(const model::Linear& lin) const;

  // f put into the junction form the options ask for and measured: its output error over the inputs
  // `st` against the dense w, b (st null: the weight error only).
  // keep_form: f's own split of B·A is kept (split heads: a junction would fill B's zero blocks).
  Fitted fitted(const model::Linear& lin, LowRank f, const MatrixD& w, const VectorD& b,
                const calib::SiteStats* st, bool keep_form = false) const;
  // The same with the output error already known (the output side, output_side.hpp).
  Fitted fitted_measured(const model::Linear& lin, LowRank f, double loss, double energy) const;
  // fit's factors quantized as options().quant asks, on the site's statistics st (A on C = Σ x·xᵀ, B on
  // A'·C·A'ᵀ; without statistics on C = I, so GPTQ rounds to nearest), fit.f then their dequantized
  // values and its loss the quantized module's (against w, b over st; without st the weight error).
  void quantize_fitted(const model::Linear& lin, Fitted& fit, const MatrixD& w, const VectorD& b,
                       const calib::SiteStats* st) const;
  // quantize_fitted's full-rank case under --bpw: B·A quantized as one dense matrix on c (fit.qw).
  void quantize_dense(const model::Linear& lin, Fitted& fit, const MatrixD& w, const VectorD& b, const MatrixD& c,
                      const quant::FactorOptions& qo, const calib::SiteStats* st) const;
  // Reports f under `how` (its log line, the report's row) and installs it in lin in place of the
  // dense weight.
  void install(model::Linear& lin, const Fitted& f, std::string_view how);

  // ---- the layer's task graph (graph/graph.hpp) ----
  // The stages declare their decompositions into it site by site; finishing work (a fit's junction
  // form and output error, which no later decomposition reads) runs in the rounds' idle time or at the
  // layer's end (end_layer), where every module is installed and reported in declaration order.
  graph::Graph& graph() { return graph_; }
  void end_layer();
  // The modelled cost (fit_cost's units) of a module's junction form and, when measured, its output
  // error: the work StageContext::fitted does.
  double finish_cost(const model::Linear& lin, std::int64_t rank, bool measured) const;
  // Installs f in lin for the layer's later calibration passes only (no report row, no log line): as
  // its two factors, or as their product when that is cheaper per token (a dense-looking module until
  // the layer's end installs its final form; fitted_in_layer tells it apart).
  void install_for_passes(model::Linear& lin, const LowRank& f);
  bool fitted_in_layer(const model::Linear& lin) const { return in_passes_.count(lin.name) > 0; }

 private:
  const CompressOptions& opt_;
  LocalOptions local_;
  CompressReport& report_;
  std::map<std::string, std::int64_t> ranks_;
  std::map<std::string, int> bits_;  // the plan's, where it chose them
  NotesJournal journal_;
  graph::Graph graph_;
  std::set<std::string> in_passes_;  // the modules installed for passes, until end_layer
};

// A fit as the layer's passes read it and as its junction form (finishing work) starts from it: B and A
// rounded to float32, the same values on every rank, held in float32 until its finishing work runs
// (half the memory and bytes of the double).
struct Factors32 {
  Eigen::MatrixXf B, A;   // [d', r], [r, d]
  std::vector<int> perm;  // as LowRank's
  VectorD bias;
  Factors32() = default;
  explicit Factors32(const LowRank& f) : B(f.B.cast<float>()), A(f.A.cast<float>()), perm(f.perm), bias(f.bias) {}
  LowRank widened() const { return {B.cast<double>(), A.cast<double>(), perm, bias}; }
};

// A fit before its junction form, as the layer's passes read it, with its output error when the fit
// measured it (the output side; else energy < 0 and the finishing work measures it).
struct RoundedFit {
  Factors32 f;
  double loss = 0, energy = -1;
};

// The dense weight of a module, moved out of it before its factors are installed, for its fit and its
// output error (finishing work); a mapped view's pages are dropped when the last holder lets go.
struct DenseWeight {
  model::Weight weight;  // [out, in] float32 or 16-bit
  DenseWeight() = default;
  DenseWeight(const DenseWeight&) = delete;
  DenseWeight& operator=(const DenseWeight&) = delete;
  ~DenseWeight();
};
std::shared_ptr<const DenseWeight> take_dense(model::Linear& lin);
MatrixD weight_double(const DenseWeight& w);

// A stage of the compressor. Per layer and site, on every rank: declare() prepares its decompositions
// (the collectives and the cheap shared work) and declares them into the layer's task graph as typed
// tasks, with the effects that install their results (graph/graph.hpp); the graph runs the site's
// tasks of every stage waiting for it together (site_stages), so that the ranks share them.
class CompressStage : public calib::Stage {
 public:
  explicit CompressStage(StageContext& ctx) : ctx_(ctx) {}
  // The stage alone at its site (site_stages wraps every site's stages instead).
  void run(const calib::StageInput& in, model::Model& m) final;
  void end_layer(int, model::Model&) final { ctx_.end_layer(); }

  virtual void declare(graph::Graph& g, const calib::StageInput& in, model::Model& m) = 0;

 protected:
  StageContext& ctx_;
};

// Runs the stages of one site (all waiting for the same site; their inputs are in `in`) for layer
// in.layer: each declares its tasks (in stage order) into the layer's graph, which runs them.
void run_site(StageContext& ctx, std::span<CompressStage* const> stages, const calib::StageInput& in,
              model::Model& m);

// The pipeline's stages: each run of consecutive stages waiting for the same site as one stage
// (run_site). The stages must outlive them.
std::vector<std::unique_ptr<calib::Stage>> site_stages(StageContext& ctx,
                                                       std::span<const std::unique_ptr<CompressStage>> stages);

// Local ASVD (the method's pre-conditioner) of the not yet compressed modules with these roles at `site`.
// With the root covariance, the wide modules among them (output_side.hpp) are fitted from their
// outputs, without the site's covariance, when local_output_side allows it.
std::unique_ptr<CompressStage> make_local_stage(StageContext& ctx, const model::Model& m, model::Site site,
                                                std::vector<model::Role> roles);
// Dense quantization (--method rtn / gptq, stage_quantize.cpp) of the modules with these roles at `site`.
std::unique_ptr<CompressStage> make_quantize_stage(StageContext& ctx, model::Site site, std::vector<model::Role> roles);
// Sparse approximation (--method sparse / wanda / sparsegpt, stage_sparse.cpp) of the modules with these
// roles at `site`: dense matrices with zeros.
std::unique_ptr<CompressStage> make_sparse_stage(StageContext& ctx, model::Site site, std::vector<model::Role> roles);
std::unique_ptr<CompressStage> make_joint_qk_stage(StageContext& ctx);
// Joint Q-K-V (stage_joint_qkv.cpp, compress/math/joint_qkv.hpp): one A shared by q_proj, k_proj, v_proj.
std::unique_ptr<CompressStage> make_joint_qkv_stage(StageContext& ctx);
std::unique_ptr<CompressStage> make_joint_vo_stage(StageContext& ctx);
std::unique_ptr<CompressStage> make_joint_ud_stage(StageContext& ctx);

// The stages of ctx's method for model m, in the sites' forward order: its registry row's (methods.cpp).
std::vector<std::unique_ptr<CompressStage>> plan_stages(StageContext& ctx, const model::Model& m);

// ---- helpers of the stage files ---------------------------------------------------------------

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
