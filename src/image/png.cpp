// PNG decoding with libpng, converted to RGB as PIL reads the file and converts it with convert("RGB")
// (PIL's PngImagePlugin modes and Convert.c; the cases are listed at image::decode_image).
//
// libpng reports errors by calling our error callback, which must not return: it longjmps back to the
// setjmp of the stage that called libpng. Those stage functions hold no object with a destructor, so
// the jump skips no C++ cleanup; the buffers they fill are allocated by their caller.
#include <png.h>

#include <array>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "image/decoders.hpp"
#include "latentllm/error.hpp"

namespace latentllm::image::detail {
namespace {

// What libpng's callbacks read and write: plain data only (see the top of the file).
struct PngSource {
  const std::uint8_t* data = nullptr;
  std::size_t size = 0;
  std::size_t pos = 0;
  bool truncated = false;
  char message[256] = {};
};

void read_callback(png_structp png, png_bytep out, png_size_t n) {
  auto* src = static_cast<PngSource*>(png_get_io_ptr(png));
  if (n > src->size - src->pos) {
    src->truncated = true;
    png_error(png, "unexpected end of data");
  }
  std::memcpy(out, src->data + src->pos, n);
  src->pos += n;
}

[[noreturn]] void error_callback(png_structp png, png_const_charp message) {
  auto* src = static_cast<PngSource*>(png_get_error_ptr(png));
  std::snprintf(src->message, sizeof src->message, "%s", message);
  png_longjmp(png, 1);
}

// PIL does not report libpng-style warnings either; nothing goes to stderr.
void warning_callback(png_structp, png_const_charp) {}

struct PngHeader {
  png_uint_32 width = 0, height = 0;
  int bit_depth = 0, color_type = 0;
};

// Stage 1: the chunks up to the first IDAT. False after a libpng error (message in the source).
bool read_header(png_structp png, png_infop info, PngHeader& h) {
  if (setjmp(png_jmpbuf(png))) return false;
  // Our own limits (check_image_size) apply, with their message, instead of libpng's 1,000,000.
  png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
  png_read_info(png, info);
  png_get_IHDR(png, info, &h.width, &h.height, &h.bit_depth, &h.color_type, nullptr, nullptr, nullptr);
  return true;
}

// Stage 2: every row, de-interlaced. Samples of 1, 2 or 4 bits are unpacked to one byte each, unscaled;
// 16-bit samples stay big-endian. No other transformation (PIL applies no gamma).
bool read_rows(png_structp png, png_infop info, png_bytep* rows, std::size_t row_bytes, bool& row_bytes_ok) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_packing(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  row_bytes_ok = png_get_rowbytes(png, info) == row_bytes;
  if (row_bytes_ok) png_read_image(png, rows);
  return true;
}

struct PngDeleter {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngDeleter() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
};

int channels_of(int color_type) {
  switch (color_type) {
    case PNG_COLOR_TYPE_GRAY: return 1;
    case PNG_COLOR_TYPE_GRAY_ALPHA: return 2;
    case PNG_COLOR_TYPE_RGB: return 3;
    case PNG_COLOR_TYPE_RGB_ALPHA: return 4;
    default: return 1;  // palette indices
  }
}

// A gray sample as PIL's RGB: modes "1" (0 or 255), "L;2" (×85), "L;4" (×17), "L", and "I" for 16 bits,
// whose conversion to RGB clips the integer to 255.
std::uint8_t gray_value(const std::uint8_t* s, int bit_depth) {
  switch (bit_depth) {
    case 1: return s[0] ? 255 : 0;
    case 2: return static_cast<std::uint8_t>(s[0] * 85);
    case 4: return static_cast<std::uint8_t>(s[0] * 17);
    case 8: return s[0];
    default: {
      const int v = (s[0] << 8) | s[1];
      return static_cast<std::uint8_t>(v > 255 ? 255 : v);
    }
  }
}

// PIL's palette: 256 entries that start as the gray ramp (i, i, i), the PLTE colours over the first ones.
std::array<std::array<std::uint8_t, 3>, 256> palette_of(png_structp png, png_infop info) {
  std::array<std::array<std::uint8_t, 3>, 256> pal{};
  for (int i = 0; i < 256; ++i) pal[i] = {std::uint8_t(i), std::uint8_t(i), std::uint8_t(i)};
  png_colorp colors = nullptr;
  int n = 0;
  if (png_get_PLTE(png, info, &colors, &n) == PNG_INFO_PLTE) {
    for (int i = 0; i < n && i < 256; ++i) pal[i] = {colors[i].red, colors[i].green, colors[i].blue};
  }
  return pal;
}

// The decoded rows [height, row_bytes] to RGB. 16-bit colour samples keep their high byte (PIL's
// "RGB;16B", "RGBA;16B", "LA;16B" raw modes); alpha is dropped.
void to_rgb(const std::uint8_t* raw, std::size_t row_bytes, const PngHeader& h,
            const std::array<std::array<std::uint8_t, 3>, 256>& pal, RgbImage& out) {
  const int ch = channels_of(h.color_type);
  const int bps = h.bit_depth == 16 ? 2 : 1;  // bytes per sample after unpacking
  for (int y = 0; y < out.height; ++y) {
    const std::uint8_t* row = raw + std::size_t(y) * row_bytes;
    for (int x = 0; x < out.width; ++x) {
      const std::uint8_t* s = row + std::size_t(x) * ch * bps;
      std::uint8_t* d = out.pixel(y, x);
      if (h.color_type == PNG_COLOR_TYPE_PALETTE) {
        std::memcpy(d, pal[s[0]].data(), 3);
      } else if (h.color_type == PNG_COLOR_TYPE_GRAY) {
        d[0] = d[1] = d[2] = gray_value(s, h.bit_depth);
      } else if (h.color_type == PNG_COLOR_TYPE_GRAY_ALPHA) {
        d[0] = d[1] = d[2] = s[0];
      } else {
        for (int c = 0; c < 3; ++c) d[c] = s[c * bps];
      }
    }
  }
}

[[noreturn]] void fail(const PngSource& src, const std::string& name) {
  if (src.truncated) {
    throw FormatError(fmt::format("{}: truncated PNG (expected more than {} bytes)", name, src.size));
  }
  throw FormatError(fmt::format("{}: corrupt PNG ({})", name, src.message));
}

}  // namespace

RgbImage decode_png(std::span<const std::uint8_t> bytes, const std::string& name, std::int64_t max_pixels) {
  PngSource src;
  src.data = bytes.data();
  src.size = bytes.size();
  PngDeleter guard;
  guard.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, error_callback, warning_callback);
  if (guard.png == nullptr) throw FormatError(fmt::format("{}: corrupt PNG (libpng could not start)", name));
  guard.info = png_create_info_struct(guard.png);
  if (guard.info == nullptr) throw FormatError(fmt::format("{}: corrupt PNG (libpng could not start)", name));
  png_set_read_fn(guard.png, &src, read_callback);

