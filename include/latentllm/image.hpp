// Images for multimodal models (LLaVA): decoding PNG and JPEG into 8-bit RGB exactly as PIL's
// `Image.open(path).convert("RGB")` gives it, and the CLIP image processor of transformers (the slow,
// PIL-based `CLIPImageProcessor`) that turns it into the vision tower's `pixel_values`.
//
// Decoding uses the system libpng and libjpeg(-turbo); the conversions to RGB follow PIL (see
// decode_image). Preprocessing reproduces PIL's fixed-point resampling (`Image.resize`, BICUBIC or
// BILINEAR on uint8) and transformers' resize / center_crop / rescale / normalize in their dtypes, so
// the float32 output equals the Python processor's bit for bit.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace latentllm::image {

// An 8-bit RGB image, row-major, channels last (numpy's `np.asarray(pil_rgb_image)`).
struct RgbImage {
  int height = 0;
  int width = 0;
  std::vector<std::uint8_t> data;  // [height, width, 3]

  const std::uint8_t* pixel(int y, int x) const { return data.data() + (std::size_t(y) * width + x) * 3; }
  std::uint8_t* pixel(int y, int x) { return data.data() + (std::size_t(y) * width + x) * 3; }
};

// Limits checked from the header, before any pixel buffer is allocated.
inline constexpr int kMaxImageSide = 65535;
inline constexpr std::int64_t kMaxImagePixels = std::int64_t{1} << 28;

// Decodes a PNG or a JPEG (recognised by its signature, not by a file name) to RGB. `name` is the file
// named in error messages. Conversions, as PIL 9 reads the file and converts it with convert("RGB"):
//   PNG gray 1/2/4/8-bit: v scaled to 0..255 (1-bit: 0 or 255); 16-bit gray (PIL mode "I"): min(v, 255);
//   16-bit RGB(A) and gray+alpha: the high byte of each sample; palette: the PLTE colour, an index past
//   the palette gives the gray (i, i, i); alpha and tRNS are dropped, never composited; gamma, sRGB and
//   ICC chunks are ignored.
//   JPEG: libjpeg's default decoding (islow IDCT, fancy upsampling) to RGB or gray; CMYK and YCCK are
//   read as Adobe-inverted CMYK and converted as PIL does: R = (255 − K) − (C·(255 − K))/255 (rounded).
// Throws FormatError "<name>: <what> (expected X, got Y)" for an unknown signature, a corrupt or
// truncated file, or a side > kMaxImageSide or more than `max_pixels` pixels (docs/ERRORS.md); a
// caller that must bound the time per image (a fuzzer) passes a smaller `max_pixels`.
RgbImage decode_image(std::span<const std::uint8_t> bytes, const std::string& name,
                      std::int64_t max_pixels = kMaxImagePixels);

// Reads and decodes a file (IoError when it cannot be read).
RgbImage load_image(const std::filesystem::path& path);

// RFC 4648 base64 (the standard alphabet, '=' padding optional) -> bytes. FormatError "<name>: base64
// data (expected ..., got ...)" for a character outside the alphabet, padding before the end, or a
// length that leaves one dangling character.
std::vector<std::uint8_t> decode_base64(std::string_view text, const std::string& name);

// Decodes the image of a data URL as OpenAI's chat API takes it, "data:<media type>;base64,<data>"
// (image/png or image/jpeg; the format comes from the bytes' signature, as decode_image), in memory.
// ConfigError "<name>: image URL (expected a data URL ..., got ...)" for any other URL: nothing is
// fetched. FormatError for bad base64 (decode_base64) or bytes decode_image refuses.
RgbImage decode_data_url(std::string_view url, const std::string& name, std::int64_t max_pixels = kMaxImagePixels);

// PIL's resampling filters (the values of PIL.Image.Resampling and the `resample` key).
enum class Resample { Bilinear = 2, Bicubic = 3 };

// PIL `Image.resize((width, height), resample)` of an RGB image: separable, horizontal pass first, 8-bit
// fixed-point coefficients (PIL's Resample.c); a pass whose size is unchanged is skipped, and the image
// is returned unchanged when both sizes match. ConfigError when the output would be empty or exceed
// kMaxImagePixels (a shortest_edge resize of a very long image).
RgbImage resize(const RgbImage& in, int height, int width, Resample resample);

// transformers' center_crop: top = (H − h) // 2, left = (W − w) // 2; an image smaller than the crop
// is first padded with zeros, ceil((h − H) / 2) above and ceil((w − W) / 2) to the left.
RgbImage center_crop(const RgbImage& in, int height, int width);

// LLaVA's expand2square: the image pasted at ((s − W) // 2, (s − H) // 2) on an s × s square of
// `fill`, s = max(H, W); a square image is returned unchanged. ConfigError when s² > kMaxImagePixels.
RgbImage expand_to_square(const RgbImage& in, std::array<std::uint8_t, 3> fill);

