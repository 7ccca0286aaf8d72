#include "model/rope.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/parallel.hpp"
#include "latentllm/error.hpp"

namespace latentllm::model {

double RopeSpec::inv_freq(int j, int head_dim) const {
  const double w = 1.0 / std::pow(theta, 2.0 * j / head_dim);
  switch (scaling) {
    case Scaling::None: return w;
    case Scaling::Linear: return w / factor;
    case Scaling::Llama3: {
      // Wavelengths below original/high_freq_factor keep their frequency, those above
      // original/low_freq_factor are slowed down by `factor`, the ones between are interpolated.
      const double wavelen = 2.0 * std::numbers::pi / w;
      if (wavelen < original_max_position_embeddings / high_freq_factor) return w;
      if (wavelen > original_max_position_embeddings / low_freq_factor) return w / factor;
      const double smooth = (original_max_position_embeddings / wavelen - low_freq_factor) /
                            (high_freq_factor - low_freq_factor);
      return (1.0 - smooth) * w / factor + smooth * w;
    }
  }
  return w;
}

void AttentionInfo::validate(std::string_view context) const {
  if (hidden < 1 || num_heads < 1 || num_kv_heads < 1 || head_dim < 1 || num_heads % num_kv_heads != 0) {
    throw ConfigError(fmt::format("{}: invalid attention shape (expected H a multiple of H_kv, got d={} H={} H_kv={} "
                                  "d_h={})", context, hidden, num_heads, num_kv_heads, head_dim));
  }
  if (rope && head_dim % 2 != 0) {
    throw ConfigError(fmt::format("{}: RoPE needs an even head_dim (got {})", context, head_dim));
  }
}

RopeTable rope_table(const RopeSpec& rope, int T, int head_dim, int first) {
  const int half = head_dim / 2;
  RopeTable t{MatrixF(T, half), MatrixF(T, half)};
  for (int j = 0; j < half; ++j) {
    const double w = rope.inv_freq(j, head_dim);
    for (int i = 0; i < T; ++i) {
      const int p = first + i;
      t.cos(i, j) = static_cast<float>(std::cos(p * w));
      t.sin(i, j) = static_cast<float>(std::sin(p * w));
    }
  }
  return t;
}

void apply_rope(MatrixF& x, int T, int head_dim, const RopeTable& t) {
  const int half = head_dim / 2;
  const std::int64_t n = x.rows(), heads = x.cols() / head_dim;
  const double elems = static_cast<double>(x.size());  // 3 operations each, read and written with cos/sin
  core::parallel_for(n, std::max<std::int64_t>(1, (1 << 14) / x.cols()), core::Work{3 * elems, 12 * elems},
                     [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      const float* c = t.cos.data() + (i % T) * half;
      const float* s = t.sin.data() + (i % T) * half;
      for (std::int64_t h = 0; h < heads; ++h) {
        float* xh = x.data() + i * x.cols() + h * head_dim;
        for (int j = 0; j < half; ++j) {
          const float x1 = xh[j], x2 = xh[j + half];
          xh[j] = x1 * c[j] - x2 * s[j];
          xh[j + half] = x2 * c[j] + x1 * s[j];
        }
      }
    }
  });
}

MatrixD rope_rotation(const RopeSpec& rope, int head_dim, double p) {
  const int half = head_dim / 2;
  MatrixD r = MatrixD::Zero(head_dim, head_dim);  // [d_h, d_h]
  for (int j = 0; j < half; ++j) {
    const double a = p * rope.inv_freq(j, head_dim);
    const double c = std::cos(a), sn = std::sin(a);
    r(j, j) = c;
    r(j, j + half) = -sn;
    r(j + half, j) = sn;
    r(j + half, j + half) = c;
  }
  return r;
}

}  // namespace latentllm::model