  PngHeader h;
  if (!read_header(guard.png, guard.info, h)) fail(src, name);
  check_image_size(h.width, h.height, name, max_pixels);
  const int bps = h.bit_depth == 16 ? 2 : 1;
  const std::size_t row_bytes = std::size_t(h.width) * channels_of(h.color_type) * bps;
  // [height, row_bytes], not zeroed: libpng writes every row (or fails) before a row is read.
  const auto raw = std::make_unique_for_overwrite<std::uint8_t[]>(row_bytes * h.height);
  std::vector<png_bytep> rows(h.height);
  for (std::size_t y = 0; y < h.height; ++y) rows[y] = raw.get() + y * row_bytes;
  bool row_bytes_ok = false;
  if (!read_rows(guard.png, guard.info, rows.data(), row_bytes, row_bytes_ok)) fail(src, name);
  if (!row_bytes_ok) {
    throw FormatError(fmt::format("{}: corrupt PNG (unsupported bit depth {} for colour type {})", name,
                                  h.bit_depth, h.color_type));
  }
  RgbImage out;
  out.height = static_cast<int>(h.height);
  out.width = static_cast<int>(h.width);
  out.data.resize(std::size_t(out.height) * out.width * 3);
  to_rgb(raw.get(), row_bytes, h, palette_of(guard.png, guard.info), out);
  return out;
}

}  // namespace latentllm::image::detail
