// The ranks of --joint qkv and --split-heads (rank_plan.hpp plan_attention_forms): the plan's budget of
// q_proj, k_proj and v_proj (uniform or global) spent on their own parameter counts.
#include <map>

#include "compress/math/joint_qkv.hpp"
#include "compress/math/split_heads.hpp"
#include "compress/methods.hpp"
#include "compress/plan/rank_plan.hpp"
#include "latentllm/error.hpp"
#include "latentllm/eval.hpp"

namespace latentllm::compress {
namespace {

using Mods = std::array<ModulePlan*, 3>;

void set_params(ModulePlan& p, std::int64_t rank, std::int64_t params, std::int64_t n_tok) {
  p.rank = rank;
  p.params = params;
  p.macs = n_tok * params;
}

// One layer's q, k, v at the joint rank their summed budget allows: q_proj carries the shared A.
void plan_qkv(const Mods& mods, bool block_identity, std::int64_t n_tok) {
  double budget = 0;
  std::int64_t out_sum = 0;
  for (const ModulePlan* p : mods) {
    budget += static_cast<double>(p->params);
    out_sum += p->out;
  }
  const std::int64_t in = mods[0]->in;
  const std::int64_t r = joint_qkv_rank(in, out_sum, budget, block_identity);
  // Each module's budget holds its own rank 1, d_i + d (− 1) weights, more than the joint rank 1 needs.
  if (r < 1) throw Error(fmt::format("{}: --joint qkv: no rank within {:.0f} weights", mods[0]->name, budget));
  set_params(*mods[0], r, r * (mods[0]->out + in) - (block_identity ? r * r : 0), n_tok);
  set_params(*mods[1], r, r * mods[1]->out, n_tok);
  set_params(*mods[2], r, r * mods[2]->out, n_tok);
}

// One module split into `heads` at the rank its budget allows.
void plan_split(ModulePlan& p, std::int64_t heads, std::int64_t n_tok) {
  const std::int64_t r = split_heads_rank(p.out, p.in, heads, static_cast<double>(p.params));
  if (r < 1) {
    throw ConfigError(fmt::format("{}: --split-heads leaves no rank (expected a budget of at least {} weights for "
                                  "rank 1 per head, got {})", p.name, split_heads_params(p.out, p.in, heads, heads),
                                  p.params));
  }
  set_params(p, r, split_heads_params(p.out, p.in, heads, r), n_tok);
}

}  // namespace

void plan_attention_forms(RankPlan& plan, const model::Model& m, const CompressOptions& opt) {
  const bool qkv = has_joint_parts(opt.method) && opt.joint.qkv;
  if (!qkv && !opt.split_heads) return;
  std::map<std::string, ModulePlan*> by_name;
  for (ModulePlan& p : plan.modules) by_name[p.name] = &p;
  const model::AttentionInfo& attn = m.attention();
  for (int i = 0; i < m.num_layers(); ++i) {
    Mods mods{};
    for (const model::Linear& lin : m.layer_spec(i).linears) {
      const int slot = lin.role == model::Role::Q ? 0 : lin.role == model::Role::K ? 1 : lin.role == model::Role::V ? 2 : -1;
      if (slot < 0 || lin.site != model::Site::AttnIn) continue;
      const auto it = by_name.find(lin.name);
      if (it == by_name.end()) throw Error(fmt::format("{}: not in the rank plan", lin.name));
      mods[static_cast<std::size_t>(slot)] = it->second;
    }
    if (mods[0] == nullptr || mods[1] == nullptr || mods[2] == nullptr) {
      throw ConfigError(fmt::format("layer {}: {} (expected q_proj, k_proj and v_proj, got a layer without them)", i,
                                    qkv ? "--joint qkv" : "--split-heads"));
    }
    if (qkv) {
      plan_qkv(mods, plan.junction == Junction::BlockIdentity, plan.n_tok);
      continue;
    }
    plan_split(*mods[0], attn.num_heads, plan.n_tok);
    plan_split(*mods[1], attn.num_kv_heads, plan.n_tok);
    plan_split(*mods[2], attn.num_kv_heads, plan.n_tok);
  }
}

}  // namespace latentllm::compress
