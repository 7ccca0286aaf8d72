// docs/ERRORS.md in sync with the code (tests/support/errors_doc.hpp): the numerics errors and the
// recorded numerical fallbacks, each produced on a tiny synthetic model or matrix; and every
// catalogue section of the doc has an owning test.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>

#include "compress/math/asvd.hpp"
#include "compress/math/asvd.hpp"
#include "compress/math/junction.hpp"
#include "compress/math/whitening.hpp"
#include "compress/math/joint_ud.hpp"
#include "compress/stages/notes.hpp"
#include "errors_doc.hpp"
#include "latentllm/checkpoint.hpp"
#include "latentllm/compress.hpp"
#include "latentllm/eval.hpp"
#include "latentllm/log.hpp"
#include "model_fixtures.hpp"

namespace latentllm::test {
namespace {

namespace fs = std::filesystem;
using compress::NoteCollector;

class Quiet : public ::testing::Test {
 protected:
  void SetUp() override { set_log_callback(nullptr); }
  void TearDown() override { set_log_callback([](LogLevel, std::string_view) {}); }
};

std::vector<std::int32_t> ids_of(int n, int T, int vocab = 39) {
  std::mt19937 rng(7);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n * T));
  for (auto& id : ids) id = static_cast<std::int32_t>(rng() % static_cast<unsigned>(vocab));
  return ids;
}

compress::CompressOptions method(const std::string& m) {
  compress::CompressOptions o;
  o.method = compress::parse_method(m);
  o.ratio = 0.3;
  return o;
}

// The OPT fixture with `edit` applied, loaded.
std::unique_ptr<model::Model> opt_model(const std::function<void(Checkpoint&)>& edit, std::uint32_t seed = 31) {
  Checkpoint c = make_opt({}, seed);
  edit(c);
  return model::Model::load(c.write("err-num"));
}

// Sets fc2's weight of the layer to a huge value: its output overflows float.
class Overflowing : public calib::Stage {
 public:
  std::string_view name() const override { return "overflowing"; }
  model::Site site() const override { return model::Site::MlpIn; }
  void run(const calib::StageInput& in, model::Model& m) override {
    m.layer(in.layer).linear("fc2").weight.f32().setConstant(3e38f);
  }
};

MatrixD gaussian(Eigen::Index rows, Eigen::Index cols, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n(0.0, 1.0);
  MatrixD m(rows, cols);
  for (Eigen::Index j = 0; j < cols; ++j)
    for (Eigen::Index i = 0; i < rows; ++i) m(i, j) = n(rng);
  return m;
}

// W [8, 12] and inputs of n tokens (n < 12: a singular covariance), optionally with dead features.
struct Local {
  MatrixD w = gaussian(8, 12, 1);
  calib::SiteStats st;
  explicit Local(int n, std::vector<int> dead = {}) {
    MatrixD x = gaussian(12, 12, 2) * gaussian(12, n, 3);  // [12, n]
    for (int f : dead) x.row(f).setZero();
    st = calib::SiteStats::of_columns(x);
  }
};

compress::LocalOptions local(compress::Preconditioner p, double lambda) {
  compress::LocalOptions o;
  o.preconditioner = p;
  o.lambda_rel = lambda;
  return o;
}

// The first note of `kind` recorded while f runs.
CaseFn note(const std::string& kind, std::function<void()> f) {
  return [=] {
    NoteCollector notes;
    const Outcome o = outcome_of(f);
    if (!o.type.empty()) return o;
    for (const auto& n : notes.notes())
      if (n.kind == kind) return Outcome{"note", n.message()};
    return Outcome{"", "no " + kind + " note"};
  };
}

