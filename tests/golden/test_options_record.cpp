// The method registry, the options record and the planner (docs/ARCHITECTURE.md, "A compression run"):
// every field of CompressOptions that decides a result round-trips through the one serialization and
// changes the resume fingerprint; a method records only what it reads; the planner is the one place ranks
// are chosen.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "compress/run/resume.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/error.hpp"
#include "latentllm/model.hpp"
#include "test_support.hpp"

namespace latentllm {
namespace {

using compress::CompressOptions;

constexpr int kSeqlen = 64;

// latentllm with every joint part and global ranks: the configuration that reads every key.
CompressOptions reads_everything() {
  CompressOptions o;
  o.method = compress::Method::LatentLlm;
  o.joint = {.qk = true, .vo = true, .ud = true};
  o.rank_alloc = compress::RankAlloc::Global;
  o.quant = {.bits = 4, .group = 64, .gptq = true, .head_bits = 8};
  return o;
}

// One change per field of the record: (key, change).
std::vector<std::pair<std::string, std::function<void(CompressOptions&)>>> field_changes() {
  return {
      {"method", [](CompressOptions& o) { o.method = compress::Method::AsvdRootCov; }},
      {"ratio", [](CompressOptions& o) { o.ratio = 0.35; }},
      {"bits", [](CompressOptions& o) { o.quant.bits = 8; }},
      {"group", [](CompressOptions& o) { o.quant.group = 32; }},
      {"quantizer", [](CompressOptions& o) { o.quant.gptq = false; }},
      {"head_bits", [](CompressOptions& o) { o.quant.head_bits = 4; }},
      {"junction", [](CompressOptions& o) { o.local.junction = compress::Junction::SInv; }},
      {"rank_alloc", [](CompressOptions& o) { o.rank_alloc = compress::RankAlloc::Uniform; }},
      {"alloc_score", [](CompressOptions& o) { o.alloc_score = compress::AllocScore::Grouped; }},
      {"alloc_tokens", [](CompressOptions& o) { o.alloc_max_tokens = 4096; }},
      {"intra_layer", [](CompressOptions& o) { o.pipeline.sequential_within_layer = false; }},
      {"batch", [](CompressOptions& o) { o.pipeline.batch_windows = 3; }},
      {"covariance", [](CompressOptions& o) { o.pipeline.covariance_f32 = true; }},
      {"update_bias", [](CompressOptions& o) { o.local.update_bias = false; }},
      {"pinv_floor_rel", [](CompressOptions& o) { o.local.pinv_floor_rel = 1e-9; }},
      {"lambda_rel", [](CompressOptions& o) { o.local.lambda_rel = 0.01; }},
      {"fit", [](CompressOptions& o) { o.error_compensation = true; }},
      {"output_side", [](CompressOptions& o) { o.output_side = false; }},
      {"joint", [](CompressOptions& o) { o.joint.vo = false; }},
      {"qk_iters", [](CompressOptions& o) { o.qk_iters = 3; }},
      {"vo_iters", [](CompressOptions& o) { o.vo_iters = 2; }},
      {"joint_tol", [](CompressOptions& o) { o.joint_tol = 1e-5; }},
      {"rope_window", [](CompressOptions& o) { o.rope_window = 4; }},
      {"ud_iters", [](CompressOptions& o) { o.ud_iters = 2; }},
      {"ud_tokens", [](CompressOptions& o) { o.ud_max_tokens = 1000; }},
      {"ud_min_tokens_per_ffn", [](CompressOptions& o) { o.ud_min_tokens_per_ffn = 3; }},
      {"ud_precision", [](CompressOptions& o) { o.ud_f32 = false; }},
      {"ud_unit_tokens", [](CompressOptions& o) { o.ud_unit_tokens = 512; }},
      {"diagnostics", [](CompressOptions& o) { o.diagnostics = true; }},
  };
}

// --method sparse: the keys the sparse methods add (solver, pattern, sparse_iters).
CompressOptions sparse_record() {
  CompressOptions o = compress::preset_options(compress::Preset::Default, compress::Method::Sparse, 0.5);
  o.sparse = {compress::SparseSolver::Fista, compress::SparsePattern::Unstructured, 50};
  return o;
}

TEST(OptionsRecord, SparseFieldsRoundTripAndChangeTheFingerprint) {
  const auto m = model::Model::load(test::shared_path("models/stories260K/hf"));
  const std::vector<std::int32_t> ids(2 * kSeqlen, 5);
  const CompressOptions base = sparse_record();
  const auto base_json = base.to_json();
  EXPECT_EQ(CompressOptions::from_json(base_json).to_json(), base_json);
  const std::vector<std::pair<std::string, std::function<void(CompressOptions&)>>> changes = {
      {"solver", [](CompressOptions& o) { o.sparse.solver = compress::SparseSolver::Hard; }},
      {"pattern", [](CompressOptions& o) { o.sparse = {compress::SparseSolver::Hard, compress::SparsePattern::TwoFour, 50}; }},
      {"sparse_iters", [](CompressOptions& o) { o.sparse.iters = 7; }},
      {"ratio", [](CompressOptions& o) { o.ratio = 0.6; }},
  };
  for (const auto& [key, change] : changes) {
    SCOPED_TRACE(key);
    EXPECT_TRUE(base_json.contains(key));
    CompressOptions o = base;
    change(o);
    const auto j = o.to_json();
    EXPECT_NE(j, base_json);
    EXPECT_EQ(CompressOptions::from_json(j).to_json(), j);
    EXPECT_NE(compress::run_fingerprint(*m, ids, kSeqlen, o), compress::run_fingerprint(*m, ids, kSeqlen, base));
  }
  // Wanda reads the pattern only; the low-rank methods none of the three.
  CompressOptions w = base;
  w.method = compress::Method::Wanda;
  EXPECT_TRUE(w.to_json().contains("pattern"));
  EXPECT_FALSE(w.to_json().contains("solver"));
  EXPECT_FALSE(reads_everything().to_json().contains("pattern"));
}

// --joint qkv and --split-heads: recorded only when asked for (earlier records stay the same), round-tripped,
// and part of the run's identity.
TEST(OptionsRecord, JointQkvAndSplitHeadsRoundTripAndChangeTheFingerprint) {
  const auto m = model::Model::load(test::shared_path("models/stories260K/hf"));
  const std::vector<std::int32_t> ids(2 * kSeqlen, 5);
  CompressOptions base = reads_everything();
  base.joint = {.qk = false, .vo = false, .ud = true};
  const auto base_json = base.to_json();
  EXPECT_FALSE(base_json.contains("split_heads"));
  EXPECT_EQ(base_json["joint"], "ud");
  CompressOptions qkv = base, split = base;
  qkv.joint.qkv = true;
  split.split_heads = true;
  for (const CompressOptions* o : {&qkv, &split}) {
    const auto j = o->to_json();
    EXPECT_NE(j, base_json);
    EXPECT_EQ(CompressOptions::from_json(j).to_json(), j);
    EXPECT_NE(compress::run_fingerprint(*m, ids, kSeqlen, *o), compress::run_fingerprint(*m, ids, kSeqlen, base));
  }
  EXPECT_EQ(qkv.to_json()["joint"], "ud,qkv");
  EXPECT_EQ(split.to_json()["split_heads"], true);
  EXPECT_THROW(compress::parse_joint_parts("qk,qkv"), ConfigError);
}

// --bpw: the budget recorded in place of --bits (each module's bits are the plan's), round-tripped, and
// part of the run's identity.
CompressOptions bpw_record() {
  CompressOptions o = reads_everything();
  o.quant = {.bits = 16, .group = 32, .gptq = true, .bpw = 3.0};
  return o;
}

TEST(OptionsRecord, BitsPerWeightRoundTripsAndChangesTheFingerprint) {
  const auto m = model::Model::load(test::shared_path("models/stories260K/hf"));
  const std::vector<std::int32_t> ids(2 * kSeqlen, 5);
  const CompressOptions base = bpw_record();
  const auto j = base.to_json();
  EXPECT_EQ(j.at("bpw"), 3.0);
  EXPECT_FALSE(j.contains("bits"));
  EXPECT_EQ(CompressOptions::from_json(j).to_json(), j);
  CompressOptions other = base;
  other.quant.bpw = 3.5;
  EXPECT_NE(compress::run_fingerprint(*m, ids, kSeqlen, other), compress::run_fingerprint(*m, ids, kSeqlen, base));
  other.quant.bpw = 0;
  EXPECT_FALSE(other.to_json().contains("bpw"));
}

TEST(OptionsRecord, EveryFieldRoundTripsAndChangesTheFingerprint) {
  const auto m = model::Model::load(test::shared_path("models/stories260K/hf"));
  const std::vector<std::int32_t> ids(2 * kSeqlen, 5);
  const CompressOptions base = reads_everything();
  const auto base_json = base.to_json();
  const std::string base_fp = compress::run_fingerprint(*m, ids, kSeqlen, base);
  // Every key of the record has a change below, and every change names a key of the record.
  const auto changes = field_changes();
  for (const auto& [key, value] : base_json.items()) {
    bool covered = false;
    for (const auto& c : changes) covered = covered || c.first == key;
    EXPECT_TRUE(covered) << "no test change for record key " << key;
  }
  EXPECT_EQ(CompressOptions::from_json(base_json).to_json(), base_json);
  for (const auto& [key, change] : changes) {
    SCOPED_TRACE(key);
    EXPECT_TRUE(base_json.contains(key));
    CompressOptions o = base;
    change(o);
    const auto j = o.to_json();
    EXPECT_NE(j, base_json);
    EXPECT_EQ(CompressOptions::from_json(j).to_json(), j);  // round trip
    EXPECT_NE(compress::run_fingerprint(*m, ids, kSeqlen, o), base_fp);
  }
}

// Option keys are spelled once: every key of the record a user sets has one flag in the library's table
// (compress::option_flags, which the CLI's "not read by --method" check uses), the table names only keys
// of the record, and `compress --help` and `sweep --help` offer each of those flags.
TEST(OptionsRecord, EveryKeyHasOneFlagAndTheCliOffersIt) {
  const auto record = reads_everything().to_json();
  const std::vector<std::string> own = {"method", "ratio", "components", "update_bias", "pinv_floor_rel"};
  const auto flags = compress::option_flags();
  for (const auto& [key, value] : record.items()) {
    if (std::find(own.begin(), own.end(), key) != own.end()) continue;
    int n = 0;
    for (const auto& f : flags) n += f.key == key;
    EXPECT_EQ(n, 1) << "record key " << key << " has no flag (or more than one) in compress::option_flags";
  }
  std::string compress_help, sweep_help;
  ASSERT_EQ(test::run_command(test::cli_path().string() + " compress --help", compress_help), 0) << compress_help;
  ASSERT_EQ(test::run_command(test::cli_path().string() + " sweep --help", sweep_help), 0) << sweep_help;
  nlohmann::json every = record;  // the keys of every method's record
  for (compress::Method m : compress::all_methods()) {
    CompressOptions o = reads_everything();
    o.method = m;
    every.update(o.to_json());
  }
  every.update(sparse_record().to_json());
  every.update(bpw_record().to_json());
  CompressOptions split = reads_everything();
  split.split_heads = true;  // recorded only when on
  every.update(split.to_json());
  for (const auto& f : flags) {
    EXPECT_TRUE(every.contains(std::string(f.key))) << f.key << " is not a key of the options record";
    const std::string flag = std::string(f.flag) + " ";
    EXPECT_NE(compress_help.find(flag), std::string::npos) << "compress --help lacks " << f.flag;
    EXPECT_NE(sweep_help.find(flag), std::string::npos) << "sweep --help lacks " << f.flag;
  }
}

TEST(OptionsRecord, AMethodRecordsOnlyWhatItReads) {
  CompressOptions o;
  o.method = compress::Method::PlainSvd;
  o.local.alpha = 2;
  o.qk_iters = 3;
  const auto j = o.to_json();
  for (const char* key : {"alpha", "qk_iters", "lambda_rel", "joint", "fit", "rope_window"})
    EXPECT_FALSE(j.contains(key)) << key;
  EXPECT_EQ(j.at("method"), "plain-svd");
  // An unread field does not change the fingerprint either: a run resumes whatever it is.
  const auto m = model::Model::load(test::shared_path("models/stories260K/hf"));
  const std::vector<std::int32_t> ids(kSeqlen, 5);
  CompressOptions other = o;
  other.local.alpha = 0.7;
  EXPECT_EQ(compress::run_fingerprint(*m, ids, kSeqlen, o), compress::run_fingerprint(*m, ids, kSeqlen, other));

  o.method = compress::Method::AsvdL1;
  EXPECT_EQ(o.to_json().at("alpha"), 2);
  o.method = compress::Method::LatentLlm;
  o.joint = {.qk = true, .vo = false, .ud = false};
  EXPECT_TRUE(compress::reads_option(o, "qk_iters"));
  EXPECT_FALSE(compress::reads_option(o, "vo_iters"));
  EXPECT_FALSE(compress::reads_option(o, "ud_iters"));
  EXPECT_FALSE(compress::reads_option(o, "alpha"));
  EXPECT_FALSE(compress::reads_option(o, "alloc_score"));
  o.rank_alloc = compress::RankAlloc::Global;
  EXPECT_TRUE(compress::reads_option(o, "alloc_score"));
}

TEST(MethodRegistry, NamesPreconditionersAndJunctionsComeFromTheRows) {
  std::vector<std::string> names;
  for (const auto m : compress::all_methods()) {
    names.emplace_back(compress::method_name(m));
    EXPECT_EQ(compress::parse_method(compress::method_name(m)), m);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"plain-svd", "asvd-hessian", "asvd-l1", "asvd-l2", "asvd-cov",
                                             "asvd-rootcov", "latentllm"}));
  EXPECT_EQ(compress::preconditioner_of(compress::Method::AsvdL2), compress::Preconditioner::DiagL2);
  EXPECT_EQ(compress::default_junction(compress::Method::LatentLlm), compress::Junction::BlockIdentity);
  EXPECT_EQ(compress::default_junction(compress::Method::AsvdRootCov), compress::Junction::Identity);
  EXPECT_EQ(compress::methods_reading("alpha"), (std::vector<std::string_view>{"asvd-l1"}));
  EXPECT_THROW(compress::parse_method("svd-magic"), ConfigError);
}

