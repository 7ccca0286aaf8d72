// The joint up-down stage (paper §"Latent MLP: Joint UD SVD", appendix "MLP-Aware Joint Compression";
// joint_ud.hpp): the MLP's input activations themselves, its gate (gated MLPs), up and down.
#include <optional>

#include "compress/stages/codecs.hpp"
#include "compress/math/joint_ud.hpp"
#include "calib/token_units.hpp"
#include "compress/stages/stage.hpp"
#include "latentllm/log.hpp"

namespace latentllm::compress {
namespace {

class JointUdStage final : public CompressStage {
 public:
  using CompressStage::CompressStage;
  std::string_view name() const override { return "joint-ud"; }
  model::Site site() const override { return model::Site::MlpIn; }
  bool needs_activations() const override { return true; }
  std::vector<model::Site> rewrites() const override { return {model::Site::MlpIn, model::Site::MlpMid}; }

 private:
  // The solver's token passes are collectives (declaring, on every rank, its decisions taken on one rank
  // through the graph); the factors' junction forms and losses are one task per module, installed for
  // the later passes at the site's end and reported at the layer's end.
  void declare(graph::Graph& g, const calib::StageInput& in, model::Model& m) override {
    auto& layer = m.layer(in.layer);
    model::Linear* up = &layer.linear(model::Role::Up);
    model::Linear* down = &layer.linear(model::Role::Down);
    model::Linear* gate = layer.find(model::Role::Gate);
    const calib::SiteStats* st = &in.stats_of(model::Site::MlpIn);
    auto dense = std::make_shared<MlpDense>();
    dense->act = m.mlp().act;
    dense->gated = m.mlp().gated;
    dense->w_up = weight_double(*up);
    dense->b_up = to_double(up->bias);
    dense->w_down = weight_double(*down);
    dense->b_down = to_double(down->bias);
    if (gate) {
      dense->w_gate = weight_double(*gate);
      dense->b_gate = to_double(gate->bias);
    }
    const CompressOptions& o = ctx_.options();
    UdOptions uo;
    uo.ranks.up = ctx_.rank_of(*up);
    uo.ranks.down = ctx_.rank_of(*down);
    uo.ranks.gate = gate ? ctx_.rank_of(*gate) : 0;
    uo.iters = o.ud_iters;
    uo.lambda_rel = o.local.lambda_rel;
    uo.f32_passes = o.ud_f32;
    uo.unit_tokens = o.ud_unit_tokens;
    MatrixF x_units;  // [n_u, d] the rows of this rank's units, when not simply all of x_mine
    std::int64_t kept = 0, total = 0;
    const MatrixF& x = calib::token_units(*in.activations, o.ud_max_tokens, ud_unit_tokens(uo, dense->w_up.rows()),
                                          x_units, &kept, &total);
    if (kept < total) log_info("  layer {} joint up-down on {} of {} calibration tokens (--ud-tokens)", in.layer, kept, total);
    auto res = std::make_shared<const UdResult>(
        joint_ud(*dense, x, uo, gate ? joined_name({gate, up, down}) : joined_name({up, down}), &g));
    // up/gate: output error over their calibration inputs. down: its inputs are the compressed hidden
    // activations, not tapped; the MLP output loss is its measure (weight error recorded).
    auto fitted = [&](model::Linear* lin, const LowRank MlpFactors::*f, const MatrixD MlpDense::*w,
                      const VectorD MlpDense::*b, const calib::SiteStats* s) {
      const double cost = static_cast<double>(lin->out) * static_cast<double>(lin->in) * static_cast<double>(lin->in);
      return g.task({lin->name, cost}, [this, lin, res, dense, f, w, b, s] {
        return ctx_.fitted(*lin, res->f.*f, (*dense).*w, (*dense).*b, s);
      });
    };
    const auto f_up = fitted(up, &MlpFactors::up, &MlpDense::w_up, &MlpDense::b_up, st);
    std::optional<graph::Value<Fitted>> f_gate;
    if (gate) f_gate = fitted(gate, &MlpFactors::gate, &MlpDense::w_gate, &MlpDense::b_gate, st);
    const auto f_down = fitted(down, &MlpFactors::down, &MlpDense::w_down, &MlpDense::b_down, nullptr);
    const int l = in.layer;
    g.at_site_end([this, res, l] {
      const double energy = res->output_energy > 0 ? res->output_energy : 1.0;
      const double best = res->best_iter >= 0 ? res->loss[static_cast<std::size_t>(res->best_iter)] : res->loss_local;
      log_info("  layer {} MLP output loss: local {:.4e} joint {:.4e} (rel {:.4f} -> {:.4f})", l, res->loss_local, best,
               res->loss_local / energy, best / energy);
      ctx_.report().ud_losses.push_back({l, best, res->loss_local});
    });
    g.at_site_end([this, up](const Fitted& f) { ctx_.install_for_passes(*up, f.f); }, f_up);
    if (gate) g.at_site_end([this, gate](const Fitted& f) { ctx_.install_for_passes(*gate, f.f); }, *f_gate);
    g.at_site_end([this, down](const Fitted& f) { ctx_.install_for_passes(*down, f.f); }, f_down);
    g.at_layer_end([this, up](const Fitted& f) { ctx_.install(*up, f, "joint-ud"); }, f_up);
    if (gate) g.at_layer_end([this, gate](const Fitted& f) { ctx_.install(*gate, f, "joint-ud"); }, *f_gate);
    g.at_layer_end([this, down](const Fitted& f) { ctx_.install(*down, f, "joint-ud"); }, f_down);
  }
};

}  // namespace

std::unique_ptr<CompressStage> make_joint_ud_stage(StageContext& ctx) { return std::make_unique<JointUdStage>(ctx); }

}  // namespace latentllm::compress
