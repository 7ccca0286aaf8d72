// LLaVA-NeXT (HF modeling_llava_next.py, LlavaNextModel.pack_image_features and unpad_image; the
// processor's _get_number_of_features in processing_llava_next.py counts the same tokens). The
// arithmetic repeats Python's: true divisions in double, floor divisions on integers, and
// int(round(x, 7)) for the unpadded side.
#include "model/llava_next.hpp"

#include <cmath>

#include <fmt/format.h>

#include "latentllm/error.hpp"
#include "latentllm/image.hpp"

namespace latentllm::model {

using json = nlohmann::json;

std::vector<std::pair<int, int>> parse_llava_next_pinpoints(const io::JsonKeys& k, std::int64_t image_size) {
  const json* v = k.find("image_grid_pinpoints");
  const std::string expected = fmt::format(
      "a non-empty list of [height, width] pairs, multiples of vision_config.image_size {}", image_size);
  if (v == nullptr) {
    // LlavaNextConfig's default, whose sides are multiples of 336 (CLIP ViT-L/14-336's image_size).
    const auto& d = image::default_grid_pinpoints();
    for (const auto& [h, w] : d)
      if (h % image_size != 0 || w % image_size != 0) k.fail("image_grid_pinpoints", expected, nullptr);
    return d;
  }
  const auto ok = [&](const json& x) {
    return x.is_number_integer() && x.get<std::int64_t>() > 0 && x.get<std::int64_t>() <= image::kMaxImageSide &&
           x.get<std::int64_t>() % image_size == 0;
  };
  if (!v->is_array() || v->empty()) k.fail("image_grid_pinpoints", expected, v);
  std::vector<std::pair<int, int>> out;
  for (const json& p : *v) {
    if (!p.is_array() || p.size() != 2 || !ok(p[0]) || !ok(p[1])) k.fail("image_grid_pinpoints", expected, v);
    out.emplace_back(p[0].get<int>(), p[1].get<int>());
  }
  return out;
}

std::pair<int, int> llava_next_grid(int height, int width, const LlavaConfig& c) {
  const auto [h, w] = image::select_best_resolution(height, width, c.image_grid_pinpoints);
  const auto S = static_cast<int>(c.vision.image_size);
  return {h / S, w / S};
}

namespace {

// Python's int(round(x, 7)) for x >= 0: round to 7 decimals (correctly rounded from x's exact binary
// value), then truncate. Only a fraction above 0.99999995 rounds up to the next integer; the double
// nearest 0.99999995 lies below it and no double lies between, so ">" against it decides exactly.
int int_round7(double x) {
  const double n = std::floor(x);
  return static_cast<int>(x - n > 0.99999995 ? n + 1 : n);
}

}  // namespace

UnpadWindow llava_next_unpad(int height, int width, int rows, int cols) {
  UnpadWindow u{0, rows, 0, cols};
  const double original_aspect = static_cast<double>(width) / height;
  const double current_aspect = static_cast<double>(cols) / rows;
  if (original_aspect > current_aspect) {
    const double scale = static_cast<double>(cols) / width;
    const int new_height = int_round7(height * scale);
    const int padding = (rows - new_height) / 2;
    u.row0 = padding;
    u.row1 = rows - padding;
  } else {
    const double scale = static_cast<double>(rows) / height;
    const int new_width = int_round7(width * scale);
    const int padding = (cols - new_width) / 2;
    u.col0 = padding;
    u.col1 = cols - padding;
  }
  return u;
}

std::int64_t llava_next_num_image_tokens(int height, int width, const LlavaConfig& c) {
  const auto p_n = static_cast<int>(c.vision.image_size / c.vision.patch_size);
  const auto [g_h, g_w] = llava_next_grid(height, width, c);
  const UnpadWindow u = llava_next_unpad(height, width, g_h * p_n, g_w * p_n);
  return std::int64_t{p_n} * p_n + std::int64_t{u.rows()} * (u.cols() + 1);
}

void llava_next_pack(const MatrixF& f, int height, int width, const LlavaConfig& c, std::span<const float> newline,
                     MatrixF& out) {
  const auto p_n = static_cast<int>(c.vision.image_size / c.vision.patch_size);
  const std::int64_t n_feat = std::int64_t{p_n} * p_n, d = f.cols();
  const auto [g_h, g_w] = llava_next_grid(height, width, c);
  // view(g_h, g_w, p_n, p_n, d).permute(4, 0, 2, 1, 3): grid position (r, q) is row y = r mod p_n,
  // column x = q mod p_n of tile (r / p_n, q / p_n), whose features start at 1 + tile index.
  const UnpadWindow u = llava_next_unpad(height, width, g_h * p_n, g_w * p_n);
  out.resize(n_feat + std::int64_t{u.rows()} * (u.cols() + 1), d);  // [n_tok, d]
  out.topRows(n_feat) = f.topRows(n_feat);                           // the base image
  const Eigen::Map<const Eigen::RowVectorXf> nl(newline.data(), static_cast<Eigen::Index>(newline.size()));
  std::int64_t t = n_feat;
  for (int r = u.row0; r < u.row1; ++r) {
    for (int q = u.col0; q < u.col1; ++q) {
      const std::int64_t tile = 1 + std::int64_t{r / p_n} * g_w + q / p_n;
      out.row(t++) = f.row(tile * n_feat + std::int64_t{r % p_n} * p_n + q % p_n);
    }
    out.row(t++) = nl;
  }
}

}  // namespace latentllm::model