TEST_F(Quiet, NumericsErrors) {
  check_section(
      "Numerics (`compress`, `ppl`)",
      {
          {"num-weight", {lib([] { (void)opt_model([](Checkpoint& c) {
             c.data("model.decoder.layers.1.fc1.weight")[7] = std::nanf("");
           }); }),
                          // A lazy model: when it widens the layer.
                          lib([] {
                            Checkpoint c = make_opt({}, 31);
                            c.data("model.decoder.layers.1.fc1.weight")[7] = std::nanf("");
                            model::Model::load(c.write("err-num-lazy"), {.lazy = true})->load_layer(1);
                          })}},
          {"num-activation", {lib([] {
             auto m = opt_model([](Checkpoint&) {});
             for (auto& [name, v] : m->layer(0).norms)
               if (name == "self_attn_layer_norm.weight") v(3) = std::nanf("");
             compress::compress_model(*m, ids_of(2, 10), 10, method("asvd-rootcov"));
           })}},
          {"num-hidden", {lib([] {
             auto m = opt_model([](Checkpoint&) {});
             Overflowing c;
             calib::Stage* stages[] = {&c};
             (void)calib::run_layerwise(*m, ids_of(2, 10), 10, stages);
           })}},
          {"num-factor-range", {lib([] {
             auto m = opt_model([](Checkpoint& c) {
               auto& w = c.data("model.decoder.layers.0.self_attn.q_proj.weight");
               for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>((i * 7) % 5) * 8e37f - 1.6e38f;
             });
             auto o = method("asvd-rootcov");
             o.local.junction = compress::Junction::Identity;
             compress::compress_model(*m, ids_of(2, 10), 10, o);
           })}},
          {"num-storage", {lib([] {
             auto m = opt_model([](Checkpoint& c) { c.data("model.decoder.embed_tokens.weight")[39 * 16 + 2] = 1e5f; });
             checkpoint::SaveOptions so;
             so.dtype = DType::F16;
             checkpoint::save(*m, make_temp_dir("err-num-out") / "out", so);
           })}},
          {"num-ppl", {lib([] {
             auto m = opt_model([](Checkpoint&) {});
             m->layer(1).linear("fc2").weight.f32().setConstant(3e38f);  // finite, but the forward overflows
             eval::perplexity_ids(*m, ids_of(2, 10), 10, 0, 0, "ids");
           })}},
          {"num-nonfinite-matrix", {lib([] {
             Local p(30);
             p.w(1, 1) = std::nan("");
             compress::asvd(p.w, {}, p.st, 4, compress::LocalOptions{}, "model.layers.0.mlp.up_proj");
           })}},
          {"num-rank", {lib([] {
             Local p(30);
             compress::asvd(p.w, {}, p.st, 9, compress::LocalOptions{}, "model.layers.0.mlp.up_proj");
           })}},
          {"num-zero-factor", {lib([] {
             compress::to_block_identity(MatrixD::Ones(6, 3), MatrixD::Zero(3, 8), "model.layers.0.mlp.up_proj");
           })}},
          // One batch's Σ x² of 1e16: activations of 1e8, beyond the exact sums' range.
          {"num-exact-range", {lib([] {
                                  calib::SiteStats st;
                                  st.reset(2);
                                  st.add(MatrixF::Constant(1, 2, 1e8f));
                                }),
                                // Joint up-down's inputs of 1e6: a unit's Σ x² beyond the range.
                                lib([] {
                                  compress::MlpDense w;
                                  w.act = model::Activation::Relu;
                                  w.w_up = gaussian(12, 6, 4);
                                  w.w_down = gaussian(6, 12, 5);
                                  compress::UdOptions o;
                                  o.ranks.up = 3;
                                  o.ranks.down = 3;
                                  (void)compress::joint_ud(w, MatrixD(gaussian(400, 6, 6) * 1e6), o,
                                                           "model.decoder.layers.0.fc1, fc2");
                                })}},
      });
}

TEST_F(Quiet, NumericalFallbacks) {
  using compress::Preconditioner;
  check_section(
      "Numerical fallbacks (not errors)",
      {
          {"note-pinv-drop",
           {note("pinv-drop", [] {
              Local p(6);
              compress::asvd(p.w, {}, p.st, 4, local(Preconditioner::RootCovariance, 0.0), "model.layers.0.mlp.up_proj");
            }),
            note("pinv-drop", [] {
              Local p(6);
              (void)compress::root_covariance(p.st.xtx, 0.0, "model.layers.0.self_attn.q_proj, k_proj");
            }),
            note("pinv-drop", [] {
              Local p(40, {2, 5});
              compress::asvd(p.w, {}, p.st, 4, local(Preconditioner::DiagL2, 1e-4), "model.decoder.layers.0.fc2");
            })}},

          {"note-zero-covariance",
           {note("zero-covariance", [] {
              Local p(30);
              const calib::SiteStats st{MatrixD::Zero(12, 12), VectorD::Zero(12), VectorD::Zero(12), 30};
              compress::asvd(p.w, {}, st, 4, compress::LocalOptions{}, "model.layers.0.mlp.up_proj");
            }),
            note("zero-covariance", [] { (void)compress::root_covariance(MatrixD::Zero(5, 5), 1e-4, "model.layers.0.mlp.up_proj"); })}},
          {"note-rank-reduced", {note("rank-reduced", [] {
             Local p(6);
             compress::asvd(p.w, {}, p.st, 8, local(Preconditioner::RootCovariance, 0.0), "model.layers.0.mlp.up_proj");
           })}},
          {"note-joint-skipped", {note("joint-skipped", [] {
             compress::MlpDense w;
             w.act = model::Activation::Relu;
             w.w_up = gaussian(12, 6, 4);
             w.w_down = MatrixD::Zero(6, 12);
             compress::UdOptions o;
             o.ranks.up = 3;
             o.ranks.down = 3;
             (void)compress::joint_ud(w, gaussian(40, 6, 5), o, "model.decoder.layers.0.fc1, fc2");
           })}},
          {"note-joint-skipped-qk-norm", {[] {
             LlamaDims d;
             d.arch = "Qwen3ForCausalLM";
             d.type = "qwen3";
             d.layers = 1;
             auto m = model::Model::load(make_llama(d, 9).write("err-num-qwen3"));
             const auto rep = compress::compress_model(*m, ids_of(2, 10, static_cast<int>(d.V)), 10, method("latentllm"));
             for (const auto& n : rep.notes)
               if (n.kind == "joint-skipped") return Outcome{"note", n.message()};
             return Outcome{"", "no joint-skipped note"};
           }}},
          {"note-joint-skipped-few-tokens", {[] {
             auto m = opt_model([](Checkpoint&) {});
             compress::CompressOptions o = method("latentllm");
             o.ud_min_tokens_per_ffn = 12;
             const auto rep = compress::compress_model(*m, ids_of(2, 8), 8, o);
             if (!rep.ud_losses.empty()) return Outcome{"", "joint up-down ran"};
             for (const auto& n : rep.notes)
               if (n.kind == "joint-skipped") return Outcome{"note", n.message()};
             return Outcome{"", "no joint-skipped note"};
           }}},
          {"note-few-tokens", {[] {
             auto m = opt_model([](Checkpoint&) {});
             const auto rep = compress::compress_model(*m, ids_of(1, 8), 8, method("latentllm"));
             for (const auto& n : rep.notes)
               if (n.kind == "few-tokens") return Outcome{"note", n.message()};
             return Outcome{"", "no few-tokens note"};
           }}},
      });
}

