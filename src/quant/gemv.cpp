#include "quant/gemv.hpp"

#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "core/gemm16.hpp"
#include "core/parallel.hpp"
#include "latentllm/error.hpp"

namespace latentllm::quant {

namespace {

// What every row kernel reads: x padded to n_g·G (zeros), x in the 4-bit kernels' order, and Σx per group.
struct Prepared {
  std::vector<float> x;     // [n_g·G] x, zero beyond cols
  std::vector<float> xs;    // [n_g·G] per 32 columns: the 16 even ones, then the 16 odd ones (q = 4)
  std::vector<float> xsum;  // [n_g] Σ_{j∈g} x_j, summed in double
};

Prepared prepare(const PackedMatrix& w, std::span<const float> x) {
  Prepared p;
  const std::int64_t n_g = w.groups(), n = n_g * w.group;
  p.x.assign(static_cast<std::size_t>(n), 0.0f);
  std::copy(x.begin(), x.end(), p.x.begin());
  p.xsum.resize(static_cast<std::size_t>(n_g));
  for (std::int64_t g = 0; g < n_g; ++g) {
    double s = 0.0;
    for (std::int64_t j = g * w.group; j < (g + 1) * w.group; ++j) s += p.x[static_cast<std::size_t>(j)];
    p.xsum[static_cast<std::size_t>(g)] = static_cast<float>(s);
  }
  if (w.bits == 4 && w.group % 32 == 0) {
    p.xs.resize(p.x.size());
    for (std::int64_t b = 0; b < n; b += 32) {
      for (int k = 0; k < 16; ++k) {
        p.xs[static_cast<std::size_t>(b + k)] = p.x[static_cast<std::size_t>(b + 2 * k)];
        p.xs[static_cast<std::size_t>(b + 16 + k)] = p.x[static_cast<std::size_t>(b + 2 * k + 1)];
      }
    }
  }
  return p;
}

// One row: the codes [n_g, G·q/8], its scales and zeros [n_g], and the prepared x.
struct Row {
  const std::uint8_t* codes;
  const std::uint16_t* scales;
  const std::uint16_t* zeros;
};
using RowFn = float (*)(const Row&, const Prepared&, std::int64_t n_g, int group, int bits);

// ---- portable: any q and G ----

float row_generic(const Row& r, const Prepared& p, std::int64_t n_g, int group, int bits) {
  const unsigned mask = (1u << bits) - 1u;
  float y = 0.0f;
  for (std::int64_t g = 0; g < n_g; ++g) {
    float dot = 0.0f;
    const std::int64_t j0 = g * group;
    for (std::int64_t j = j0; j < j0 + group; ++j) {
      const std::int64_t bit = j * bits;
      unsigned v = r.codes[bit / 8];
      if (bit % 8 + bits > 8) v |= static_cast<unsigned>(r.codes[bit / 8 + 1]) << 8;
      dot += static_cast<float>((v >> (bit % 8)) & mask) * p.x[static_cast<std::size_t>(j)];
    }
    const auto k = static_cast<std::size_t>(g);
    y += f16_to_f32(r.scales[g]) * (dot - f16_to_f32(r.zeros[g]) * p.xsum[k]);
  }
  return y;
}

// ---- AVX2 + FMA + F16C ----

#define LATENTLLM_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))

LATENTLLM_TARGET_AVX2 inline __m256 widen8(__m128i bytes) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes)); }

LATENTLLM_TARGET_AVX2 inline float hsum8(__m256 v) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

template <int Bits>
LATENTLLM_TARGET_AVX2 float row_avx2(const Row& r, const Prepared& p, std::int64_t n_g, int group, int) {
  const __m128i low4 = _mm_set1_epi8(0x0f);
  const std::int64_t gb = std::int64_t{group} * Bits / 8;
  const float* x = Bits == 4 ? p.xs.data() : p.x.data();
  __m256 yv = _mm256_setzero_ps();  // Σ_g s_g·(the group's lanes): one horizontal sum per row
  float zero_term = 0.0f;           // Σ_g s_g·z_g·Σ_{j∈g} x_j
  for (std::int64_t g = 0; g < n_g; ++g) {
    const std::uint8_t* c = r.codes + g * gb;
    const float* xg = x + g * group;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    for (std::int64_t b = 0; b < gb; b += (Bits == 4 ? 16 : 32)) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c + b));
      if constexpr (Bits == 4) {
        const __m128i lo = _mm_and_si128(v, low4), hi = _mm_and_si128(_mm_srli_epi16(v, 4), low4);
        const float* xb = xg + 2 * b;  // 16 even columns, then 16 odd ones
        a0 = _mm256_fmadd_ps(widen8(lo), _mm256_loadu_ps(xb), a0);
        a1 = _mm256_fmadd_ps(widen8(_mm_srli_si128(lo, 8)), _mm256_loadu_ps(xb + 8), a1);
        a2 = _mm256_fmadd_ps(widen8(hi), _mm256_loadu_ps(xb + 16), a2);
        a3 = _mm256_fmadd_ps(widen8(_mm_srli_si128(hi, 8)), _mm256_loadu_ps(xb + 24), a3);
      } else {
        const __m128i v2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c + b + 16));
        a0 = _mm256_fmadd_ps(widen8(v), _mm256_loadu_ps(xg + b), a0);
        a1 = _mm256_fmadd_ps(widen8(_mm_srli_si128(v, 8)), _mm256_loadu_ps(xg + b + 8), a1);
        a2 = _mm256_fmadd_ps(widen8(v2), _mm256_loadu_ps(xg + b + 16), a2);
        a3 = _mm256_fmadd_ps(widen8(_mm_srli_si128(v2, 8)), _mm256_loadu_ps(xg + b + 24), a3);
      }
    }
    const float s = _cvtsh_ss(r.scales[g]), z = _cvtsh_ss(r.zeros[g]);
    yv = _mm256_fmadd_ps(_mm256_set1_ps(s), _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)), yv);
    zero_term += s * z * p.xsum[static_cast<std::size_t>(g)];
  }
  return hsum8(yv) - zero_term;
}

