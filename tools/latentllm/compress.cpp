// `latentllm compress`: calibrate, compress with a method at a ratio, write a latent checkpoint (or, with
// --format hf|onnx, its export directly: format::export_model).
#include <chrono>
#include <cstdio>

#include "commands.hpp"
#include "options.hpp"
#include "latentllm/dist.hpp"
#include "latentllm/threads.hpp"
#include "latentllm/resources.hpp"
#include "latentllm/checkpoint.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/error.hpp"
#include "latentllm/export.hpp"
#include "latentllm/log.hpp"
#include "latentllm/multimodal.hpp"
#include "latentllm/provenance.hpp"
#include "latentllm/scienceqa.hpp"
#include "latentllm/tokenizer.hpp"

namespace latentllm::cli {
namespace {

struct CompressArgs {
  std::string model, out, method = "latentllm", dtype;  // dtype "": the format's default
  std::string format = "latent", kv_cache = "auto";
  std::string max_memory;  // empty: physical memory − 2 GiB
  std::string components = "lm";
  double ratio = 0.2;
  MethodArgs m;
  CalibArgs c;
  RunArgs run;
  int stop_after_layers = 0;
  bool dry_run = false, json = false, force = false, resume = false;
};

// plain: the same ratio planned without block identity, for comparison (null: not printed). Its budget is
// the same, so its ranks are lower, not its parameters higher.
void print_plan(const compress::RankPlan& plan, const compress::RankPlan* plain, bool json) {
  if (json || !dist::is_root()) return;
  std::printf("%-52s %9s %6s %10s %10s %12s\n", "module", "shape", "rank", "params", "dense", "MACs@128");
  for (const auto& m : plan.modules) {
    std::printf("%-52s %4lldx%-4lld %6lld %10lld %10lld %12lld\n", m.name.c_str(), (long long)m.out,
                (long long)m.in, (long long)m.rank, (long long)m.params, (long long)m.dense_params,
                (long long)m.macs);
  }
  std::printf("total of the compressed linear modules: params %lld of %lld (%.2f%% removed), MACs@%lld %lld of "
              "%lld, FLOPs %lld of %lld\n",
              (long long)plan.params(), (long long)plan.dense_params(), 100.0 * plan.achieved_ratio(),
              (long long)plan.n_tok, (long long)plan.macs(), (long long)plan.dense_macs(),
              (long long)(2 * plan.macs()), (long long)(2 * plan.dense_macs()));
  if (!plain) return;
  std::printf("for comparison, the same ratio without block identity (--junction identity: the same budget at lower "
              "ranks): params %lld of %lld (%.2f%% removed), MACs@%lld %lld of %lld, FLOPs %lld of %lld\n",
              (long long)plain->params(), (long long)plain->dense_params(), 100.0 * plain->achieved_ratio(),
              (long long)plain->n_tok, (long long)plain->macs(), (long long)plain->dense_macs(),
              (long long)(2 * plain->macs()), (long long)(2 * plain->dense_macs()));
}

// The provenance of the output (latentllm/provenance.hpp): the source, the method, the calibration set
// (`calibration`, as recorded in the checkpoint) and its hash, the source's size.
nlohmann::json run_provenance(const CompressArgs& a, nlohmann::json calibration, const calib::CalibOptions& co) {
  calibration["sha256"] = format::data_sha256(co.data);
  nlohmann::json compression = {{"method", a.method}, {"ratio", a.ratio}, {"preset", a.m.preset}};
  if (a.components != "lm") compression["components"] = a.components;
  return {{"latentllm", format::tool_identity()}, {"source", format::source_identity(a.model)},
          {"compression", compression}, {"calibration", calibration},
          {"size", {{"before", format::to_json(format::weights_size(a.model))}}}};
}

// The whole model before and after, in parameters, weight-file bytes and storage type.
void print_model_size(const format::WeightsSize& before, const format::WeightsSize& after) {
  const std::string params =
      after.params > 0 ? fmt::format("{} -> {} parameters ({:.2f}% of the whole model removed)", before.params,
                                     after.params, 100.0 * (1.0 - static_cast<double>(after.params) / before.params))
                       : fmt::format("{} parameters", before.params);
  std::printf("whole model: %s, weight files %s -> %s (%s -> %s)\n", params.c_str(),
              core::format_bytes(before.bytes).c_str(), core::format_bytes(after.bytes).c_str(),
              before.dtypes.c_str(), after.dtypes.empty() ? "ONNX" : after.dtypes.c_str());
}

// Prints how the budget will be spent (stderr) and throws ConfigError, before any work, when the plan
// does not fit, naming the largest --nsamples that fits.
// mm: a multimodal calibration's own bytes (its embeddings, pixels and the float towers), held beside the run.
core::MemoryPlan check_memory(const CompressArgs& a, const model::Model& m, const compress::CompressOptions& opt,
                              const calib::CalibOptions& co, const core::MemoryItem* mm = nullptr) {
  const std::int64_t budget = a.max_memory.empty() ? core::default_memory_budget()
                                                   : core::parse_bytes(a.max_memory, "--max-memory");
  auto plan_of = [&](std::int64_t windows) {
    core::MemoryPlan p = compress::plan_compress_memory(m, windows * co.seqlen, co.seqlen, opt, budget);
    if (mm) p.add(mm->name, mm->bytes, mm->detail);
    return p;
  };
  const core::MemoryPlan plan = plan_of(co.nsamples);
  print_memory_plan("compress", plan, a.max_memory.empty() ? "physical memory - 2 GiB; --max-memory" : "--max-memory");
  if (plan.fits()) return plan;
  int k = co.nsamples - 1;
  while (k > 0 && !plan_of(k).fits()) --k;
  std::string advice = k > 0 ? fmt::format("use --nsamples {} or --max-memory {}", k, gib_option(plan.total()))
                             : fmt::format("use --max-memory {}", gib_option(plan.total()));
  compress::CompressOptions no_ud = opt;
  no_ud.joint.ud = false;
  if (opt.joint.ud && compress::plan_compress_memory(m, co.nsamples * co.seqlen, co.seqlen, no_ud, budget).fits()) {
    advice += " (or drop joint up-down, whose [ffn, ffn] statistics dominate: --joint qk)";
  }
  throw ConfigError(fmt::format("--max-memory: budget too small to compress with {} windows of {} tokens (expected at "
                                "least {}: {}; got {}); {}", co.nsamples, co.seqlen, core::format_bytes(plan.total()),
                                plan.summary(), core::format_bytes(budget), advice));
}

// --stop-after-layers: no checkpoint; the progress directory stays for --resume, and the time of the
// layers run so far projects the whole model's.
int report_stopped(const CompressArgs& a, const compress::CompressReport& report, const std::filesystem::path& state,
                   const core::MemoryPlan& memory) {
  const int ran = report.layers_done - report.layers_resumed;
  const double per_layer = ran > 0 ? report.total_s / ran : 0.0;
  const double projected = per_layer * (report.layers_total - report.layers_resumed);
  auto j = report.to_json();
  j["stopped"] = true;
  j["progress"] = state.string();
  j["projected_seconds_all_layers"] = projected;
  j["peak_rss_bytes"] = core::peak_rss_bytes();
  j["planned_peak_bytes"] = memory.total();
  j["weights"] = a.run.weights;
  j["processes"] = dist::size();
  j["communication"] = {{"bytes", dist::traffic().bytes}, {"seconds", dist::traffic().seconds}};  // rank 0's
  if (a.json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("stopped after layer %d of %d (--stop-after-layers %d): no checkpoint written; progress in %s "
                "(run again with --resume to continue)\n", report.layers_done, report.layers_total, a.stop_after_layers,
                state.string().c_str());
    std::printf("time: %.1fs for %d layers = forward %.1fs + covariance %.1fs + output statistics %.1fs + "
                "decompositions %.1fs; %.1fs a layer, %.0fs projected for all %d layers\n", report.total_s, ran,
                report.times.forward, report.times.covariance, report.times.consume, report.times.compress, per_layer,
                projected,
                report.layers_total - report.layers_resumed);
    std::printf("peak memory: %.1f MiB\n", core::peak_rss_bytes() / 1048576.0);
  }
  return 0;
}


// parse -> check -> plan -> print -> run -> write: every option is checked before any work, the ranks are
// chosen once (compress::plan_run), and nothing of the user's can be overwritten or discarded.
int run_compress(const CompressArgs& a) {
  apply_run_options(a.run);
  auto opt = to_compress_options(a.m, a.method, a.ratio);
  opt.stop_after_layers = a.stop_after_layers;
  opt.components = compress::parse_components(a.components);
  opt.validate();
  check_options_read(a.m, opt);
  format::ExportOptions eo;
  eo.format = a.format;
  if (!a.dtype.empty()) eo.dtype = parse_storage_dtype(a.dtype);
  eo.kv_cache = model::parse_kv_cache_mode(a.kv_cache);
  eo.force = a.force;
  const bool latent = a.format == "latent";
  if (!a.dry_run && a.out.empty()) throw ConfigError("--out is required (or use --dry-run)");
  const std::string out = a.out.empty() ? "" : output_dir(a.out);
  if (!out.empty()) {
    // Before any work: never the model itself, never a file or directory that is not ours, never saved progress.
    checkpoint::check_output_target(a.model, out, a.force);
    compress::check_progress_kept(out + ".resume", a.resume);
  }
  // Lazy: one decoder layer is loaded at a time (--weights stored: its F16/BF16 matrices mapped, widened
  // where a solver reads them); the compressed ones go to the progress directory.
  auto model = model::Model::load(a.model, a.run.load(/*lazy=*/true, /*scan_finite=*/true));
  require_dense(*model, "compress");
  format::check_format(*model, eo, "--format", /*allow_latent=*/true);  // as export refuses, before any work
  const bool global = opt.rank_alloc == compress::RankAlloc::Global;
  // Without calibration data a dry run can only show the uniform plan of the same total.
  std::optional<calib::CalibOptions> co;
  if (!a.dry_run || !a.c.data.empty()) co = to_calib_options(a.c, model->config());
  const bool calibrate = !a.dry_run || (global && co);
  if (a.dry_run && calibrate) {
    log_info("--dry-run with --rank-alloc global: the ranks need the dense pre-pass over the calibration windows");
  }
  // Multimodal calibration: sampled first (its sequence lengths size the memory plan), embedded through
  // the vision tower and projector, handed to the pipeline as its layer-0 input.
  // --components beyond lm: the vision tower and projector are compressed in `llava` (before the
  // language model, which then calibrates on their compressed features) and written from there.
  const bool towers = opt.components.towers();
  if (towers && model->config().multimodal_architecture.empty()) {
    throw ConfigError(fmt::format("--components {}: {} is not a multimodal checkpoint (expected a LLaVA checkpoint, "
                                  "got {})", a.components, a.model, model->config().architecture));
  }
  if (towers && co && co->source != "scienceqa") {
    throw ConfigError(fmt::format("--components {}: the vision tower and projector calibrate on images (expected "
                                  "--calib scienceqa, got --calib {})", a.components, co->source));
  }
  std::optional<eval::scienceqa::CalibrationSet> mm;
  std::optional<model::LlavaModel> llava;
  if (towers) llava.emplace(model::LlavaModel::load(a.model, a.run.load(/*lazy=*/true)));
  if (co && co->source == "scienceqa") {
    if (model->config().multimodal_architecture.empty()) {
      throw ConfigError(fmt::format("--calib scienceqa: {} is not a multimodal checkpoint (expected a LLaVA "
                                    "checkpoint, got {})", a.model, model->config().architecture));
    }
    if (!llava) llava.emplace(model::LlavaModel::load(a.model, a.run.load(/*lazy=*/true)));
    mm = eval::scienceqa::calibration_set(*llava, *model_tokenizer(a.model, model->config()),
                                          image::load_checkpoint_processor(a.model),
                                          co->data, "train", co->nsamples, co->seed);
    co->seqlen = *std::max_element(mm->lengths.begin(), mm->lengths.end());
    opt.pipeline.lengths = mm->lengths;
    opt.pipeline.input_embeddings = &mm->embeddings;
  }
  if (co) resolve_batch(a.m, opt, co->seqlen);
  std::optional<core::MemoryPlan> memory;
  if (!a.dry_run) {
    if (dist::is_root()) checkpoint::check_output_writable(out);  // fail now, not after the compression
    std::optional<core::MemoryItem> mm_bytes;
    if (mm) {
      // The towers are float32 in `llava`; the calibration's embeddings and pixels stay for the run.
      std::int64_t towers = 0;
      for (const auto& [part, n] : llava->component_params())
        if (part != "language") towers += 4 * n;
      mm_bytes = core::MemoryItem{"multimodal calibration",
                                  4 * (mm->embeddings.size() + static_cast<std::int64_t>(mm->pixels.size())) + towers,
                                  "the prompts' embeddings, the images' pixels, the vision tower and projector (f32)"};
    }
    memory = check_memory(a, *model, opt, *co, mm_bytes ? &*mm_bytes : nullptr);
    // Progress after every layer goes to <out>.resume (removed once the checkpoint is written), so that
    // --resume after a kill continues where the run stopped.
    opt.state_dir = out + ".resume";
    opt.resume = a.resume;
    // A factor the storage type cannot hold fails at its layer, with the progress kept, not at write time
    // (hf stores the products, checked as they are written).
    const DType factors = eo.dtype.value_or(a.format == "onnx" ? DType::F32 : DType::F16);
    if (a.format != "hf") opt.layer_done = [&opt, factors](int layer) {
      try {
        checkpoint::check_layer_factors_storable(checkpoint::layer_factors_file(opt.state_dir, layer), factors);
      } catch (const NumericError& e) {
        throw NumericError(fmt::format("{} (the {} finished layers are kept in {}: run the same command with "
                                       "--resume --dtype f32 to continue)", e.what(), layer + 1,
                                       opt.state_dir.string()));
      }
    };
  }

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::int32_t> ids;
  if (mm) ids = mm->ids;
  else if (calibrate) ids = calib::sample_calibration(*model_tokenizer(a.model, model->config()), *co);
  const double sample_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (calibrate && !mm) {
    log_info("calibration: {} windows of {} tokens ({}, seed {}, {:.1f}s)", co->nsamples, co->seqlen, co->source,
             co->seed, sample_s);
  }
  compress::TowerCalibration cal;
  if (mm) cal = {mm->pixels, mm->tiles};
  // The language model will calibrate on the compressed towers' features: a resumed run is told apart by
  // the dense ones they follow from.
  if (mm && towers) opt.inputs_digest = compress::embeddings_digest(mm->embeddings);
  const compress::PlannedRanks planned = towers ? compress::plan_components(*llava, ids, calibrate ? co->seqlen : 0, opt, cal)
                                                : compress::plan_run(*model, ids, calibrate ? co->seqlen : 0, opt);
  if (planned.source == compress::PlannedRanks::Source::UniformNoData) {
    log_warn("--dry-run: global rank allocation needs the dense pre-pass over the calibration windows; without "
             "--calib-data this is the uniform plan of the same parameter total (give --calib-data for the global "
             "ranks)");
  }
  const bool resumed = planned.source == compress::PlannedRanks::Source::Resumed;
  const bool block_identity = planned.plan.junction == compress::Junction::BlockIdentity;
  print_plan(planned.plan, resumed || !block_identity ? nullptr : &planned.plain, a.json);
  if (a.dry_run) {
    // The whole model: every stored parameter, the compressed modules' as planned.
    const std::int64_t whole = format::weights_size(a.model).params;
    const std::int64_t planned_whole = whole - planned.plan.dense_params() + planned.plan.params();
    if (a.json && dist::is_root()) {
      std::printf("%s\n", nlohmann::json{{"options", method_json(opt, a.m.preset)},
                                         {"plan", plan_json(planned.plan)},
                                         {"plan_without_block_identity", plan_json(planned.plain)},
                                         {"rank_alloc", compress::planned_source_name(planned.source)},
                                         {"model_params", whole}, {"planned_model_params", planned_whole}}
                                .dump(2).c_str());
    } else if (dist::is_root()) {
      std::printf("whole model: params %lld of %lld as planned (%.2f%% removed)\n", (long long)planned_whole,
                  (long long)whole, 100.0 * (1.0 - static_cast<double>(planned_whole) / static_cast<double>(whole)));
    }
    return 0;
  }
  compress::CompressReport tower_report;
  if (towers) {
    tower_report = compress::compress_towers(*llava, cal, opt, planned.plan);
    eval::scienceqa::embed_calibration(*llava, *mm);  // opt.pipeline.input_embeddings: the compressed towers' features
  }
  auto report = compress::compress_model(*model, ids, co->seqlen, opt, &planned.plan);
  if (!dist::is_root()) return 0;  // rank 0 writes the checkpoint and prints the results
  const std::int64_t lm_dense = report.dense_params, lm_params = report.params;
  report.merge(tower_report);
  report.prepass_s = planned.prepass_s;
  report.calib_sample_s = sample_s;
  if (report.layers_done < report.layers_total) return report_stopped(a, report, opt.state_dir, *memory);
  const bool plan_resumed = resumed;

  checkpoint::SaveOptions so;
  so.dtype = eo.dtype.value_or(DType::F16);
  so.overwrite = a.force;
  // The options as run: joint up-down may have been skipped for few tokens (effective_options).
  const auto run_opt = compress::effective_options(model->config(), std::ssize(ids), opt);
  so.info = method_json(run_opt, a.m.preset);
  so.info["calibration"] = calib_json(*co, a.c.sampling);
  so.info["notes"] = report.to_json().at("notes");
  so.layer_factors_dir = opt.state_dir;
  if (towers) so.tower_modules = compress::tower_modules(*llava, opt.components);
  const nlohmann::json options = so.info;
  so.info["provenance"] = eo.provenance = run_provenance(a, so.info["calibration"], *co);
  const auto tw = std::chrono::steady_clock::now();
  if (latent) {
    checkpoint::save(*model, out, so);
  } else {
    format::export_model(*model, opt.state_dir, out, eo, so.tower_modules);
  }
  std::error_code ec;
  std::filesystem::remove_all(opt.state_dir, ec);
  if (ec) log_warn("{}: cannot remove the progress directory ({})", opt.state_dir.string(), ec.message());
  const double write_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - tw).count();

