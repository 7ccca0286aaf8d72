// `latentllm compress`: calibrate, compress with a method at a ratio, write a latent checkpoint.
#include <chrono>
#include <cstdio>

#include "commands.hpp"
#include "latentllm/resources.hpp"
#include "latentllm/checkpoint.hpp"
#include "latentllm/compressor.hpp"
#include "latentllm/error.hpp"
#include "latentllm/log.hpp"

namespace latentllm::cli {
namespace {

struct CompressArgs {
  std::string model, out, method = "latentllm", junction = "block-identity", dtype = "f16";
  std::string calib = "c4", calib_data, sampling = "random", joint = "qk,ud";
  double ratio = 0.2, lambda_rel = compress::LocalOptions{}.lambda_rel, alpha = 0.5;
  int nsamples = 64, seqlen = 0, qk_iters = 8, ud_iters = 4, rope_window = 0, threads = 0, batch = 8;
  std::uint64_t seed = 0;
  bool dry_run = false, json = false, force = false, no_intra_layer = false;
};

compress::CompressOptions to_options(const CompressArgs& a) {
  compress::CompressOptions o;
  o.method = a.method;
  o.ratio = a.ratio;
  o.local.junction = compress::parse_junction(a.junction);
  o.local.lambda_rel = a.lambda_rel;
  o.local.alpha = a.alpha;
  o.joint_qk = o.joint_vo = o.joint_ud = false;
  std::string rest = a.joint;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const std::string part = rest.substr(0, comma);
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
    if (part == "qk") o.joint_qk = true;
    else if (part == "vo") o.joint_vo = true;
    else if (part == "ud") o.joint_ud = true;
    else if (part == "none" || part.empty()) continue;
    else throw ConfigError(fmt::format("--joint: unknown part (expected qk, vo, ud or none, got {})", part));
  }
  if (o.joint_vo) throw ConfigError("--joint vo: joint V-O is not wired into the pipeline yet (see docs/JOINT.md)");
  o.qk_iters = a.qk_iters;
  o.ud_iters = a.ud_iters;
  o.rope_window = a.rope_window;
  o.pipeline.sequential_within_layer = !a.no_intra_layer;
  o.pipeline.batch_windows = a.batch;
  return o;
}

void print_plan(const compress::RankPlan& plan, const compress::RankPlan& plain, bool json) {
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
  std::printf("without block identity: params %lld (%.2f%% removed), MACs@%lld %lld\n", (long long)plain.params(),
              100.0 * plain.achieved_ratio(), (long long)plain.n_tok, (long long)plain.macs());
}

nlohmann::json plan_json(const compress::RankPlan& p) {
  nlohmann::json mods = nlohmann::json::array();
  for (const auto& m : p.modules)
    mods.push_back({{"name", m.name}, {"out", m.out}, {"in", m.in}, {"rank", m.rank}, {"params", m.params},
                    {"dense_params", m.dense_params}, {"macs", m.macs}, {"dense_macs", m.dense_macs}});
  return {{"ratio", p.ratio}, {"junction", compress::junction_name(p.junction)}, {"n_tok", p.n_tok},
          {"params", p.params()}, {"dense_params", p.dense_params()}, {"macs", p.macs()},
          {"dense_macs", p.dense_macs()}, {"flops", 2 * p.macs()}, {"dense_flops", 2 * p.dense_macs()},
          {"achieved_ratio", p.achieved_ratio()}, {"modules", mods}};
}

int run_compress(const CompressArgs& a) {
  if (a.threads < 0) throw ConfigError(fmt::format("--threads (expected >= 0, got {})", a.threads));
  model::set_num_threads(a.threads);
  auto opt = to_options(a);
  auto model = model::Model::load(a.model);
  const auto plan = compress::plan_model(*model, opt);
  auto plain_opt = opt;
  plain_opt.local.junction = compress::Junction::Identity;
  const auto plain = compress::plan_model(*model, plain_opt);
  print_plan(plan, plain, a.json);
  if (a.dry_run) {
    if (a.json) std::printf("%s\n", nlohmann::json{{"plan", plan_json(plan)}, {"plan_without_block_identity", plan_json(plain)}}.dump(2).c_str());
    return 0;
  }
  if (a.out.empty()) throw ConfigError("--out is required (or use --dry-run)");
  if (a.calib_data.empty()) throw ConfigError("--calib-data is required: the calibration text (c4 JSON lines or a text file)");
  if (!a.force && std::filesystem::exists(a.out)) {
    throw IoError(fmt::format("{}: output directory exists (use --force to replace it)", a.out));
  }
  calib::CalibOptions co;
  co.source = a.calib;
  co.data = a.calib_data;
  co.nsamples = a.nsamples;
  co.seqlen = a.seqlen > 0 ? a.seqlen : static_cast<int>(std::min<std::int64_t>(2048, model->config().max_position_embeddings));
  co.seed = a.seed;
  if (a.sampling == "random") co.sampling = calib::Sampling::Random;
  else if (a.sampling == "contiguous") co.sampling = calib::Sampling::Contiguous;
  else throw ConfigError(fmt::format("--calib-sampling (expected random or contiguous, got {})", a.sampling));

  const auto t0 = std::chrono::steady_clock::now();
  const auto tok = io::load_tokenizer(a.model);
  const auto ids = calib::sample_calibration(*tok, co);
  const double sample_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log_info("calibration: {} windows of {} tokens ({}, seed {}, {:.1f}s)", co.nsamples, co.seqlen, a.calib, co.seed, sample_s);

  auto report = compress::compress_model(*model, ids, co.seqlen, opt);
  report.calib_sample_s = sample_s;

  checkpoint::SaveOptions so;
  so.dtype = a.dtype == "f32" ? DType::F32 : a.dtype == "f16" ? DType::F16 : a.dtype == "bf16" ? DType::BF16
             : throw ConfigError(fmt::format("--dtype (expected f16, bf16 or f32, got {})", a.dtype));
  so.overwrite = a.force;
  so.info = {{"method", a.method}, {"ratio", a.ratio}, {"junction", a.junction}, {"lambda_rel", a.lambda_rel},
             {"alpha", a.alpha}, {"joint", a.method == "latentllm" ? a.joint : "none"},
             {"qk_iters", a.qk_iters}, {"ud_iters", a.ud_iters}, {"rope_window", a.rope_window},
             {"calibration", {{"source", a.calib}, {"data", std::filesystem::path(a.calib_data).filename().string()},
                              {"nsamples", co.nsamples}, {"seqlen", co.seqlen}, {"seed", co.seed}, {"sampling", a.sampling}}},
             {"notes", report.notes}};
  const auto tw = std::chrono::steady_clock::now();
  checkpoint::save(*model, a.out, so);
  const double write_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - tw).count();

