// `latentllm export --format onnx` (format::write_onnx): the TinyStories-656K (Llama, GQA, RoPE, tied
// head stored as lm_head) and opt-tiny (biases, learned positions, latent keys and values) latent
// checkpoints as ONNX graphs that libonnx's checker accepts with strict shape inference; the graph's
// float initializers are exactly the checkpoint's tensors (so its parameter count is `inspect`'s); the
// inputs and outputs are Optimum's decoder layout with the latent past where `generate --kv-cache auto`
// caches the latent; external data above the threshold; f16 weights and I/O; the error rows of
// docs/ERRORS.md "ONNX export". ONNX Runtime runs them in test_onnx_runtime.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <set>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "errors_doc.hpp"
#include "latentllm/export.hpp"
#include "latentllm/io.hpp"
#include "onnx_support.hpp"

namespace latentllm::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int kFloat = 1, kInt64 = 7, kFloat16 = 10;

json read_json(const fs::path& p) { return json::parse(std::ifstream(p)); }
fs::path graph(const fs::path& dir) { return dir / "onnx" / "model.onnx"; }

std::int64_t numel(const json& dims) {
  std::int64_t n = 1;
  for (const auto& d : dims) n *= d.get<std::int64_t>();
  return n;
}

std::int64_t inspect_params(const fs::path& lat) {
  const std::string log = run_cli_ok("inspect --model " + shq(lat) + " --json");
  return json::parse(log.substr(log.find('{'))).at("model_params").get<std::int64_t>();
}

// Every float initializer is a tensor of the latent checkpoint with its element count (the factors as
// stored, never B·A), every checkpoint tensor is one, and other initializers are int64 gather indices.
void expect_initializers_are_the_checkpoint(const fs::path& lat, const json& d, int float_type) {
  const io::TensorStore store = io::TensorStore::open(lat);
  std::set<std::string> seen;
  std::int64_t params = 0;
  for (const auto& t : d.at("initializers")) {
    const std::string name = t.at("name");
    if (t.at("type") == kInt64) {
      EXPECT_TRUE(name.ends_with(".perm.identity") || name.ends_with(".perm.rest")) << name;
      continue;
    }
    EXPECT_EQ(t.at("type"), float_type) << name;
    ASSERT_TRUE(store.has(name)) << name << " is not a checkpoint tensor";
    EXPECT_EQ(numel(t.at("dims")), store.get(name).numel()) << name;
    EXPECT_TRUE(seen.insert(name).second) << name << " twice";
    params += numel(t.at("dims"));
  }
  EXPECT_EQ(seen.size(), store.names().size());
  EXPECT_EQ(params, inspect_params(lat));
}

