// `latentllm compress`: calibrate, compress with a method at a ratio, write a latent checkpoint.
#include <chrono>
#include <cstdio>

#include "commands.hpp"
#include "options.hpp"
#include "latentllm/threads.hpp"
#include "latentllm/resources.hpp"
#include "latentllm/checkpoint.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/error.hpp"
#include "latentllm/log.hpp"

namespace latentllm::cli {
namespace {

struct CompressArgs {
  std::string model, out, method = "latentllm", dtype = "f16";
  std::string max_memory;  // empty: physical memory − 2 GiB
  double ratio = 0.2;
  MethodArgs m;
  CalibArgs c;
  int threads = 0, stop_after_layers = 0;
  bool dry_run = false, json = false, force = false, resume = false;
};

// plain: the same allocation without block identity, for comparison (null: not printed).
void print_plan(const compress::RankPlan& plan, const compress::RankPlan* plain, bool json) {
  if (json) return;
  std::printf("%-52s %9s %6s %10s %10s %12s\n", "module", "shape", "rank", "params", "dense", "MACs@128");
  for (const auto& m : plan.modules) {
    std::printf("%-52s %4lldx%-4lld %6lld %10lld %10lld %12lld\n", m.name.c_str(), (long long)m.out,
                (long long)m.in, (long long)m.rank, (long long)m.params, (long long)m.dense_params,
                (long long)m.macs);
  }
  std::printf("total: params %lld of %lld (%.2f%% removed), MACs@%lld %lld of %lld, FLOPs %lld of %lld\n",
              (long long)plan.params(), (long long)plan.dense_params(), 100.0 * plan.achieved_ratio(),
              (long long)plan.n_tok, (long long)plan.macs(), (long long)plan.dense_macs(),
              (long long)(2 * plan.macs()), (long long)(2 * plan.dense_macs()));
  if (!plain) return;
  std::printf("without block identity: params %lld of %lld (%.2f%% removed), MACs@%lld %lld of %lld, FLOPs %lld of %lld\n",
              (long long)plain->params(), (long long)plain->dense_params(), 100.0 * plain->achieved_ratio(),
              (long long)plain->n_tok, (long long)plain->macs(), (long long)plain->dense_macs(),
              (long long)(2 * plain->macs()), (long long)(2 * plain->dense_macs()));
}

// Prints how the budget will be spent (stderr) and throws ConfigError, before any work, when the plan
// does not fit, naming the largest --nsamples that fits.
core::MemoryPlan check_memory(const CompressArgs& a, const model::Model& m, const compress::CompressOptions& opt,
                              const calib::CalibOptions& co) {
  const std::int64_t budget = a.max_memory.empty() ? core::default_memory_budget()
                                                   : core::parse_bytes(a.max_memory, "--max-memory");
  auto plan_of = [&](std::int64_t windows) {
    return compress::plan_compress_memory(m, windows * co.seqlen, co.seqlen, opt, budget);
  };
  const core::MemoryPlan plan = plan_of(co.nsamples);
  std::fprintf(stderr, "compress: memory budget %s (%s)\n%s", core::format_bytes(budget).c_str(),
               a.max_memory.empty() ? "physical memory - 2 GiB; --max-memory" : "--max-memory",
               plan.describe().c_str());
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

int run_compress(const CompressArgs& a) {
  if (a.stop_after_layers < 0) {
    throw ConfigError(fmt::format("--stop-after-layers (expected >= 0, got {})", a.stop_after_layers));
  }
  if (a.threads < 0) throw ConfigError(fmt::format("--threads (expected >= 0, got {})", a.threads));
  core::set_num_threads(a.threads);
  auto opt = to_compress_options(a.m, a.method, a.ratio);
  const DType dtype = a.dtype == "f32" ? DType::F32 : a.dtype == "f16" ? DType::F16 : a.dtype == "bf16" ? DType::BF16
                      : throw ConfigError(fmt::format("--dtype (expected f16, bf16 or f32, got {})", a.dtype));
  // Lazy: one decoder layer is widened at a time; the compressed ones go to the progress directory.
  auto model = model::Model::load(a.model, {.lazy = true, .scan_finite = true});
  if (const auto& mm = model->config().multimodal_architecture; !mm.empty()) {
    // The checkpoint writer knows only the language model's names: it would drop the vision tower and
    // the projector and write tensors the multimodal loader does not read back (docs/LMM.md).
    throw ConfigError(fmt::format("{}: compressing a {} checkpoint (expected a causal LM; multimodal "
                                  "checkpoints are not supported by compress yet)", a.model, mm));
  }
  const bool global = opt.rank_alloc == compress::RankAlloc::Global;
  auto plan = compress::plan_model(*model, opt);
  auto plain_opt = opt;
  plain_opt.local.junction = compress::Junction::Identity;
  auto plain = compress::plan_model(*model, plain_opt);
  // Global ranks come from the spectra of the calibration inputs (a dense pre-pass), both plans from one.
  auto plan_global = [&](std::span<const std::int32_t> ids, int seqlen) {
    const auto spectra = compress::measure_spectra(*model, ids, seqlen, opt);
    plan = compress::allocate_ranks(spectra, opt.ratio, opt.local.junction, opt.alloc_score);
    plain = compress::allocate_ranks(spectra, opt.ratio, compress::Junction::Identity, opt.alloc_score);
  };
  // Without calibration data a dry run can only show the uniform plan of the same total.
  const bool dry_global = a.dry_run && global && !a.c.data.empty();
  if (a.dry_run && global && !dry_global) {
    log_warn("--dry-run: global rank allocation needs the dense pre-pass over the calibration windows; without "
             "--calib-data this is the uniform plan of the same parameter total (give --calib-data for the global "
             "ranks)");
  }
  if (dry_global) {
    log_info("--dry-run with --rank-alloc global: the ranks need the dense pre-pass over the calibration windows");
    const calib::CalibOptions co = to_calib_options(a.c, model->config());
    plan_global(calib::sample_calibration(*io::load_tokenizer(a.model), co), co.seqlen);
  }
  if (!global || a.dry_run) print_plan(plan, &plain, a.json);
  if (a.dry_run) {
    if (a.json) {
      std::printf("%s\n", nlohmann::json{{"plan", plan_json(plan)}, {"plan_without_block_identity", plan_json(plain)},
                                         {"rank_alloc", dry_global ? "global" : "uniform"}}.dump(2).c_str());
    }
    return 0;
  }
  if (a.out.empty()) throw ConfigError("--out is required (or use --dry-run)");
  // "dir/" names the directory "dir" (its progress is "dir.resume", not "dir/.resume").
  std::filesystem::path out_path = std::filesystem::path(a.out).lexically_normal();
  if (!out_path.has_filename() && out_path.has_parent_path()) out_path = out_path.parent_path();
  const std::string out = out_path.string();
  if (!a.force && std::filesystem::exists(out)) {
    throw IoError(fmt::format("{}: output directory exists (use --force to replace it)", out));
  }
  checkpoint::check_output_writable(out);  // fail now, not after the compression
  const calib::CalibOptions co = to_calib_options(a.c, model->config());
  const core::MemoryPlan memory = check_memory(a, *model, opt, co);
  // Progress after every layer goes to <out>.resume (removed once the checkpoint is written), so that
  // --resume after a kill continues where the run stopped.
  opt.state_dir = out + ".resume";
  opt.resume = a.resume;
  opt.stop_after_layers = a.stop_after_layers;

  const auto t0 = std::chrono::steady_clock::now();
  const auto tok = io::load_tokenizer(a.model);
  const auto ids = calib::sample_calibration(*tok, co);
  const double sample_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log_info("calibration: {} windows of {} tokens ({}, seed {}, {:.1f}s)", co.nsamples, co.seqlen, co.source, co.seed,
           sample_s);

  double prepass_s = 0;
  bool plan_resumed = false;
  if (global) {
    // --resume: the killed run's plan (no second pre-pass); it printed the plan without block identity.
    if (auto saved = compress::resumed_plan(*model, ids, co.seqlen, opt)) {
      plan = std::move(*saved);
      plan_resumed = true;
      print_plan(plan, nullptr, a.json);
    } else {
      const auto tp = std::chrono::steady_clock::now();
      plan_global(ids, co.seqlen);
      prepass_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - tp).count();
      print_plan(plan, &plain, a.json);
    }
  }
  auto report = compress::compress_model(*model, ids, co.seqlen, opt, &plan);
  report.prepass_s = prepass_s;
  report.calib_sample_s = sample_s;
  if (report.layers_done < report.layers_total) return report_stopped(a, report, opt.state_dir, memory);

  checkpoint::SaveOptions so;
  so.dtype = dtype;
  so.overwrite = a.force;
  so.info = method_json(a.m, a.method, a.ratio);
  so.info["calibration"] = calib_json(co, a.c.sampling);
  so.info["notes"] = report.to_json().at("notes");
  if (opt.method == compress::Method::LatentLlm)  // as run: joint up-down may have been skipped for few tokens
    so.info["joint"] = joint_spec(compress::effective_options(model->config(), std::ssize(ids), opt).joint);
  so.layer_factors_dir = opt.state_dir;
  const auto tw = std::chrono::steady_clock::now();
  checkpoint::save(*model, out, so);
  std::error_code ec;
  std::filesystem::remove_all(opt.state_dir, ec);
  if (ec) log_warn("{}: cannot remove the progress directory ({})", opt.state_dir.string(), ec.message());
  const double write_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - tw).count();

