// Regression tests for the inputs that crashed the libFuzzer targets in fuzz/ (scripts/fuzz): each
// input, minimized, must now give the typed exception with a message naming the file. The inputs are
// also in the seed corpora (fuzz/corpus/<target>/regress-*) so that fuzzing starts from them.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "latentllm/chat.hpp"
#include "latentllm/dataset.hpp"
#include "latentllm/error.hpp"
#include "latentllm/image.hpp"
#include "latentllm/io.hpp"
#include "latentllm/model.hpp"
#include "latentllm/tokenizer.hpp"
#include "test_support.hpp"

namespace latentllm {
namespace {

namespace fs = std::filesystem;

fs::path write_file(const fs::path& dir, const std::string& name, const std::string& bytes) {
  const fs::path p = dir / name;
  std::ofstream f(p, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return p;
}

std::string le64(std::uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}


// fuzz_config, fuzz_safetensors: a number beyond double range made nlohmann throw out_of_range 406
// (not parse_error), which escaped the loaders as an untyped exception.
TEST(FuzzRegression, ConfigNumberOverflowIsFormatError) {
  const fs::path p = write_file(test::make_temp_dir("fuzz"), "config.json", "507E1507E1");
  test::expect_error<FormatError>([&] { model::load_config(p); }, {p.string() + ": not valid JSON", "number overflow"});
}

TEST(FuzzRegression, SafetensorsHeaderNumberOverflowIsFormatError) {
  const std::string header = R"({"a":1e999})";
  const fs::path p = write_file(test::make_temp_dir("fuzz"), "model.safetensors", le64(header.size()) + header);
  test::expect_error<FormatError>([&] { io::SafetensorsFile f(p); }, {p.string() + ": header is not valid JSON"});
}

TEST(FuzzRegression, ShardIndexNumberOverflowIsFormatError) {
  const fs::path dir = test::make_temp_dir("fuzz");
  const fs::path p = write_file(dir, "model.safetensors.index.json", "\n83888888888888888888e88563923-46422");
  test::expect_error<FormatError>([&] { io::TensorStore::open(dir); }, {p.string() + ": not valid JSON"});
}

// fuzz_tokenizer_json seed: a Split pre-tokenizer with a {"String": ...} pattern never loaded, because
// PCRE2 rejects PCRE2_LITERAL together with PCRE2_UCP ("invalid option bits").
TEST(FuzzRegression, SplitWithStringPatternLoads) {
  const fs::path dir = test::make_temp_dir("fuzz");
  write_file(dir, "tokenizer.json",
             R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "!": 2, "a!": 3}, "merges": ["a !"]},)"
             R"( "pre_tokenizer": {"type": "Split", "pattern": {"String": "!"}, "behavior": "Isolated",)"
             R"( "invert": false}})");
  const auto tok = io::load_tokenizer(dir);
  EXPECT_EQ(tok->encode("a!b!", false), (std::vector<std::int32_t>{0, 2, 1, 2}));
}

// A deeply nested document parsed fine (nlohmann's parser is iterative) but then overflowed the stack
// when copied (ModelConfig::raw) or dumped into an error message: the readers now refuse nesting
// beyond kMaxJsonDepth before parsing.
std::string nested(std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(FuzzRegression, DeepConfigIsFormatError) {
  const fs::path p = write_file(test::make_temp_dir("fuzz"), "config.json",
                                R"({"architectures": ["OPTForCausalLM"], "hidden_size": )" + nested(1000000) + "}");
  test::expect_error<FormatError>([&] { model::load_config(p); }, {p.string() + ": JSON nesting too deep", "at most 64"});
}

TEST(FuzzRegression, DeepShardIndexIsFormatError) {
  const fs::path dir = test::make_temp_dir("fuzz");
  const fs::path p =
      write_file(dir, "model.safetensors.index.json", R"({"weight_map": {"a": )" + nested(100000) + "}}");
  test::expect_error<FormatError>([&] { io::TensorStore::open(dir); }, {p.string() + ": JSON nesting too deep"});
}

TEST(FuzzRegression, DeepTokenizerConfigIsFormatError) {
  const fs::path dir = test::make_temp_dir("fuzz");
  write_file(dir, "tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})");
  const fs::path p = write_file(dir, "tokenizer_config.json", R"({"bos_token": )" + nested(100000) + "}");
  test::expect_error<FormatError>([&] { io::load_tokenizer(dir); }, {p.string() + ": JSON nesting too deep"});
}

TEST(FuzzRegression, JsonDepthIgnoresBracketsInStrings) {
  const fs::path dir = test::make_temp_dir("fuzz");
  write_file(dir, "tokenizer.json",
             R"({"model": {"type": "BPE", "vocab": {")" + std::string(100, '[') + R"(\"": 0, "a": 1}, "merges": []}})");
  EXPECT_EQ(io::load_tokenizer(dir)->encode("a", false), (std::vector<std::int32_t>{1}));
}

