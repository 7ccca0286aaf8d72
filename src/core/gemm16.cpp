#include "core/gemm16.hpp"

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/gemm.hpp"
#include "core/parallel.hpp"

namespace latentllm::core {
namespace {

// ---- portable ----

template <DType D>
inline float widen1(std::uint16_t h) {
  if constexpr (D == DType::F16) {
    return f16_to_f32(h);
  } else {
    return bf16_to_f32(h);
  }
}

template <DType D>
void widen_generic(const std::uint16_t* s, std::int64_t n, float* out) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = widen1<D>(s[i]);
}

// Eight partial sums, as the vector kernels keep lanes: the same shape of rounding error.
template <DType D>
float dot_generic(const std::uint16_t* w, const float* x, std::int64_t k) {
  float acc[8] = {};
  std::int64_t i = 0;
  for (; i + 8 <= k; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += widen1<D>(w[i + j]) * x[i + j];
  for (; i < k; ++i) acc[0] += widen1<D>(w[i]) * x[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

template <DType D>
void dot4_generic(const std::uint16_t* w, std::int64_t ldw, const float* x, std::int64_t k, float* out) {
  for (int r = 0; r < 4; ++r) out[r] = dot_generic<D>(w + r * ldw, x, k);
}

// ---- prefetching for the GEMV (dot4 below) ----

constexpr std::int64_t kLineElems = 32;  // 16-bit elements per 64-byte cache line
constexpr std::int64_t kPrefetch = 256;  // how far ahead each row is prefetched: 512 bytes

// The address is formed as an integer: it may lie past the matrix, where pointer arithmetic would
// be undefined (a prefetch of any address is harmless).
inline void prefetch_rows(const std::uint16_t* w, std::int64_t ldw, std::int64_t at) {
  const auto base = reinterpret_cast<std::uintptr_t>(w);
  for (std::int64_t r = 0; r < 4; ++r) {
    __builtin_prefetch(reinterpret_cast<const void*>(base + static_cast<std::uintptr_t>(2 * (r * ldw + at))), 0, 3);
  }
}

// ---- F16C + AVX2 + FMA ----

#define LATENTLLM_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))

template <DType D>
LATENTLLM_TARGET_AVX2 inline __m256 load8(const std::uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (D == DType::F16) {
    return _mm256_cvtph_ps(h);
  } else {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

template <DType D>
LATENTLLM_TARGET_AVX2 void widen_avx2(const std::uint16_t* s, std::int64_t n, float* out) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, load8<D>(s + i));
  for (; i < n; ++i) out[i] = widen1<D>(s[i]);
}

template <DType D>
LATENTLLM_TARGET_AVX2 float dot_avx2(const std::uint16_t* w, const float* x, std::int64_t k) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  std::int64_t i = 0;
  for (; i + 32 <= k; i += 32) {
    a0 = _mm256_fmadd_ps(load8<D>(w + i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(load8<D>(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
    a2 = _mm256_fmadd_ps(load8<D>(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
    a3 = _mm256_fmadd_ps(load8<D>(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
  }
  for (; i + 8 <= k; i += 8) a0 = _mm256_fmadd_ps(load8<D>(w + i), _mm256_loadu_ps(x + i), a0);
  const __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  float t = _mm_cvtss_f32(h);
  for (; i < k; ++i) t += widen1<D>(w[i]) * x[i];
  return t;
}

// Four rows of w against one x: four independent streams from memory, x loaded once per step. Each
// row is a short stream (a few KiB) that the hardware prefetcher picks up late, so the kernel asks for
// each row's cache line kPrefetch elements ahead (past a row's end: the next rows', read next). A
// prefetch never faults and changes no result.
template <DType D>
LATENTLLM_TARGET_AVX2 void dot4_avx2(const std::uint16_t* w, std::int64_t ldw, const float* x, std::int64_t k,
                                     float* out) {
  __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  std::int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    if (i % kLineElems == 0) prefetch_rows(w, ldw, i + kPrefetch);
    const __m256 xv = _mm256_loadu_ps(x + i);
    for (int r = 0; r < 4; ++r) a[r] = _mm256_fmadd_ps(load8<D>(w + r * ldw + i), xv, a[r]);
  }
  for (int r = 0; r < 4; ++r) {
    alignas(32) float lane[8];
    _mm256_store_ps(lane, a[r]);
    float t = ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
    for (std::int64_t j = i; j < k; ++j) t += widen1<D>(w[r * ldw + j]) * x[j];
    out[r] = t;
  }
}

// ---- AVX-512 (F, BW, VL) ----

#define LATENTLLM_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

template <DType D>
LATENTLLM_TARGET_AVX512 inline __m512 load16(const std::uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  if constexpr (D == DType::F16) {
    return _mm512_cvtph_ps(h);
  } else {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

template <DType D>
LATENTLLM_TARGET_AVX512 void widen_avx512(const std::uint16_t* s, std::int64_t n, float* out) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, load16<D>(s + i));
  for (; i < n; ++i) out[i] = widen1<D>(s[i]);
}

template <DType D>
LATENTLLM_TARGET_AVX512 float dot_avx512(const std::uint16_t* w, const float* x, std::int64_t k) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
  std::int64_t i = 0;
  for (; i + 64 <= k; i += 64) {
    a0 = _mm512_fmadd_ps(load16<D>(w + i), _mm512_loadu_ps(x + i), a0);
    a1 = _mm512_fmadd_ps(load16<D>(w + i + 16), _mm512_loadu_ps(x + i + 16), a1);
    a2 = _mm512_fmadd_ps(load16<D>(w + i + 32), _mm512_loadu_ps(x + i + 32), a2);
    a3 = _mm512_fmadd_ps(load16<D>(w + i + 48), _mm512_loadu_ps(x + i + 48), a3);
  }
  for (; i + 16 <= k; i += 16) a0 = _mm512_fmadd_ps(load16<D>(w + i), _mm512_loadu_ps(x + i), a0);
  // The lanes' tree sum through memory: GCC 12's _mm512_reduce_add_ps trips -Wuninitialized in its header.
  alignas(64) float lane[16];
  _mm512_store_ps(lane, _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
  for (int w2 = 8; w2 > 0; w2 /= 2)
    for (int j = 0; j < w2; ++j) lane[j] += lane[j + w2];
  float t = lane[0];
  for (; i < k; ++i) t += widen1<D>(w[i]) * x[i];
  return t;
}

template <DType D>
LATENTLLM_TARGET_AVX512 void dot4_avx512(const std::uint16_t* w, std::int64_t ldw, const float* x, std::int64_t k,
                                         float* out) {
  __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  std::int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    if (i % kLineElems == 0) prefetch_rows(w, ldw, i + kPrefetch);
    const __m512 xv = _mm512_loadu_ps(x + i);
    for (int r = 0; r < 4; ++r) a[r] = _mm512_fmadd_ps(load16<D>(w + r * ldw + i), xv, a[r]);
  }
  for (int r = 0; r < 4; ++r) {
    alignas(64) float lane[16];  // the lanes' tree sum (see dot_avx512)
    _mm512_store_ps(lane, a[r]);
    for (int w2 = 8; w2 > 0; w2 /= 2)
      for (int j = 0; j < w2; ++j) lane[j] += lane[j + w2];
    float t = lane[0];
    for (std::int64_t j = i; j < k; ++j) t += widen1<D>(w[r * ldw + j]) * x[j];
    out[r] = t;
  }
}

// dot4 of n <= 4 rows of x at once: out[i·4 + r] = the dot4_avx512 of x row i (x + i·ldx) and weight row r.
// Each chunk of the four weight rows is widened once for the n rows; every (r, i) accumulates the same
// FMAs in the same order as dot4_avx512 on row i alone, so the results are its bits (RowwiseProducts).
template <DType D, int N>
LATENTLLM_TARGET_AVX512 void dot4_rows_avx512(const std::uint16_t* w, std::int64_t ldw, const float* x, std::int64_t ldx,
                                              std::int64_t k, float* out) {
  __m512 a[N][4];
  for (int i = 0; i < N; ++i)
    for (int r = 0; r < 4; ++r) a[i][r] = _mm512_setzero_ps();
  std::int64_t c = 0;
  for (; c + 16 <= k; c += 16) {
    if (c % kLineElems == 0) prefetch_rows(w, ldw, c + kPrefetch);
    __m512 wv[4];
    for (int r = 0; r < 4; ++r) wv[r] = load16<D>(w + r * ldw + c);
    for (int i = 0; i < N; ++i) {
      const __m512 xv = _mm512_loadu_ps(x + i * ldx + c);
      for (int r = 0; r < 4; ++r) a[i][r] = _mm512_fmadd_ps(wv[r], xv, a[i][r]);
    }
  }
  for (int i = 0; i < N; ++i) {
    for (int r = 0; r < 4; ++r) {
      alignas(64) float lane[16];  // the lanes' tree sum (see dot_avx512)
      _mm512_store_ps(lane, a[i][r]);
      for (int w2 = 8; w2 > 0; w2 /= 2)
        for (int j = 0; j < w2; ++j) lane[j] += lane[j + w2];
      float t = lane[0];
      for (std::int64_t j = c; j < k; ++j) t += widen1<D>(w[r * ldw + j]) * x[i * ldx + j];
      out[i * 4 + r] = t;
    }
  }
}

// ---- dispatch ----

using WidenFn = void (*)(const std::uint16_t*, std::int64_t, float*);
using DotFn = float (*)(const std::uint16_t*, const float*, std::int64_t);
using Dot4Fn = void (*)(const std::uint16_t*, std::int64_t, const float*, std::int64_t, float*);

std::atomic<int> g_isa{-1};  // Isa once chosen

Isa isa_from_env() {
  const Isa best = best_isa();
  const char* e = std::getenv("LATENTLLM_ISA");
  if (e == nullptr) return best;
  const std::string v(e);
  Isa asked = best;
  if (v == "generic") asked = Isa::Generic;
  if (v == "f16c") asked = Isa::F16c;
  return std::min(asked, best);
}

template <DType D>
WidenFn widen_fn(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return widen_avx512<D>;
    case Isa::F16c: return widen_avx2<D>;
    case Isa::Generic: break;
  }
  return widen_generic<D>;
}

template <DType D>
DotFn dot_fn(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return dot_avx512<D>;
    case Isa::F16c: return dot_avx2<D>;
    case Isa::Generic: break;
  }
  return dot_generic<D>;
}

template <DType D>
Dot4Fn dot4_fn(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return dot4_avx512<D>;
    case Isa::F16c: return dot4_avx2<D>;
    case Isa::Generic: break;
  }
  return dot4_generic<D>;
}

// dot4 of n x rows (leading dimension ldx) into out[i·4 + r]: the AVX-512 kernel widens each weight chunk
// once for up to four rows; other instruction sets run dot4 per row (the same bits either way).
using Dot4RowsFn = void (*)(const std::uint16_t*, std::int64_t, const float*, std::int64_t, int, std::int64_t, float*);

template <DType D>
void dot4_rows_fallback(const std::uint16_t* w, std::int64_t ldw, const float* x, std::int64_t ldx, int n, std::int64_t k,
                        float* out) {
  const Dot4Fn dot4 = dot4_fn<D>(kernel_isa());
  for (int i = 0; i < n; ++i) dot4(w, ldw, x + i * ldx, k, out + 4 * i);
}

template <DType D>
void dot4_rows_avx512_any(const std::uint16_t* w, std::int64_t ldw, const float* x, std::int64_t ldx, int n,
                          std::int64_t k, float* out) {
  for (int i0 = 0; i0 < n; i0 += 4) {
    const float* xi = x + i0 * ldx;
    float* oi = out + 4 * i0;
    switch (std::min(4, n - i0)) {
      case 1: dot4_rows_avx512<D, 1>(w, ldw, xi, ldx, k, oi); break;
      case 2: dot4_rows_avx512<D, 2>(w, ldw, xi, ldx, k, oi); break;
      case 3: dot4_rows_avx512<D, 3>(w, ldw, xi, ldx, k, oi); break;
      default: dot4_rows_avx512<D, 4>(w, ldw, xi, ldx, k, oi); break;
    }
  }
}

template <DType D>
Dot4RowsFn dot4_rows_fn(Isa isa) {
  return isa == Isa::Avx512 ? dot4_rows_avx512_any<D> : dot4_rows_fallback<D>;
}

Dot4RowsFn dot4_rows_for(DType d) {
  return d == DType::BF16 ? dot4_rows_fn<DType::BF16>(kernel_isa()) : dot4_rows_fn<DType::F16>(kernel_isa());
}

Dot4Fn dot4_for(DType d) {
  return d == DType::BF16 ? dot4_fn<DType::BF16>(kernel_isa()) : dot4_fn<DType::F16>(kernel_isa());
}

WidenFn widen_for(DType d) { return d == DType::BF16 ? widen_fn<DType::BF16>(kernel_isa()) : widen_fn<DType::F16>(kernel_isa()); }
DotFn dot_for(DType d) { return d == DType::BF16 ? dot_fn<DType::BF16>(kernel_isa()) : dot_fn<DType::F16>(kernel_isa()); }

}  // namespace

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::Generic: return "generic";
    case Isa::F16c: return "f16c";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

namespace {
// F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does not know "f16c".
bool has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
}  // namespace

Isa best_isa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    return Isa::Avx512;  // every AVX-512 CPU has F16C
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c()) return Isa::F16c;
  return Isa::Generic;
}

Isa kernel_isa() {
  int v = g_isa.load(std::memory_order_relaxed);
  if (v < 0) {
    v = static_cast<int>(isa_from_env());
    g_isa.store(v, std::memory_order_relaxed);
  }
  return static_cast<Isa>(v);
}

Isa set_kernel_isa(Isa isa) {
  const Isa chosen = std::min(isa, best_isa());
  g_isa.store(static_cast<int>(chosen), std::memory_order_relaxed);
  return chosen;
}

void widen_rows(const Matrix16& w, std::int64_t r0, std::int64_t r1, float* out) {
  if (r1 <= r0) return;
  widen_for(w.dtype)(w.row(r0), (r1 - r0) * w.cols, out);
}

namespace {
std::atomic<int> g_exact_products{0};  // ExactProducts alive
std::atomic<int> g_rowwise_products{0};  // RowwiseProducts alive
}  // namespace

RowwiseProducts::RowwiseProducts() { g_rowwise_products.fetch_add(1); }
RowwiseProducts::~RowwiseProducts() { g_rowwise_products.fetch_sub(1); }
bool rowwise_products() { return g_rowwise_products.load(std::memory_order_relaxed) != 0; }

ExactProducts::ExactProducts() { g_exact_products.fetch_add(1); }
ExactProducts::~ExactProducts() { g_exact_products.fetch_sub(1); }

void xwt16(const float* x, int n, int ldx, const Matrix16& w, std::int64_t c0, std::int64_t c1, float beta, float* y,
           int ldy) {
  const std::int64_t k = w.cols, cols = c1 - c0;
  if (n <= 0 || cols <= 0) return;
  if ((n <= kGemvRows || rowwise_products()) && g_exact_products.load(std::memory_order_relaxed) == 0) {
    // Four rows of W at a time (four streams in flight), then the rest one by one; each x row reads
    // the four rows again from L1.
    const DotFn dot = dot_for(w.dtype);
    const Dot4Fn dot4 = dot4_for(w.dtype);
    auto put = [&](int i, std::int64_t j, float d) {
      float& yij = y[static_cast<std::int64_t>(i) * ldy + j];
      yij = beta == 0.0f ? d : beta * yij + d;
    };
    std::int64_t j = 0;
    if (n > 1) {  // several rows (a decoding batch): each chunk of four weight rows widened once for them all
      const Dot4RowsFn dot4_rows = dot4_rows_for(w.dtype);
      std::vector<float> d(static_cast<std::size_t>(4 * n));  // [n, 4]
      for (; j + 4 <= cols; j += 4) {
        dot4_rows(w.row(c0 + j), k, x, ldx, n, k, d.data());
        for (int i = 0; i < n; ++i)
          for (int r = 0; r < 4; ++r) put(i, j + r, d[static_cast<std::size_t>(4 * i + r)]);
      }
    }
    for (; j + 4 <= cols; j += 4) {
      for (int i = 0; i < n; ++i) {
        float d[4];
        dot4(w.row(c0 + j), k, x + static_cast<std::int64_t>(i) * ldx, k, d);
        for (int r = 0; r < 4; ++r) put(i, j + r, d[r]);
      }
    }
    for (; j < cols; ++j)
      for (int i = 0; i < n; ++i) put(i, j, dot(w.row(c0 + j), x + static_cast<std::int64_t>(i) * ldx, k));
    return;
  }
  thread_local ScratchF panel;  // [c1 − c0, k]
  panel.resize(static_cast<std::size_t>(cols * k));
  widen_rows(w, c0, c1, panel.data());
  sgemm_rm(false, true, n, static_cast<int>(cols), static_cast<int>(k), 1.0f, x, ldx, panel.data(),
           static_cast<int>(k), beta, y, ldy);
}

std::int64_t first_non_finite(const Matrix16& w) {
  // An all-ones exponent is Inf or NaN: F16 bits 10-14, BF16 bits 7-14.
  const std::uint16_t mask = w.dtype == DType::BF16 ? 0x7f80u : 0x7c00u;
  constexpr std::int64_t kBlock = 4096;
  const std::int64_t n = w.size();
  for (std::int64_t b = 0; b < n; b += kBlock) {
    const std::int64_t e = std::min(n, b + kBlock);
    bool any = false;
    for (std::int64_t i = b; i < e; ++i) any |= (w.data[i] & mask) == mask;
    if (!any) continue;
    for (std::int64_t i = b; i < e; ++i)
      if ((w.data[i] & mask) == mask) return i;
  }
  return -1;
}

}  // namespace latentllm::core