// Optimum's decoder inputs and outputs; the past of layer i latent [batch, past, r] exactly where
// config.json's latentllm_export says so (and the metadata), else dense [batch, H_kv, past, d_h].
void expect_decoder_io(const fs::path& dir, const json& d, int io_type) {
  const json cfg = read_json(dir / "config.json");
  const json& layers = cfg.at("latentllm_export").at("past_key_values");
  const int L = cfg.at("num_hidden_layers"), H = cfg.at("num_attention_heads");
  const int H_kv = cfg.value("num_key_value_heads", H), d_h = cfg.value("head_dim", cfg.at("hidden_size").get<int>() / H);
  ASSERT_EQ(static_cast<int>(layers.size()), L);
  const json& in = d.at("inputs");
  const json& out = d.at("outputs");
  ASSERT_EQ(in.size(), static_cast<std::size_t>(3 + 2 * L));
  ASSERT_EQ(out.size(), static_cast<std::size_t>(1 + 2 * L));
  EXPECT_EQ(in[0], json({{"name", "input_ids"}, {"type", kInt64}, {"dims", {"batch_size", "sequence_length"}}}));
  EXPECT_EQ(in[1], json({{"name", "attention_mask"}, {"type", kInt64}, {"dims", {"batch_size", "total_sequence_length"}}}));
  EXPECT_EQ(in[2], json({{"name", "position_ids"}, {"type", kInt64}, {"dims", {"batch_size", "sequence_length"}}}));
  EXPECT_EQ(out[0], json({{"name", "logits"}, {"type", io_type},
                          {"dims", {"batch_size", "sequence_length", cfg.at("vocab_size")}}}));
  for (int i = 0; i < L; ++i) {
    for (int p = 0; p < 2; ++p) {
      const std::string part = p == 0 ? "key" : "value";
      const json& f = layers[static_cast<std::size_t>(i)].at(part);
      auto dims = [&](const char* len) {
        return f.at("form") == "latent" ? json({"batch_size", len, f.at("rank")}) : json({"batch_size", H_kv, len, d_h});
      };
      EXPECT_EQ(in[static_cast<std::size_t>(3 + 2 * i + p)],
                json({{"name", fmt::format("past_key_values.{}.{}", i, part)}, {"type", io_type}, {"dims", dims("past_sequence_length")}}));
      EXPECT_EQ(out[static_cast<std::size_t>(1 + 2 * i + p)],
                json({{"name", fmt::format("present.{}.{}", i, part)}, {"type", io_type}, {"dims", dims("total_sequence_length")}}));
      EXPECT_EQ(d.at("metadata").at(fmt::format("latentllm.past_key_values.{}.{}", i, part)), f.at("form"));
    }
  }
  EXPECT_GE(d.at("opset").get<int>(), 17);
}

TEST(ExportOnnx, TinyStoriesPassesTheCheckerAndKeepsTheCheckpointsParameters) {
  LATENTLLM_REQUIRE_ONNX_MODULE();
  const fs::path lat = latent_fixture("TinyStories-656K");
  const fs::path out = onnx_export(lat);
  format::check_onnx_model(graph(out), /*full=*/true);
  const json d = format::describe_onnx_model(graph(out));
  expect_initializers_are_the_checkpoint(lat, d, kFloat);
  expect_decoder_io(out, d, kFloat);
  // RoPE keys stay dense (generate --kv-cache auto), the values are latent.
  for (const auto& l : read_json(out / "config.json").at("latentllm_export").at("past_key_values")) {
    EXPECT_EQ(l.at("key").at("form"), "dense");
    EXPECT_EQ(l.at("value").at("form"), "latent");
  }
  EXPECT_FALSE(read_json(out / "config.json").contains("latent"));
  EXPECT_EQ(read_bytes(out / "tokenizer.json"), read_bytes(lat / "tokenizer.json"));
  EXPECT_FALSE(fs::exists(out / "onnx" / "model.onnx_data"));
}

TEST(ExportOnnx, OptTinyPassesTheCheckerWithLatentKeysAndValues) {
  LATENTLLM_REQUIRE_ONNX_MODULE();
  const fs::path lat = latent_fixture("opt-tiny");
  const fs::path out = onnx_export(lat);
  format::check_onnx_model(graph(out), /*full=*/true);
  const json d = format::describe_onnx_model(graph(out));
  expect_initializers_are_the_checkpoint(lat, d, kFloat);
  expect_decoder_io(out, d, kFloat);
  for (const auto& l : read_json(out / "config.json").at("latentllm_export").at("past_key_values")) {
    EXPECT_EQ(l.at("key").at("form"), "latent");
    EXPECT_EQ(l.at("value").at("form"), "latent");
  }
}

// A dense checkpoint exports too: every module one MatMul over its stored weight, every past dense.
TEST(ExportOnnx, DenseCheckpointExportsWithDensePasts) {
  LATENTLLM_REQUIRE_ONNX_MODULE();
  const fs::path dense = shared_path("models/TinyStories-656K");
  const fs::path out = onnx_export(dense);
  format::check_onnx_model(graph(out), /*full=*/true);
  const json d = format::describe_onnx_model(graph(out));
  expect_initializers_are_the_checkpoint(dense, d, kFloat);
  expect_decoder_io(out, d, kFloat);
  for (const auto& l : read_json(out / "config.json").at("latentllm_export").at("past_key_values")) {
    EXPECT_EQ(l.at("key").at("form"), "dense");
    EXPECT_EQ(l.at("value").at("form"), "dense");
  }
}

