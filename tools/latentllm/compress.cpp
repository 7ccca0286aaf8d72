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
#include "latentllm/compress_run.hpp"
#include "latentllm/error.hpp"
#include "latentllm/eval.hpp"
#include "latentllm/export.hpp"
#include "latentllm/provenance.hpp"

namespace latentllm::cli {
namespace {

struct CompressArgs {
  std::string model, out, method = "latentllm", dtype;  // dtype "": the format's default
  std::string format = "latent", kv_cache = "auto";
  std::string max_memory;  // empty: core::default_budget()
  std::string components = "lm";
  std::string target = "linear";
  double ratio = 0.2;
  const CLI::Option* ratio_flag = nullptr;  // whether --ratio was given (--bpw replaces it)
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
  const bool bits = !plan.modules.empty() && plan.modules.front().bits > 0;  // --bpw chose each module's bits
  std::printf("%-52s %9s %6s %10s %10s %12s%s\n", "module", "shape", "rank", "params", "dense", "MACs@128",
              bits ? "  bits" : "");
  for (const auto& m : plan.modules) {
    std::printf("%-52s %4lldx%-4lld %6lld %10lld %10lld %12lld%s\n", m.name.c_str(), (long long)m.out,
                (long long)m.in, (long long)m.rank, (long long)m.params, (long long)m.dense_params,
                (long long)m.macs, bits ? fmt::format(" {:5d}", m.bits).c_str() : "");
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

// A sparse run's modules as a values + positions format would store them (eval::sparse_storage_bytes;
// lowrank-sparse: its factors beside, eval::lowrank_sparse_storage_bytes): the checkpoint keeps them dense.
nlohmann::json sparse_json(const compress::CompressReport& report, int value_bytes) {
  std::int64_t nnz = 0, factors = 0, dense = 0, bytes = 0;
  for (const auto& m : report.modules) {
    const std::int64_t f = eval::factored_params(m.out, m.in, m.rank, false);  // 0 without a low-rank part
    nnz += m.params - f;
    factors += f;
    dense += m.dense_params;
    bytes += eval::lowrank_sparse_storage_bytes(m.params - f, m.rank, m.out, m.in, value_bytes);
  }
  nlohmann::json j = {{"nonzeros", nnz}, {"dense_params", dense},
                      {"sparsity", dense > 0 ? 1.0 - static_cast<double>(nnz) / static_cast<double>(dense) : 0.0},
                      {"value_bytes", value_bytes}, {"storage_bytes", bytes}, {"dense_bytes", dense * value_bytes}};
  if (report.method == compress::Method::LowRankSparse) j["factor_params"] = factors;
  return j;
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


// --dry-run: the plan (printed already) and the whole model as planned.
int report_dry_run(const CompressArgs& a, const compress::Outcome& o) {
  if (a.json) {
    std::printf("%s\n", nlohmann::json{{"options", o.options_record}, {"plan", plan_json(o.planned.plan)},
                                       {"plan_without_block_identity", plan_json(o.planned.plain)},
                                       {"rank_alloc", compress::planned_source_name(o.planned.source)},
                                       {"model_params", o.model_params}, {"planned_model_params", o.planned_model_params}}
                              .dump(2).c_str());
  } else {
    std::printf("whole model: params %lld of %lld as planned (%.2f%% removed)\n", (long long)o.planned_model_params,
                (long long)o.model_params,
                100.0 * (1.0 - static_cast<double>(o.planned_model_params) / static_cast<double>(o.model_params)));
  }
  return 0;
}

// A finished run: what was written, the sizes before and after, where the time went.
int report_done(const CompressArgs& a, const compress::Outcome& o) {
  const compress::CompressReport& report = o.report;
  const bool plan_resumed = o.planned.source == compress::PlannedRanks::Source::Resumed;
  const bool towers = o.tower_dense_params > 0;
  auto j = report.to_json();
  j["stage_seconds"]["write"] = o.write_s;
  j["peak_rss_bytes"] = core::peak_rss_bytes();
  j["planned_peak_bytes"] = o.memory->total();
  j["weights"] = a.run.weights;
  j["options"] = o.options_record;
  j["model_size"] = {{"before", format::to_json(o.before)}, {"after", format::to_json(o.after)}};
  j["out_dir"] = o.out.string();
  j["format"] = a.format;
  j["plan"] = plan_json(o.planned.plan);
  j["plan_resumed"] = plan_resumed;
  j["processes"] = dist::size();
  j["communication"] = {{"bytes", dist::traffic().bytes}, {"seconds", dist::traffic().seconds}};  // rank 0's
  if (towers) {
    j["components"] = {{"language", {{"dense_params", o.language_dense_params}, {"params", o.language_params}}},
                       {"towers", {{"dense_params", o.tower_dense_params}, {"params", o.tower_params}}}};
  }
  const bool sparse = compress::sparsifies(compress::parse_method(a.method));
  if (sparse) j["sparse"] = sparse_json(report, a.dtype == "f32" ? 4 : 2);
  if (const auto& cm = o.compressed_modules) {  // as inspect --json reports it
    j["compressed_modules"] = {{"dense_params", cm->dense_params}, {"bytes", cm->bytes},
                               {"bits_per_weight", cm->bits_per_weight()}};
  }
  if (const auto& h = o.head) {  // as inspect --json reports it
    j["lm_head"] = {{"bits", h->bits}, {"group", h->group}, {"params", h->params}, {"bytes", h->bytes}};
  }
  if (a.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  if (!a.m.bpw.empty()) {
    std::printf("compressed %s with %s at --bpw %s: %lld -> %lld weights in compressed modules (the linear modules "
                "of attention and MLP), each module's rank and bits chosen together\n", a.model.c_str(),
                a.method.c_str(), a.m.bpw.c_str(), (long long)report.dense_params, (long long)report.params);
  } else if (a.target == "linear") {
    std::printf("compressed %s with %s at ratio %.2f: %lld -> %lld weights in compressed modules (the linear "
                "modules of attention and MLP, what --ratio counts)\n", a.model.c_str(), a.method.c_str(), a.ratio,
                (long long)report.dense_params, (long long)report.params);
  } else {
    std::printf("compressed %s with %s at ratio %.2f of the whole model's %s (--target %s), ratio %.4f of the "
                "compressed modules: %lld -> %lld weights in them (the linear modules of attention and MLP)\n",
                a.model.c_str(), a.method.c_str(), a.ratio, a.target == "params" ? "parameters" : "weight-file bytes",
                a.target.c_str(), o.options_record.value("ratio", 0.0), (long long)report.dense_params,
                (long long)report.params);
  }
  print_model_size(o.before, o.after);
  if (const auto& cm = o.compressed_modules) {
    std::printf("quantized: the compressed modules store %s for %lld weights, %.4f bits per weight (codes, scales, "
                "zero points and biases)%s\n", core::format_bytes(cm->bytes).c_str(), (long long)cm->dense_params,
                cm->bits_per_weight(),
                !a.m.bpw.empty() ? fmt::format(" of the --bpw {} budget", a.m.bpw).c_str() : "");
  }
  if (const auto& h = o.head) {
    std::printf("quantized LM head: %d-bit groups of %d, %s for %lld weights, %.4f bits per weight\n", h->bits,
                h->group, core::format_bytes(h->bytes).c_str(), (long long)h->params, h->bits_per_weight());
  }
  if (sparse) {
    const auto& sp = j["sparse"];
    if (sp.contains("factor_params")) {
      std::printf("low rank + sparse: %lld factor parameters beside the sparse parts (the modules stored dense as "
                  "B·A + D)\n", (long long)sp["factor_params"].get<std::int64_t>());
    }
    std::printf("sparsity %.4f of the compressed modules (stored dense with zeros); as values + positions (a bitmask, "
                "or indices when fewer bits) they would take %s of their dense %s (%.2f%% fewer bytes)\n",
                sp["sparsity"].get<double>(), core::format_bytes(sp["storage_bytes"].get<std::int64_t>()).c_str(),
                core::format_bytes(sp["dense_bytes"].get<std::int64_t>()).c_str(),
                100.0 * (1.0 - sp["storage_bytes"].get<double>() / sp["dense_bytes"].get<double>()));
  }
  if (towers) {
    const compress::Components c = compress::parse_components(a.components);
    const char* parts = c.vision && c.projector ? "the vision tower and projector"
                        : c.vision              ? "the vision tower"
                                                : "the projector";
    std::printf("of which the language model %lld -> %lld, %s %lld -> %lld\n", (long long)o.language_dense_params,
                (long long)o.language_params, parts, (long long)o.tower_dense_params, (long long)o.tower_params);
  }
  const double sample_s = report.calib_sample_s;
  std::printf("time: total %.1fs = sampling %.1fs + forward %.1fs + covariance %.1fs + output statistics %.1fs + "
              "decompositions %.1fs + write %.1fs\n", report.total_s + sample_s + o.write_s, sample_s,
              report.times.forward, report.times.covariance, report.times.consume, report.times.compress, o.write_s);
  if (report.rank_alloc == compress::RankAlloc::Global) {
    const std::string score = o.options_record.value("alloc_score", "relative");
    if (plan_resumed) {
      std::printf("rank allocation (global, %s): the interrupted run's plan, no pre-pass\n", score.c_str());
    } else {
      std::printf("rank allocation (global, %s): dense pre-pass %.1fs before that\n", score.c_str(), report.prepass_s);
    }
  }
  if (report.times.dense_forward > 0 || report.times.cross > 0) {
    std::printf("error compensation: dense forward %.1fs + cross moments %.1fs (in the total, not in its other parts)\n",
                report.times.dense_forward, report.times.cross);
  }
  std::printf("peak memory: %.1f MiB\nwrote %s\n", core::peak_rss_bytes() / 1048576.0, o.out.string().c_str());
  return 0;
}

// parse -> call -> print: the flow is the library's (compress::run): every option checked before any work,
// the ranks chosen once, nothing of the user's overwritten or discarded.
int run_compress(const CompressArgs& a) {
  apply_run_options(a.run);
  compress::Request r;
  r.model = a.model;
  if (!a.m.bpw.empty() && a.ratio_flag->count() > 0) {
    throw ConfigError(fmt::format("--bpw: --ratio (expected one of them: the budget in bits per weight replaces the "
                                  "ratio, got --bpw {} and --ratio {})", a.m.bpw, a.ratio));
  }
  r.options = to_compress_options(a.m, a.method, a.ratio);
  r.options.stop_after_layers = a.stop_after_layers;
  r.options.components = compress::parse_components(a.components);
  r.options.validate();
  check_options_read(a.m, r.options);
  r.preset = a.m.preset;
  r.target = compress::parse_target(a.target);
  r.batch_auto = a.m.batch == 0;
  r.output.format = a.format;
  if (!a.dtype.empty()) r.output.dtype = parse_storage_dtype(a.dtype);
  r.output.kv_cache = model::parse_kv_cache_mode(a.kv_cache);
  r.output.force = a.force;
  if (!a.out.empty()) r.out = output_dir(a.out);
  r.load = a.run.load();
  if (!a.max_memory.empty()) r.memory_budget = core::parse_bytes(a.max_memory, "--max-memory");
  r.dry_run = a.dry_run;
  r.resume = a.resume;
  // Without calibration data a dry run can only show the uniform plan of the same total.
  if (!a.dry_run || !a.c.data.empty()) {
    r.calibration = to_calib_options(a.c, nullptr);  // seqlen resolved against the model by compress::run
  }
  compress::Observer observe;
  observe.memory = [&](const core::MemoryPlan& plan, const std::string& budget_source) {
    print_memory_plan("compress", plan, budget_source);
  };
  const bool sparse = compress::sparsifies(r.options.method);
  const compress::Method r_method = r.options.method;
  observe.planned = [&, r_method](const compress::PlannedRanks& p) {
    if (sparse) {  // no ranks: every module keeps its shape with --ratio of its weights zero
      if (a.json) return;
      if (r_method == compress::Method::LowRankSparse) {
        std::fprintf(stderr, "lowrank-sparse: every compressed module as B·A + D in the bytes of %.4g of its weights "
                     "zero, the rank chosen per module\n", a.ratio);
      } else {
        std::fprintf(stderr, "sparse: every compressed module with %.4g of its weights zero\n", a.ratio);
      }
      return;
    }
    const bool plain = p.source != compress::PlannedRanks::Source::Resumed && a.m.bpw.empty() &&
                       p.plan.junction == compress::Junction::BlockIdentity;
    print_plan(p.plan, plain ? &p.plain : nullptr, a.json);
  };
  const compress::Outcome o = compress::run(std::move(r), observe);
  if (!dist::is_root()) return 0;  // rank 0 wrote the checkpoint and prints the results
  if (o.dry_run) return report_dry_run(a, o);
  if (o.stopped) return report_stopped(a, o.report, o.progress, *o.memory);
  return report_done(a, o);
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
  sub->add_option("--method", a->method, "plain-svd, asvd-hessian, asvd-l1, asvd-l2, asvd-cov, asvd-rootcov, latentllm; rtn, gptq (dense, "
                                        "quantized: --bits); sparse, wanda, sparsegpt (dense with --ratio of the weights zero); "
                                        "lowrank-sparse (B·A + D in the bytes of sparse at --ratio, stored summed)")
      ->capture_default_str()->group("Method");
  a->ratio_flag = sub->add_option("--ratio", a->ratio, "Fraction of the weights of the compressed modules (the linear modules of "
                                       "attention and MLP; not the embeddings, norms or LM head) removed, in (0, 1)")
      ->capture_default_str()->group("Method");
  sub->add_option("--target", a->target,
                  "What --ratio counts: linear (the compressed linear modules' weights, the paper's ratio), params "
                  "(the whole model's parameters) or bytes (the whole model's weight-file bytes in the output's "
                  "storage type); params and bytes are turned into the linear modules' ratio that removes as much")
      ->check(CLI::IsMember({"linear", "params", "bytes"}))->capture_default_str()->group("Method");
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
                  "Memory budget (e.g. 20G; default: physical memory - 2 GiB, or less when less is available now or a cgroup limits it): the plan of the run is printed at "
                  "start and a run that does not fit is refused before any work")->group("Run");
  sub->add_flag("--json", a->json, "Print the result as JSON")->group("Run");
  return {sub, [a] { return run_compress(*a); }};
}

}  // namespace latentllm::cli
