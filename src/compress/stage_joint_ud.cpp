// The joint up-down stage (paper §"Latent MLP: Joint UD SVD", appendix "MLP-Aware Joint Compression";
// joint_ud.hpp): the MLP's input activations themselves, its gate (gated MLPs), up and down.
#include "compress/joint_ud.hpp"
#include "compress/stage.hpp"
#include "dist/comm.hpp"
#include "latentllm/log.hpp"

namespace latentllm::compress {
namespace {

// The tokens joint up-down sees: every rank's rows x_mine [n_r, d] in rank order, evenly strided to at
// most max_tokens (--ud-tokens), cut into units of `unit` tokens; this rank's share of the units
// (dist::share_of) is the returned rows, gathered from the ranks that hold them into `owned` (or x_mine
// itself on one rank without a stride).
const MatrixF& units_of(const MatrixF& x_mine, std::int64_t max_tokens, std::int64_t unit, int layer, MatrixF& owned) {
  const std::int64_t n = dist::sum_of(x_mine.rows());
  const std::int64_t stride = max_tokens > 0 && n > max_tokens ? (n + max_tokens - 1) / max_tokens : 1;
  const std::int64_t n_sub = (n + stride - 1) / stride, units = (n_sub + unit - 1) / unit;
  if (stride > 1) log_info("  layer {} joint up-down on {} of {} calibration tokens (--ud-tokens)", layer, n_sub, n);
  if (dist::size() == 1 && stride == 1) return x_mine;
  const dist::Share mine = dist::my_share(units);
  dist::redistribute_rows(x_mine.data(), x_mine.rows(), x_mine.cols(), stride,
                          {mine.begin * unit, std::min(mine.end * unit, n_sub)}, owned);
  return owned;
}

class JointUdStage final : public CompressStage {
 public:
  using CompressStage::CompressStage;
  std::string_view name() const override { return "joint-ud"; }
  model::Site site() const override { return model::Site::MlpIn; }
  bool needs_activations() const override { return true; }
  std::vector<model::Site> rewrites() const override { return {model::Site::MlpIn, model::Site::MlpMid}; }

 private:
  void compress(const calib::StageInput& in, model::Model& m) override {
    auto& layer = m.layer(in.layer);
    model::Linear& up = layer.linear(model::Role::Up);
    model::Linear& down = layer.linear(model::Role::Down);
    model::Linear* gate = layer.find(model::Role::Gate);
    MlpDense dense;
    dense.act = m.mlp().act;
    dense.gated = m.mlp().gated;
    dense.w_up = weight_double(up);
    dense.b_up = to_double(up.bias);
    dense.w_down = weight_double(down);
    dense.b_down = to_double(down.bias);
    if (gate) {
      dense.w_gate = weight_double(*gate);
      dense.b_gate = to_double(gate->bias);
    }
    const CompressOptions& o = ctx_.options();
    UdOptions uo;
    uo.ranks.up = ctx_.rank_of(up);
    uo.ranks.down = ctx_.rank_of(down);
    uo.ranks.gate = gate ? ctx_.rank_of(*gate) : 0;
    uo.iters = o.ud_iters;
    uo.lambda_rel = o.local.lambda_rel;
    uo.f32_passes = o.ud_f32;
    uo.unit_tokens = o.ud_unit_tokens;
    MatrixF x_units;  // [n_u, d] the rows of this rank's units, when not simply all of x_mine
    const MatrixF& x = units_of(*in.activations, o.ud_max_tokens, ud_unit_tokens(uo, dense.w_up.rows()), in.layer,
                                x_units);
    const UdResult res = joint_ud(dense, x, uo, gate ? joined_name({gate, &up, &down}) : joined_name({&up, &down}));
    const double energy = res.output_energy > 0 ? res.output_energy : 1.0;
    const double best = res.best_iter >= 0 ? res.loss[static_cast<std::size_t>(res.best_iter)] : res.loss_local;
    log_info("  layer {} MLP output loss: local {:.4e} joint {:.4e} (rel {:.4f} -> {:.4f})", in.layer,
             res.loss_local, best, res.loss_local / energy, best / energy);
    ctx_.report().ud_losses.push_back({in.layer, best, res.loss_local});
    // up/gate: output error over their calibration inputs. down: its inputs are the compressed hidden
    // activations, not tapped; the MLP output loss above is its measure (weight error recorded).
    const calib::SiteStats& st = in.stats_of(model::Site::MlpIn);
    ctx_.install(up, res.f.up, dense.w_up, dense.b_up, &st, "joint-ud");
    if (gate) ctx_.install(*gate, res.f.gate, dense.w_gate, dense.b_gate, &st, "joint-ud");
    ctx_.install(down, res.f.down, dense.w_down, dense.b_down, nullptr, "joint-ud");
  }
};

}  // namespace

std::unique_ptr<CompressStage> make_joint_ud_stage(StageContext& ctx) { return std::make_unique<JointUdStage>(ctx); }

}  // namespace latentllm::compress