// Above the threshold every initializer goes to onnx/model.onnx_data and the graph stays small.
TEST(ExportOnnx, ExternalDataAboveTheThreshold) {
  LATENTLLM_REQUIRE_ONNX_MODULE();
  const fs::path lat = latent_fixture("TinyStories-656K");
  const fs::path out = make_temp_dir("onnx-ext") / "onnx";
  format::ExportOptions opt;
  opt.format = "onnx";
  opt.onnx_external_data_above = 1 << 10;
  format::export_checkpoint(lat, out, opt);
  ASSERT_TRUE(fs::exists(out / "onnx" / "model.onnx_data"));
  format::check_onnx_model(graph(out), /*full=*/true);
  const json d = format::describe_onnx_model(graph(out));
  for (const auto& t : d.at("initializers")) EXPECT_TRUE(t.at("external").get<bool>()) << t.at("name");
  EXPECT_LT(fs::file_size(graph(out)), fs::file_size(graph(onnx_export(lat))) / 4);
  EXPECT_GT(fs::file_size(out / "onnx" / "model.onnx_data"), fs::file_size(lat / "model.safetensors") * 9 / 10);
  expect_initializers_are_the_checkpoint(lat, d, kFloat);
}

TEST(ExportOnnx, F16WeightsAndIo) {
  LATENTLLM_REQUIRE_ONNX_MODULE();
  const fs::path lat = latent_fixture("opt-tiny");
  const fs::path out = onnx_export(lat, "--dtype f16");
  format::check_onnx_model(graph(out), /*full=*/true);
  const json d = format::describe_onnx_model(graph(out));
  expect_initializers_are_the_checkpoint(lat, d, kFloat16);
  expect_decoder_io(out, d, kFloat16);
  EXPECT_EQ(read_json(out / "config.json").at("torch_dtype"), "float16");
  // --force replaces an earlier ONNX export (config.json's latentllm_export marks it as ours).
  run_cli_ok("export --model " + shq(lat) + " --out " + shq(out) + " --format onnx --force -q");
  EXPECT_EQ(read_json(out / "config.json").at("torch_dtype"), "float32");
}

// A copy of the f32 TinyStories latent whose first B weight is 1e5 (beyond f16).
fs::path latent_with_a_huge_factor() {
  const fs::path dir = make_temp_dir("onnx-huge") / "latent";
  fs::copy(latent_fixture("TinyStories-656K"), dir, fs::copy_options::recursive);
  std::string bytes = read_bytes(dir / "model.safetensors");
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const json header = json::parse(bytes.substr(8, n));
  const std::uint64_t begin = header.at("model.layers.0.self_attn.q_proj.B.weight").at("data_offsets")[0];
  const float huge = 1e5f;
  std::memcpy(bytes.data() + 8 + n + begin, &huge, 4);
  std::ofstream(dir / "model.safetensors", std::ios::binary | std::ios::trunc) << bytes;
  return dir;
}

// A copy of the OPT checkpoint `src_dir` in `<temp>/<sub>` made post-LN as OPT-350M:
// do_layer_norm_before false, no final layer norm.
fs::path post_ln_copy(const fs::path& src_dir, const std::string& tag, const std::string& sub) {
  const fs::path dir = make_temp_dir(tag) / sub;
  fs::copy(src_dir, dir, fs::copy_options::recursive);
  const io::SafetensorsFile src(src_dir / "model.safetensors");
  std::vector<std::vector<float>> values;
  values.reserve(src.tensors().size());
  std::vector<io::TensorToWrite> tensors;
  for (const auto& t : src.tensors()) {
    if (t.name.find("decoder.final_layer_norm.") != std::string::npos) continue;
    values.push_back(t.to_f32());
    tensors.push_back({t.name, DType::F32, t.shape, values.back()});
  }
  fs::remove(dir / "model.safetensors");
  io::write_safetensors(dir / "model.safetensors", tensors);
  json cfg = read_json(dir / "config.json");
  cfg["do_layer_norm_before"] = false;
  std::ofstream(dir / "config.json", std::ios::trunc) << cfg.dump(2);
  return dir;
}

