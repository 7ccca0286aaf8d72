// Compression time of a model (default ../shared/models/opt-tiny at 20 %, 64 C4 windows of 512 tokens)
// split into calibration sampling, layer forwards, covariance accumulation, decompositions (by part:
// local, joint Q-K, joint up-down) and writing the checkpoint, with the forward's and the covariance's
// achieved FLOP rates as fractions of this machine's sgemm and dgemm peaks, measured in this process.
// Writes <out>.json and <out>.md (speed bars of issues 3 and 4).
//
//   compress_time [--shared ../shared] [--model DIR] [--ratio 0.2] [--nsamples 64] [--seqlen L]
//                 [--methods asvd-rootcov,asvd-rootcov/restart,latentllm] [--out bench/results/compress_time]
//                 [--stop-after-layers N] [--project-layers M] [--threads T] [--covariance f64|f32]
//                 [--preset none|default|paper] [--rank-alloc uniform|global] [--calib c4|scienceqa]
// --calib scienceqa (a LLaVA checkpoint; --calib-data a ScienceQA folder): the multimodal calibration of
// compress --calib scienceqa, --nsamples train problems each one sequence of its own length with its
// image's features in place; "sampling" then includes the vision tower and projector.
// A method "<m>/restart" runs m with every calibration pass restarting at the layer input (baseline);
// "<m>/input-side" fits every module from its input covariance (CompressOptions::output_side off).
// --stop-after-layers N (bench/run_scale.sh): the first N layers only, no checkpoint written; the
// whole model's time is projected from them (per-layer stages × layers, plus sampling and embedding).
// --project-layers M projects to M layers instead of the checkpoint's (a real shape truncated to a few
// layers with latentllm-synth --layers, so that its weights fit in memory while lazy loading is not in
// compress). L defaults to min(2048, max_position_embeddings).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench_common.hpp"
#include "blas_counters.hpp"
#include "latentllm/calib.hpp"
#include "latentllm/checkpoint.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/files.hpp"
#include "latentllm/image.hpp"
#include "latentllm/log.hpp"
#include "latentllm/multimodal.hpp"
#include "latentllm/resources.hpp"
#include "latentllm/scienceqa.hpp"

