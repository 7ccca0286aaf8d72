// src/image: decoding against PIL, the CLIP processor against transformers' slow path (both from
// tests/data/golden/images, written by scripts/gen_image_golden.py), the llava-shapes-tiny fixture's
// pixel_values (../shared REFERENCE.json), bad files, and the docs/ERRORS.md rows of images.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "errors_doc.hpp"
#include "latentllm/error.hpp"
#include "latentllm/files.hpp"
#include "latentllm/image.hpp"
#include "test_support.hpp"

namespace latentllm::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using image::RgbImage;

fs::path golden_dir() { return test_data_path("golden/images"); }

json golden_index() { return json::parse(core::read_file(golden_dir() / "index.json")); }

std::vector<std::uint8_t> bytes_of(const fs::path& p) {
  const std::string s = core::read_file(p);
  return {s.begin(), s.end()};
}

std::vector<float> floats_of(const fs::path& p) {
  const std::string s = core::read_file(p);
  std::vector<float> out(s.size() / 4);
  std::memcpy(out.data(), s.data(), out.size() * 4);  // little-endian float32, as this machine
  return out;
}

image::ProcessorConfig variant_config(const json& index, const std::string& variant) {
  const json& v = index.at("variants").at(variant);
  image::ProcessorConfig c = image::parse_processor_config(v.at("config"), "index.json:" + variant);
  c.pad_to_square = v.at("pad_to_square").get<bool>();
  return c;
}

TEST(ImageGolden, DecodesEveryImageAsPil) {
  const json index = golden_index();
  ASSERT_GE(index.at("images").size(), 20u);
  for (const json& e : index.at("images")) {
    const std::string name = e.at("name");
    SCOPED_TRACE(name + " (PIL mode " + e.at("mode").get<std::string>() + ")");
    const RgbImage img = image::load_image(golden_dir() / e.at("file").get<std::string>());
    EXPECT_EQ(img.height, e.at("height").get<int>());
    EXPECT_EQ(img.width, e.at("width").get<int>());
    const std::vector<std::uint8_t> want = bytes_of(golden_dir() / (name + ".rgb"));  // [H, W, 3]
    ASSERT_EQ(img.data.size(), want.size());
    std::size_t diff = 0;
    for (std::size_t i = 0; i < want.size(); ++i) diff += img.data[i] != want[i];
    EXPECT_EQ(diff, 0u) << "bytes differing from PIL's convert(\"RGB\")";
  }
}

TEST(ImageGolden, PreprocessesAsClipImageProcessor) {
  const json index = golden_index();
  int checked = 0;
  for (const json& e : index.at("images")) {
    const std::string name = e.at("name");
    const RgbImage img = image::load_image(golden_dir() / e.at("file").get<std::string>());
    for (const json& v : e.at("variants")) {
      SCOPED_TRACE(name + " / " + v.get<std::string>());
      const image::PixelValues px = image::preprocess(img, variant_config(index, v));
      const std::vector<float> want = floats_of(golden_dir() / (name + "." + v.get<std::string>() + ".f32"));
      ASSERT_EQ(px.data.size(), want.size());  // [3, h, w]
      double max_diff = 0;
      std::size_t exact = 0;
      for (std::size_t i = 0; i < want.size(); ++i) {
        max_diff = std::max(max_diff, double(std::fabs(px.data[i] - want[i])));
        exact += px.data[i] == want[i];
      }
      EXPECT_LE(max_diff, 1e-6);
      EXPECT_EQ(exact, want.size()) << "values not bit-identical to the float32 reference";
      ++checked;
    }
  }
  EXPECT_GE(checked, 30);
}

