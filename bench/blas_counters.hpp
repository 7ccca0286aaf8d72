// FLOP and time counters on every BLAS/LAPACK entry point the library calls, by link-time wrapping
// (`-Wl,--wrap=dgemm_,...`, set for compress_time in bench/CMakeLists.txt): each __wrap_X counts and
// times, then calls __real_X. Calls OpenBLAS makes internally (e.g. the GEMMs inside LAPACKE_dsyevd)
// are not seen; they are inside the LAPACK time. Include from ONE translation unit of ONE binary.
//
// FLOPs follow the usual conventions: gemm 2·m·n·k, syrk n·(n+1)·k, trsm/trmm m·n·(m or n), gemv 2·m·n.
#pragma once

#include <lapacke.h>

#include <atomic>
#include <chrono>

namespace latentllm::bench {

struct BlasCounters {
  std::atomic<double> flops_d{0}, flops_s{0};  // double / single precision BLAS FLOPs
  std::atomic<double> blas_s{0};               // seconds inside BLAS (summed over calling threads)
  std::atomic<double> lapack_s{0};             // seconds inside LAPACKE eigen/SVD/QR/Cholesky calls
};

inline BlasCounters& blas_counters() {
  static BlasCounters c;
  return c;
}

// A plain snapshot, for differences between two points of a run.
struct BlasSnapshot {
  double flops_d = 0, flops_s = 0, blas_s = 0, lapack_s = 0;
  static BlasSnapshot now() {
    const auto& c = blas_counters();
    return {c.flops_d.load(), c.flops_s.load(), c.blas_s.load(), c.lapack_s.load()};
  }
  BlasSnapshot operator-(const BlasSnapshot& o) const {
    return {flops_d - o.flops_d, flops_s - o.flops_s, blas_s - o.blas_s, lapack_s - o.lapack_s};
  }
  BlasSnapshot& operator+=(const BlasSnapshot& o) {
    flops_d += o.flops_d, flops_s += o.flops_s, blas_s += o.blas_s, lapack_s += o.lapack_s;
    return *this;
  }
};

namespace detail {
template <typename F>
auto timed_call(std::atomic<double>& acc, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  if constexpr (std::is_void_v<decltype(f())>) {
    f();
    acc.fetch_add(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  } else {
    auto r = f();
    acc.fetch_add(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return r;
  }
}
inline double d(int x) { return static_cast<double>(x); }
}  // namespace detail

}  // namespace latentllm::bench

// Fortran BLAS as Eigen declares them (Eigen/src/misc/blas.h), and the CBLAS/LAPACKE calls of src/.
extern "C" {
using latentllm::bench::blas_counters;
using latentllm::bench::detail::d;
using latentllm::bench::detail::timed_call;

int __real_dgemm_(const char*, const char*, const int*, const int*, const int*, const double*, const double*,
                  const int*, const double*, const int*, const double*, double*, const int*);
int __wrap_dgemm_(const char* ta, const char* tb, const int* m, const int* n, const int* k, const double* al,
                  const double* a, const int* lda, const double* b, const int* ldb, const double* be, double* c,
                  const int* ldc) {
  blas_counters().flops_d.fetch_add(2 * d(*m) * d(*n) * d(*k));
  return timed_call(blas_counters().blas_s,
                    [&] { return __real_dgemm_(ta, tb, m, n, k, al, a, lda, b, ldb, be, c, ldc); });
}
int __real_sgemm_(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
                  const int*, const float*, const int*, const float*, float*, const int*);
int __wrap_sgemm_(const char* ta, const char* tb, const int* m, const int* n, const int* k, const float* al,
                  const float* a, const int* lda, const float* b, const int* ldb, const float* be, float* c,
                  const int* ldc) {
  blas_counters().flops_s.fetch_add(2 * d(*m) * d(*n) * d(*k));
  return timed_call(blas_counters().blas_s,
                    [&] { return __real_sgemm_(ta, tb, m, n, k, al, a, lda, b, ldb, be, c, ldc); });
}
int __real_dgemv_(const char*, const int*, const int*, const double*, const double*, const int*, const double*,
                  const int*, const double*, double*, const int*);
int __wrap_dgemv_(const char* t, const int* m, const int* n, const double* al, const double* a, const int* lda,
                  const double* x, const int* incx, const double* be, double* y, const int* incy) {
  blas_counters().flops_d.fetch_add(2 * d(*m) * d(*n));
  return timed_call(blas_counters().blas_s,
                    [&] { return __real_dgemv_(t, m, n, al, a, lda, x, incx, be, y, incy); });
}
int __real_sgemv_(const char*, const int*, const int*, const float*, const float*, const int*, const float*,
                  const int*, const float*, float*, const int*);
int __wrap_sgemv_(const char* t, const int* m, const int* n, const float* al, const float* a, const int* lda,
                  const float* x, const int* incx, const float* be, float* y, const int* incy) {
  blas_counters().flops_s.fetch_add(2 * d(*m) * d(*n));
  return timed_call(blas_counters().blas_s,
                    [&] { return __real_sgemv_(t, m, n, al, a, lda, x, incx, be, y, incy); });
}
int __real_dsyrk_(const char*, const char*, const int*, const int*, const double*, const double*, const int*,
                  const double*, double*, const int*);
int __wrap_dsyrk_(const char* uplo, const char* t, const int* n, const int* k, const double* al, const double* a,
                  const int* lda, const double* be, double* c, const int* ldc) {
  blas_counters().flops_d.fetch_add(d(*n) * (d(*n) + 1) * d(*k));
  return timed_call(blas_counters().blas_s, [&] { return __real_dsyrk_(uplo, t, n, k, al, a, lda, be, c, ldc); });
}
int __real_dtrsm_(const char*, const char*, const char*, const char*, const int*, const int*, const double*,
                  const double*, const int*, double*, const int*);
int __wrap_dtrsm_(const char* side, const char* uplo, const char* t, const char* diag, const int* m, const int* n,
                  const double* al, const double* a, const int* lda, double* b, const int* ldb) {
  blas_counters().flops_d.fetch_add(d(*m) * d(*n) * (*side == 'L' || *side == 'l' ? d(*m) : d(*n)));
  return timed_call(blas_counters().blas_s,
                    [&] { return __real_dtrsm_(side, uplo, t, diag, m, n, al, a, lda, b, ldb); });
}
int __real_dtrmm_(const char*, const char*, const char*, const char*, const int*, const int*, const double*,
                  const double*, const int*, double*, const int*);
int __wrap_dtrmm_(const char* side, const char* uplo, const char* t, const char* diag, const int* m, const int* n,
                  const double* al, const double* a, const int* lda, double* b, const int* ldb) {
  blas_counters().flops_d.fetch_add(d(*m) * d(*n) * (*side == 'L' || *side == 'l' ? d(*m) : d(*n)));
  return timed_call(blas_counters().blas_s,
                    [&] { return __real_dtrmm_(side, uplo, t, diag, m, n, al, a, lda, b, ldb); });
}
void __real_cblas_sgemm(CBLAS_ORDER, CBLAS_TRANSPOSE, CBLAS_TRANSPOSE, blasint, blasint, blasint, float,
                        const float*, blasint, const float*, blasint, float, float*, blasint);
void __wrap_cblas_sgemm(CBLAS_ORDER o, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint m, blasint n, blasint k,
                        float al, const float* a, blasint lda, const float* b, blasint ldb, float be, float* c,
                        blasint ldc) {
  blas_counters().flops_s.fetch_add(2 * d(m) * d(n) * d(k));
  timed_call(blas_counters().blas_s,
             [&] { __real_cblas_sgemm(o, ta, tb, m, n, k, al, a, lda, b, ldb, be, c, ldc); });
}
void __real_cblas_ssyrk(CBLAS_ORDER, CBLAS_UPLO, CBLAS_TRANSPOSE, blasint, blasint, float, const float*, blasint,
                        float, float*, blasint);
void __wrap_cblas_ssyrk(CBLAS_ORDER o, CBLAS_UPLO u, CBLAS_TRANSPOSE t, blasint n, blasint k, float al, const float* a,
                        blasint lda, float be, float* c, blasint ldc) {
  blas_counters().flops_s.fetch_add(d(n) * (d(n) + 1) * d(k));
  timed_call(blas_counters().blas_s, [&] { __real_cblas_ssyrk(o, u, t, n, k, al, a, lda, be, c, ldc); });
}
void __real_cblas_dsyrk(CBLAS_ORDER, CBLAS_UPLO, CBLAS_TRANSPOSE, blasint, blasint, double, const double*,
                        blasint, double, double*, blasint);
void __wrap_cblas_dsyrk(CBLAS_ORDER o, CBLAS_UPLO u, CBLAS_TRANSPOSE t, blasint n, blasint k, double al,
                        const double* a, blasint lda, double be, double* c, blasint ldc) {
  blas_counters().flops_d.fetch_add(d(n) * (d(n) + 1) * d(k));
  timed_call(blas_counters().blas_s, [&] { __real_cblas_dsyrk(o, u, t, n, k, al, a, lda, be, c, ldc); });
}
void __real_cblas_dtrmm(CBLAS_ORDER, CBLAS_SIDE, CBLAS_UPLO, CBLAS_TRANSPOSE, CBLAS_DIAG, blasint, blasint, double,
                        const double*, blasint, double*, blasint);
void __wrap_cblas_dtrmm(CBLAS_ORDER o, CBLAS_SIDE side, CBLAS_UPLO u, CBLAS_TRANSPOSE t, CBLAS_DIAG dg, blasint m,
                        blasint n, double al, const double* a, blasint lda, double* b, blasint ldb) {
  blas_counters().flops_d.fetch_add(d(m) * d(n) * (side == CblasLeft ? d(m) : d(n)));
  timed_call(blas_counters().blas_s, [&] { __real_cblas_dtrmm(o, side, u, t, dg, m, n, al, a, lda, b, ldb); });
}
void __real_cblas_dtrsm(CBLAS_ORDER, CBLAS_SIDE, CBLAS_UPLO, CBLAS_TRANSPOSE, CBLAS_DIAG, blasint, blasint, double,
                        const double*, blasint, double*, blasint);
void __wrap_cblas_dtrsm(CBLAS_ORDER o, CBLAS_SIDE side, CBLAS_UPLO u, CBLAS_TRANSPOSE t, CBLAS_DIAG dg, blasint m,
                        blasint n, double al, const double* a, blasint lda, double* b, blasint ldb) {
  blas_counters().flops_d.fetch_add(d(m) * d(n) * (side == CblasLeft ? d(m) : d(n)));
  timed_call(blas_counters().blas_s, [&] { __real_cblas_dtrsm(o, side, u, t, dg, m, n, al, a, lda, b, ldb); });
}
lapack_int __real_LAPACKE_dpotrf(int, char, lapack_int, double*, lapack_int);
lapack_int __wrap_LAPACKE_dpotrf(int layout, char uplo, lapack_int n, double* a, lapack_int lda) {
  return timed_call(blas_counters().lapack_s, [&] { return __real_LAPACKE_dpotrf(layout, uplo, n, a, lda); });
}
lapack_int __real_LAPACKE_dsyevd(int, char, char, lapack_int, double*, lapack_int, double*);
lapack_int __wrap_LAPACKE_dsyevd(int layout, char jobz, char uplo, lapack_int n, double* a, lapack_int lda,
                                 double* w) {
  return timed_call(blas_counters().lapack_s,
                    [&] { return __real_LAPACKE_dsyevd(layout, jobz, uplo, n, a, lda, w); });
}
lapack_int __real_LAPACKE_dgesdd(int, char, lapack_int, lapack_int, double*, lapack_int, double*, double*,
                                 lapack_int, double*, lapack_int);
lapack_int __wrap_LAPACKE_dgesdd(int layout, char jobz, lapack_int m, lapack_int n, double* a, lapack_int lda,
                                 double* s, double* u, lapack_int ldu, double* vt, lapack_int ldvt) {
  return timed_call(blas_counters().lapack_s,
                    [&] { return __real_LAPACKE_dgesdd(layout, jobz, m, n, a, lda, s, u, ldu, vt, ldvt); });
}
lapack_int __real_LAPACKE_dgeqp3(int, lapack_int, lapack_int, double*, lapack_int, lapack_int*, double*);
lapack_int __wrap_LAPACKE_dgeqp3(int layout, lapack_int m, lapack_int n, double* a, lapack_int lda,
                                 lapack_int* jpvt, double* tau) {
  return timed_call(blas_counters().lapack_s,
                    [&] { return __real_LAPACKE_dgeqp3(layout, m, n, a, lda, jpvt, tau); });
}
}  // extern "C"