  auto j = report.to_json();
  j["stage_seconds"]["write"] = write_s;
  j["peak_rss_bytes"] = core::peak_rss_bytes();
  j["planned_peak_bytes"] = memory->total();
  j["weights"] = a.run.weights;
  j["options"] = options;
  const format::WeightsSize before = format::weights_size(a.model), after = format::weights_size(out);
  j["model_size"] = {{"before", format::to_json(before)}, {"after", format::to_json(after)}};
  j["out_dir"] = out;
  j["format"] = a.format;
  j["plan"] = plan_json(planned.plan);
  j["plan_resumed"] = plan_resumed;
  j["processes"] = dist::size();
  j["communication"] = {{"bytes", dist::traffic().bytes}, {"seconds", dist::traffic().seconds}};  // rank 0's
  if (towers) {
    j["components"] = {{"language", {{"dense_params", lm_dense}, {"params", lm_params}}},
                       {"towers", {{"dense_params", tower_report.dense_params}, {"params", tower_report.params}}}};
  }
  if (a.json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("compressed %s with %s at ratio %.2f: %lld -> %lld weights in compressed modules (the linear "
                "modules of attention and MLP, what --ratio counts)\n", a.model.c_str(), a.method.c_str(), a.ratio,
                (long long)report.dense_params, (long long)report.params);
    print_model_size(before, after);
    if (towers) {
      const char* parts = opt.components.vision && opt.components.projector ? "the vision tower and projector"
                          : opt.components.vision                                ? "the vision tower"
                                                                                  : "the projector";
      std::printf("of which the language model %lld -> %lld, %s %lld -> %lld\n", (long long)lm_dense,
                  (long long)lm_params, parts, (long long)tower_report.dense_params, (long long)tower_report.params);
    }
    std::printf("time: total %.1fs = sampling %.1fs + forward %.1fs + covariance %.1fs + output statistics %.1fs + "
                "decompositions %.1fs + write %.1fs\n", report.total_s + sample_s + write_s, sample_s,
                report.times.forward, report.times.covariance, report.times.consume, report.times.compress, write_s);
    if (global && plan_resumed) {
      std::printf("rank allocation (global, %s): the interrupted run's plan, no pre-pass\n",
                  compress::alloc_score_name(opt.alloc_score).data());
    } else if (global) {
      std::printf("rank allocation (global, %s): dense pre-pass %.1fs before that\n",
                  compress::alloc_score_name(opt.alloc_score).data(), report.prepass_s);
    }
    if (report.times.dense_forward > 0 || report.times.cross > 0) {
      std::printf("error compensation: dense forward %.1fs + cross moments %.1fs (in the total, not in its other parts)\n",
                  report.times.dense_forward, report.times.cross);
    }
    std::printf("peak memory: %.1f MiB\nwrote %s\n", core::peak_rss_bytes() / 1048576.0, out.c_str());
  }
  return 0;
}

}  // namespace