TEST(Planner, UniformGlobalAndNoData) {
  auto m = model::Model::load(test::shared_path("models/stories260K/hf"));
  std::vector<std::int32_t> ids;
  for (int i = 0; i < 4 * kSeqlen; ++i) ids.push_back(1 + (i * 37) % 500);
  CompressOptions o = compress::preset_options(compress::Preset::Default, compress::Method::LatentLlm, 0.3);
  ASSERT_EQ(o.rank_alloc, compress::RankAlloc::Global);
  // No calibration windows (a dry run): the uniform plan of the same total, said so.
  const auto none = compress::plan_run(*m, {}, kSeqlen, o);
  EXPECT_EQ(none.source, compress::PlannedRanks::Source::UniformNoData);
  EXPECT_EQ(none.plan.params(), compress::plan_model(*m, o).params());
  // Global: at most the uniform total; the spectra cache gives the same plan without a second pre-pass.
  std::vector<compress::ModuleSpectrum> cache;
  const auto g = compress::plan_run(*m, ids, kSeqlen, o, &cache);
  EXPECT_EQ(g.source, compress::PlannedRanks::Source::Global);
  EXPECT_FALSE(cache.empty());
  EXPECT_LE(g.plan.params(), none.plan.params());
  EXPECT_EQ(g.plain.junction, compress::Junction::Identity);
  const auto again = compress::plan_run(*m, ids, kSeqlen, o, &cache);
  EXPECT_EQ(again.prepass_s, 0.0);
  ASSERT_EQ(again.plan.modules.size(), g.plan.modules.size());
  for (std::size_t i = 0; i < g.plan.modules.size(); ++i) EXPECT_EQ(again.plan.modules[i].rank, g.plan.modules[i].rank);
  // Uniform needs no data and no pre-pass.
  o.rank_alloc = compress::RankAlloc::Uniform;
  const auto u = compress::plan_run(*m, ids, kSeqlen, o);
  EXPECT_EQ(u.source, compress::PlannedRanks::Source::Uniform);
  EXPECT_EQ(u.prepass_s, 0.0);
}