// ---- AVX-512 (F, BW, VL) ----

#define LATENTLLM_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

LATENTLLM_TARGET_AVX512 inline __m512 widen16(__m128i bytes) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(bytes));
}

// The 16 lanes summed as a fixed tree (GCC's _mm512_reduce_add_ps trips -Wuninitialized in its header).
LATENTLLM_TARGET_AVX512 inline float hsum16(__m512 v) {
  alignas(64) float l[16];
  _mm512_store_ps(l, v);
  float h[8];
  for (int i = 0; i < 8; ++i) h[i] = l[i] + l[i + 8];
  return ((h[0] + h[4]) + (h[1] + h[5])) + ((h[2] + h[6]) + (h[3] + h[7]));
}

// 16 codes times 16 x values into acc: the low nibbles (even columns) or the bytes of `bytes`.
LATENTLLM_TARGET_AVX512 inline __m512 fma16(__m128i codes, const float* x, __m512 acc) {
  return _mm512_fmadd_ps(widen16(codes), _mm512_loadu_ps(x), acc);
}

// Four accumulators (four independent chains of multiply-adds: one chain would wait on the FMA
// latency at every step), 64 codes per step and a tail of 32 (G is a multiple of 32).
template <int Bits>
LATENTLLM_TARGET_AVX512 float row_avx512(const Row& r, const Prepared& p, std::int64_t n_g, int group, int) {
  const __m128i low4 = _mm_set1_epi8(0x0f);
  const std::int64_t gb = std::int64_t{group} * Bits / 8;
  const float* x = Bits == 4 ? p.xs.data() : p.x.data();
  __m512 yv = _mm512_setzero_ps();  // Σ_g s_g·(the group's lanes): one horizontal sum per row
  float zero_term = 0.0f;           // Σ_g s_g·z_g·Σ_{j∈g} x_j
  for (std::int64_t g = 0; g < n_g; ++g) {
    const std::uint8_t* c = r.codes + g * gb;
    const float* xg = x + g * group;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    // Codes j0 .. j0 + 31 (16 bytes at q = 4, 32 at q = 8) into two accumulators.
    auto step32 = [&](std::int64_t j0, __m512& u, __m512& v) LATENTLLM_TARGET_AVX512 {
      if constexpr (Bits == 4) {
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c + j0 / 2));
        u = fma16(_mm_and_si128(b, low4), xg + j0, u);                          // 16 even columns
        v = fma16(_mm_and_si128(_mm_srli_epi16(b, 4), low4), xg + j0 + 16, v);  // 16 odd columns
      } else {
        u = fma16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c + j0)), xg + j0, u);
        v = fma16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c + j0 + 16)), xg + j0 + 16, v);
      }
    };
    std::int64_t j = 0;
    for (; j + 64 <= group; j += 64) {
      step32(j, a0, a1);
      step32(j + 32, a2, a3);
    }
    if (j < group) step32(j, a0, a1);
    const float s = _cvtsh_ss(r.scales[g]), z = _cvtsh_ss(r.zeros[g]);
    yv = _mm512_fmadd_ps(_mm512_set1_ps(s), _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)), yv);
    zero_term += s * z * p.xsum[static_cast<std::size_t>(g)];
  }
  return hsum16(yv) - zero_term;
}

RowFn row_fn(const PackedMatrix& w) {
  const bool vector = (w.bits == 4 || w.bits == 8) && w.group % 32 == 0;
  if (!vector) return row_generic;
  switch (core::kernel_isa()) {
    case core::Isa::Avx512: return w.bits == 4 ? row_avx512<4> : row_avx512<8>;
    case core::Isa::F16c: return w.bits == 4 ? row_avx2<4> : row_avx2<8>;
    case core::Isa::Generic: break;
  }
  return row_generic;
}

}  // namespace

bool gemv_vectorized(const PackedMatrix& w) { return row_fn(w) != row_generic; }

void gemv(const PackedMatrix& w, std::span<const float> x, std::span<float> y) {
  if (static_cast<std::int64_t>(x.size()) != w.cols || static_cast<std::int64_t>(y.size()) != w.rows) {
    throw ConfigError(fmt::format("quant::gemv: shapes disagree (expected x [{}] and y [{}], got [{}] and [{}])", w.cols,
                            w.rows, x.size(), y.size()));
  }
  const Prepared p = prepare(w, x);
  const RowFn fn = row_fn(w);
  const std::int64_t n_g = w.groups(), rb = w.row_bytes();
  const double bytes = static_cast<double>(w.codes.size()) + 4.0 * static_cast<double>(w.scales.size());
  const core::Work work{2.0 * static_cast<double>(w.rows) * static_cast<double>(w.cols), bytes};
  // Rows are independent sums: any split gives the same bits.
  core::parallel_for(w.rows, 64, work, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const Row row{w.codes.data() + r * rb, w.scales.data() + r * n_g, w.zeros.data() + r * n_g};
      y[static_cast<std::size_t>(r)] = fn(row, p, n_g, w.group, w.bits);
    }
  });
}

}  // namespace latentllm::quant