// Token ids straight from JSON: a negative id indexed id_to_token before its start (UBSan), a float
// beyond int32 was an undefined conversion, an id near INT32_MAX allocated a 64 GB table (ASan
// out-of-memory) or overflowed `id + 1` (GPT-2 loader).
fs::path tokenizer_json_with_id(const std::string& id) {
  const fs::path dir = test::make_temp_dir("fuzz");
  write_file(dir, "tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": )" + id + R"(}, "merges": []}})");
  return dir;
}

TEST(FuzzRegression, NegativeTokenIdIsFormatError) {
  const fs::path dir = tokenizer_json_with_id("-3");
  test::expect_error<FormatError>([&] { io::load_tokenizer(dir); },
                            {(dir / "tokenizer.json").string() + ": model: vocab \"a\": id (expected an integer in "
                                                                 "0..1073741823, got -3)"});
}

TEST(FuzzRegression, FloatTokenIdIsFormatError) {
  const fs::path dir = tokenizer_json_with_id("1e10");
  test::expect_error<FormatError>([&] { io::load_tokenizer(dir); }, {"vocab \"a\": id (expected an integer", "got 1"});
}

TEST(FuzzRegression, HugeTokenIdIsFormatError) {
  const fs::path dir = tokenizer_json_with_id("2000000000");
  test::expect_error<FormatError>([&] { io::load_tokenizer(dir); }, {"got 2000000000)"});
}

TEST(FuzzRegression, LargestTokenIdLoadsWithoutADenseTable) {
  const auto tok = io::load_tokenizer(tokenizer_json_with_id("1073741823"));
  EXPECT_EQ(tok->vocab_size(), 1073741824);
  EXPECT_EQ(tok->id_to_token(1073741823), "a");
  EXPECT_EQ(tok->id_to_token(0), "");
  EXPECT_EQ(tok->encode("aa", false), (std::vector<std::int32_t>{1073741823, 1073741823}));
}

TEST(FuzzRegression, AddedTokenAndTemplateIdsAreChecked) {
  const fs::path dir = test::make_temp_dir("fuzz");
  write_file(dir, "tokenizer.json",
             R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},)"
             R"( "added_tokens": [{"id": -1, "content": "<s>"}]})");
  test::expect_error<FormatError>([&] { io::load_tokenizer(dir); }, {"added token \"<s>\": id (expected", "got -1)"});
  write_file(dir, "tokenizer.json",
             R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "post_processor":)"
             R"( {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}}],)"
             R"( "special_tokens": {"<s>": {"ids": [3.5e9]}}}})");
  test::expect_error<FormatError>([&] { io::load_tokenizer(dir); }, {"post_processor: <s>: id (expected"});
}

TEST(FuzzRegression, Gpt2MaxIntTokenIdIsFormatError) {
  const fs::path dir = test::make_temp_dir("fuzz");
  const fs::path vocab = write_file(dir, "vocab.json", R"({"a": 2147483647})");
  write_file(dir, "merges.txt", "a b\n");
  test::expect_error<FormatError>([&] { io::load_tokenizer(dir); },
                            {vocab.string() + ": token \"a\": id (expected an integer in 0..1073741823, got "
                                              "2147483647)"});
}

// An empty Metaspace replacement made the split loop find "" at the same offset forever (a hang
// that grew memory); tokenizers itself requires one character.
TEST(FuzzRegression, EmptyMetaspaceReplacementIsFormatError) {
  const fs::path dir = test::make_temp_dir("fuzz");
  write_file(dir, "tokenizer.json",
             R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},)"
             R"( "pre_tokenizer": {"type": "Metaspace", "replacement": ""}})");
  test::expect_error<FormatError>([&] { io::load_tokenizer(dir); },
                            {"pre_tokenizer: Metaspace replacement (expected one character, got \"\")"});
  write_file(dir, "tokenizer.json",
             R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},)"
             R"( "pre_tokenizer": {"type": "Metaspace", "replacement": "ab"}})");
  test::expect_error<FormatError>([&] { io::load_tokenizer(dir); }, {"got \"ab\")"});
}

// fuzz_safetensors: widening an empty F32 tensor (shape [0, 3]) passed the null data() of an empty
// vector to memcpy (UBSan: null pointer passed as argument 1). Meaningful under scripts/sanitize.
TEST(FuzzRegression, EmptyF32TensorWidensToNothing) {
  const std::string header =
      R"({"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"e":{"dtype":"F32","shape":[0,3],"data_offsets":[4,4]}})";
  const fs::path p =
      write_file(test::make_temp_dir("fuzz"), "model.safetensors", le64(header.size()) + header + std::string(4, '\0'));
  const io::SafetensorsFile f(p);
  ASSERT_NE(f.find("e"), nullptr);
  EXPECT_TRUE(f.find("e")->to_f32().empty());
  EXPECT_EQ(f.find("s")->to_f32(), std::vector<float>{0.0f});
}

