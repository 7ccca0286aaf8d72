// Whole-model compression driver: method dispatch per layer stage (issue 3 item 4, issue 4 item 4).
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <optional>
#include <cmath>
#include <algorithm>
#include <map>

#include <fmt/ranges.h>

#include "compress/asvd.hpp"
#include "compress/junction.hpp"
#include "compress/joint_qk.hpp"
#include "compress/joint_ud.hpp"
#include "compress/joint_vo.hpp"
#include "compress/notes.hpp"
#include "model/ops.hpp"
#include "compress/resume.hpp"
#include "latentllm/compressor.hpp"
#include "latentllm/error.hpp"
#include "latentllm/log.hpp"

namespace latentllm::compress {
namespace {

bool is_latentllm(const CompressOptions& opt) { return opt.method == "latentllm"; }

LocalOptions local_options(const CompressOptions& opt) {
  LocalOptions lo = opt.local;
  lo.preconditioner = is_latentllm(opt) ? Preconditioner::RootCovariance : parse_preconditioner(opt.method);
  return lo;
}

MatrixD to_double(const MatrixF& m) { return m.cast<double>(); }
VectorD to_double(const VectorF& v) { return v.cast<double>(); }

// Writes factors into a model Linear (float), replacing its dense weight.
void install(model::Linear& lin, const LowRank& f) {
  MatrixF b = f.B.cast<float>(), a = f.A.cast<float>();  // [out, r], [r, in or in − r]
  // Factors beyond the float range (from weights near it) would poison every later layer.
  model::check_finite(b, lin.name + ".B.weight");
  model::check_finite(a, lin.name + ".A.weight");
  lin.B = std::move(b);
  lin.A = std::move(a);
  lin.block_identity = f.block_identity();
  lin.perm.assign(f.perm.begin(), f.perm.end());
  if (f.bias.size() > 0) lin.bias = f.bias.cast<float>();
  lin.weight.resize(0, 0);
}

class MethodCompressor : public calib::LayerCompressor {
 public:
  MethodCompressor(const CompressOptions& opt, const RankPlan& plan, CompressReport& report)
      : opt_(opt), local_(local_options(opt)), report_(report) {
    for (const auto& mp : plan.modules) ranks_[mp.name] = mp.rank;
  }

  std::vector<model::Site> stages(const model::Model&) const override {
    std::vector<model::Site> s = {model::Site::AttnIn, model::Site::AttnOut, model::Site::MlpIn};
    if (!joint_ud()) s.push_back(model::Site::MlpMid);
    return s;
  }

  bool needs_activations(model::Site site) const override { return joint_ud() && site == model::Site::MlpIn; }

  // Joint V-O rewrites v_proj (fed by AttnIn) at the o_proj stage; joint up-down rewrites the down
  // projection (MlpMid) at the MlpIn stage.
  std::vector<model::Site> rewrites(model::Site site) const override {
    if (site == model::Site::AttnOut && joint_vo()) return {model::Site::AttnIn, site};
    if (site == model::Site::MlpIn && joint_ud()) return {site, model::Site::MlpMid};
    return {site};
  }

  void compress(const calib::StageInput& in, model::Model& m) override {
    NoteCollector notes;  // the numerical fallbacks of this stage, into the report in order
    compress_stage(in, m);
    for (const NumericNote& n : notes.notes()) report_.add_note(n);
  }

 private:
  void compress_stage(const calib::StageInput& in, model::Model& m) {
    auto& layer = m.layer(in.layer);
    if (in.site == model::Site::AttnIn && joint_qk()) {
      timed("joint-qk", [&] { compress_qk(in, m); });
    } else if (in.site == model::Site::AttnOut && joint_vo()) {
      timed("joint-vo", [&] { compress_vo(in, m); });
    } else if (in.site == model::Site::MlpIn && joint_ud()) {
      timed("joint-ud", [&] { compress_mlp(in, m); });
      return;
    }
    if (in.site == model::Site::AttnIn && joint_vo()) attn_in_ = *in.stats;  // for V-O at AttnOut
    timed("local", [&] {
      for (auto& lin : layer.linears) {
        if (lin.site != in.site || lin.factored()) continue;
        // Joint V-O compresses v_proj with o_proj once the o_proj input statistics exist.
        if (joint_vo() && lin.role == model::Role::V) continue;
        compress_local(in, lin);
      }
    });
  }

  bool joint_qk() const { return is_latentllm(opt_) && opt_.joint_qk; }
  bool joint_ud() const { return is_latentllm(opt_) && opt_.joint_ud; }
  bool joint_vo() const { return is_latentllm(opt_) && opt_.joint_vo; }