// The opt-tiny latent made post-LN, and the dense opt-tiny made post-LN (for compress --format onnx).
fs::path post_ln_opt() { return post_ln_copy(latent_fixture("opt-tiny"), "onnx-postln", "latent"); }
fs::path post_ln_dense_opt() { return post_ln_copy(shared_path("models/opt-tiny"), "onnx-postln-dense", "opt"); }

fs::path llava_latent() {
  const fs::path out = make_temp_dir("onnx-llava") / "latent";
  run_cli_ok("compress --model " + shq(shared_path("models/llava-shapes-tiny")) + " --method latentllm --ratio 0.3 " +
             "--calib text --calib-data " + shq(tinystories_text()) + " --nsamples 4 --seqlen 64 -q --out " + shq(out));
  return out;
}

// `latentllm <args>` with the environment `env` prepended, as errors_doc.hpp's cli().
CaseFn cli_with_env(const std::string& env, const std::string& args) {
  return [env, args] {
    std::string out;
    const int rc = run_command(env + " " + cli_path().string() + " " + args, out);
    const std::string tag = "latentllm: error: ";
    const auto pos = out.rfind(tag);
    if (rc != 1 || pos == std::string::npos) return Outcome{fmt::format("exit status {}", rc), out};
    return Outcome{"*", cli_error_line(out, pos + tag.size())};
  };
}

TEST(ErrorsDoc, OnnxExport) {
  const fs::path lat = latent_fixture("TinyStories-656K");
  const fs::path tmp = make_temp_dir("onnx-err");
  const std::string m = " --model " + shq(lat) + " --format onnx";
  // compress --format onnx refuses the same before any work (the dry run stops after its checks).
  auto compress = [](const fs::path& model, const std::string& args) {
    return cli("compress --model " + shq(model) + " --format onnx --dry-run " + args);
  };
  const fs::path stories = shared_path("models/stories260K/hf");
  check_section("ONNX export (`latentllm export --format onnx`)",
                {
                    {"onnx-module", {cli_with_env("LATENTLLM_ONNX_MODULE=/nonexistent/liblatentllm_onnx.so",
                                                  "export" + m + " --out " + shq(tmp / "a")),
                                     cli_with_env("LATENTLLM_ONNX_MODULE=/nonexistent/liblatentllm_onnx.so",
                                                  "compress --model " + shq(stories) + " --format onnx --dry-run")}},
                    {"onnx-dtype", {cli("export" + m + " --dtype bf16 --out " + shq(tmp / "b")), compress(stories, "--dtype bf16")}},
                    {"onnx-kv-cache-latent", {cli("export" + m + " --kv-cache latent --out " + shq(tmp / "f")),
                                              compress(stories, "--kv-cache latent")}},
                    {"onnx-multimodal", {cli("export --model " + shq(llava_latent()) + " --format onnx --out " + shq(tmp / "c")),
                                         compress(shared_path("models/llava-shapes-tiny"), "")}},
                    {"onnx-opt-post-ln", {cli("export --model " + shq(post_ln_opt()) + " --format onnx --out " + shq(tmp / "d")),
                                          compress(post_ln_dense_opt(), "")}},
                    {"onnx-overflow", {cli("export --model " + shq(latent_with_a_huge_factor()) +
                                           " --format onnx --dtype f16 --out " + shq(tmp / "e"))}},
                });
  for (const char* d : {"a", "b", "c", "d", "e", "f"}) EXPECT_FALSE(fs::exists(tmp / d)) << d;  // nothing left behind
}

}  // namespace
}  // namespace latentllm::test