// preprocessor_config.json of a CLIPImageProcessor, a LlavaImageProcessor (CLIP's steps after an optional
// pad to square, `do_pad`) or a LlavaNextImageProcessor (preprocess_anyres).
// Field names are the JSON keys; defaults are transformers'.
struct ProcessorConfig {
  std::string image_processor_type = "CLIPImageProcessor";
  bool do_convert_rgb = true;  // decode_image always gives RGB
  bool do_resize = true;
  int shortest_edge = 224;     // size.shortest_edge; 0 when size gives height and width
  int size_height = 0;         // size.height / size.width when shortest_edge == 0
  int size_width = 0;
  Resample resample = Resample::Bicubic;
  bool do_center_crop = true;
  int crop_height = 224;
  int crop_width = 224;
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool do_normalize = true;
  std::array<double, 3> image_mean = {0.48145466, 0.4578275, 0.40821073};  // OPENAI_CLIP_MEAN
  std::array<double, 3> image_std = {0.26862954, 0.26130258, 0.27577711};   // OPENAI_CLIP_STD
  // LlavaNext: (height, width) pairs; LlavaNextImageProcessor's default when its file has none, empty for
  // a CLIPImageProcessor without the key.
  std::vector<std::pair<int, int>> image_grid_pinpoints;
  // Pad to a square of the mean colour, int(mean · 255) per channel, before the processor: LLaVA's
  // `image_aspect_ratio: pad` (config.json of LLaVA's own checkpoints, mm_utils.process_images'
  // expand2square) or LlavaImageProcessor's `do_pad` (llava-hf's, pad_to_square with the same colour).
  bool pad_to_square = false;
};

// Parses the JSON of preprocessor_config.json; `origin` names it in errors (ConfigError
// "<origin>: <key> (expected X, got Y)", docs/ERRORS.md).
ProcessorConfig parse_processor_config(const nlohmann::json& doc, const std::string& origin);
// Reads and parses a preprocessor_config.json file.
ProcessorConfig load_processor_config(const std::filesystem::path& path);
// The image processing of a LLaVA checkpoint directory, decided once for eval, generate and calibration:
// its preprocessor_config.json, padded to a square when that file's LlavaImageProcessor says do_pad or
// the directory's config.json says image_aspect_ratio "pad" (LLaVA's own checkpoints). Other
// image_aspect_ratio values ("square", "anyres" with a NeXT processor) change nothing here.
ProcessorConfig load_checkpoint_processor(const std::filesystem::path& dir);

// transformers' get_resize_output_image_size for this config: (height, width) after the resize. With
// shortest_edge s (default_to_square=False): the short side becomes s, the long side int(s · long / short).
std::pair<int, int> resize_output_size(int height, int width, const ProcessorConfig& config);

// The processor's output for one image: channels first, float32.
struct PixelValues {
  int height = 0;
  int width = 0;
  std::vector<float> data;  // [3, height, width]
};

// CLIPImageProcessor.preprocess (PIL path) of one RGB image: [pad to square] → resize → center crop →
// x.astype(float64) · rescale_factor cast to float32 → (x − mean) / std in float32 → channels first.
PixelValues preprocess(const RgbImage& image, const ProcessorConfig& config);

// ---- LLaVA-NeXT "anyres" (LlavaNextImageProcessor, image_processing_llava_next.py) ------------------

// LlavaNextImageProcessor's image_grid_pinpoints when the file gives none.
const std::vector<std::pair<int, int>>& default_grid_pinpoints();

// image_processing_utils.select_best_resolution: the (height, width) of `pinpoints` that keeps the most
// of an image of height × width pixels scaled to fit it (effective = min(int(W·s)·int(H·s), W·H) with
// s = min(w / W, h / H) in double), ties broken by the least wasted area w·h − effective, the first
// pinpoint winning exact ties. ConfigError when pinpoints is empty.
std::pair<int, int> select_best_resolution(int height, int width, std::span<const std::pair<int, int>> pinpoints);

// image_processing_utils.get_patch_output_size: the aspect-preserving size (height, width) that fits
// (target_height, target_width): the side with the smaller scale takes the target, the other
// min(ceil(side · scale), target) with the scale a double.
std::pair<int, int> patch_output_size(int height, int width, std::pair<int, int> target);

// LlavaNextImageProcessor.preprocess of one RGB image (PIL path, do_pad on one image is a no-op).
struct AnyresPixels {
  int image_height = 0;  // image_sizes: the original image's (height, width)
  int image_width = 0;
  int best_height = 0;   // select_best_resolution(image_height, image_width, pinpoints)
  int best_width = 0;
  int grid_height = 0;   // tiles per column and per row: best_height / crop_height, best_width / crop_width
  int grid_width = 0;
  int tile_height = 0;   // each tile's pixel size after the CLIP steps (crop size)
  int tile_width = 0;
  std::vector<float> data;  // [1 + grid_height·grid_width, 3, tile_height, tile_width]

  int num_tiles() const { return 1 + grid_height * grid_width; }
};

// get_image_patches then _preprocess: the base image resized (squashed) to shortest_edge × shortest_edge,
// then the image resized with patch_output_size to fit the best resolution (resample), zero-padded to
// it, centred (_pad_for_patching: divmod(target − new, 2), the odd pixel after) and cut into crop-size
// tiles row by row (divide_to_patches); the base image first, then every tile through preprocess()
// (resize to shortest_edge, center crop, rescale, normalize). pad_to_square is not applied.
// ConfigError "<what> (expected X, got Y)" for empty pinpoints, a pinpoint not a multiple of the crop
// size, or a size given as height/width (docs/ERRORS.md, "Images").
AnyresPixels preprocess_anyres(const RgbImage& image, const ProcessorConfig& config);

}  // namespace latentllm::image
