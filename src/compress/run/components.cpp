// compress --components: a LLaVA checkpoint's vision tower and projector compressed beside its
// language model (compress.hpp, "A multimodal checkpoint's other parts"; docs/LMM.md).
#include <algorithm>
#include <chrono>

#include "compress/math/asvd.hpp"
#include "compress/plan/sensitivity.hpp"
#include "compress/stages/stage.hpp"
#include "compress/math/whitening.hpp"
#include "core/gemm16.hpp"
#include "graph/graph.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/error.hpp"
#include "latentllm/log.hpp"
#include "compress/stages/notes.hpp"
#include "model/ops.hpp"
#include "model/vision.hpp"

namespace latentllm::compress {
namespace {

using Clock = std::chrono::steady_clock;

void check_tiles(const model::LlavaModel& m, const TowerCalibration& cal) {
  const model::VisionConfig& v = m.config().vision;
  const std::int64_t per = v.num_channels * v.image_size * v.image_size;
  if (cal.n_tiles <= 0 || static_cast<std::int64_t>(cal.pixels.size()) != cal.n_tiles * per) {
    throw ConfigError(fmt::format("{}: calibration images for the vision tower and projector (expected at least one "
                                  "image tile of {}·{}·{} values, got {} tiles and {} values): the calibration "
                                  "problems drawn have no image; draw more (--nsamples) from a set with images",
                                  m.dir().string(), v.num_channels, v.image_size, v.image_size, cal.n_tiles,
                                  cal.pixels.size()));
  }
}

// The pipeline options of the vision tower's run: the language model's choices of passes, covariance
// precision and memory, none of its sequences, progress or resume; windows of P positions, about 4096
// tokens a forward call.
CompressOptions vision_options(const CompressOptions& opt, const MatrixF& embeddings, int P) {
  CompressOptions o = opt;
  o.state_dir.clear();
  o.resume = false;
  o.stop_after_layers = 0;
  o.layer_done = nullptr;
  o.pipeline = calib::PipelineOptions{};
  o.pipeline.sequential_within_layer = opt.pipeline.sequential_within_layer;
  o.pipeline.covariance_f32 = opt.pipeline.covariance_f32;
  o.pipeline.resume_passes = opt.pipeline.resume_passes;
  o.pipeline.resume_limit_bytes = opt.pipeline.resume_limit_bytes;
  o.pipeline.batch_windows = std::max(1, 4096 / P);
  o.pipeline.input_embeddings = &embeddings;
  o.pipeline.log_prefix = "vision tower: ";
  return o;
}

// The vision tower's layers as a model, its calibration embeddings ([n_tiles·P, d_v]) and placeholder
// ids (the layers take embeddings; the ids only count the rows).
struct VisionRun {
  MatrixF embeddings;
  std::vector<std::int32_t> ids;
  int P = 0;
};
VisionRun vision_run(model::LlavaModel& m, const TowerCalibration& cal) {
  check_tiles(m, cal);
  VisionRun r;
  r.P = static_cast<int>(m.config().vision.num_positions());
  m.vision_tower().embed(cal.pixels, cal.n_tiles, r.embeddings);  // hidden_states[0]
  r.ids.assign(static_cast<std::size_t>(r.embeddings.rows()), 0);
  return r;
}

// Per module of the projector: its input statistics over the calibration tiles' features, with
// `after(k, lin, x)` called once module k's input x is known (it may replace the module).
template <typename After>
void projector_passes(model::LlavaModel& m, const TowerCalibration& cal, bool f32_products, After after) {
  const core::ExactProducts exact;  // as the layers' calibration (calib::run_layerwise)
  MatrixF x;  // [n_tiles·n_feat, d_v·m], then [n_tiles·n_feat, d]
  m.projector_input(cal.pixels, cal.n_tiles, x);
  const auto mods = m.projector_modules();
  for (std::size_t k = 0; k < mods.size(); ++k) {
    calib::SiteStats st;
    st.reset(static_cast<int>(x.cols()));
    st.add(x, 0, f32_products);
    after(k, *mods[k], st);
    if (k + 1 == mods.size()) break;
    MatrixF u;  // [n, d] linear_1's output (compressed, when it was), through the activation
    mods[k]->forward(x, u);
    model::activate_span(u.data(), u.size(), m.projector_activation());
    x.swap(u);
  }
}

std::vector<ModuleSpectrum> projector_spectra(model::LlavaModel& m, const TowerCalibration& cal,
                                              const CompressOptions& opt) {
  std::vector<ModuleSpectrum> out;
  projector_passes(m, cal, opt.pipeline.covariance_f32, [&](std::size_t k, model::Linear& lin, const calib::SiteStats& st) {
    NoteCollector silent(/*silent=*/true);  // the compression itself records the whitening's notes
    const bool centered = lin.bias.size() > 0 && opt.local.update_bias;  // as the local ASVD
    const Whitening wh = whiten(centered ? st.centered() : st.xtx, opt.local.lambda_rel, lin.name);  // [d, d]
    out.push_back({lin.name, k == 0 ? model::Role::Up : model::Role::Down, lin.out, lin.in, whitened_spectrum(weight_double(lin), wh, lin.name), {}});
  });
  return out;
}

}  // namespace

std::vector<const model::Linear*> tower_modules(model::LlavaModel& m, const Components& c) {
  std::vector<const model::Linear*> out;
  if (c.vision) {
    const model::VisionModel& v = m.vision_tower();
    for (int i = 0; i < v.num_layers(); ++i)
      for (const auto& lin : v.layer(i).linears) out.push_back(&lin);
  }
  if (c.projector)
    for (const model::Linear* lin : m.projector_modules()) out.push_back(lin);
  return out;
}

std::vector<ModuleShape> tower_shapes(model::LlavaModel& m, const Components& c) {
  std::vector<ModuleShape> out;
  for (const model::Linear* lin : tower_modules(m, c)) out.push_back({lin->name, lin->out, lin->in});
  return out;
}

PlannedRanks plan_components(model::LlavaModel& m, std::span<const std::int32_t> ids, int seqlen,
                             const CompressOptions& opt, const TowerCalibration& cal) {
  if (graph::processes().size() > 1) {
    throw ConfigError(fmt::format("--components: the vision tower and projector are compressed on one process "
                                  "(expected a plain run, got {} MPI ranks)", graph::processes().size()));
  }
  const Components& c = opt.components;
  if (!c.towers()) return plan_run(m.language_model(), ids, seqlen, opt);
  const PlanParts towers{components_name(c), tower_shapes(m, c), [&] {
    std::vector<ModuleSpectrum> spectra;
    if (c.vision) {
      VisionRun r = vision_run(m, cal);
      const CompressOptions o = vision_options(opt, r.embeddings, r.P);
      const auto layers = model::vision_layers(m.vision_tower(), m.dir());
      spectra = measure_spectra(*layers, r.ids, r.P, o);
    }
    if (c.projector) {
      check_tiles(m, cal);
      auto pr = projector_spectra(m, cal, opt);
      spectra.insert(spectra.end(), pr.begin(), pr.end());
    }
    return spectra;
  }};
  return plan_run(m.language_model(), ids, seqlen, opt, nullptr, &towers);
}

CompressReport compress_towers(model::LlavaModel& m, const TowerCalibration& cal, const CompressOptions& opt,
                               const RankPlan& plan) {
  opt.validate();
  CompressReport report;
  report.method = opt.method;
  report.ratio = opt.ratio;
  report.rank_alloc = opt.rank_alloc;
  const auto t0 = Clock::now();
  if (opt.components.vision) {
    VisionRun r = vision_run(m, cal);
    const CompressOptions o = vision_options(opt, r.embeddings, r.P);
    log_info("vision tower: {} encoder layers on {} image tiles of {} positions", m.vision_tower().num_layers(),
             cal.n_tiles, r.P);
    const auto layers = model::vision_layers(m.vision_tower(), m.dir());
    CompressReport v = compress_model(*layers, r.ids, r.P, o, &plan);
    report.layers_done += v.layers_done;
    report.layers_total += v.layers_total;
    report.merge(std::move(v));
  }
  if (opt.components.projector) {
    check_tiles(m, cal);
    CompressReport pr;
    StageContext ctx(opt, plan, pr);
    const auto tp = Clock::now();
    NoteCollector notes;  // the numerical fallbacks, into the report
    projector_passes(m, cal, opt.pipeline.covariance_f32, [&](std::size_t, model::Linear& lin, const calib::SiteStats& st) {
      const MatrixD w = weight_double(lin);  // [out, in]
      const VectorD b = to_double(lin.bias);    // [out] or empty
      LocalOptions lo = ctx.local();
      if (b.size() == 0) lo.update_bias = false;
      ctx.install(lin, ctx.fitted(lin, asvd(w, b, st, ctx.rank_of(lin), lo, lin.name), w, b, &st), "local");
    });
    pr.part_seconds["local"] += std::chrono::duration<double>(Clock::now() - tp).count();
    for (const NumericNote& n : notes.notes()) pr.add_note(n);
    report.merge(std::move(pr));
  }
  report.total_s = std::chrono::duration<double>(Clock::now() - t0).count();
  return report;
}

}  // namespace latentllm::compress
