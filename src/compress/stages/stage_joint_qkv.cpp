// The joint Q-K-V stage (paper appendix "Activation-Aware Joint QKV Compression"; joint_qkv.hpp): q_proj,
// k_proj and v_proj of a layer from one root-covariance SVD of [W_q; W_k; W_v], one A shared by the three.
// Each module is stored as its own factored module holding the same A (docs/JOINT.md "Joint Q-K-V": the
// checkpoint repeats A, the report counts it once); with the block identity each module takes the
// junction form of the same A, so the three A's stay equal.
#include <memory>
#include <tuple>

#include "compress/math/joint_qkv.hpp"
#include "compress/stages/codecs.hpp"
#include "compress/stages/stage.hpp"
#include "latentllm/log.hpp"

namespace latentllm::compress {
namespace {

class JointQkvStage final : public CompressStage {
 public:
  using CompressStage::CompressStage;
  std::string_view name() const override { return "joint-qkv"; }
  model::Site site() const override { return model::Site::AttnIn; }

 private:
  using Fits = std::tuple<Factors32, Factors32, Factors32>;

  // One task solves the three modules; the solution serves the layer's later passes at the site's end;
  // each module's junction form and output error is finishing work, installed at the layer's end.
  void declare(graph::Graph& g, const calib::StageInput& in, model::Model& m) override {
    auto& layer = m.layer(in.layer);
    const std::array<model::Linear*, 3> mods = {&layer.linear(model::Role::Q), &layer.linear(model::Role::K),
                                                &layer.linear(model::Role::V)};
    auto dense = std::make_shared<QkvDense>();
    for (int i = 0; i < 3; ++i) {
      dense->w[i] = weight_double(*mods[i]);
      dense->b[i] = to_double(mods[i]->bias);
    }
    auto stats = std::make_shared<const calib::SiteStats>(in.stats_of(model::Site::AttnIn));
    const int rank = ctx_.rank_of(*mods[0]);
    const std::string name = joined_name({mods[0], mods[1], mods[2]});
    const double cost = fit_cost(*mods[0], false) + fit_cost(*mods[1], false) + fit_cost(*mods[2], false);
    const auto solved = g.task({name, cost}, [this, dense, stats, rank, name] {
      LocalOptions lo = ctx_.local();
      if (dense->b[0].size() == 0) lo.update_bias = false;
      const std::array<LowRank, 3> f = joint_qkv(*dense, *stats, rank, lo, name);
      return Fits{Factors32(f[0]), Factors32(f[1]), Factors32(f[2])};
    });
    g.at_site_end([this, mods](const Fits& f) {
      ctx_.install_for_passes(*mods[0], std::get<0>(f).widened());
      ctx_.install_for_passes(*mods[1], std::get<1>(f).widened());
      ctx_.install_for_passes(*mods[2], std::get<2>(f).widened());
    }, solved);
    for (int i = 0; i < 3; ++i) declare_finishing(g, *mods[i], i, dense, stats, rank, solved);
  }

  // Module i's junction form and output error; q_proj counts the shared A, k_proj and v_proj their B only.
  void declare_finishing(graph::Graph& g, model::Linear& lin, int i, const std::shared_ptr<QkvDense>& dense,
                         const std::shared_ptr<const calib::SiteStats>& stats, int rank,
                         const graph::Value<Fits>& solved) {
    const auto done = g.finishing(
        {lin.name + ": junction form", ctx_.finish_cost(lin, rank, true)},
        [this, &lin, i, dense, stats](const Fits& f) {
          const Factors32& mine = i == 0 ? std::get<0>(f) : i == 1 ? std::get<1>(f) : std::get<2>(f);
          Fitted fit = ctx_.fitted(lin, mine.widened(), dense->w[i], dense->b[i], stats.get());
          fit.params = i == 0 ? fit.f.weight_params() : fit.f.B.size();
          return fit;
        },
        solved);
    g.at_layer_end([this, &lin](const Fitted& fit) { ctx_.install(lin, fit, "joint-qkv"); }, done);
  }
};

}  // namespace

std::unique_ptr<CompressStage> make_joint_qkv_stage(StageContext& ctx) { return std::make_unique<JointQkvStage>(ctx); }

}  // namespace latentllm::compress