  auto j = report.to_json();
  j["seconds"]["write"] = write_s;
  j["peak_rss_bytes"] = core::peak_rss_bytes();
  j["planned_peak_bytes"] = memory.total();
  j["out"] = out;
  j["plan"] = plan_json(plan);
  j["plan_resumed"] = plan_resumed;
  if (a.json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("compressed %s with %s at ratio %.2f: %lld -> %lld weights in compressed modules\n", a.model.c_str(),
                a.method.c_str(), a.ratio, (long long)report.dense_params, (long long)report.params);
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
  sub->add_option("--out", a->out, "Output directory for the latent checkpoint")->group("Model");
  sub->add_option("--dtype", a->dtype, "Storage type of the output: f16, bf16, f32")->capture_default_str()->group("Model");
  sub->add_flag("--force", a->force, "Replace an existing output directory")->group("Model");
  sub->add_option("--method", a->method, "plain-svd, asvd-hessian, asvd-l1, asvd-l2, asvd-cov, asvd-rootcov, latentllm")
      ->capture_default_str()->group("Method");
  sub->add_option("--ratio", a->ratio, "Fraction of each compressed module's weights removed, in (0, 1)")
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
  add_calib_options(sub, a->c);
  sub->add_option("--threads", a->threads, "Threads of the forward pass and BLAS (0 = all cores)")->capture_default_str()->group("Run");
  sub->add_option("--max-memory", a->max_memory,
                  "Memory budget (e.g. 20G; default: physical memory - 2 GiB): the plan of the run is printed at "
                  "start and a run that does not fit is refused before any work")->group("Run");
  sub->add_flag("--json", a->json, "Print the result as JSON")->group("Run");
  return {sub, [a] { return run_compress(*a); }};
}

}  // namespace latentllm::cli