// The two val images of ../shared/models/llava-shapes-tiny/REFERENCE.json through the model's own
// preprocessor_config.json: every value within 1e-6, and the float32 bytes' sha256.
TEST(ImageGolden, LlavaShapesTinyPixelValues) {
  const fs::path model = shared_path("models/llava-shapes-tiny");
  const image::ProcessorConfig config = image::load_processor_config(model / "preprocessor_config.json");
  const json ref = json::parse(core::read_file(model / "REFERENCE.json"));
  int checked = 0;
  for (const json& ex : ref.at("examples")) {
    if (!ex.contains("pixel_values")) continue;
    SCOPED_TRACE(ex.at("pid").get<std::string>());
    const json& pv = ex.at("pixel_values");
    const RgbImage img =
        image::load_image(shared_path("data/scienceqa-shapes/" + ex.at("image").at("path").get<std::string>()));
    EXPECT_EQ(img.width, ex.at("image").at("width").get<int>());
    EXPECT_EQ(img.height, ex.at("image").at("height").get<int>());
    const image::PixelValues px = image::preprocess(img, config);
    EXPECT_EQ(json({1, 3, px.height, px.width}), pv.at("shape"));
    const auto& values = pv.at("values_rounded_7");
    ASSERT_EQ(values.size(), px.data.size());
    double max_diff = 0, sum = 0;
    for (std::size_t i = 0; i < px.data.size(); ++i) {
      max_diff = std::max(max_diff, std::fabs(px.data[i] - values[i].get<double>()));
      sum += px.data[i];
    }
    EXPECT_LE(max_diff, 1e-6);
    for (std::size_t i = 0; i < 16; ++i) EXPECT_NEAR(px.data[i], pv.at("first16")[i].get<double>(), 1e-6);
    EXPECT_NEAR(sum, pv.at("sum").get<double>(), 1e-3);
    EXPECT_EQ(sha256_hex(px.data.data(), px.data.size() * 4), pv.at("sha256_float32_le").get<std::string>());
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

TEST(Image, ResizeOutputSizeFollowsTransformers) {
  image::ProcessorConfig c;
  c.shortest_edge = 64;
  EXPECT_EQ(image::resize_output_size(52, 70, c), std::pair(64, 86));   // int(64 * 70 / 52) = 86
  EXPECT_EQ(image::resize_output_size(120, 96, c), std::pair(80, 64));
  EXPECT_EQ(image::resize_output_size(64, 64, c), std::pair(64, 64));
  EXPECT_EQ(image::resize_output_size(3, 200, c), std::pair(64, 4266));  // floor of 4266.67
  c.shortest_edge = 0;
  c.size_height = 48;
  c.size_width = 80;
  EXPECT_EQ(image::resize_output_size(5, 7, c), std::pair(48, 80));
}

TEST(Image, ResizeKeepsConstantImagesAndSameSize) {
  RgbImage img{5, 9, std::vector<std::uint8_t>(5 * 9 * 3, 200)};
  for (auto r : {image::Resample::Bicubic, image::Resample::Bilinear}) {
    const RgbImage up = image::resize(img, 13, 4, r);
    EXPECT_EQ(up.height, 13);
    EXPECT_EQ(up.width, 4);
    for (auto v : up.data) EXPECT_EQ(v, 200);
  }
  img.data[7] = 3;
  EXPECT_EQ(image::resize(img, 5, 9, image::Resample::Bicubic).data, img.data);
}

TEST(Image, CenterCropPadsSmallImagesWithZeros) {
  RgbImage img{1, 2, {1, 2, 3, 4, 5, 6}};
  const RgbImage c = image::center_crop(img, 3, 5);  // pad ceil(2/2)=1 above, ceil(3/2)=2 left
  ASSERT_EQ(c.data.size(), 3u * 5 * 3);
  for (int y = 0; y < 3; ++y) {
    for (int x = 0; x < 5; ++x) {
      const bool inside = y == 1 && (x == 2 || x == 3);
      EXPECT_EQ(c.pixel(y, x)[0], inside ? (x == 2 ? 1 : 4) : 0) << y << "," << x;
    }
  }
}

TEST(Image, ExpandToSquareCentresOnTheFill) {
  RgbImage img{1, 4, std::vector<std::uint8_t>(12, 9)};
  const RgbImage s = image::expand_to_square(img, {122, 116, 104});
  ASSERT_EQ(s.height, 4);
  EXPECT_EQ(s.pixel(0, 0)[0], 122);
  EXPECT_EQ(s.pixel(1, 0)[2], 9);  // row (4 − 1) // 2 = 1
  EXPECT_EQ(s.pixel(2, 3)[1], 116);
}

TEST(Image, ParsesLlavaNextKeysAndIntegerSizes) {
  const json doc = {{"image_processor_type", "LlavaNextImageProcessor"},
                    {"size", 336},
                    {"crop_size", 336},
                    {"image_grid_pinpoints", {{336, 672}, {672, 336}}},
                    {"image_mean", 0.5},
                    {"image_std", {0.5, 0.5, 0.5}}};
  const image::ProcessorConfig c = image::parse_processor_config(doc, "p.json");
  EXPECT_EQ(c.shortest_edge, 336);
  EXPECT_EQ(c.crop_height, 336);
  EXPECT_EQ(c.crop_width, 336);
  ASSERT_EQ(c.image_grid_pinpoints.size(), 2u);
  EXPECT_EQ(c.image_grid_pinpoints[1], std::pair(672, 336));
  EXPECT_EQ(c.image_mean[2], 0.5);
}

// Every prefix of a PNG and a JPEG, and random byte changes, decode or give a FormatError.
// RFC 4648's encoding (the standard alphabet, '=' padding), the test's own: what decode_base64 inverts.
std::string base64(const std::vector<std::uint8_t>& b) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (std::size_t i = 0; i < b.size(); i += 3) {
    const std::uint32_t v = (std::uint32_t{b[i]} << 16) | (i + 1 < b.size() ? std::uint32_t{b[i + 1]} << 8 : 0) |
                            (i + 2 < b.size() ? std::uint32_t{b[i + 2]} : 0);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < b.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += i + 2 < b.size() ? kAlphabet[v & 63] : '=';
  }
  return out;
}

TEST(Image, Base64RoundTripsEveryLengthWithAndWithoutPadding) {
  EXPECT_EQ(image::decode_base64("TWFu", "x"), (std::vector<std::uint8_t>{'M', 'a', 'n'}));  // RFC 4648's example
  EXPECT_TRUE(image::decode_base64("", "x").empty());
  std::vector<std::uint8_t> bytes;
  for (int n = 0; n < 40; ++n) {
    const std::string text = base64(bytes);
    EXPECT_EQ(image::decode_base64(text, "x"), bytes) << text;
    std::string unpadded = text;
    while (!unpadded.empty() && unpadded.back() == '=') unpadded.pop_back();
    EXPECT_EQ(image::decode_base64(unpadded, "x"), bytes) << unpadded;
    bytes.push_back(static_cast<std::uint8_t>(n * 37 + 251));  // every byte value's bits across the alphabet
  }
}

TEST(Image, DataUrlDecodesInMemoryAsTheFile) {
  for (const char* file : {"rgb_70x52.png", "jpeg_rgb_70x52.jpg"}) {
    const RgbImage want = image::load_image(golden_dir() / file);
    const std::string type = std::string(file).ends_with(".png") ? "image/png" : "image/jpeg";
    const RgbImage got = image::decode_data_url("data:" + type + ";base64," + base64(bytes_of(golden_dir() / file)), "u");
    EXPECT_EQ(got.height, want.height);
    EXPECT_EQ(got.width, want.width);
    EXPECT_EQ(got.data, want.data) << file;
  }
}

TEST(Image, DamagedFilesGiveFormatErrors) {
  for (const char* f : {"rgb_3x7.png", "p4bit_17x9.png", "jpeg_rgb444_24x18.jpg", "jpeg_cmyk_30x20.jpg"}) {
    const std::vector<std::uint8_t> good = bytes_of(golden_dir() / f);
    std::mt19937 rng(27);
    int errors = 0;
    for (std::size_t n = 0; n < good.size() + 300; ++n) {
      std::vector<std::uint8_t> b = good;
      if (n < good.size()) {
        b.resize(n);
      } else {
        for (int k = 0; k < 3; ++k) b[rng() % b.size()] = static_cast<std::uint8_t>(rng());
      }
      try {
        const RgbImage img = image::decode_image(b, f);
        EXPECT_EQ(img.data.size(), std::size_t(img.height) * img.width * 3);
      } catch (const FormatError&) {
        ++errors;
      }
    }
    EXPECT_GE(errors, static_cast<int>(good.size()) - 1) << f;  // at least every strict prefix but one
  }
}

// ---- docs/ERRORS.md ----------------------------------------------------------------------------------

std::uint32_t crc32(const std::uint8_t* p, std::size_t n) {
  std::uint32_t c = 0xffffffffu;
  for (std::size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return c ^ 0xffffffffu;
}

void put_be32(std::vector<std::uint8_t>& b, std::size_t at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<std::uint8_t>(v >> (24 - 8 * i));
}

// A golden PNG with its IHDR width and height replaced (and the CRC made valid again).
std::vector<std::uint8_t> png_with_size(std::uint32_t width, std::uint32_t height) {
  std::vector<std::uint8_t> b = bytes_of(golden_dir() / "rgb_3x7.png");
  put_be32(b, 16, width);  // signature 8, length 4, "IHDR" 4
  put_be32(b, 20, height);
  put_be32(b, 29, crc32(&b[12], 17));
  return b;
}

// A golden JPEG with the size in its frame header (SOF0 or SOF2: marker, length 2, precision 1, height 2,
// width 2) replaced.
std::vector<std::uint8_t> jpeg_with_size(const char* file, int width, int height) {
  std::vector<std::uint8_t> b = bytes_of(golden_dir() / file);
  for (std::size_t i = 2; i + 8 < b.size(); ++i) {
    if (b[i] == 0xff && (b[i + 1] == 0xc0 || b[i + 1] == 0xc2)) {
      b[i + 5] = static_cast<std::uint8_t>(height >> 8);
      b[i + 6] = static_cast<std::uint8_t>(height);
      b[i + 7] = static_cast<std::uint8_t>(width >> 8);
      b[i + 8] = static_cast<std::uint8_t>(width);
      break;
    }
  }
  return b;
}

fs::path put(const std::string& name, const std::vector<std::uint8_t>& bytes) {
  static const fs::path dir = make_temp_dir("img-err");
  std::ofstream(dir / name, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return dir / name;
}

CaseFn load(const std::string& name, std::vector<std::uint8_t> bytes) {
  return lib([=] { image::load_image(put(name, bytes)); });
}

CaseFn config(json doc) {
  return lib([=] { image::parse_processor_config(doc, "preprocessor_config.json"); });
}

std::vector<std::uint8_t> prefix(const char* file, double fraction) {
  std::vector<std::uint8_t> b = bytes_of(golden_dir() / file);
  b.resize(static_cast<std::size_t>(b.size() * fraction));
  return b;
}

TEST(ErrorsDoc, Images) {
  std::vector<std::uint8_t> bad_crc = bytes_of(golden_dir() / "rgb_3x7.png");
  bad_crc[30] ^= 0xff;  // the IHDR CRC
  const std::vector<std::uint8_t> gif = {'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0};
  // A 12-bit sample precision in the frame header (SOF0: marker, length 2, precision 1), which an 8-bit
  // libjpeg does not decode.
  std::vector<std::uint8_t> precision12 = bytes_of(golden_dir() / "jpeg_rgb_70x52.jpg");
  for (std::size_t i = 2; i + 4 < precision12.size(); ++i) {
    if (precision12[i] == 0xff && precision12[i + 1] == 0xc0) {
      precision12[i + 4] = 12;
      break;
    }
  }
  check_section("Images (`image::load_image`, `image::load_processor_config`)",
                {
                    {"img-open", {lib([] { image::load_image("/nonexistent/image.png"); })}},
                    {"img-format", {load("x.gif", gif), load("empty.png", {})}},
                    {"img-png-corrupt", {load("crc.png", bad_crc)}},
                    {"img-png-truncated", {load("half.png", prefix("rgb_70x52.png", 0.5))}},
                    {"img-jpeg-corrupt", {load("precision.jpg", precision12)}},
                    {"img-jpeg-truncated", {load("half.jpg", prefix("jpeg_rgb_70x52.jpg", 0.5)),
                                            load("head.jpg", prefix("jpeg_rgb_70x52.jpg", 0.05))}},
                    {"img-jpeg-memory", {load("bomb.jpg", jpeg_with_size("jpeg_rgb444_prog_16x12.jpg", 65000, 4100))}},
                    {"img-side", {load("wide.png", png_with_size(70000, 1)), load("tall.png", png_with_size(1, 65536))}},
                    {"img-pixels", {load("big.png", png_with_size(20000, 20000)),
                                    load("big.jpg", jpeg_with_size("jpeg_rgb_70x52.jpg", 20000, 20000))}},
                    {"pp-type", {config({{"image_processor_type", "SiglipImageProcessor"}})}},
                    {"pp-size", {config({{"size", {{"longest_edge", 64}}}}), config({{"size", -3}})}},
                    {"pp-crop", {config({{"crop_size", {{"height", 64}}}})}},
                    {"pp-resample", {config({{"resample", 1}}), config({{"resample", "bicubic"}})}},
                    {"pp-mean-std", {config({{"image_mean", {0.5, 0.5}}}), config({{"image_std", {0.5, 0, 0.5}}})}},
                    {"pp-rescale", {config({{"rescale_factor", 0}})}},
                    {"pp-resize", {lib([] {
                                     image::ProcessorConfig c;
                                     c.shortest_edge = 336;
                                     image::preprocess(RgbImage{1, 4000, std::vector<std::uint8_t>(12000)}, c);
                                   }),
                                   lib([] { image::resize(RgbImage{2, 2, std::vector<std::uint8_t>(12)}, 0, 5,
                                                          image::Resample::Bicubic); }),
                                   lib([] {
                                     image::expand_to_square(RgbImage{1, 20000, std::vector<std::uint8_t>(60000)},
                                                             {0, 0, 0});
                                   })}},
                    {"pp-pinpoints", {config({{"image_grid_pinpoints", {{336}}}})}},
                    {"img-data-url", {lib([] { image::decode_data_url("https://example.com/cat.png", "u"); }),
                                      lib([] { image::decode_data_url("data:image/png,rawbytes", "u"); }),
                                      lib([] { image::decode_data_url(std::string(100, 'h'), "u"); })}},
                    {"img-base64", {lib([] { image::decode_base64("TWF-", "b"); }),
                                    lib([] { image::decode_base64("TW=u", "b"); }),
                                    lib([] { image::decode_base64("TWFuT", "b"); })}},
                });
}

}  // namespace
}  // namespace latentllm::test