namespace {

using namespace latentllm;
using bench::Clock;
using bench::seconds_since;

struct MethodTimes {
  std::string method;
  double sample_s = 0, write_s = 0;
  compress::CompressReport rep;
  model::ForwardProfile profile;  // the calibration passes' forward, by part
  std::map<std::string, bench::BlasSnapshot> part_blas;  // BLAS FLOPs / BLAS and LAPACK seconds per part
  bool covariance_f32 = false;  // as run (the preset's unless --covariance)
  std::int64_t calib_tokens = 0;  // Σ over the calibration sequences
  int calib_images = 0;           // --calib scienceqa: sequences with an image
};

// spec: a method, "<method>/restart" for the same with every calibration pass restarting at the layer
// input (PipelineOptions::resume_passes off: the pipeline before the passes resumed), or
// "<method>/input-side" with every module fitted from its input covariance (no output side).
struct RunArgs {
  double ratio = 0.2;
  int nsamples = 64, seqlen = 0, stop_after_layers = 0;
  std::string covariance = "auto";  // auto: the preset's; f64 or f32
  std::string preset = "none";  // none (CompressOptions{}: uniform ranks, every joint part), default, paper
  std::string rank_alloc;       // empty: the preset's; uniform or global
  std::string calib = "c4";     // c4 (windows of seqlen) or scienceqa (multimodal, one sequence a problem)
};

MethodTimes run_method(const std::string& model_dir, const std::string& c4, const std::string& spec, const RunArgs& a) {
  MethodTimes t;
  t.method = spec;
  const auto slash = spec.find('/');
  const std::string method = spec.substr(0, slash);
  const std::string variant = slash == std::string::npos ? "" : spec.substr(slash + 1);
  if (!variant.empty() && variant != "restart" && variant != "input-side") {
    throw std::runtime_error("unknown method variant (expected restart or input-side, got " + variant + ")");
  }
  const bool restart = variant == "restart";
  auto m = model::Model::load(model_dir);
  const auto tok = io::load_tokenizer(model_dir);
  calib::CalibOptions co;
  co.data = c4;
  co.nsamples = a.nsamples;
  co.seqlen = a.seqlen > 0 ? a.seqlen : static_cast<int>(std::min<std::int64_t>(2048, m->config().max_position_embeddings));
  auto t0 = Clock::now();
  std::vector<std::int32_t> ids;
  std::optional<eval::scienceqa::CalibrationSet> mm;  // as compress --calib scienceqa builds it
  if (a.calib == "scienceqa") {
    model::LoadOptions lo;
    lo.lazy = true;
    const auto llava = model::LlavaModel::load(model_dir, lo);
    mm = eval::scienceqa::calibration_set(
        llava, *tok, image::load_processor_config(std::filesystem::path(model_dir) / "preprocessor_config.json"), c4,
        "train", a.nsamples, co.seed);
    ids = mm->ids;
    co.seqlen = *std::max_element(mm->lengths.begin(), mm->lengths.end());
  } else {
    ids = calib::sample_calibration(*tok, co);
  }
  t.sample_s = seconds_since(t0);
  compress::CompressOptions opt;
  if (a.preset != "none") opt = compress::preset_options(compress::parse_preset(a.preset), compress::parse_method(method), a.ratio);
  opt.method = compress::parse_method(method);
  opt.ratio = a.ratio;
  if (!a.rank_alloc.empty()) opt.rank_alloc = compress::parse_rank_alloc(a.rank_alloc);
  opt.stop_after_layers = a.stop_after_layers;
  if (a.covariance != "auto") opt.pipeline.covariance_f32 = a.covariance == "f32";
  t.covariance_f32 = opt.pipeline.covariance_f32;
  bench::BlasSnapshot at_begin;
  opt.part_observer = [&](std::string_view part, bool begin) {
    // The forward profile covers the compression's passes only, not the pre-pass's dense forwards.
    if (part == "pre-pass" && !begin) model::reset_forward_profile();
    if (begin) at_begin = bench::BlasSnapshot::now();
    else t.part_blas[std::string(part)] += bench::BlasSnapshot::now() - at_begin;
  };
  opt.pipeline.resume_passes = !restart;
  if (mm) {
    opt.pipeline.lengths = mm->lengths;
    opt.pipeline.input_embeddings = &mm->embeddings;
    t.calib_tokens = static_cast<std::int64_t>(mm->ids.size());
    t.calib_images = mm->images;
  } else {
    t.calib_tokens = static_cast<std::int64_t>(ids.size());
  }
  if (variant == "input-side") opt.output_side = false;
  model::reset_forward_profile();
  model::set_profiling(true);
  t.rep = compress::compress_model(*m, ids, co.seqlen, opt);
  model::set_profiling(false);
  t.profile = model::forward_profile();
  if (t.rep.layers_done < t.rep.layers_total) return t;  // a partly compressed model: nothing to write
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("latentllm-bench-{}", method);
  checkpoint::SaveOptions so;
  so.overwrite = true;
  t0 = Clock::now();
  checkpoint::save(*m, dir, so);
  t.write_s = seconds_since(t0);
  std::filesystem::remove_all(dir);
  return t;
}

std::string pct(double x) { return fmt::format("{:.0f} %", 100 * x); }

}  // namespace

