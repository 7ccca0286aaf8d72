// `latentllm compress` and `latentllm sweep` end to end on stories260K: the plan, the written latent
// checkpoint and its provenance, the sweep's tables and files, and one clear error per bad option.
#include <gtest/gtest.h>

#include <fstream>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/sha256.hpp"
#include "test_support.hpp"

namespace latentllm {
namespace {

std::string q(const std::filesystem::path& p) { return "'" + p.string() + "'"; }
std::string cli() { return test::cli_path().string(); }
std::filesystem::path model() { return test::shared_path("models/stories260K/hf"); }
std::filesystem::path stories() {
  return test::shared_path("data/tinystories/TinyStories-valid.stories0001-0232.clean.txt");
}
std::string calib_args() { return " --calib text --calib-data " + q(stories()) + " --nsamples 4 --seqlen 64"; }

std::string read(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Splits stdout (the JSON document) from the log lines on stderr: the last line starting with '{'
// through the end.
nlohmann::json json_of(const std::string& out) {
  const auto pos = out.find("\n{");
  return nlohmann::json::parse(pos == std::string::npos ? out : out.substr(pos + 1));
}

TEST(CompressCli, DryRunPlanHoldsTheBudgetWithAndWithoutBlockIdentity) {
  std::string out;
  ASSERT_EQ(test::run_command(cli() + " compress --model " + q(model()) + " --ratio 0.3 --dry-run --json 2>/dev/null", out), 0)
      << out;
  const auto j = json_of(out);
  const auto& plan = j.at("plan");
  EXPECT_EQ(plan.at("junction"), "block-identity");
  EXPECT_EQ(plan.at("n_tok"), 128);
  EXPECT_GE(plan.at("achieved_ratio").get<double>(), 0.3);
  EXPECT_LE(plan.at("params").get<std::int64_t>(), static_cast<std::int64_t>(0.7 * plan.at("dense_params").get<double>()));
  // stories260K: 5 layers × 7 linear modules.
  EXPECT_EQ(plan.at("modules").size(), 35u);
  EXPECT_EQ(plan.at("flops").get<std::int64_t>(), 2 * plan.at("macs").get<std::int64_t>());
  EXPECT_EQ(j.at("plan_without_block_identity").at("junction"), "identity");
}

// The text plan's two summary lines carry the same figures as the JSON plan: params, MACs and FLOPs
// (2 per multiply-add) at 128 tokens, with and without block identity.
TEST(CompressCli, DryRunTextPrintsParamsMacsAndFlopsWithAndWithoutBlockIdentity) {
  const std::string base = cli() + " compress --model " + q(model()) + " --ratio 0.3 --dry-run";
  std::string text, js;
  ASSERT_EQ(test::run_command(base + " 2>/dev/null", text), 0) << text;
  ASSERT_EQ(test::run_command(base + " --json 2>/dev/null", js), 0) << js;
  const auto j = json_of(js);
  auto line = [&](const nlohmann::json& p, const std::string& lead) {
    return fmt::format("{}params {} of {} ({:.2f}% removed), MACs@128 {} of {}, FLOPs {} of {}\n", lead,
                       p.at("params").get<std::int64_t>(), p.at("dense_params").get<std::int64_t>(),
                       100.0 * p.at("achieved_ratio").get<double>(), p.at("macs").get<std::int64_t>(),
                       p.at("dense_macs").get<std::int64_t>(), p.at("flops").get<std::int64_t>(),
                       p.at("dense_flops").get<std::int64_t>());
  };
  const auto& bi = j.at("plan");
  const auto& plain = j.at("plan_without_block_identity");
  for (const auto* p : {&bi, &plain}) {
    EXPECT_EQ(p->at("flops").get<std::int64_t>(), 2 * p->at("macs").get<std::int64_t>());
    EXPECT_LT(p->at("flops").get<std::int64_t>(), p->at("dense_flops").get<std::int64_t>());
  }
  const std::string total = "total of the compressed linear modules: ";
  const std::string other = "for comparison, the same ratio without block identity (--junction identity: the same "
                            "budget at lower ranks): ";
  EXPECT_NE(text.find(line(bi, total)), std::string::npos) << line(bi, total) << text;
  EXPECT_NE(text.find(line(plain, other)), std::string::npos) << line(plain, other) << text;
  // The whole model as planned: every stored parameter, the compressed modules' by the plan.
  const std::int64_t whole = j.at("model_params"), planned = j.at("planned_model_params");
  EXPECT_EQ(whole - planned, bi.at("dense_params").get<std::int64_t>() - bi.at("params").get<std::int64_t>());
  EXPECT_NE(text.find(fmt::format("whole model: params {} of {} as planned (", planned, whole)), std::string::npos)
      << text;
  // A plan without block identity has no such comparison.
  ASSERT_EQ(test::run_command(base + " --method asvd-rootcov 2>/dev/null", text), 0) << text;
  EXPECT_EQ(text.find("without block identity"), std::string::npos) << text;
}

TEST(CompressCli, WritesAReloadableCheckpointWithProvenance) {
  const auto dir = test::make_temp_dir("ccli") / "out";
  std::string out;
  ASSERT_EQ(test::run_command(cli() + " compress --model " + q(model()) + " --method asvd-rootcov --ratio 0.25 --json" +
                                  calib_args() + " --out " + q(dir) + " 2>/dev/null",
                              out),
            0)
      << out;
  const auto rep = json_of(out);
  EXPECT_EQ(rep.at("method"), "asvd-rootcov");
  EXPECT_GT(rep.at("peak_rss_bytes").get<std::int64_t>(), 0);
  const auto cfg = nlohmann::json::parse(read(dir / "config.json"));
  const auto& latent = cfg.at("latent");
  EXPECT_EQ(latent.at("method"), "asvd-rootcov");
  EXPECT_EQ(latent.at("calibration").at("nsamples"), 4);
  EXPECT_EQ(latent.at("lambda_rel"), 1e-4);
  EXPECT_EQ(latent.at("modules").size(), 35u);
  // The JSON vocabulary: the output folder is out_dir, the MPI processes processes.
  EXPECT_EQ(rep.at("out_dir"), dir.string());
  EXPECT_EQ(rep.at("processes"), 1);
  EXPECT_FALSE(rep.contains("out"));
  EXPECT_FALSE(rep.contains("ranks"));
  // The whole model before and after: every stored tensor, the weight files' bytes, the storage types.
  const auto& size = rep.at("model_size");
  const auto& before = size.at("before");
  const auto& after = size.at("after");
  EXPECT_EQ(before.at("dtypes"), "F32");
  EXPECT_EQ(after.at("dtypes"), "F16");
  EXPECT_EQ(before.at("bytes"), std::filesystem::file_size(model() / "model.safetensors"));
  EXPECT_EQ(after.at("bytes"), std::filesystem::file_size(dir / "model.safetensors"));
  EXPECT_EQ(before.at("model_params").get<std::int64_t>() - after.at("model_params").get<std::int64_t>(),
            rep.at("dense_params").get<std::int64_t>() - rep.at("params").get<std::int64_t>());
  // Provenance: beside latent.modules and latent.notes, the same in the model card.
  const auto& prov = latent.at("provenance");
  EXPECT_EQ(prov.at("latentllm").at("version"), "0.1.0");
  EXPECT_FALSE(prov.at("latentllm").at("commit").get<std::string>().empty());
  EXPECT_EQ(prov.at("source").at("path"), std::filesystem::canonical(model()).string());
  EXPECT_EQ(prov.at("source").at("weights_sha256"), core::file_sha256(model() / "model.safetensors"));
  EXPECT_EQ(prov.at("source").at("sha256").get<std::string>().size(), 64u);
  EXPECT_EQ(prov.at("calibration").at("sha256"), core::file_sha256(stories()));
  EXPECT_EQ(prov.at("compression"), nlohmann::json({{"method", "asvd-rootcov"}, {"ratio", 0.25}, {"preset", "default"}}));
  EXPECT_EQ(prov.at("size"), size);
  EXPECT_EQ(prov.at("output"), nlohmann::json({{"format", "latent"}, {"dtype", "F16"}}));
  const std::string card = read(dir / "README.md");
  for (const std::string& s : {std::string("compressed by latentllm (asvd-rootcov, ratio 0.25)"),
                               prov.at("source").at("sha256").get<std::string>(),
                               prov.at("calibration").at("sha256").get<std::string>(),
                               std::string("| storage type | F32 | F16 |"),
                               std::string("latentllm export --model MODEL_DIR --out MODEL_DIR-hf --format hf")})
    EXPECT_NE(card.find(s), std::string::npos) << s << "\n" << card;
  // An export's card: the same provenance and the export step.
  const auto hf = test::make_temp_dir("ccli-hf") / "hf";
  ASSERT_EQ(test::run_command(cli() + " export -q --model " + q(dir) + " --out " + q(hf) + " 2>&1", out), 0) << out;
  const std::string hf_card = read(hf / "README.md");
  EXPECT_NE(hf_card.find("library_name: transformers"), std::string::npos) << hf_card;
  EXPECT_NE(hf_card.find("| exported from | `" + std::filesystem::canonical(dir).string()), std::string::npos) << hf_card;
  EXPECT_NE(hf_card.find(prov.at("calibration").at("sha256").get<std::string>()), std::string::npos) << hf_card;
  // The checkpoint runs: ppl of the latent model on a few windows.
  ASSERT_EQ(test::run_command(cli() + " ppl --json --model " + q(dir) + " --dataset text --data " + q(stories()) +
                                  " --seqlen 128 --max-windows 4 2>/dev/null",
                              out),
            0)
      << out;
  EXPECT_GT(json_of(out).at("ppl").get<double>(), 1.0);
  // Refuses to overwrite without --force.
  EXPECT_NE(test::run_command(cli() + " compress --model " + q(model()) + calib_args() + " --out " + q(dir), out), 0);
  EXPECT_NE(out.find("output directory exists (use --force"), std::string::npos) << out;
  // The text summary says what --ratio counted and what the whole model became.
  ASSERT_EQ(test::run_command(cli() + " compress --model " + q(model()) + " --method asvd-rootcov --ratio 0.25 --force" +
                                  calib_args() + " --out " + q(dir) + " 2>/dev/null", out), 0) << out;
  EXPECT_NE(out.find(fmt::format("weights in compressed modules (the linear modules of attention and MLP, what --ratio "
                                 "counts)\nwhole model: {} -> {} parameters (",
                                 before.at("model_params").get<std::int64_t>(), after.at("model_params").get<std::int64_t>())),
            std::string::npos) << out;
  EXPECT_NE(out.find("% of the whole model removed), weight files "), std::string::npos) << out;
  EXPECT_NE(out.find(" (F32 -> F16)\n"), std::string::npos) << out;
}

// c4-heldout after a calibration on the same file: held out with --calib-holdout 100 (recorded in the
// checkpoint), and flagged, with a warning, without it. A file of 130 stories as c4 documents.
TEST(CompressCli, C4HeldoutIsFlaggedUnlessTheCalibrationLeftItOut) {
  const auto tmp = test::make_temp_dir("ccli-heldout");
  const std::string text = read(stories());
  std::ofstream jsonl(tmp / "c4.jsonl");
  std::size_t pos = 0;
  for (int d = 0; d < 130; ++d) {
    const std::size_t end = text.find("\n\n", pos);
    jsonl << nlohmann::json({{"text", text.substr(pos, end - pos)}}).dump() << "\n";
    pos = end + 2;
  }
  jsonl.close();
  for (const int holdout : {100, 0}) {
    SCOPED_TRACE(holdout);
    const auto dir = tmp / fmt::format("out-{}", holdout);
    std::string out;
    ASSERT_EQ(test::run_command(cli() + " compress --model " + q(model()) + " --method asvd-rootcov --ratio 0.25" +
                                    " --calib c4 --calib-data " + q(tmp / "c4.jsonl") + " --nsamples 4 --seqlen 64" +
                                    fmt::format(" --calib-holdout {}", holdout) + " --out " + q(dir) + " 2>/dev/null",
                                out),
              0)
        << out;
    EXPECT_EQ(nlohmann::json::parse(read(dir / "config.json")).at("latent").at("calibration").at("holdout_docs"),
              holdout);
    ASSERT_EQ(test::run_command(cli() + " ppl --json --model " + q(dir) + " --dataset c4-heldout --data " +
                                    q(tmp / "c4.jsonl") + " --seqlen 128 --max-windows 2 2>&1",
                                out),
              0)
        << out;
    EXPECT_EQ(json_of(out).at("held_out").get<bool>(), holdout == 100);
    EXPECT_EQ(out.find("this perplexity is not held out") != std::string::npos, holdout == 0) << out;
  }
}

struct BadCase {
  std::string args, message;
};

TEST(CompressCli, BadOptionsGiveOneClearError) {
  const auto dir = test::make_temp_dir("ccli-bad") / "out";
  const std::vector<BadCase> cases = {
      {" --ratio 1.5 --dry-run", "ratio"},
      {" --method svd-magic --dry-run", "svd-magic"},
      {" --junction diagonal --dry-run", "diagonal"},
      {" --joint qk,xx --dry-run", "--joint: unknown part"},
      {" --dtype f8" + calib_args() + " --out " + q(dir), "--dtype (expected f16, bf16 or f32, got f8)"},
      {" --out " + q(dir), "--calib-data is required"},
      {" --calib-data /nonexistent/c4.jsonl --out " + q(dir), "/nonexistent/c4.jsonl"},
  };
  for (const auto& c : cases) {
    std::string out;
    const int rc = test::run_command(cli() + " compress --model " + q(model()) + c.args, out);
    EXPECT_NE(rc, 0) << c.args;
    EXPECT_NE(out.find(c.message), std::string::npos) << c.args << "\n" << out;
    EXPECT_EQ(out.find("internal error"), std::string::npos) << out;
  }
  EXPECT_FALSE(std::filesystem::exists(dir));
}

TEST(SweepCli, WritesTablesResultsAndPlots) {
  const auto dir = test::make_temp_dir("sweep") / "grid";
  std::string out;
  const std::string cmd = cli() + " sweep --model " + q(model()) + " --methods plain-svd,asvd-rootcov --ratios 0.2,0.4" +
                          calib_args() + " --datasets text=" + q(stories()) +
                          " --eval-seqlen 128 --max-windows 8 --json --out " + q(dir) + " 2>/dev/null";
  ASSERT_EQ(test::run_command(cmd, out), 0) << out;
  const auto j = json_of(out);
  ASSERT_EQ(j.at("runs").size(), 5u);  // dense + 2 methods × 2 ratios
  EXPECT_EQ(j.at("runs")[0].at("method"), "dense");
  // The dense row counts its weights too (the compressed modules' dense size), and the evaluation window used.
  EXPECT_GT(j.at("runs")[0].at("params").get<std::int64_t>(), 0);
  EXPECT_EQ(j.at("runs")[0].at("params"), j.at("runs")[1].at("dense_params"));
  EXPECT_EQ(j.at("eval_seqlen"), 128);
  // Each run records its own options: plain-svd has no damping, asvd-rootcov does.
  EXPECT_FALSE(j.at("runs")[1].at("options").contains("lambda_rel"));
  EXPECT_TRUE(j.at("runs")[2].at("options").contains("lambda_rel"));
  const double dense = j.at("runs")[0].at("ppl").at("text");
  for (std::size_t i = 1; i < 5; ++i) EXPECT_GT(j.at("runs")[i].at("ppl").at("text").get<double>(), dense);
  // More compression, fewer parameters.
  EXPECT_GT(j.at("runs")[1].at("model_params").get<std::int64_t>(), j.at("runs")[3].at("model_params").get<std::int64_t>());
  const std::string csv = read(dir / "results.csv");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 6);  // header + 5 rows
  const std::string t2 = read(dir / "table2.md");
  EXPECT_NE(t2.find("| 20% | asvd-rootcov |"), std::string::npos) << t2;
  const std::string t3 = read(dir / "table3.md");
  EXPECT_NE(t3.find("| 40% | block-identity |"), std::string::npos) << t3;
  // ... and each run's plan as it ran, its parameters those of the run's row.
  EXPECT_NE(t3.find(fmt::format("| 20% | asvd-rootcov | {} |", j.at("runs")[2].at("model_params").get<std::int64_t>())),
            std::string::npos) << t3;
  EXPECT_TRUE(std::filesystem::exists(dir / "ppl_text.gp"));
  // Again with --force and one dataset less: the earlier grid's plot of the other dataset is gone, a
  // file of the user's in the folder is kept.
  std::ofstream(dir / "ppl_old.png") << "stale";
  std::ofstream(dir / "mine.txt") << "kept";
  ASSERT_NE(test::run_command(cmd, out), 0) << out;  // without --force: refused
  EXPECT_NE(out.find("use --force"), std::string::npos) << out;
  const std::string again = cli() + " sweep --model " + q(model()) + " --methods plain-svd --ratios 0.2" + calib_args() +
                            " --datasets text=" + q(stories()) + " --eval-seqlen 128 --max-windows 2 --force -q --out " +
                            q(dir) + " 2>/dev/null";
  ASSERT_EQ(test::run_command(again, out), 0) << out;
  EXPECT_FALSE(std::filesystem::exists(dir / "ppl_old.png"));
  EXPECT_TRUE(std::filesystem::exists(dir / "mine.txt"));
  // stdout's last line lists exactly the files written, each of which exists.
  const auto wrote = out.rfind("wrote " + dir.string() + "/{");
  ASSERT_NE(wrote, std::string::npos) << out;
  const std::string list = out.substr(wrote + dir.string().size() + 8, out.find('}', wrote) - wrote - dir.string().size() - 8);
  EXPECT_EQ(list.substr(0, 64), "results.csv,results.json,table2.md,table3.md,table3.json,ppl_tex") << list;
  std::stringstream names(list);
  for (std::string name; std::getline(names, name, ',');) EXPECT_TRUE(std::filesystem::exists(dir / name)) << name;
  EXPECT_EQ(list.find("table4"), std::string::npos) << list;
}

// sweep --bpw: a grid of budgets in bits per weight, latentllm by --bpw and gptq at the most bits within
// each budget (3 bits in groups of 32 within 4.0, 2 bits in groups of 64 within 2.5), each run's stored
// bits per weight recorded, within its budget for latentllm, and tables and plot by budget.
TEST(SweepCli, BudgetGridInBitsPerWeight) {
  const auto dir = test::make_temp_dir("sweep-bpw") / "grid";
  std::string out;
  const std::string cmd = cli() + " sweep --model " + q(model()) + " --methods latentllm,gptq --bpw 2.5,4 --group 32" +
                          calib_args() + " --datasets text=" + q(stories()) +
                          " --eval-seqlen 128 --max-windows 4 --json --out " + q(dir) + " 2>/dev/null";
  ASSERT_EQ(test::run_command(cmd, out), 0) << out;
  const auto j = json_of(out);
  ASSERT_EQ(j.at("runs").size(), 5u);  // dense + 2 methods × 2 budgets
  for (std::size_t i = 1; i < 5; ++i) {
    const auto& r = j.at("runs")[i];
    SCOPED_TRACE(r.at("method").get<std::string>() + " " + r.at("budget_bits_per_weight").dump());
    const double budget = r.at("budget_bits_per_weight"), bits = r.at("bits_per_weight");
    if (r.at("method") == "latentllm") {
      EXPECT_LE(bits, budget);
      EXPECT_EQ(r.at("options").at("bpw"), budget);
    } else {
      EXPECT_EQ(r.at("options").at("bits"), budget == 4 ? 3 : 2);
      EXPECT_EQ(r.at("options").at("group"), budget == 4 ? 32 : 64);
      EXPECT_LE(bits, budget + 0.25);  // partial last groups of the 172-wide rows are padded
    }
  }
  const std::string t2 = read(dir / "table2.md");
  EXPECT_NE(t2.find("| budget | method | bits per weight |"), std::string::npos) << t2;
  EXPECT_NE(t2.find("| 2.5 bpw | gptq |"), std::string::npos) << t2;
  EXPECT_NE(read(dir / "results.csv").find("method,ratio,budget,bits_per_weight,dataset"), std::string::npos);
  EXPECT_NE(read(dir / "ppl_text.gp").find("bits per weight"), std::string::npos);
}

// sweep --mc: a zero-shot task scored for every run beside perplexity. The dense row's scores are eval
// --task mc's on the same items (the same function on the same model), and table2.md, mc.csv and the plot
// carry every run's.
TEST(SweepCli, ZeroShotTaskBesidePerplexity) {
  const auto dir = test::make_temp_dir("sweep-mc") / "grid";
  const auto tasks = test::shared_path("data/tinystories/TinyStories-valid.stories0001-0232.txt");
  std::string out;
  const std::string cmd = cli() + " sweep --model " + q(model()) + " --methods latentllm --ratios 0.4" + calib_args() +
                          " --datasets text=" + q(stories()) + " --eval-seqlen 128 --max-windows 2 --mc tinystories-next=" +
                          q(tasks) + " --mc-limit 40 --json --out " + q(dir) + " 2>/dev/null";
  ASSERT_EQ(test::run_command(cmd, out), 0) << out;
  const auto j = json_of(out);
  ASSERT_EQ(j.at("runs").size(), 2u);
  EXPECT_EQ(j.at("mc_tasks"), nlohmann::json::parse(R"([{"name": "tinystories-next", "items": 40}])"));
  std::string eval_out;
  ASSERT_EQ(test::run_command(cli() + " eval --task mc --format tinystories-next --max-problems 40 --json --data " +
                                  q(tasks) + " --model " + q(model()) + " 2>/dev/null", eval_out), 0) << eval_out;
  const auto e = json_of("\n" + eval_out).at("results").at("tinystories-next");
  const auto& dense = j.at("runs")[0].at("mc").at("tinystories-next");
  EXPECT_EQ(dense.at("items"), 40);
  for (const char* k : {"acc", "acc_stderr", "acc_norm", "acc_norm_stderr"}) EXPECT_EQ(dense.at(k), e.at(k)) << k;
  const auto& latent = j.at("runs")[1].at("mc").at("tinystories-next");
  EXPECT_EQ(latent.at("items"), 40);
  EXPECT_GE(latent.at("acc").get<double>(), 0.0);
  EXPECT_LE(latent.at("acc").get<double>(), 1.0);
  const std::string t2 = read(dir / "table2.md");
  EXPECT_NE(t2.find("| text | tinystories-next acc | tinystories-next acc_norm |"), std::string::npos) << t2;
  EXPECT_NE(t2.find(fmt::format("| {:.4f} ± {:.4f} | {:.4f} ± {:.4f} |", e.at("acc").get<double>(),
                                e.at("acc_stderr").get<double>(), e.at("acc_norm").get<double>(),
                                e.at("acc_norm_stderr").get<double>())),
            std::string::npos) << t2;
  const std::string csv = read(dir / "mc.csv");
  EXPECT_EQ(csv.substr(0, csv.find('\n')), "method,ratio,task,items,acc,acc_stderr,acc_norm,acc_norm_stderr");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 3);  // header + 2 runs
  EXPECT_NE(read(dir / "mc_tinystories-next.gp").find("acc_norm (tinystories-next)"), std::string::npos);
  // Again with --force and no task: the earlier task's table and plot are gone, a user's file of that
  // prefix is kept.
  std::ofstream(dir / "mc_notes.txt") << "mine";
  ASSERT_EQ(test::run_command(cli() + " sweep --model " + q(model()) + " --methods latentllm --ratios 0.4" + calib_args() +
                                  " --datasets text=" + q(stories()) + " --eval-seqlen 128 --max-windows 2 --force -q --out " +
                                  q(dir) + " 2>/dev/null", out), 0) << out;
  EXPECT_FALSE(std::filesystem::exists(dir / "mc.csv"));
  EXPECT_FALSE(std::filesystem::exists(dir / "mc_tinystories-next.gp"));
  EXPECT_TRUE(std::filesystem::exists(dir / "mc_notes.txt"));
}

TEST(SweepCli, BadGridIsRejectedBeforeAnyWork) {
  const auto dir = test::make_temp_dir("sweep-bad") / "grid";
  const std::vector<BadCase> cases = {
      {" --ratios 0.2,abc", "--ratios: abc"},
      {" --ratios 0", "--ratios: 0"},
      {" --methods plain-svd,nope", "nope"},
      {" --datasets text", "--datasets: text needs a file"},
      {" --datasets wikitext2 --data-dir /nonexistent", "dataset file not found"},
      {" --datasets wikitext2", "needs --data-dir"},
  };
  for (const auto& c : cases) {
    std::string out;
    EXPECT_NE(test::run_command(cli() + " sweep --model " + q(model()) + calib_args() + " --out " + q(dir) + c.args, out), 0);
    EXPECT_NE(out.find(c.message), std::string::npos) << c.args << "\n" << out;
  }
  EXPECT_FALSE(std::filesystem::exists(dir));
}

}  // namespace
}  // namespace latentllm
