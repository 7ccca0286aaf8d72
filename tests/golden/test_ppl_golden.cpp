// Dense perplexities of every model in ../shared/models against its REFERENCE.json (computed by an
// independent PyTorch implementation): same token count, same id sequence (sha256 of the int32
// little-endian ids), same number of windows, ppl within 0.1 % relative. One test per (model,
// dataset) so ctest can run them in parallel; a coverage test makes sure no reference entry is missed.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <fstream>
#include <ostream>
#include <set>

#include <nlohmann/json.hpp>

#include "latentllm/dataset.hpp"
#include "latentllm/eval.hpp"
#include "latentllm/model.hpp"
#include "latentllm/tokenizer.hpp"
#include "test_support.hpp"

namespace latentllm {
namespace {

struct Case {
  const char* model;  // folder under ../shared/models
  const char* key;    // entry of REFERENCE.json "ppl"
};

// gtest prints parameters in test names and failures; say which case, not its bytes.
void PrintTo(const Case& c, std::ostream* os) { *os << c.model << " " << c.key; }

constexpr Case kCases[] = {
    {"opt-tiny", "wikitext2:wiki.test.raw@512"},
    {"opt-tiny", "ptb:ptb.valid.txt@512"},
    {"opt-tiny", "c4:c4-train.00000-of-01024.first1000.jsonl@512"},
    {"stories260K", "wikitext2:wiki.test.raw@512"},
    {"stories260K", "text:TinyStories-valid.stories0001-0232.clean.txt@512"},
    {"TinyStories-656K", "wikitext2:wiki.test.raw@512"},
    {"TinyStories-656K", "text:TinyStories-valid.stories0001-0232.clean.txt@512"},
    {"aidreams260K", "wikitext2:wiki.test.raw@128"},
};
constexpr const char* kModels[] = {"opt-tiny", "stories260K", "TinyStories-656K", "aidreams260K"};

nlohmann::json reference(const std::string& model) {
  std::ifstream f(test::shared_path("models/" + model + "/REFERENCE.json"));
  return nlohmann::json::parse(f);
}

std::string ids_sha256(const std::vector<std::int32_t>& ids) {
  static_assert(std::endian::native == std::endian::little, "hash over little-endian int32");
  return test::sha256_hex(ids.data(), ids.size() * sizeof(std::int32_t));
}

class PplGolden : public ::testing::TestWithParam<Case> {};

TEST_P(PplGolden, MatchesReference) {
  const Case c = GetParam();
  const auto ref = reference(c.model);
  const auto& e = ref.at("ppl").at(c.key);
  const auto model_dir = test::shared_path("models/" + std::string(c.model) + "/" + ref.value("model_dir", "."));
  const auto m = model::Model::load(model_dir);
  const auto tok = io::load_tokenizer(model_dir);
  const int seqlen = e.at("seqlen").get<int>();
  const auto dataset = io::parse_dataset(e.at("dataset").get<std::string>());
  const auto data = test::shared_path("data/" + e.at("data").get<std::string>());

  const auto ids = eval::eval_ids(*tok, dataset, data, seqlen);
  ASSERT_EQ(static_cast<std::int64_t>(ids.size()), e.at("tokens").get<std::int64_t>());
  ASSERT_EQ(ids_sha256(ids), e.at("ids_sha256").get<std::string>());

  const auto r = eval::perplexity_ids(*m, ids, seqlen, 0, 0, data.string());
  EXPECT_EQ(r.windows, e.at("windows").get<std::int64_t>());
  EXPECT_EQ(r.predicted, r.windows * (seqlen - 1));
  const double ref_ppl = e.at("ppl").get<double>();
  EXPECT_NEAR(r.ppl, ref_ppl, 1e-3 * ref_ppl) << c.model << " " << c.key << ": mean NLL " << r.mean_nll
                                              << " (reference " << e.at("mean_nll").get<double>() << ")";
  std::printf("%s %s: ppl %.5f (reference %.5f, rel. diff %.2e), %lld windows, %.0f tokens/s\n", c.model, c.key,
              r.ppl, ref_ppl, std::abs(r.ppl / ref_ppl - 1.0), static_cast<long long>(r.windows), r.tokens_per_s);
}

INSTANTIATE_TEST_SUITE_P(AllModels, PplGolden, ::testing::ValuesIn(kCases), [](const auto& info) {
  std::string name = std::string(info.param.model) + "_" + info.param.key;
  for (auto& ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return name;
});

// Every entry of every REFERENCE.json is one of the cases above.
TEST(PplGoldenCoverage, EveryReferenceEntryIsTested) {
  std::set<std::pair<std::string, std::string>> listed;
  for (const auto& c : kCases) listed.emplace(c.model, c.key);
  for (const char* model : kModels) {
    // Named: a range-for over a member of the temporary reference(model) would outlive it (C++20).
    const auto ref = reference(model);
    for (const auto& [key, entry] : ref.at("ppl").items()) {
      EXPECT_TRUE(listed.count({model, key})) << model << " " << key << " has no golden test";
    }
  }
}

}  // namespace
}  // namespace latentllm
