// The joint up-down stage (paper §"Latent MLP: Joint UD SVD", appendix "MLP-Aware Joint Compression";
// joint_ud.hpp): the MLP's input activations themselves, its gate (gated MLPs), up and down.
#include <array>

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
  // The solver's token passes are collectives (begin, on every rank); the factors' junction forms and
  // losses are one job per module.
  int begin(const calib::StageInput& in, model::Model& m) override {
    auto& layer = m.layer(in.layer);
    up_ = &layer.linear(model::Role::Up);
    down_ = &layer.linear(model::Role::Down);
    gate_ = layer.find(model::Role::Gate);
    st_ = &in.stats_of(model::Site::MlpIn);
    layer_ = in.layer;
    dense_ = MlpDense{};
    dense_.act = m.mlp().act;
    dense_.gated = m.mlp().gated;
    dense_.w_up = weight_double(*up_);
    dense_.b_up = to_double(up_->bias);
    dense_.w_down = weight_double(*down_);
    dense_.b_down = to_double(down_->bias);
    if (gate_) {
      dense_.w_gate = weight_double(*gate_);
      dense_.b_gate = to_double(gate_->bias);
    }
    const CompressOptions& o = ctx_.options();
    UdOptions uo;
    uo.ranks.up = ctx_.rank_of(*up_);
    uo.ranks.down = ctx_.rank_of(*down_);
    uo.ranks.gate = gate_ ? ctx_.rank_of(*gate_) : 0;
    uo.iters = o.ud_iters;
    uo.lambda_rel = o.local.lambda_rel;
    uo.f32_passes = o.ud_f32;
    uo.unit_tokens = o.ud_unit_tokens;
    MatrixF x_units;  // [n_u, d] the rows of this rank's units, when not simply all of x_mine
    const MatrixF& x = units_of(*in.activations, o.ud_max_tokens, ud_unit_tokens(uo, dense_.w_up.rows()), in.layer,
                                x_units);
    res_ = joint_ud(dense_, x, uo, gate_ ? joined_name({gate_, up_, down_}) : joined_name({up_, down_}));
    return 1;
  }
  // up/gate: output error over their calibration inputs. down: its inputs are the compressed hidden
  // activations, not tapped; the MLP output loss is its measure (weight error recorded).
  std::vector<Job> jobs(int) override {
    std::vector<Job> out;
    auto job = [&](model::Linear* lin, const LowRank* f, const MatrixD* w, const VectorD* b,
                   const calib::SiteStats* st, Fitted* into) {
      const double cost = static_cast<double>(lin->out) * static_cast<double>(lin->in) * static_cast<double>(lin->in);
      out.push_back({lin->name, cost, [this, lin, f, w, b, st](Payload& p) { p.put(ctx_.fitted(*lin, *f, *w, *b, st)); },
                     [into](Payload& p) { p.get(*into); }});
    };
    job(up_, &res_.f.up, &dense_.w_up, &dense_.b_up, st_, &fits_[0]);
    if (gate_) job(gate_, &res_.f.gate, &dense_.w_gate, &dense_.b_gate, st_, &fits_[1]);
    job(down_, &res_.f.down, &dense_.w_down, &dense_.b_down, nullptr, &fits_[2]);
    return out;
  }
  void finish(model::Model&) override {
    const double energy = res_.output_energy > 0 ? res_.output_energy : 1.0;
    const double best = res_.best_iter >= 0 ? res_.loss[static_cast<std::size_t>(res_.best_iter)] : res_.loss_local;
    log_info("  layer {} MLP output loss: local {:.4e} joint {:.4e} (rel {:.4f} -> {:.4f})", layer_, res_.loss_local,
             best, res_.loss_local / energy, best / energy);
    ctx_.report().ud_losses.push_back({layer_, best, res_.loss_local});
    ctx_.install_for_passes(*up_, fits_[0].f);
    if (gate_) ctx_.install_for_passes(*gate_, fits_[1].f);
    ctx_.install_for_passes(*down_, fits_[2].f);
    ctx_.defer(layer_, name(), {}, [this, up = up_, gate = gate_, down = down_, fits = fits_] {
      ctx_.install(*up, fits[0], "joint-ud");
      if (gate) ctx_.install(*gate, fits[1], "joint-ud");
      ctx_.install(*down, fits[2], "joint-ud");
    });
    dense_ = {};
    res_ = {};
    fits_ = {};
  }

  // The layer's work (begin to finish).
  model::Linear *up_ = nullptr, *down_ = nullptr, *gate_ = nullptr;
  const calib::SiteStats* st_ = nullptr;
  int layer_ = 0;
  MlpDense dense_;
  UdResult res_;
  std::array<Fitted, 3> fits_;  // up, gate, down
};

}  // namespace

std::unique_ptr<CompressStage> make_joint_ud_stage(StageContext& ctx) { return std::make_unique<JointUdStage>(ctx); }

}  // namespace latentllm::compress
