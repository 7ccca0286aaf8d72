// JPEG decoding with libjpeg(-turbo), as PIL's JpegDecode does it: libjpeg's defaults (islow IDCT, fancy
// upsampling), output colour space RGB, gray or CMYK by the number of components; CMYK (and YCCK, which
// libjpeg converts to CMYK) is read Adobe-inverted ("CMYK;I") and converted to RGB by PIL's cmyk2rgb.
//
// libjpeg's default error_exit calls exit(). Ours records the message and longjmps back to the setjmp
// of the stage that called libjpeg; those stage functions hold no object with a destructor (the output
// buffer is allocated by their caller). Warnings are not printed; the one for data ending before the
// end of the image (JWRN_JPEG_EOF) is an error, as in PIL ("image file is truncated"), raised the same way.
#include <cstdio>  // jpeglib.h needs FILE and size_t first

#include <jerror.h>
#include <jpeglib.h>

#include <csetjmp>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "image/decoders.hpp"
#include "latentllm/error.hpp"

namespace latentllm::image::detail {
namespace {

// libjpeg's memory for whole-image buffers (the coefficients of a progressive or multi-scan JPEG, two
// bytes per sample). Beyond it libjpeg would need a backing store, which it does not have, and fails
// with JERR_NO_BACKING_STORE before allocating. Only progressive 4:4:4 images of more than about
// 180 million pixels reach it, which PIL refuses too (its decompression-bomb limit).
constexpr long kMaxDecoderMemory = 1L << 30;

struct JpegErrors {
  jpeg_error_mgr mgr;  // first member: libjpeg hands us &mgr as cinfo->err
  std::jmp_buf jump;
  bool truncated = false;
  char message[JMSG_LENGTH_MAX] = {};
};

[[noreturn]] void error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// msg_level < 0 is a warning (corrupt data libjpeg recovers from), >= 0 trace output: neither printed.
// The end of the data stops decoding at once: libjpeg would go on to the last row with made-up data.
void emit_message(j_common_ptr cinfo, int msg_level) {
  if (msg_level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
    auto* err = reinterpret_cast<JpegErrors*>(cinfo->err);
    err->truncated = true;
    std::longjmp(err->jump, 1);
  }
}

void output_message(j_common_ptr) {}

// Stage 1: the headers up to the first scan. False after a libjpeg error.
bool read_header(jpeg_decompress_struct& cinfo, JpegErrors& err, const std::uint8_t* data, std::size_t size) {
  if (setjmp(err.jump)) return false;
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  return true;
}

// Stage 2: every scanline into `out` [height, width, components]. False after a libjpeg error.
bool read_pixels(jpeg_decompress_struct& cinfo, JpegErrors& err, std::uint8_t* out, std::size_t row_bytes,
                 bool& shape_ok) {
  if (setjmp(err.jump)) return false;
  jpeg_start_decompress(&cinfo);
  shape_ok = std::size_t(cinfo.output_width) * cinfo.output_components == row_bytes;
  if (!shape_ok) return true;
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = out + std::size_t(cinfo.output_scanline) * row_bytes;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  return true;
}

struct JpegDeleter {
  jpeg_decompress_struct* cinfo;
  ~JpegDeleter() { jpeg_destroy_decompress(cinfo); }
};

// PIL's MULDIV255: a·b / 255 rounded, in integers.
int muldiv255(int a, int b) {
  const int t = a * b + 128;
  return ((t >> 8) + t) >> 8;
}

// [height, width, components] to RGB: gray replicated; CMYK inverted (Adobe) then PIL's cmyk2rgb.
void to_rgb(const std::uint8_t* raw, int components, RgbImage& out) {
  const std::size_t n = std::size_t(out.height) * out.width;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint8_t* s = raw + i * components;
    std::uint8_t* d = out.data.data() + i * 3;
    if (components == 1) {
      d[0] = d[1] = d[2] = s[0];
    } else if (components == 3) {
      std::memcpy(d, s, 3);
    } else {
      const int nk = s[3];  // 255 − (255 − K) after the inversion
      for (int c = 0; c < 3; ++c) d[c] = static_cast<std::uint8_t>(nk - muldiv255(255 - s[c], nk));
    }
  }
}

}  // namespace

RgbImage decode_jpeg(std::span<const std::uint8_t> bytes, const std::string& name, std::int64_t max_pixels) {
  jpeg_decompress_struct cinfo;
  JpegErrors err;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = error_exit;
  err.mgr.emit_message = emit_message;
  err.mgr.output_message = output_message;
  jpeg_create_decompress(&cinfo);
  JpegDeleter guard{&cinfo};
  cinfo.mem->max_memory_to_use = kMaxDecoderMemory;
  auto fail = [&]() -> FormatError {
    if (err.truncated) {
      return FormatError(fmt::format("{}: truncated JPEG (expected more than {} bytes)", name, bytes.size()));
    }
    if (err.mgr.msg_code == JERR_NO_BACKING_STORE) {
      return FormatError(fmt::format("{}: JPEG decoder memory (expected at most {} bytes of whole-image buffers, "
                                     "got an image of {}x{} that needs more)",
                                     name, kMaxDecoderMemory, cinfo.image_width, cinfo.image_height));
    }
    return FormatError(fmt::format("{}: corrupt JPEG ({})", name, err.message));
  };

  if (!read_header(cinfo, err, bytes.data(), bytes.size())) throw fail();
  check_image_size(cinfo.image_width, cinfo.image_height, name, max_pixels);
  const int components = cinfo.num_components == 1 ? 1 : cinfo.num_components == 4 ? 4 : 3;
  cinfo.out_color_space = components == 1 ? JCS_GRAYSCALE : components == 4 ? JCS_CMYK : JCS_RGB;
  const std::size_t row_bytes = std::size_t(cinfo.image_width) * components;
  // [height, width, components], not zeroed: libjpeg writes every row before it is read.
  const auto raw = std::make_unique_for_overwrite<std::uint8_t[]>(row_bytes * cinfo.image_height);
  bool shape_ok = false;
  if (!read_pixels(cinfo, err, raw.get(), row_bytes, shape_ok) || err.truncated) throw fail();
  if (!shape_ok) throw FormatError(fmt::format("{}: corrupt JPEG (unexpected output size)", name));
  RgbImage out;
  out.height = static_cast<int>(cinfo.image_height);
  out.width = static_cast<int>(cinfo.image_width);
  out.data.resize(std::size_t(out.height) * out.width * 3);
  to_rgb(raw.get(), components, out);
  return out;
}

}  // namespace latentllm::image::detail
