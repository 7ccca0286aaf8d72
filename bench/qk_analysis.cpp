// Issue 13: why joint Q-K's attention-map loss drop does not reach perplexity. Only q_proj and k_proj
// are compressed (every other module keeps its full rank, which the block-identity factorization
// reproduces exactly), locally (root covariance, each alone) or jointly (Algorithm 1, plain or
// RoPE-aware over offsets 0..w), at the same ranks; the perplexity then moves only through the
// attention logits. The map losses are the solver's (unrotated, all token pairs); the perplexity is
// the model's (rotated, causal, softmax). Results: bench/results/qk_analysis/<name>.{json,md}.
//   qk_analysis --model DIR --name N --dataset tinystories-valid|wikitext2 --data FILE [--ratios 0.2,0.4]
//               [--rope-windows 0,8] [--nsamples 64] [--seqlen 512]
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "bench_common.hpp"
#include "latentllm/calib.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/dataset.hpp"
#include "latentllm/eval.hpp"
#include "latentllm/log.hpp"
#include "latentllm/model.hpp"
#include "latentllm/tokenizer.hpp"

using namespace latentllm;

namespace {

std::vector<double> list(const std::string& s) {
  std::vector<double> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stod(item));
  return out;
}

struct Variant {
  std::string name;
  bool joint = false;
  int rope_window = 0;
};

// The uniform plan at `ratio` for q_proj and k_proj; every other module at full rank (exact).
compress::RankPlan qk_only_plan(const model::Model& m, const compress::CompressOptions& opt) {
  compress::RankPlan plan = compress::plan_model(m, opt);
  for (auto& p : plan.modules) {
    if (p.name.ends_with(".q_proj") || p.name.ends_with(".k_proj")) continue;
    p.rank = std::min(p.out, p.in);
  }
  return plan;
}

}  // namespace

int main(int argc, char** argv) try {
  latentllm::bench::check_args(argc, argv, {"--shared", "--model", "--name", "--dataset", "--data", "--ratios",
                                            "--rope-windows", "--out", "--nsamples", "--seqlen"},
                               "bench/qk_analysis.cpp");
  using bench::arg;
  set_log_callback([](LogLevel l, std::string_view msg) {
    if (l >= LogLevel::Warn) std::fprintf(stderr, "%.*s\n", static_cast<int>(msg.size()), msg.data());
  });
  const std::string shared = arg(argc, argv, "--shared", "../shared");
  const std::filesystem::path dir = arg(argc, argv, "--model", shared + "/models/TinyStories-656K");
  const std::string name = arg(argc, argv, "--name", dir.filename().string());
  const io::Dataset dataset = io::parse_dataset(arg(argc, argv, "--dataset", "tinystories-valid"));
  const std::string data = arg(argc, argv, "--data", shared + "/data/tinystories/TinyStories-valid.stories0001-0232.clean.txt");
  const std::vector<double> ratios = list(arg(argc, argv, "--ratios", "0.2,0.4"));
  const std::vector<double> windows = list(arg(argc, argv, "--rope-windows", "0,8"));
  const std::string out = arg(argc, argv, "--out", "bench/results/qk_analysis/" + name);

  auto dense = model::Model::load(dir);
  const auto tok = io::load_tokenizer(dir);
  calib::CalibOptions co;
  co.data = shared + "/data/c4/c4-train.00000-of-01024.first1000.jsonl";
  co.nsamples = std::stoi(arg(argc, argv, "--nsamples", "64"));
  co.seqlen = std::stoi(arg(argc, argv, "--seqlen", "512"));
  const auto calib_ids = calib::sample_calibration(*tok, co);
  const int eval_len = eval::default_seqlen(dense->config());
  const auto eval_ids = eval::eval_ids(*tok, dataset, data, eval_len);
  auto nll = [&](model::Model& m) { return eval::perplexity_ids(m, eval_ids, eval_len, 0, 0, data).mean_nll; };
  const double dense_nll = nll(*dense);
  const bool rope = dense->attention().rope;

  std::vector<Variant> variants = {{"local", false, 0}};
  for (double w : windows) {
    if (w > 0 && !rope) continue;
    variants.push_back({w > 0 ? fmt::format("joint, RoPE window {}", w) : "joint", true, static_cast<int>(w)});
  }
  nlohmann::json rows = nlohmann::json::array();
  std::string md = fmt::format(
      "# Joint Q-K alone: {} ({})\n\nOnly q_proj and k_proj compressed (uniform ranks at the ratio, block "
      "identity; every other module at full rank, exact), calibration {} random C4 windows of {} (seed 0), "
      "perplexity on `{}` at seqlen {}. Map loss: the solver's Σ_i ‖P(W_qᵢᵀW_k − M̂ᵢ)P‖² summed over layers "
      "(unrotated, every token pair; the local column is the same loss at the local solution); `bench/qk_analysis`.\n\n"
      "Dense perplexity {:.4f}.\n\n| ratio | variant | perplexity | Δ NLL vs dense | map loss |\n"
      "|---:|---|---:|---:|---:|\n",
      name, rope ? "RoPE" : "no RoPE", co.nsamples, co.seqlen, io::dataset_name(dataset), eval_len,
      std::exp(dense_nll));
  for (double ratio : ratios) {
    for (const Variant& v : variants) {
      auto m = model::Model::load(dir);
      compress::CompressOptions opt;
      opt.ratio = ratio;
      opt.joint = {.qk = v.joint, .vo = false, .ud = false};
      opt.rope_window = v.rope_window;
      opt.diagnostics = true;  // the local solution's map loss beside the joint one
      const compress::RankPlan plan = qk_only_plan(*m, opt);
      const auto rep = compress::compress_model(*m, calib_ids, co.seqlen, opt, &plan);
      double joint_loss = 0, local_loss = 0;
      for (const auto& l : rep.qk_losses) {
        joint_loss += l.joint;
        local_loss += l.local;
      }
      const double x = nll(*m);
      nlohmann::json row = {{"ratio", ratio}, {"variant", v.name}, {"nll", x}, {"ppl", std::exp(x)},
                            {"delta_nll", x - dense_nll}, {"qk_losses", nlohmann::json::array()}};
      for (const auto& l : rep.qk_losses) row["qk_losses"].push_back(l.to_json());
      rows.push_back(row);
      const std::string loss = v.joint ? fmt::format("{:.4g} (local {:.4g})", joint_loss, local_loss) : "—";
      md += fmt::format("| {:.1f} | {} | {:.4f} | {:+.5f} | {} |\n", ratio, v.name, std::exp(x), x - dense_nll, loss);
      std::fprintf(stderr, "%s %.1f %s: ppl %.4f\n", name.c_str(), ratio, v.name.c_str(), std::exp(x));
    }
  }
  std::filesystem::create_directories(std::filesystem::path(out).parent_path());
  std::ofstream(out + ".json") << nlohmann::json{{"model", name}, {"rope", rope}, {"dense_nll", dense_nll},
                                                 {"rows", rows}}.dump(2);
  std::ofstream(out + ".md") << md;
  std::printf("%s", md.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "qk_analysis: %s\n", e.what());
  return 1;
}