int main(int argc, char** argv) try {
  latentllm::bench::check_args(argc, argv, {"--shared", "--model", "--calib-data", "--ratio", "--nsamples", "--seqlen",
                                            "--stop-after-layers", "--covariance", "--preset", "--rank-alloc",
                                            "--threads", "--project-layers", "--methods", "--out", "--calib"},
                               "bench/compress_time.cpp");
  latentllm::core::reuse_large_allocations();  // as the CLI does (latentllm/resources.hpp)
  using bench::arg;
  const std::string shared = arg(argc, argv, "--shared", "../shared");
  const std::string model_dir = arg(argc, argv, "--model", shared + "/models/opt-tiny");
  const std::string c4 = arg(argc, argv, "--calib-data", shared + "/data/c4/c4-train.00000-of-01024.first1000.jsonl");
  RunArgs ra;
  ra.ratio = std::stod(arg(argc, argv, "--ratio", "0.2"));
  ra.nsamples = std::stoi(arg(argc, argv, "--nsamples", "64"));
  ra.seqlen = std::stoi(arg(argc, argv, "--seqlen", "0"));
  ra.stop_after_layers = std::stoi(arg(argc, argv, "--stop-after-layers", "0"));
  ra.covariance = arg(argc, argv, "--covariance", "auto");
  ra.preset = arg(argc, argv, "--preset", "none");
  ra.rank_alloc = arg(argc, argv, "--rank-alloc", "");
  ra.calib = arg(argc, argv, "--calib", "c4");
  if (ra.calib != "c4" && ra.calib != "scienceqa") throw std::runtime_error("--calib (expected c4 or scienceqa, got " + ra.calib + ")");
  core::set_num_threads(std::stoi(arg(argc, argv, "--threads", "0")));
  const int project_layers = std::stoi(arg(argc, argv, "--project-layers", "0"));
  const double ratio = ra.ratio;
  const int nsamples = ra.nsamples;
  const std::string methods = arg(argc, argv, "--methods", "asvd-rootcov,asvd-rootcov/restart,latentllm");
  const std::string out = arg(argc, argv, "--out", "bench/results/compress_time");
  set_log_callback([](LogLevel, std::string_view) {});

  const double load_before = bench::load_average();
  nlohmann::json peak_detail;
  const double speak = bench::sgemm_peak_gflops(peak_detail);
  const double dpeak = bench::dgemm_peak_gflops();
  std::fprintf(stderr, "sgemm peak %.1f GFLOP/s, dgemm peak %.1f GFLOP/s\n", speak, dpeak);

  nlohmann::json runs = nlohmann::json::array();
  std::string md = fmt::format(
      "# Compression time: {} at {:.0f} %, {} {}\n\nsgemm peak {:.1f} GFLOP/s, dgemm peak {:.1f} GFLOP/s "
      "(OpenBLAS, measured in the same process). Load average before: {:.2f}.\n\n"
      "| method | stage | seconds | share | GFLOP/s | fraction of peak | time in BLAS | time in LAPACK |\n"
      "|---|---|---:|---:|---:|---:|---:|---:|\n",
      std::filesystem::path(model_dir).filename().string(), 100 * ratio, nsamples,
      ra.calib == "scienceqa" ? "ScienceQA train problems (multimodal, one sequence each)" : "C4 windows", speak, dpeak,
      load_before);
  std::map<std::string, double> forward_s;  // by method spec
  std::map<std::string, nlohmann::json> by_spec;  // each run's JSON, by method spec
  std::stringstream list(methods);
  for (std::string method; std::getline(list, method, ',');) {
    std::fprintf(stderr, "compressing with %s...\n", method.c_str());
    const auto t = run_method(model_dir, c4, method, ra);
    const auto& pt = t.rep.times;
    const double total = t.sample_s + t.rep.total_s + t.write_s;
    forward_s[method] = pt.forward;
    const double gemm_flops = pt.forward_flops + pt.attention_flops;
    const double fwd_rate = gemm_flops / pt.forward / 1e9, cov_rate = pt.covariance_flops / pt.covariance / 1e9;
    const double lin_rate = pt.forward_flops / pt.forward / 1e9;
    const model::ForwardProfile& fp = t.profile;
    auto row = [&](const std::string& stage, double s, double rate, double peak, const bench::BlasSnapshot* b = nullptr) {
      md += fmt::format("| {} | {} | {:.2f} | {} | {} | {} | {} | {} |\n", method, stage, s, pct(s / total),
                        rate > 0 ? fmt::format("{:.1f}", rate) : "", rate > 0 ? pct(rate / peak) : "",
                        b ? pct(b->blas_s / s) : "", b ? pct(b->lapack_s / s) : "");
    };
    row(ra.calib == "scienceqa" ? fmt::format("calibration sampling ({} prompts, {} tokens, {} images through the vision "
                                              "tower and projector)", nsamples, t.calib_tokens, t.calib_images)
                                : "calibration sampling (tokenize C4)",
        t.sample_s, 0, 1);
    row("layer forwards (linear + attention GEMM FLOPs / wall, vs sgemm)", pt.forward, fwd_rate, speak);
    row("&nbsp;&nbsp;counting the linear modules' FLOPs only", pt.forward, lin_rate, speak);
    row("&nbsp;&nbsp;of which linear modules (sgemm)", fp.linear_s, fp.linear_flops / fp.linear_s / 1e9, speak);
    row("&nbsp;&nbsp;of which attention (Q·Kᵀ, softmax, ·V)", fp.attention_s,
        fp.attention_flops / fp.attention_s / 1e9, speak);
    row("&nbsp;&nbsp;of which norms, activations, RoPE, residual adds", fp.other_s, 0, 1);
    row("&nbsp;&nbsp;of which batching and copies", pt.forward - fp.linear_s - fp.attention_s - fp.other_s, 0, 1);
    if (t.covariance_f32) row("covariance XXᵀ (float products: ssyrk, vs sgemm)", pt.covariance, cov_rate, speak);
    else row("covariance XXᵀ (dsyrk, vs dgemm)", pt.covariance, cov_rate, dpeak);
    const double out_rate = pt.consume > 0 ? pt.consume_flops / pt.consume / 1e9 : 0.0;
    if (pt.consume > 0) {
      row("output statistics of wide modules (y = W·x by sgemm, Σ y·yᵀ by ssyrk; vs sgemm)", pt.consume, out_rate,
          speak);
    }
    if (t.rep.prepass_s > 0) {
      row(fmt::format("rank allocation pre-pass (all {} layers of the checkpoint)", t.rep.layers_total), t.rep.prepass_s,
          0, 1);
    }
    nlohmann::json parts = nlohmann::json::object();
    for (const auto& [part, s] : t.rep.part_seconds) {
      const bench::BlasSnapshot b = t.part_blas.count(part) ? t.part_blas.at(part) : bench::BlasSnapshot{};
      const double rate = (b.flops_d + b.flops_s) / s / 1e9;  // all of a part's BLAS FLOPs over its wall time
      // Against the peak of its own mix: each double FLOP at the dgemm peak, each float one at sgemm's.
      const double mix_peak = b.flops_d + b.flops_s > 0 ? (b.flops_d + b.flops_s) / (b.flops_d / dpeak + b.flops_s / speak) : dpeak;
      row(fmt::format("decompositions: {} (BLAS FLOPs / wall, vs the peak of its mix: {:.0f} % float)", part,
                      b.flops_d + b.flops_s > 0 ? 100.0 * b.flops_s / (b.flops_d + b.flops_s) : 0.0),
          s, rate, mix_peak, &b);
      parts[part] = {{"seconds", s}, {"blas_flops_double", b.flops_d}, {"blas_flops_single", b.flops_s},
                     {"blas_seconds", b.blas_s}, {"lapack_seconds", b.lapack_s}, {"gflops", rate},
                     {"fraction_of_dgemm_peak", rate / dpeak}, {"fraction_of_sgemm_peak", rate / speak},
                     {"fraction_of_mix_peak", rate / mix_peak},
                     {"blas_gflops", b.blas_s > 0 ? (b.flops_d + b.flops_s) / b.blas_s / 1e9 : 0.0}};
    }
    const int ran = std::max(1, t.rep.layers_done - t.rep.layers_resumed);
    const int all_layers = project_layers > 0 ? project_layers : t.rep.layers_total;
    // The pre-pass runs over every layer of the checkpoint before the first is compressed.
    const double layers_s = t.rep.total_s - t.rep.prepass_s;
    const double projected = t.sample_s + (t.rep.prepass_s / std::max(1, t.rep.layers_total) + layers_s / ran) * all_layers;
    if (t.rep.layers_done < all_layers) {
      row(fmt::format("**total of {} of {} layers** (no checkpoint written)", t.rep.layers_done, all_layers), total, 0,
          1);
      md += fmt::format("| {} | **projected for all {} layers** (sampling + {} × (the layers' mean + the pre-pass's "
                        "per layer)) | {:.0f} | | | | | |\n", method, all_layers, all_layers, projected);
    } else {
      row("writing the checkpoint (f16)", t.write_s, 0, 1);
      row("**total**", total, 0, 1);
    }
    nlohmann::json run = {{"method", method}, {"calib", ra.calib}, {"calib_tokens", t.calib_tokens},
                    {"calib_images", t.calib_images},
                    {"seconds", {{"sampling", t.sample_s}, {"forward", pt.forward}, {"covariance", pt.covariance},
                                 {"output_statistics", pt.consume}, {"decompositions", pt.compress}, {"decompositions_by_part", t.rep.part_seconds},
                                 {"prepass", t.rep.prepass_s}, {"write", t.write_s}, {"total", total}}},
                    {"preset", ra.preset}, {"covariance", t.covariance_f32 ? "f32" : "f64"}, {"rank_alloc", compress::rank_alloc_name(t.rep.rank_alloc)}, {"joint", {{"qk", t.rep.qk_losses.size() > 0}, {"ud", t.rep.ud_losses.size() > 0}}},
                    {"forward_gflops", fwd_rate}, {"forward_fraction_of_sgemm_peak", fwd_rate / speak},
                    {"forward_flops", {{"linear", pt.forward_flops}, {"attention", pt.attention_flops}}},
                    {"forward_linear_only_fraction_of_sgemm_peak", lin_rate / speak},
                    {"forward_profile_seconds", {{"linear", fp.linear_s}, {"attention", fp.attention_s},
                                                 {"other", fp.other_s}}},
                    {"covariance_gflops", cov_rate}, {"covariance_fraction_of_dgemm_peak", cov_rate / dpeak},
                    {"covariance_fraction_of_sgemm_peak", cov_rate / speak},
                    {"output_statistics_gflops", out_rate}, {"output_statistics_fraction_of_sgemm_peak", out_rate / speak},
                    {"decomposition_parts", parts},
                    {"layers", t.rep.to_json().at("layers")}, {"projected_layers", all_layers},
                    {"projected_seconds_all_layers", projected},
                    {"peak_rss_bytes", core::peak_rss_bytes()},
                    {"attention_map_loss", t.rep.to_json().at("attention_map_loss")},
                    {"mlp_output_loss", t.rep.to_json().at("mlp_output_loss")}};
    by_spec[method] = run;
    runs.push_back(std::move(run));
  }
  for (const auto& [spec, s] : forward_s) {
    const std::string base = spec.ends_with("/restart") ? spec.substr(0, spec.size() - 8) : "";
    if (base.empty() || !forward_s.count(base)) continue;
    md += fmt::format("\n{}: the calibration forwards take {:.2f} s with resumed passes against {:.2f} s restarting "
                      "every pass at the layer input, {:.2f}× faster (same process, bit-identical results).\n",
                      base, forward_s.at(base), s, s / forward_s.at(base));
  }
  for (const auto& [spec, r] : by_spec) {
    const std::string base = spec.ends_with("/input-side") ? spec.substr(0, spec.size() - 11) : "";
    if (base.empty() || !by_spec.count(base)) continue;
    const nlohmann::json& b = by_spec.at(base);
    auto sec = [](const nlohmann::json& j, const char* k) { return j.at("stage_seconds").value(k, 0.0); };
    const double out_layer = sec(b, "covariance") + sec(b, "output_statistics") + sec(b, "decompositions");
    const double in_layer = sec(r, "covariance") + sec(r, "output_statistics") + sec(r, "decompositions");
    md += fmt::format("\n{}: covariance + output statistics + decompositions {:.1f} s with the wide modules fitted from "
                      "their outputs against {:.1f} s from their input covariances ({:.2f}x); projected whole model "
                      "{:.0f} s against {:.0f} s ({:.2f}x; same process).\n", base, out_layer, in_layer,
                      in_layer / out_layer, b.at("projected_seconds_all_layers").get<double>(),
                      r.at("projected_seconds_all_layers").get<double>(),
                      r.at("projected_seconds_all_layers").get<double>() / b.at("projected_seconds_all_layers").get<double>());
  }
  md += "\nForward: the GEMM FLOPs the calibration forwards execute (linear modules, and attention's Q·Kᵀ and ·V "
        "over the block-causal region) over their wall time (norms, activations, batching copies included; the "
        "statistics taps excluded), against the float sgemm peak; the next row counts the linear modules' FLOPs "
        "only, and the indented rows split the forward's time (model::ForwardProfile). A method marked /restart runs "
        "every calibration pass from the layer's input (PipelineOptions::resume_passes off), as the pipeline did "
        "before passes resumed where the previous stage stopped. Covariance: the "
        "FLOPs of the triangle (n·w·(w+1)), against the dgemm peak in double (dsyrk) or the sgemm peak with "
        "--covariance f32 (ssyrk per 1024 tokens, summed in double). Output statistics: the wide root-covariance modules "
        "(down_proj, fc2) fitted from their outputs (src/compress/math/output_side.hpp): the recomputed y = W·x and the "
        "triangle of Σ y·yᵀ, in float products summed in double, against the sgemm peak. Decompositions are LAPACK "
        "eigen/SVDs and, for joint up-down, GEMM-bound alternating fits over all calibration tokens (in float with "
        "--ud-precision f32, the default). Their rate is every "
        "BLAS FLOP the part issued (GEMM, SYRK, TRSM, GEMV; counted by link-time wrappers, bench/blas_counters.hpp) over "
        "the part's wall time, against the peak of its mix (each double FLOP at the dgemm peak, each float one at "
        "sgemm's); the two last columns say where that time goes: inside BLAS (summed over threads: concurrent "
        "single-threaded calls can exceed 100 %), inside LAPACK (dsyevd, "
        "dgesdd, dgeqp3, whose internal FLOPs are not counted), and the rest is Eigen element-wise work and "
        "bookkeeping.\n";
  const nlohmann::json j = {{"model", model_dir}, {"ratio", ratio}, {"nsamples", nsamples}, {"seqlen", ra.seqlen},
                            {"threads", core::num_threads()}, {"covariance", ra.covariance},
                            {"sgemm_peak_gflops", speak}, {"sgemm_square_gflops", peak_detail},
                            {"dgemm_peak_gflops", dpeak}, {"load_average_before", load_before},
                            {"load_average_after", bench::load_average()}, {"peak_rss_bytes", core::peak_rss_bytes()},
                            {"runs", runs}};
  core::write_text_atomic(out + ".json", j.dump(2) + "\n");
  core::write_text_atomic(out + ".md", md);
  std::printf("%s", md.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "compress_time: %s\n", e.what());
  return 1;
}