Command add_compress(CLI::App& app) {
  auto* sub = app.add_subcommand("compress", "Calibrate and compress a model into a latent checkpoint");
  auto a = std::make_shared<CompressArgs>();
  sub->add_option("--model", a->model, "Input model directory (HF format)")->required()->group("Model");
  sub->add_option("--out", a->out, "REQUIRED unless --dry-run: output directory for the latent checkpoint (or its "
                                   "export, --format)")->group("Model");
  sub->add_option("--format", a->format, "Output format: latent (the latent checkpoint); hf or onnx (its export, as "
                                         "latentllm export writes it, directly from the compression)")
      ->capture_default_str()->group("Model");
  sub->add_option("--dtype", a->dtype, "Storage type of the output: f16, bf16, f32 (default f16; --format onnx: f32 or f16, default f32)")
      ->group("Model");
  sub->add_option("--kv-cache", a->kv_cache,
                  "--format onnx: which past inputs carry the latent: auto (where generate --kv-cache auto caches it) "
                  "or dense (as latentllm export --kv-cache)")->capture_default_str()->group("Model");
  sub->add_flag("--force", a->force, "Replace an existing output directory")->group("Model");
  sub->add_option("--method", a->method, "plain-svd, asvd-hessian, asvd-l1, asvd-l2, asvd-cov, asvd-rootcov, latentllm")
      ->capture_default_str()->group("Method");
  sub->add_option("--ratio", a->ratio, "Fraction of the weights of the compressed modules (the linear modules of "
                                       "attention and MLP; not the embeddings, norms or LM head) removed, in (0, 1)")
      ->capture_default_str()->group("Method");
  add_method_options(sub, a->m);
  sub->add_flag("--resume", a->resume,
                "Continue an interrupted run from its saved progress (<out>.resume); the result is identical "
                "to an uninterrupted run")->group("Model");
  sub->add_option("--stop-after-layers", a->stop_after_layers,
                  "Compress the first N layers only and stop without writing a checkpoint (progress kept for "
                  "--resume; prints the projected time of all layers; 0 = all)")->capture_default_str()->group("Run");
  sub->add_flag("--dry-run", a->dry_run, "Print the rank plan (ranks, parameters, FLOPs/MACs at 128 tokens) and exit "
                "(with --rank-alloc global after the dense pre-pass over the calibration windows, which it needs)")->group("Method");
  sub->add_option("--components", a->components,
                  "A LLaVA checkpoint's parts to compress: lm (the language model, the paper's setting), vision (the "
                  "vision tower's encoder layers up to the feature layer), projector; comma-separated, with lm "
                  "(docs/LMM.md)")->capture_default_str()->group("Method");
  add_calib_options(sub, a->c);
  add_run_options(sub, a->run);
  add_weights_option(sub, a->run);
  sub->add_option("--max-memory", a->max_memory,
                  "Memory budget (e.g. 20G; default: physical memory - 2 GiB): the plan of the run is printed at "
                  "start and a run that does not fit is refused before any work")->group("Run");
  sub->add_flag("--json", a->json, "Print the result as JSON")->group("Run");
  return {sub, [a] { return run_compress(*a); }};
}

}  // namespace latentllm::cli