// The checker itself, on a synthetic doc: every kind of drift is exactly one failure.
const std::string kSection = "Numerical fallbacks (not errors)";
const std::vector<Case> kTwoCases = {
    {"a", {lib([] { throw ConfigError("--x (expected > 0, got -1)"); })}},
    {"b", {lib([] { throw IoError("/p: cannot open (No such file)"); })}},
};
const std::vector<Case> kThreeCases = {kTwoCases[0], kTwoCases[1], {"c", {lib([] { throw IoError("c"); })}}};

void with_doc(const std::string& rows) {
  const fs::path p = make_temp_dir("err-doc") / "ERRORS.md";
  std::ofstream(p) << "# E\n\n## " << kSection << "\n\n| id | case | exception | message pattern |\n|---|---|---|---|\n"
                   << rows << "\n## Next\n";
  ::setenv("LATENTLLM_ERRORS_DOC", p.c_str(), 1);
}

TEST(ErrorsDoc, TheCheckFailsOnEveryKindOfDrift) {
  const std::string a = "| `a` | x negative | `ConfigError` | `--x (expected > 0, got <n>)` |\n";
  const std::string b = "| `b` | missing | `IoError` | `<path>: cannot open (<OS reason>)` |\n";
  with_doc(a + b);
  check_section(kSection, kTwoCases);  // in sync: no failure
  with_doc(a + "| `b` | missing | `IoError` | `<path>: cannot read (<OS reason>)` |\n");
  EXPECT_NONFATAL_FAILURE(check_section(kSection, kTwoCases), "pattern: <path>: cannot read (<OS reason>)");
  with_doc(a + "| `b` | missing | `FormatError` | `<path>: cannot open (<OS reason>)` |\n");
  EXPECT_NONFATAL_FAILURE(check_section(kSection, kTwoCases), "FormatError");
  with_doc(a + b + "| `c2` | new | `IoError` | `c` |\n");
  EXPECT_NONFATAL_FAILURE(check_section(kSection, kTwoCases), "catalogued case without a test");
  with_doc(a + b);
  EXPECT_NONFATAL_FAILURE(check_section(kSection, kThreeCases), "test case c has no row in the doc");
  with_doc("| `a` | x | `Error42` | `--x (expected > 0, got <n>)` |\n" + b);
  EXPECT_NONFATAL_FAILURE(check_section(kSection, kTwoCases), "exception column: Error42");
  ::unsetenv("LATENTLLM_ERRORS_DOC");
}

TEST(ErrorsDoc, EverySectionIsOwnedAndPatternsWork) {
  std::set<std::string> in_doc;
  for (const DocRow& r : load_errors_doc()) in_doc.insert(r.section);
  std::set<std::string> owned;
  for (const auto& [section, owner] : doc_owners()) {
    owned.insert(section);
    const fs::path tests = fs::path(LATENTLLM_TEST_DATA_DIR).parent_path();
    EXPECT_TRUE(fs::exists(tests / "unit" / (owner + ".cpp")) || fs::exists(tests / "golden" / (owner + ".cpp")))
        << owner;
  }
  EXPECT_EQ(in_doc, owned) << "a catalogue section without an owning test, or an owner without its section";
  // The pattern language itself.
  EXPECT_TRUE(matches_pattern("<path>: cannot open (<OS reason>)", "/a/b: cannot open (No such file)"));
  EXPECT_FALSE(matches_pattern("<path>: cannot open (<OS reason>)", "/a/b: cannot open ()"));
  EXPECT_FALSE(matches_pattern("<path>: cannot open", "/a/b: cannot open (x)")) << "the whole message";
  EXPECT_TRUE(matches_pattern("x (expected <= 28, got …)", "x (expected <= 28, got )"));
  EXPECT_TRUE(matches_pattern("got {…}", "got {\"a\":1}"));
  EXPECT_FALSE(matches_pattern("expected 24, got 100", "expected 25, got 100"));
}

}  // namespace
}  // namespace latentllm::test
