#include "quant/prefill.hpp"

#include <algorithm>

#include "core/gemm.hpp"
#include "core/parallel.hpp"

namespace latentllm::quant {

void dequantize_rows(const PackedMatrix& w, std::int64_t r0, std::int64_t r1, float* out) {
  const QuantSpec spec = w.spec();
  const std::int64_t n_g = w.groups(), rb = w.row_bytes();
  const unsigned mask = (1u << w.bits) - 1u;
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::uint8_t* codes = w.codes.data() + r * rb;
    float* o = out + (r - r0) * w.cols;
    for (std::int64_t g = 0; g < n_g; ++g) {
      const float s = f16_to_f32(w.scales[static_cast<std::size_t>(r * n_g + g)]);
      const float z = f16_to_f32(w.zeros[static_cast<std::size_t>(r * n_g + g)]);
      const std::int64_t j1 = std::min(w.cols, (g + 1) * spec.group);
      for (std::int64_t j = g * spec.group; j < j1; ++j) {
        const std::int64_t bit = j * w.bits;
        unsigned v = codes[bit / 8];
        if (bit % 8 + w.bits > 8) v |= static_cast<unsigned>(codes[bit / 8 + 1]) << 8;
        o[j] = s * (static_cast<float>((v >> (bit % 8)) & mask) - z);
      }
    }
  }
}

void xwtq(const float* x, int n, int ldx, const PackedMatrix& w, std::int64_t c0, std::int64_t c1, float beta,
          float* y, int ldy) {
  const std::int64_t cols = c1 - c0;
  if (n <= 0 || cols <= 0) return;
  thread_local core::ScratchF panel;  // [c1 − c0, w.cols]
  panel.resize(static_cast<std::size_t>(cols * w.cols));
  dequantize_rows(w, c0, c1, panel.data());
  core::sgemm_rm(false, true, n, static_cast<int>(cols), static_cast<int>(w.cols), 1.0f, x, ldx, panel.data(),
                 static_cast<int>(w.cols), beta, y, ldy);
}

}  // namespace latentllm::quant