// fuzz_tokenizer_spm (found by CI): a unigram model with a piece starting with a NUL byte made
// libsentencepiece's bundled darts-clone (which takes the pieces as C strings) throw
// Darts::Details::Exception ("zero-length key") out of LoadFromSerializedProto; untyped, it
// terminated the process. A NUL later in a piece would silently shorten it.
std::string proto_field(int field, const std::string& bytes) {  // length-delimited, short messages only
  return std::string{static_cast<char>(field << 3 | 2), static_cast<char>(bytes.size())} + bytes;
}
std::string proto_varint(int field, int value) {
  return std::string{static_cast<char>(field << 3), static_cast<char>(value)};
}
std::string spm_piece(const std::string& text, int type) {  // SentencePiece {piece, score, type}
  return proto_field(1, proto_field(1, text) + std::string{0x15, 0, 0, 0, 0} + proto_varint(3, type));
}

TEST(FuzzRegression, SentencePieceNulPieceIsFormatError) {
  const fs::path dir = test::make_temp_dir("fuzz");
  // pieces: <unk> (UNKNOWN = 2), "a" and "\0b" (NORMAL = 1); trainer_spec.model_type = UNIGRAM (1).
  const std::string nul_b{'\0', 'b'};
  const fs::path p = write_file(dir, "tokenizer.model", spm_piece("<unk>", 2) + spm_piece("a", 1) +
                                                            spm_piece(nul_b, 1) + proto_field(2, proto_varint(3, 1)));
  test::expect_error<FormatError>([&] { io::load_tokenizer(dir); },
                            {p.string() + ": not a readable SentencePiece model (piece 2 contains a NUL byte)"});
  write_file(dir, "tokenizer.model", spm_piece("<unk>", 2) + spm_piece("a", 1) + spm_piece("a" + nul_b, 1) +
                                         proto_field(2, proto_varint(3, 1)));
  test::expect_error<FormatError>([&] { io::load_tokenizer(dir); }, {"(piece 2 contains a NUL byte)"});
  // The same model without the empty piece loads and encodes (the test's proto encoding is right).
  write_file(dir, "tokenizer.model", spm_piece("<unk>", 2) + spm_piece("a", 1) + spm_piece("\u2581", 1) +
                                         proto_field(2, proto_varint(3, 1)));
  EXPECT_EQ(io::load_tokenizer(dir)->encode("a", false), (std::vector<std::int32_t>{2, 1}));
}

// fuzz_image: a 134-byte CMYK JPEG declaring 15920x15475 pixels (within kMaxImagePixels) and ending at
// once; libjpeg fills in the missing data, a legitimate decode of 246362000 pixels that took longer than
// the fuzzer's time limit under ASan. The target now passes max_pixels = 2^22, so such an image stops
// at its header.
TEST(FuzzRegression, HugeDeclaredJpegStopsAtTheHeader) {
  const std::vector<std::uint8_t> input = {
      0xff, 0xd8, 0xff, 0xee, 0x00, 0x00, 0xff, 0xdb, 0x00, 0x43, 0x00, 0x03, 0x02, 0x04, 0x03, 0x03,
      0x04, 0x05, 0x08, 0x05, 0x05, 0x04, 0x04, 0x05, 0x0a, 0x07, 0x07, 0x06, 0x08, 0x0c, 0x0a, 0x0c,
      0x0c, 0x0b, 0x0a, 0x69, 0x6e, 0x76, 0x65, 0x72, 0x74, 0x0b, 0x0b, 0x0d, 0x0e, 0x12, 0x10, 0x0d,
      0x0e, 0x11, 0x4e, 0x30, 0x0b, 0x0b, 0x66, 0x66, 0x6e, 0x5f, 0x64, 0x69, 0x6d, 0x10, 0x16, 0x10,
      0x11, 0x13, 0x14, 0x15, 0x15, 0x15, 0x0c, 0x0f, 0x17, 0x18, 0x16, 0x14, 0x18, 0x12, 0x14, 0x15,
      0x14, 0xff, 0xc0, 0x00, 0x14, 0x08, 0x3c, 0x73, 0x3e, 0x30, 0x04, 0x43, 0x11, 0x00, 0x4d, 0x11,
      0x00, 0x59, 0x14, 0x00, 0x4b, 0x11, 0x00, 0x44, 0xb6, 0xb7, 0xfa, 0xff, 0xda, 0x00, 0x0e, 0x04,
      0x43, 0x00, 0x4d, 0x00, 0x59, 0x00, 0x4b, 0x00, 0x00, 0x3f, 0x00, 0xf2, 0xaf, 0x87, 0x1e, 0x08,
      0xd3, 0xca, 0xa2, 0x15, 0xff, 0xd9,
  };
  test::expect_error<FormatError>([&] { image::decode_image(input, "input", std::int64_t{1} << 22); },
                                  {"input: image size 15920x15475 (expected at most 4194304 pixels, got 246362000)"});
}

// A template's integer literal beyond 64 bits (fuzz/corpus/chat_template/regress-int-overflow).
TEST(FuzzRegression, JinjaIntegerBeyond64BitsIsFormatError) {
  const std::string tmpl = "{% for {" + std::string(75, '8') + "%- if tools %}x{% endif %}{% endfor %}";
  try {
    io::ChatTemplate t(tmpl, "regress");
    ADD_FAILURE() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("regress: line 1: syntax (expected a number within 64 bits, got 888"),
              std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace latentllm
