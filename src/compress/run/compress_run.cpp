// The whole compress flow as one call (latentllm/compress_run.hpp): check -> calibrate -> plan -> compress
// -> write. Every option and output is checked before any work; nothing of the user's is overwritten or
// discarded (the progress directory is removed only once the output is written).
#include "latentllm/compress_run.hpp"

#include <algorithm>
#include <chrono>

#include "compress/math/sparse.hpp"
#include "core/enum_names.hpp"
#include "latentllm/checkpoint.hpp"
#include "latentllm/dist.hpp"
#include "latentllm/error.hpp"
#include "latentllm/eval.hpp"
#include "latentllm/image.hpp"
#include "latentllm/log.hpp"
#include "latentllm/multimodal.hpp"
#include "latentllm/scienceqa.hpp"
#include "latentllm/tokenizer.hpp"
#include "model/weight_table.hpp"
#include "quant/pack.hpp"

namespace latentllm::compress {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::unique_ptr<io::Tokenizer> checked_tokenizer(const std::filesystem::path& dir, const model::ModelConfig& c) {
  auto tok = io::load_tokenizer(dir);
  io::check_tokenizer_vocab(*tok, c.vocab_size, dir.string());  // never garbage ids later
  return tok;
}

// The towers of --components, and a ScienceQA calibration, need a LLaVA checkpoint calibrated on images.
void check_multimodal(const Request& r, const model::Model& m) {
  const CompressOptions& opt = r.options;
  const bool multimodal = !m.config().multimodal_architecture.empty();
  const std::string components = components_name(opt.components);
  if (opt.components.towers() && !multimodal) {
    throw ConfigError(fmt::format("--components {}: {} is not a multimodal checkpoint (expected a LLaVA checkpoint, "
                                  "got {})", components, r.model.string(), m.config().architecture));
  }
  if (opt.components.towers() && r.calibration && r.calibration->source != "scienceqa") {
    throw ConfigError(fmt::format("--components {}: the vision tower and projector calibrate on images (expected "
                                  "--calib scienceqa, got --calib {})", components, r.calibration->source));
  }
  if (r.calibration && r.calibration->source == "scienceqa" && !multimodal) {
    throw ConfigError(fmt::format("--calib scienceqa: {} is not a multimodal checkpoint (expected a LLaVA "
                                  "checkpoint, got {})", r.model.string(), m.config().architecture));
  }
}

// The memory plan of the run (a multimodal calibration's own bytes `mm` beside it); ConfigError, before
// any work, when it does not fit, naming the largest --nsamples that fits.
core::MemoryPlan check_memory(const Request& r, const model::Model& m, const CompressOptions& opt,
                              const calib::CalibOptions& co, const core::MemoryItem* mm, const Observer& observe) {
  const core::MemoryBudget given{r.memory_budget, "--max-memory"};
  const core::MemoryBudget b = r.memory_budget > 0 ? given : core::default_budget();
  const std::int64_t budget = b.bytes;
  auto plan_of = [&](std::int64_t windows) {
    core::MemoryPlan p = plan_compress_memory(m, windows * co.seqlen, co.seqlen, opt, budget);
    if (mm) p.add(mm->name, mm->bytes, mm->detail);
    return p;
  };
  const core::MemoryPlan plan = plan_of(co.nsamples);
  if (observe.memory && dist::is_root()) observe.memory(plan, r.memory_budget > 0 ? b.source : b.source + "; --max-memory");
  if (plan.fits()) return plan;
  int k = co.nsamples - 1;
  while (k > 0 && !plan_of(k).fits()) --k;
  std::string advice = k > 0 ? fmt::format("use --nsamples {} or --max-memory {}", k, core::gib_option(plan.total()))
                             : fmt::format("use --max-memory {}", core::gib_option(plan.total()));
  CompressOptions no_ud = opt;
  no_ud.joint.ud = false;
  if (opt.joint.ud && plan_compress_memory(m, co.nsamples * co.seqlen, co.seqlen, no_ud, budget).fits()) {
    advice += " (or drop joint up-down, whose [ffn, ffn] statistics dominate: --joint qk)";
  }
  throw ConfigError(fmt::format("--max-memory: budget too small to compress with {} windows of {} tokens (expected at "
                                "least {}: {}; got {}); {}", co.nsamples, co.seqlen, core::format_bytes(plan.total()),
                                plan.summary(), core::format_bytes(budget), advice));
}

// A multimodal calibration's bytes held beside the run: the towers, float32 in `llava`, the prompts'
// embeddings and the images' pixels.
core::MemoryItem multimodal_bytes(const model::LlavaModel& llava, const eval::scienceqa::CalibrationSet& mm) {
  std::int64_t towers = 0;
  for (const auto& [part, n] : llava.component_params())
    if (part != "language") towers += 4 * n;
  return {"multimodal calibration",
          4 * (mm.embeddings.size() + static_cast<std::int64_t>(mm.pixels.size())) + towers,
          "the prompts' embeddings, the images' pixels, the vision tower and projector (f32)"};
}

// A factor the storage type cannot hold fails at its layer, with the progress kept, not at write time
// (hf stores the products, checked as they are written).
void check_storable_per_layer(CompressOptions& opt, const format::ExportOptions& eo) {
  if (eo.format == "hf") return;
  const DType factors = eo.dtype.value_or(eo.format == "onnx" ? DType::F32 : DType::F16);
  const std::filesystem::path dir = opt.state_dir;
  opt.layer_done = [dir, factors](int layer) {
    try {
      checkpoint::check_layer_factors_storable(checkpoint::layer_factors_file(dir, layer), factors);
    } catch (const NumericError& e) {
      throw NumericError(fmt::format("{} (the {} finished layers are kept in {}: run the same command with "
                                     "--resume --dtype f32 to continue)", e.what(), layer + 1, dir.string()));
    }
  };
}

// The provenance of the output (latentllm/provenance.hpp): the source, the method, the calibration set
// (as the checkpoint records it) and its hash, the source's size.
nlohmann::json run_provenance(const Request& r, nlohmann::json calibration) {
  calibration["sha256"] = format::data_sha256(r.calibration->data);
  nlohmann::json compression = {{"method", method_name(r.options.method)}, {"ratio", r.options.ratio},
                                {"preset", r.preset}};
  if (r.options.components.towers()) compression["components"] = components_name(r.options.components);
  if (r.target != Target::Linear) compression["target"] = std::string(target_name(r.target));
  return {{"latentllm", format::tool_identity()}, {"source", format::source_identity(r.model)},
          {"compression", compression}, {"calibration", calibration},
          {"size", {{"before", format::to_json(format::weights_size(r.model))}}}};
}

// The latent checkpoint, or its export, from the progress directory; the directory removed once written.
void write_output(const Request& r, model::Model& m, const CompressOptions& opt, model::LlavaModel* llava,
                  Outcome& o) {
  checkpoint::SaveOptions so;
  so.dtype = r.output.dtype.value_or(DType::F16);
  so.overwrite = r.output.force;
  so.info = o.options_record;
  so.layer_factors_dir = opt.state_dir;
  if (llava) so.tower_modules = tower_modules(*llava, opt.components);
  if (opt.quant.head_bits < 16) {
    const quant::QuantSpec spec{opt.quant.head_bits, opt.quant.group, quant::Grid::MinMax};
    so.head = model::quantize_table(m.head_weight(), spec, m.dir().string() + ": lm_head");
  }
  format::ExportOptions eo = r.output;
  so.info["provenance"] = eo.provenance = run_provenance(r, so.info["calibration"]);
  const auto tw = Clock::now();
  if (r.output.format == "latent") {
    checkpoint::save(m, r.out, so);
  } else {
    format::export_model(m, opt.state_dir, r.out, eo, so.tower_modules);
  }
  std::error_code ec;
  std::filesystem::remove_all(opt.state_dir, ec);
  if (ec) log_warn("{}: cannot remove the progress directory ({})", opt.state_dir.string(), ec.message());
  o.write_s = seconds_since(tw);
  o.written = true;
  o.after = format::weights_size(r.out);
  if (r.output.format == "latent" && (opt.quant.enabled() || so.head)) {
    // Counted from the checkpoint as inspect counts it (the language model's modules; bits per weight with
    // scales and zero points).
    const auto written = model::Model::load(r.out, {.lazy = true});
    if (opt.quant.enabled()) o.compressed_modules = eval::compressed_modules(*written, so.dtype == DType::F32 ? 4 : 2);
    o.head = eval::quantized_head(*written);
  }
}

// --method lowrank-sparse: each module's rank and the non-zeros of its D, which the dense B·A + D of the
// checkpoint no longer shows (inspect reads them back).
nlohmann::json sparse_parts(const CompressReport& report) {
  nlohmann::json parts = nlohmann::json::object();
  for (const ModuleReport& m : report.modules) {
    parts[m.name] = {{"rank", m.rank}, {"nonzeros", m.params - eval::factored_params(m.out, m.in, m.rank, false)}};
  }
  return parts;
}

constexpr auto kTargetNames = core::enum_names<Target>(core::Named<Target>{Target::Linear, "linear"},
                                                       core::Named<Target>{Target::Params, "params"},
                                                       core::Named<Target>{Target::Bytes, "bytes"});

// The linear modules' ratio that removes the fraction opt.ratio of the whole model's parameters or
// bytes: the modules outside the plan (embeddings, norms, head, ...) keep theirs, stored in the output's type.
double linear_ratio(const Request& r, const model::Model& m, const CompressOptions& opt) {
  const format::WeightsSize whole = format::weights_size(r.model);
  const double lin = static_cast<double>(plan_model(m, opt).dense_params());  // the language model's
  const double other = static_cast<double>(whole.params) - lin;
  const std::string name(target_name(r.target));
  double after_lin = 0;  // the compressed modules' parameters the target leaves
  if (r.target == Target::Params) {
    after_lin = (1.0 - opt.ratio) * static_cast<double>(whole.params) - other;
  } else {
    const DType out = r.output.dtype.value_or(r.output.format == "onnx" ? DType::F32 : DType::F16);
    const double b = static_cast<double>(dtype_size(out));
    after_lin = (1.0 - opt.ratio) * static_cast<double>(whole.bytes) / b - other;
  }
  const double ratio = 1.0 - after_lin / lin;
  if (!(ratio > 0.0 && ratio < 1.0)) {
    throw ConfigError(fmt::format(
        "--ratio {} of the whole model's {} (--target {}): out of reach of the compressed modules (expected a ratio "
        "that leaves them between none and all of their {} weights, got {:.4f} of them removed; the other {} "
        "parameters stay{})", opt.ratio, r.target == Target::Params ? "parameters" : "bytes", name,
        static_cast<std::int64_t>(lin), ratio, static_cast<std::int64_t>(other),
        r.target == Target::Bytes ? ", and the storage type changes the bytes too: see --dtype" : ""));
  }
  log_info("--target {}: --ratio {} of the whole model = {:.4f} of the compressed modules' weights", name, opt.ratio,
           ratio);
  return ratio;
}

}  // namespace

