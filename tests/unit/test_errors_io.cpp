// docs/ERRORS.md in sync with the code (tests/support/errors_doc.hpp): safetensors files, checkpoint
// directories and the safetensors writer, one hand-made bad file per catalogued row.
#include <gtest/gtest.h>

#include <fstream>

#include "errors_doc.hpp"
#include "latentllm/io.hpp"

namespace latentllm::test {
namespace {

namespace fs = std::filesystem;

fs::path put(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
  return p;
}

// A safetensors file: 8-byte little-endian header length, the header, `data` zero bytes.
std::string st_bytes(const std::string& header, std::size_t data, std::uint64_t declared = 0) {
  std::uint64_t n = declared ? declared : header.size();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + header + std::string(data, '\0');
}

// Opening a file with this header and data fails with the row's error.
CaseFn open_st(const std::string& header, std::size_t data, std::uint64_t declared = 0) {
  return lib([=] {
    const fs::path p = put(make_temp_dir("err-st") / "x.safetensors", st_bytes(header, data, declared));
    io::SafetensorsFile f(p);
  });
}

const std::string kA = R"("a":{"dtype":"F32","shape":[6],"data_offsets":[0,24]})";

TEST(ErrorsDoc, SafetensorsFiles) {
  check_section("Safetensors files (`io::SafetensorsFile`)",
                {
                    {"st-open", {lib([] { io::SafetensorsFile f(make_temp_dir("err-st") / "missing.safetensors"); })}},
                    {"st-short", {lib([] { io::SafetensorsFile f(put(make_temp_dir("err-st") / "s", "abc")); })}},
                    {"st-header-cap", {open_st("{}", 0, 100000001)}},
                    {"st-header-beyond", {open_st("{}", 0, 100)}},
                    {"st-header-json", {open_st("{", 0)}},
                    {"st-header-type", {open_st("[]", 0)}},
                    {"st-duplicate", {open_st("{" + kA + "," + kA + "}", 24)}},
                    {"st-nesting", {open_st(R"({"a":{"dtype":"F32","shape":[[1]],"data_offsets":[0,4]}})", 4)}},
                    {"st-metadata", {open_st(R"({"__metadata__":[1]})", 0)}},
                    {"st-metadata-value", {open_st(R"({"__metadata__":{"k":1}})", 0)}},
                    {"st-entry", {open_st(R"({"a":5})", 0)}},
                    {"st-missing-key", {open_st(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", 4)}},
                    {"st-unknown-dtype", {open_st(R"({"a":{"dtype":"F17","shape":[1],"data_offsets":[0,4]}})", 4)}},
                    {"st-unsupported-dtype", {open_st(R"({"a":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}})", 4)}},
                    {"st-shape", {open_st(R"({"a":{"dtype":"F32","shape":[2,-3],"data_offsets":[0,4]}})", 4)}},
                    {"st-offsets", {open_st(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4)}},
                    {"st-offsets-order", {open_st(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8)}},
                    {"st-byte-overflow",
                     {open_st(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,4]}})", 4)}},
                    {"st-byte-length", {open_st(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,100]}})", 100)}},
                    {"st-beyond-data", {open_st(R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[24,32]}})", 28)}},
                    {"st-overlap",
                     {open_st("{" + kA + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}})", 24)}},
                    {"st-gap", {open_st("{" + kA + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[28,36]}})", 36)}},
                    {"st-trailing", {open_st(R"({"a":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})", 40)}},
                });
}

// A valid one-tensor file `name` [2, 3] in dir.
void valid_st(const fs::path& dir, const std::string& file, std::vector<std::string> names) {
  std::string header = "{";
  std::size_t off = 0;
  for (const auto& n : names) {
    header += fmt::format("{}\"{}\":{{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[{},{}]}}",
                          header.size() > 1 ? "," : "", n, off, off + 24);
    off += 24;
  }
  put(dir / file, st_bytes(header + "}", off));
}

CaseFn open_index(const std::string& index, std::vector<std::pair<std::string, std::vector<std::string>>> shards) {
  return lib([=] {
    const fs::path dir = make_temp_dir("err-store");
    put(dir / "model.safetensors.index.json", index);
    for (const auto& [file, names] : shards) {
      if (names.empty()) put(dir / file, "abc");
      else valid_st(dir, file, names);
    }
    (void)io::TensorStore::open(dir);
  });
}

TEST(ErrorsDoc, CheckpointDirectories) {
  check_section(
      "Checkpoint directories (`io::TensorStore`)",
      {
          {"store-none", {lib([] { (void)io::TensorStore::open(make_temp_dir("err-store")); })}},
          {"store-index-json", {open_index("{", {})}},
          {"store-weight-map", {open_index(R"({"weight_map":{}})", {})}},
          {"store-shard-name", {open_index(R"({"weight_map":{"a":"../x"}})", {})}},
          {"store-shard-missing", {open_index(R"({"weight_map":{"a":"s1.safetensors"}})", {})}},
          {"store-shard-lacks", {open_index(R"({"weight_map":{"a":"s1.safetensors"}})", {{"s1.safetensors", {"b"}}})}},
          {"store-twice",
           {open_index(R"({"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}})",
                       {{"s1.safetensors", {"a"}}, {"s2.safetensors", {"a", "b"}}})}},
          {"store-corrupt-shard", {open_index(R"({"weight_map":{"a":"s1.safetensors"}})", {{"s1.safetensors", {}}})}},
          {"store-missing-tensor", {lib([] {
             const fs::path dir = make_temp_dir("err-store");
             valid_st(dir, "model.safetensors", {"a"});
             (void)io::TensorStore::open(dir).get("zz");
           })}},
          {"store-shape", {lib([] {
             const fs::path dir = make_temp_dir("err-store");
             valid_st(dir, "model.safetensors", {"a"});
             const std::vector<std::int64_t> expected = {3, 2};
             (void)io::TensorStore::open(dir).get("a", expected);
           })}},
      });
}

CaseFn write_one(std::string name, std::vector<std::int64_t> shape, std::size_t values, bool twice = false,
                 fs::path where = {}) {
  return lib([=] {
    const std::vector<float> data(values, 1.0f);
    std::vector<io::TensorToWrite> ts = {{name, DType::F32, shape, data}};
    if (twice) ts.push_back(ts.front());
    const fs::path p = where.empty() ? make_temp_dir("err-write") / "x.safetensors" : where;
    io::write_safetensors(p, ts);
  });
}

TEST(ErrorsDoc, WritingSafetensors) {
  check_section("Writing safetensors (`io::write_safetensors`)",
                {
                    {"write-name", {write_one("a", {2}, 2, true), write_one("", {2}, 2), write_one("__metadata__", {2}, 2)}},
                    {"write-count", {write_one("a", {2, 4}, 6)}},
                    {"write-shape", {write_one("a", {-2, -3}, 0)}},
                    {"write-utf8", {write_one("\xff", {2}, 2)}},
                    {"write-create", {write_one("a", {2}, 2, false, "/nonexistent-dir/x.safetensors")}},
                });
}

}  // namespace
}  // namespace latentllm::test