// A failed run keeps its progress directory only when it holds finished layers, and saved progress is
// never discarded by a run that does not resume.
TEST(Planner, FailedRunsKeepOnlyRealProgress) {
  std::vector<std::int32_t> ids;
  for (int i = 0; i < 4 * kSeqlen; ++i) ids.push_back(1 + (i * 37) % 500);
  CompressOptions o = compress::preset_options(compress::Preset::Default, compress::Method::AsvdRootCov, 0.3);
  o.state_dir = test::make_temp_dir("stray") / "out.resume";
  o.part_observer = [](std::string_view, bool) { throw Error("stopped in layer 0"); };
  {
    auto m = model::Model::load(test::shared_path("models/stories260K/hf"));
    EXPECT_THROW(compress::compress_model(*m, ids, kSeqlen, o), Error);
  }
  EXPECT_FALSE(std::filesystem::exists(o.state_dir));  // nothing finished: nothing left behind
  o.part_observer = {};
  o.layer_done = [](int) { throw Error("stopped after layer 0"); };
  {
    auto m = model::Model::load(test::shared_path("models/stories260K/hf"));
    EXPECT_THROW(compress::compress_model(*m, ids, kSeqlen, o), Error);
  }
  EXPECT_TRUE(std::filesystem::exists(o.state_dir / "progress.json"));
  o.layer_done = {};
  auto m = model::Model::load(test::shared_path("models/stories260K/hf"));
  test::expect_error<ConfigError>([&] { compress::compress_model(*m, ids, kSeqlen, o); },
                                  {"progress of an earlier run exists (1 finished layers; expected --resume"});
  EXPECT_TRUE(std::filesystem::exists(o.state_dir / "progress.json"));
  o.resume = true;
  const auto report = compress::compress_model(*m, ids, kSeqlen, o);
  EXPECT_EQ(report.layers_resumed, 1);
}

TEST(Planner, OptionsOutOfRangeFailBeforeAnyWork) {
  CompressOptions o;
  o.stop_after_layers = -1;
  test::expect_error<ConfigError>([&] { o.validate(); }, {"--stop-after-layers (expected >= 0, got -1)"});
  o = CompressOptions{};
  o.ratio = 1.5;
  test::expect_error<ConfigError>([&] { o.validate(); }, {"--ratio"});
}

}  // namespace
}  // namespace latentllm