std::string_view target_name(Target t) { return kTargetNames.name(t); }
Target parse_target(std::string_view name) {
  return kTargetNames.parse(name, "--target (expected {}, got {})");
}

void require_dense(const model::Model& m, std::string_view what) {
  if (!m.config().raw.contains("latent")) return;
  throw ConfigError(fmt::format("{}: a latent checkpoint (expected a dense Hugging Face model for {}, got one that "
                                "latentllm compress wrote, with a latent section in config.json): compress the dense "
                                "source model instead", m.dir().string(), what));
}

nlohmann::json options_record(const CompressOptions& o, std::string_view preset) {
  nlohmann::json j = o.to_json();
  j["preset"] = preset;
  return j;
}

Outcome run(Request r, const Observer& observe) {
  CompressOptions& opt = r.options;
  opt.validate();
  const nlohmann::json target = {{"kind", std::string(target_name(r.target))}, {"ratio", opt.ratio}};  // as given
  if (!r.dry_run && r.out.empty()) throw ConfigError("--out is required (or use --dry-run)");
  Outcome o;
  o.dry_run = r.dry_run;
  o.out = r.out;
  if (!r.out.empty()) {
    // Before any work: never the model itself, never a file or directory that is not ours, never saved progress.
    checkpoint::check_output_target(r.model, r.out, r.output.force);
    check_progress_kept(r.out.string() + ".resume", r.resume);
  }
  // Lazy: one decoder layer is loaded at a time; the compressed ones go to the progress directory.
  model::LoadOptions load = r.load;
  load.lazy = true;
  load.scan_finite = true;
  auto m = model::Model::load(r.model, load);
  require_dense(*m, "compress");
  format::check_format(*m, r.output, "--format", /*allow_latent=*/true);  // as export refuses, before any work
  if (opt.quant.head_bits < 16 && r.output.format != "latent") {
    throw ConfigError(fmt::format("--head-bits {}: --format {} (expected latent: the quantized head is stored in a "
                                  "latent checkpoint only; export it from there)", opt.quant.head_bits,
                                  r.output.format));
  }
  check_multimodal(r, *m);
  if (r.target != Target::Linear) {
    if (opt.components.towers()) {
      throw ConfigError(fmt::format("--target {}: not with --components {} (expected --target linear: the "
                                    "whole-model target counts the language model's modules)",
                                    target_name(r.target), components_name(opt.components)));
    }
    if (sparsifies(opt.method)) {
      throw ConfigError(fmt::format("--target {}: not with --method {} (expected --target linear: --ratio is the "
                                    "fraction of zeros of the compressed modules)", target_name(r.target),
                                    method_name(opt.method)));
    }
    if (opt.quant.bpw > 0) {
      throw ConfigError(fmt::format("--bpw: --target (expected linear: the budget is in bits per weight of the "
                                    "compressed modules, got {})", target_name(r.target)));
    }
    if (r.target == Target::Bytes && opt.quant.enabled()) {
      throw ConfigError(fmt::format("--target bytes: not with --bits {} (expected --target linear or params: the "
                                    "bytes of quantized factors are not planned yet)", opt.quant.bits));
    }
    opt.ratio = linear_ratio(r, *m, opt);
  }
  std::optional<calib::CalibOptions>& co = r.calibration;
  if (co && co->source != "scienceqa") calib::resolve_seqlen(*co, m->config());
  if (r.dry_run && co && opt.rank_alloc == RankAlloc::Global) {
    log_info("--dry-run with --rank-alloc global: the ranks need the dense pre-pass over the calibration windows");
  }
  // Without calibration data a dry run can only show the uniform plan of the same total.
  const bool calibrate = co && (!r.dry_run || opt.rank_alloc == RankAlloc::Global);

  // Multimodal calibration: sampled first (its sequence lengths size the memory plan), embedded through
  // the vision tower and projector, handed to the pipeline as its layer-0 input. With towers, they are
  // compressed in `llava` before the language model, which then calibrates on their compressed features.
  const bool towers = opt.components.towers();
  std::optional<eval::scienceqa::CalibrationSet> mm;
  std::optional<model::LlavaModel> llava;
  if (towers || (co && co->source == "scienceqa")) {
    model::LoadOptions lazy = r.load;
    lazy.lazy = true;
    llava.emplace(model::LlavaModel::load(r.model, lazy));
  }
  if (co && co->source == "scienceqa") {
    mm = eval::scienceqa::calibration_set(*llava, *checked_tokenizer(r.model, m->config()),
                                          image::load_checkpoint_processor(r.model),
                                          co->data, "train", co->nsamples, co->seed);
    co->seqlen = *std::max_element(mm->lengths.begin(), mm->lengths.end());
    opt.pipeline.lengths = mm->lengths;
    opt.pipeline.input_embeddings = &mm->embeddings;
  }
  if (co && r.batch_auto) opt.pipeline.batch_windows = std::max(1, 4096 / co->seqlen);
  if (!r.dry_run) {
    if (dist::is_root()) checkpoint::check_output_writable(r.out);  // fail now, not after the compression
    const std::optional<core::MemoryItem> mm_bytes =
        mm ? std::optional(multimodal_bytes(*llava, *mm)) : std::nullopt;
    o.memory = check_memory(r, *m, opt, *co, mm_bytes ? &*mm_bytes : nullptr, observe);
    // Progress after every layer goes to <out>.resume, so that --resume after a kill continues there.
    opt.state_dir = r.out.string() + ".resume";
    opt.resume = r.resume;
    check_storable_per_layer(opt, r.output);
  }

  const auto t0 = Clock::now();
  std::vector<std::int32_t> ids;
  if (mm) ids = mm->ids;
  else if (calibrate) ids = calib::sample_calibration(*checked_tokenizer(r.model, m->config()), *co);
  const double sample_s = seconds_since(t0);
  if (calibrate && !mm) {
    log_info("calibration: {} windows of {} tokens ({}, seed {}, {:.1f}s)", co->nsamples, co->seqlen, co->source,
             co->seed, sample_s);
  }
  TowerCalibration cal;
  if (mm) cal = {mm->pixels, mm->tiles};
  // A resumed run is told apart by the dense tower features the language model's inputs follow from.
  if (mm && towers) opt.inputs_digest = embeddings_digest(mm->embeddings);
  const int seqlen = calibrate ? co->seqlen : 0;
  o.planned = towers ? plan_components(*llava, ids, seqlen, opt, cal) : plan_run(*m, ids, seqlen, opt);
  if (o.planned.source == PlannedRanks::Source::UniformNoData) {
    log_warn("--dry-run: global rank allocation needs the dense pre-pass over the calibration windows; without "
             "--calib-data this is the uniform plan of the same parameter total (give --calib-data for the global "
             "ranks)");
  }
  if (observe.planned && dist::is_root()) observe.planned(o.planned);
  if (r.dry_run) {
    // The whole model: every stored parameter, the compressed modules' as planned.
    o.model_params = format::weights_size(r.model).params;
    o.planned_model_params = o.model_params - o.planned.plan.dense_params() + o.planned.plan.params();
    // No ranks: the non-zero weights every module keeps at the ratio's sparsity (lowrank-sparse: those of the
    // pure sparse module whose bytes it takes; its split is chosen while compressing).
    if (sparsifies(opt.method)) {
      o.planned_model_params = o.model_params;
      for (const ModulePlan& p : o.planned.plan.modules)
        o.planned_model_params -= p.out * pruned_per_row(p.in, {opt.ratio, opt.sparse.pattern});
    }
    o.options_record = options_record(opt, r.preset);
    if (r.target != Target::Linear) o.options_record["target"] = target;
    return o;
  }
  CompressReport tower_report;
  if (towers) {
    tower_report = compress_towers(*llava, cal, opt, o.planned.plan);
    eval::scienceqa::embed_calibration(*llava, *mm);  // opt.pipeline.input_embeddings: the compressed features
  }
  o.report = compress_model(*m, ids, co->seqlen, opt, &o.planned.plan);
  o.language_dense_params = o.report.dense_params;
  o.language_params = o.report.params;
  o.tower_dense_params = tower_report.dense_params;
  o.tower_params = tower_report.params;
  o.report.merge(tower_report);
  o.report.prepass_s = o.planned.prepass_s;
  o.report.calib_sample_s = sample_s;
  o.progress = opt.state_dir;
  o.before = format::weights_size(r.model);
  // The options as run: joint up-down may have been skipped for few tokens (effective_options).
  o.options_record = options_record(effective_options(m->config(), std::ssize(ids), opt), r.preset);
  o.options_record["calibration"] = calib::calibration_record(*co);
  if (r.target != Target::Linear) o.options_record["target"] = target;
  o.options_record["notes"] = o.report.to_json().at("notes");
  if (opt.method == Method::LowRankSparse) o.options_record["sparse_parts"] = sparse_parts(o.report);
  if (o.report.layers_done < o.report.layers_total) {
    o.stopped = true;  // --stop-after-layers: no output; the progress stays for --resume
    return o;
  }
  if (dist::is_root()) write_output(r, *m, opt, llava ? &*llava : nullptr, o);  // rank 0 writes
  return o;
}

}  // namespace latentllm::compress