  template <typename F>
  void timed(const std::string& part, F&& f) {
    if (opt_.part_observer) opt_.part_observer(part, true);
    const auto t0 = std::chrono::steady_clock::now();
    f();
    if (opt_.part_observer) opt_.part_observer(part, false);
    report_.part_seconds[part] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  // "model.layers.0.self_attn.q_proj, k_proj": the modules a joint part compresses together.
  static std::string joined_name(std::initializer_list<const model::Linear*> mods) {
    std::string out;
    for (const model::Linear* lin : mods) out += out.empty() ? lin->name : ", " + lin->name.substr(lin->name.rfind('.') + 1);
    return out;
  }

  // A computation only compared against (its factors are not kept): its numerical notes are dropped.
  template <typename F>
  static auto compared(F&& f) {
    NoteCollector discard(/*silent=*/true);
    return f();
  }

  int rank_of(const model::Linear& lin) const {
    const auto it = ranks_.find(lin.name);
    if (it == ranks_.end()) throw Error(fmt::format("{}: no rank planned", lin.name));
    return static_cast<int>(it->second);
  }

  static ModuleReport base_report(const model::Linear& lin, const LowRank& f, const std::string& how) {
    ModuleReport r;
    r.name = lin.name;
    r.out = lin.out;
    r.in = lin.in;
    r.rank = f.rank();
    r.dense_params = lin.out * lin.in;
    r.params = f.weight_params();
    r.how = how;
    return r;
  }

  // Reports a compressed module with its output error over the calibration inputs `st`.
  void record(const model::Linear& lin, const LowRank& f, const calib::SiteStats& st, const MatrixD& w,
              const VectorD& b, const std::string& how) {
    const MatrixD e = w - f.dense();
    VectorD delta;
    if (b.size() > 0) delta = b - f.bias;
    const VectorD mean = st.mean();
    const auto n = static_cast<double>(st.n);
    const double loss = output_error(e, delta, st.xtx, mean, n);
    const double energy = output_error(w, b, st.xtx, mean, n);
    ModuleReport r = base_report(lin, f, how);
    r.loss = loss;
    r.loss_rel = energy > 0 ? loss / energy : 0.0;
    log_info("  {} rank {} params {}/{} loss {:.4e} (rel {:.4f}) [{}]", lin.name, r.rank, r.params,
             r.dense_params, r.loss, r.loss_rel, how);
    report_.modules.push_back(std::move(r));
  }

  void compress_local(const calib::StageInput& in, model::Linear& lin) {
    const MatrixD w = to_double(lin.weight);  // [out, in]
    const VectorD b = to_double(lin.bias);    // [out] or empty
    LocalOptions lo = local_;
    if (b.size() == 0) lo.update_bias = false;
    const LowRank f = asvd(w, b, *in.stats, rank_of(lin), lo, lin.name);
    record(lin, f, *in.stats, w, b, "local");
    install(lin, f);
  }

  static const model::AttentionInfo& attn_shape(const model::Model& m) { return m.attention(); }

  void compress_qk(const calib::StageInput& in, model::Model& m) {
    auto& layer = m.layer(in.layer);
    auto& q = layer.linear(model::Role::Q);
    auto& k = layer.linear(model::Role::K);
    QkDense dense{to_double(q.weight), to_double(q.bias), to_double(k.weight), to_double(k.bias)};
    QkOptions qo;
    qo.r_q = rank_of(q);
    qo.r_k = rank_of(k);
    qo.iters = opt_.qk_iters;
    qo.lambda_rel = opt_.local.lambda_rel;
    qo.rope.window = opt_.rope_window;
    const auto s = attn_shape(m);
    const calib::SiteStats& mom = *in.stats;
    const std::string ctx = joined_name({&q, &k});
    const QkResult res = compress::joint_qk(dense, s, mom, qo, ctx);
    const QkFactors sep = compared([&] { return separate_qk(dense, mom, qo.r_q, qo.r_k, qo.lambda_rel, ctx); });
    const double l_joint = qk_attention_loss(dense, res.f, s, mom, qo.rope);
    const double l_local = qk_attention_loss(dense, sep, s, mom, qo.rope);
    log_info("  layer {} attention-map loss: local {:.4e} joint {:.4e} (ratio {:.3f}){}", in.layer, l_local,
             l_joint, l_local > 0 ? l_joint / l_local : 0.0, res.used_local_start ? " [local start]" : "");
    report_.qk_losses.push_back({l_local, l_joint});
    const LowRank fq = with_junction(res.f.q, local_.junction, q.name);
    const LowRank fk = with_junction(res.f.k, local_.junction, k.name);
    record(q, fq, *in.stats, dense.wq, dense.bq, "joint-qk");
    record(k, fk, *in.stats, dense.wk, dense.bk, "joint-qk");
    install(q, fq);
    install(k, fk);
  }

  // Joint V-O, attention-aware (appendix "Joint Value-Output Compression"; docs/JOINT.md): v_proj's
  // input moments from the AttnIn stage, o_proj's input moments from this stage.
  void compress_vo(const calib::StageInput& in, model::Model& m) {
    auto& layer = m.layer(in.layer);
    auto& v = layer.linear(model::Role::V);
    auto& o = layer.linear(model::Role::O);
    const VoDense dense{to_double(v.weight), to_double(v.bias), to_double(o.weight), to_double(o.bias)};
    const calib::SiteStats& o_mom = *in.stats;
    VoOptions vo;
    vo.r_v = rank_of(v);
    vo.r_o = rank_of(o);
    vo.iters = opt_.qk_iters;
    vo.lambda_rel = opt_.local.lambda_rel;
    vo.o_moments = &o_mom;
    const auto s = attn_shape(m);
    const std::string ctx = joined_name({&v, &o});
    const VoResult res = compress::joint_vo(dense, s, attn_in_, vo, ctx);
    const VoFactors sep =
        compared([&] { return separate_vo(dense, attn_in_, o_mom, vo.r_v, vo.r_o, vo.lambda_rel, ctx); });
    const double l_joint = vo_output_loss(dense, res.f, s, attn_in_);
    const double l_local = vo_output_loss(dense, sep, s, attn_in_);
    log_info("  layer {} V-O output loss (own-token attention): local {:.4e} joint {:.4e} (ratio {:.3f})", in.layer,
             l_local, l_joint, l_local > 0 ? l_joint / l_local : 0.0);
    report_.vo_losses.push_back({l_local, l_joint});
    const calib::SiteStats& v_stats = attn_in_;  // the AttnIn statistics, for the per-module report
    const LowRank fv = with_junction(res.f.v, local_.junction, v.name);
    const LowRank fo = with_junction(res.f.o, local_.junction, o.name);
    record(v, fv, v_stats, dense.wv, dense.bv, "joint-vo");
    record(o, fo, *in.stats, dense.wo, dense.bo, "joint-vo");
    install(v, fv);
    install(o, fo);
  }

  void compress_mlp(const calib::StageInput& in, model::Model& m) {
    auto& layer = m.layer(in.layer);
    const bool gated = m.mlp().gated;
    model::Linear& up = layer.linear(model::Role::Up);
    model::Linear& down = layer.linear(model::Role::Down);
    model::Linear* gate = layer.find(model::Role::Gate);
    MlpDense dense;
    dense.act = m.mlp().act;
    dense.gated = gated;
    dense.w_up = to_double(up.weight);
    dense.b_up = to_double(up.bias);
    dense.w_down = to_double(down.weight);
    dense.b_down = to_double(down.bias);
    if (gate) {
      dense.w_gate = to_double(gate->weight);
      dense.b_gate = to_double(gate->bias);
    }
    UdOptions uo;
    uo.ranks.up = rank_of(up);
    uo.ranks.down = rank_of(down);
    uo.ranks.gate = gate ? rank_of(*gate) : 0;
    uo.iters = opt_.ud_iters;
    uo.lambda_rel = opt_.local.lambda_rel;
    const MatrixF& x_all = *in.activations;  // [N·L, d]
    MatrixF x_sub;                             // [≤ ud_max_tokens, d] evenly strided rows, when capped
    if (opt_.ud_max_tokens > 0 && x_all.rows() > opt_.ud_max_tokens) {
      const std::int64_t stride = (x_all.rows() + opt_.ud_max_tokens - 1) / opt_.ud_max_tokens;
      x_sub.resize((x_all.rows() + stride - 1) / stride, x_all.cols());
      for (Eigen::Index i = 0; i < x_sub.rows(); ++i) x_sub.row(i) = x_all.row(i * stride);
      log_info("  layer {} joint up-down on {} of {} calibration tokens (--ud-tokens)", in.layer, x_sub.rows(),
               x_all.rows());
    }
    const UdResult res = compress::joint_ud(dense, x_sub.size() > 0 ? x_sub : x_all, uo,
                                            gate ? joined_name({gate, &up, &down}) : joined_name({&up, &down}));
    const double energy = res.output_energy > 0 ? res.output_energy : 1.0;
    const double best = res.best_iter >= 0 ? res.loss[static_cast<std::size_t>(res.best_iter)] : res.loss_local;
    log_info("  layer {} MLP output loss: local {:.4e} joint {:.4e} (rel {:.4f} -> {:.4f})", in.layer,
             res.loss_local, best, res.loss_local / energy, best / energy);
    report_.ud_losses.push_back({res.loss_local, best});
    // up/gate: output error over their calibration inputs. down: its inputs are the compressed
    // hidden activations, not tapped; the MLP output loss above is its measure (weight error recorded).
    auto put = [&](model::Linear& lin, const LowRank& lr, const MatrixD& w, const VectorD& b) {
      const LowRank f = with_junction(lr, local_.junction, lin.name);
      if (&lin != &down) {
        record(lin, f, *in.stats, w, b, "joint-ud");
      } else {
        ModuleReport r = base_report(lin, f, "joint-ud");
        r.loss = (w - f.dense()).squaredNorm();
        report_.modules.push_back(std::move(r));
      }
      install(lin, f);
    };
    put(up, res.f.up, dense.w_up, dense.b_up);
    if (gate) put(*gate, res.f.gate, dense.w_gate, dense.b_gate);
    put(down, res.f.down, dense.w_down, dense.b_down);
  }

  const CompressOptions& opt_;
  LocalOptions local_;
  CompressReport& report_;
  std::map<std::string, std::int64_t> ranks_;
  calib::SiteStats attn_in_;  // this layer's AttnIn moments while joint V-O waits for the AttnOut stage
};

std::vector<ModuleShape> module_shapes(const model::Model& m) {
  std::vector<ModuleShape> shapes;
  for (int i = 0; i < m.num_layers(); ++i)
    for (const auto& lin : m.layer(i).linears) shapes.push_back({lin.name, lin.out, lin.in});
  return shapes;
}

// Fewer calibration tokens than a module has input features: its input covariance is singular and
// only the damping (or, without it, the pseudo-inverse) makes the pre-conditioner defined. Recorded
// once per run, for the widest input.
void note_few_tokens(const model::Model& m, std::int64_t n_tok, const CompressOptions& opt, CompressReport& report) {
  const model::Linear* widest = nullptr;
  int short_modules = 0, modules = 0;
  for (int i = 0; i < m.num_layers(); ++i) {
    for (const auto& lin : m.layer(i).linears) {
      ++modules;
      if (lin.in <= n_tok) continue;
      ++short_modules;
      if (!widest || lin.in > widest->in) widest = &lin;
    }
  }
  if (!widest) return;
  const bool damped = opt.local.lambda_rel > 0 && local_options(opt).preconditioner != Preconditioner::DiagL1 &&
                      local_options(opt).preconditioner != Preconditioner::DiagL2;
  const std::string how = damped ? fmt::format("the damping λ = {:g}·mean(diag C) (--lambda) keeps the "
                                               "pre-conditioners invertible", opt.local.lambda_rel)
                                 : "directions the calibration never excited are left out of the pre-conditioners "
                                   "(their pseudo-inverse; see the pinv-drop and rank-reduced notes)";
  NumericNote n{"calibration", "few-tokens",
                fmt::format("{} calibration tokens for {} of {} modules with more input features (up to {} in {}): "
                            "their input covariances are singular; {}", n_tok, short_modules, modules, widest->in,
                            widest->name, how)};
  if (std::find(report.notes.begin(), report.notes.end(), n) == report.notes.end()) {
    log_warn("numerics [{}]: {}", n.kind, n.message());
    report.add_note(n);
  }
}

// Test hook of the resume test (tests/golden/test_resume.cpp): LATENTLLM_TEST_KILL_AFTER_LAYER=i
// kills the process with SIGKILL right after layer i's progress is saved, like an interrupted run.
void kill_for_test(int layer) {
  const char* v = std::getenv("LATENTLLM_TEST_KILL_AFTER_LAYER");
  if (v && std::atoi(v) == layer) std::raise(SIGKILL);
}

}  // namespace

std::vector<std::string> method_names() {
  std::vector<std::string> names;
  for (auto p : all_preconditioners()) names.emplace_back(preconditioner_name(p));
  names.emplace_back("latentllm");
  return names;
}

RankPlan plan_model(const model::Model& m, const CompressOptions& opt, std::int64_t n_tok) {
  const auto names = method_names();
  if (std::find(names.begin(), names.end(), opt.method) == names.end()) {
    throw ConfigError(fmt::format("--method: unknown method (expected one of {}, got {})", fmt::join(names, ", "),
                                  opt.method));
  }
  return plan_ranks(module_shapes(m), opt.ratio, opt.local.junction, n_tok);
}

CompressReport compress_model(model::Model& m, std::span<const std::int32_t> ids, int seqlen,
                              const CompressOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  const RankPlan plan = plan_model(m, opt);
  CompressReport report;
  report.method = opt.method;
  report.ratio = opt.ratio;
  MethodCompressor compressor(opt, plan, report);
  calib::PipelineOptions po = opt.pipeline;
  MatrixF start_hidden;  // [N·L, d] after the restored layers
  std::optional<ResumeState> state;
  if (!opt.state_dir.empty()) {
    state.emplace(opt.state_dir, run_fingerprint(m, ids, seqlen, opt));
    if (opt.resume) {
      po.start_layer = state->restore(m, start_hidden, report);
      po.start_hidden = &start_hidden;
    } else {
      std::error_code ec;
      std::filesystem::remove_all(opt.state_dir, ec);
      if (ec) throw IoError(fmt::format("{}: cannot remove the old progress ({})", opt.state_dir.string(), ec.message()));
    }
    state->create();
    po.layer_done = [&](int layer, const MatrixF& hidden) {
      state->save_layer(m, layer, hidden, report);
      kill_for_test(layer);
    };
  }
  note_few_tokens(m, static_cast<std::int64_t>(ids.size()), opt, report);  // after a restore: deduplicated
  report.times = calib::run_layerwise(m, ids, seqlen, compressor, po);
  for (const auto& r : report.modules) {
    report.dense_params += r.dense_params;
    report.params += r.params;
  }
  report.total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

void CompressReport::add_note(const NumericNote& n) {
  if (std::find(notes.begin(), notes.end(), n) == notes.end()) notes.push_back(n);
}

nlohmann::json note_to_json(const NumericNote& n) {
  return {{"module", n.module}, {"kind", n.kind}, {"detail", n.detail}};
}

NumericNote note_from_json(const nlohmann::json& j) {
  return {j.at("module").get<std::string>(), j.at("kind").get<std::string>(), j.at("detail").get<std::string>()};
}

nlohmann::json ModuleReport::to_json() const {
  return {{"name", name}, {"out", out}, {"in", in}, {"rank", rank}, {"dense_params", dense_params},
          {"params", params}, {"loss", loss}, {"loss_rel", loss_rel}, {"how", how}};
}

ModuleReport ModuleReport::from_json(const nlohmann::json& j) {
  ModuleReport r;
  r.name = j.at("name");
  r.out = j.at("out");
  r.in = j.at("in");
  r.rank = j.at("rank");
  r.dense_params = j.at("dense_params");
  r.params = j.at("params");
  r.loss = j.at("loss");
  r.loss_rel = j.at("loss_rel");
  r.how = j.at("how");
  return r;
}

nlohmann::json CompressReport::to_json() const {
  nlohmann::json mods = nlohmann::json::array();
  for (const auto& r : modules) mods.push_back(r.to_json());
  nlohmann::json qk = nlohmann::json::array(), ud = nlohmann::json::array(), vo = nlohmann::json::array();
  for (const auto& [l, j] : qk_losses) qk.push_back({{"local", l}, {"joint", j}});
  for (const auto& [l, j] : vo_losses) vo.push_back({{"local", l}, {"joint", j}});
  for (const auto& [l, j] : ud_losses) ud.push_back({{"local", l}, {"joint", j}});
  nlohmann::json notes_json = nlohmann::json::array();
  for (const auto& n : notes) notes_json.push_back(note_to_json(n));
  return {{"method", method},
          {"ratio", ratio},
          {"modules", mods},
          {"attention_map_loss", qk},
          {"mlp_output_loss", ud},
          {"vo_output_loss", vo},
          {"notes", notes_json},
          {"dense_params", dense_params},
          {"params", params},
          {"seconds", {{"total", total_s},
                       {"calibration_sampling", calib_sample_s},
                       {"forward", times.forward},
                       {"covariance", times.covariance},
                       {"decompositions", times.compress},
                       {"decompositions_by_part", part_seconds}}},
          {"flops", {{"forward", times.forward_flops}, {"covariance", times.covariance_flops}}}};
}

}  // namespace latentllm::compress