  auto j = report.to_json();
  j["seconds"]["write"] = write_s;
  j["peak_rss_bytes"] = core::peak_rss_bytes();
  j["out"] = a.out;
  j["plan"] = plan_json(plan);
  if (a.json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("compressed %s with %s at ratio %.2f: %lld -> %lld weights in compressed modules\n", a.model.c_str(),
                a.method.c_str(), a.ratio, (long long)report.dense_params, (long long)report.params);
    std::printf("time: total %.1fs = sampling %.1fs + forward %.1fs + covariance %.1fs + decompositions %.1fs + write %.1fs\n",
                report.total_s + sample_s + write_s, sample_s, report.times.forward, report.times.covariance,
                report.times.compress, write_s);
    std::printf("peak memory: %.1f MiB\nwrote %s\n", core::peak_rss_bytes() / 1048576.0, a.out.c_str());
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
  sub->add_option("--junction", a->junction, "Junction matrix: block-identity, identity, s-inv, sqrt-s-inv")
      ->capture_default_str()->group("Method");
  sub->add_option("--lambda", a->lambda_rel, "Damping relative to the mean diagonal of XXᵀ")->capture_default_str()->group("Method");
  sub->add_option("--alpha", a->alpha, "Exponent of the diagonal l1 pre-conditioner")->capture_default_str()->group("Method");
  sub->add_option("--joint", a->joint, "Joint parts of --method latentllm: any of qk,vo,ud, or none")->capture_default_str()->group("Method");
  sub->add_option("--qk-iters", a->qk_iters, "Joint Q-K alternating updates")->capture_default_str()->group("Method");
  sub->add_option("--ud-iters", a->ud_iters, "Joint up-down iterations")->capture_default_str()->group("Method");
  sub->add_option("--rope-window", a->rope_window, "RoPE-aware joint Q-K over offsets 0..w (0 = plain)")->capture_default_str()->group("Method");
  sub->add_flag("--dry-run", a->dry_run, "Print the rank plan (ranks, parameters, FLOPs/MACs at 128 tokens) and exit")->group("Method");
  sub->add_option("--calib", a->calib, "Calibration source: c4 (JSON lines) or text")->capture_default_str()->group("Calibration");
  sub->add_option("--calib-data", a->calib_data, "Calibration file")->group("Calibration");
  sub->add_option("--nsamples", a->nsamples, "Calibration windows")->capture_default_str()->group("Calibration");
  sub->add_option("--seqlen", a->seqlen, "Tokens per window (0 = min(2048, max positions))")->capture_default_str()->group("Calibration");
  sub->add_option("--seed", a->seed, "Sampling seed")->capture_default_str()->group("Calibration");
  sub->add_option("--calib-sampling", a->sampling, "random (GPTQ) or contiguous")->capture_default_str()->group("Calibration");
  sub->add_flag("--no-intra-layer", a->no_intra_layer, "Gather all of a layer's statistics on the dense layer (SparseGPT) instead of re-running it after each stage")->group("Calibration");
  sub->add_option("--batch", a->batch, "Windows per forward call")->capture_default_str()->group("Run");
  sub->add_option("--threads", a->threads, "BLAS threads (0 = all cores)")->capture_default_str()->group("Run");
  sub->add_flag("--json", a->json, "Print the result as JSON")->group("Run");
  return {sub, [a] { return run_compress(*a); }};
}

}  // namespace latentllm::cli
