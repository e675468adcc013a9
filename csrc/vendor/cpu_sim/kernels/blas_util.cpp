#include "kernels/blas_util.h"

#include <cblas.h>

#include <mutex>
#include <stdexcept>

namespace devx::cpu_sim::kern {
namespace {

// OpenBLAS runs single-threaded and the kernel pool (DEVX_SIM_THREADS) splits each product into
// per-thread blocks, so one pool sizes all of the kernels' parallel work. OpenBLAS's own threads
// spin between calls: on a shared 2-core machine they fought the pool's threads (im2col, the
// copies) and other processes for the cores, making convolutions 10 to 30 times slower.
void init_blas() {
  static std::once_flag once;
  std::call_once(once, [] { scipy_openblas_set_num_threads(1); });
}

// Products smaller than this many multiply-adds run as one call: splitting costs more than it gains.
constexpr int64_t kSplitWork = int64_t{1} << 21;

CBLAS_TRANSPOSE op(bool trans) { return trans ? CblasTrans : CblasNoTrans; }

// BLAS with k == 0 is left to scale C by beta itself; doing it here keeps beta == 0 from
// depending on how a BLAS treats NaN in C.
template <typename S>
void scale_c(int64_t m, int64_t n, S beta, S* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == S(0) ? S(0) : beta * c[i * ldc + j];
  }
}

void blas_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
               float beta, float* c, int ldc) {
  scipy_cblas_sgemm(CblasRowMajor, op(ta), op(tb), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void blas_gemm(bool ta, bool tb, int m, int n, int k, double alpha, const double* a, int lda, const double* b,
               int ldb, double beta, double* c, int ldc) {
  scipy_cblas_dgemm(CblasRowMajor, op(ta), op(tb), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void blas_gemm_batched(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, int sa,
                       const float* b, int ldb, int sb, float beta, float* c, int ldc, int sc, int batch) {
  scipy_cblas_sgemm_batch_strided(CblasRowMajor, op(ta), op(tb), m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc,
                                  sc, batch);
}

void blas_gemm_batched(bool ta, bool tb, int m, int n, int k, double alpha, const double* a, int lda, int sa,
                       const double* b, int ldb, int sb, double beta, double* c, int ldc, int sc, int batch) {
  scipy_cblas_dgemm_batch_strided(CblasRowMajor, op(ta), op(tb), m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc,
                                  sc, batch);
}

bool all_fit(std::initializer_list<int64_t> values) {
  for (int64_t v : values) {
    if (!fits_blas_int(v)) return false;
  }
  return true;
}

}  // namespace

template <typename S>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, S alpha, const S* a, int64_t lda, const S* b,
          int64_t ldb, S beta, S* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    scale_c(m, n, beta, c, ldc);
    return;
  }
  if (!all_fit({m, n, k, lda, ldb, ldc})) throw std::runtime_error("cpu_sim kernel: matrix too large for BLAS");
  init_blas();
  // The block of C at rows [i0, i0 + rows) and columns [j0, j0 + cols).
  auto block = [&](int64_t i0, int64_t rows, int64_t j0, int64_t cols) {
    blas_gemm(trans_a, trans_b, static_cast<int>(rows), static_cast<int>(cols), static_cast<int>(k), alpha,
              a + (trans_a ? i0 : i0 * lda), static_cast<int>(lda), b + (trans_b ? j0 * ldb : j0),
              static_cast<int>(ldb), beta, c + i0 * ldc + j0, static_cast<int>(ldc));
  };
  if (num_threads() == 1 || m * n * k < kSplitWork) {
    block(0, m, 0, n);
  } else if (n >= m) {
    parallel_for(n, 64, [&](int64_t begin, int64_t end) { block(0, m, begin, end - begin); });
  } else {
    parallel_for(m, 64, [&](int64_t begin, int64_t end) { block(begin, end - begin, 0, n); });
  }
}

template <typename S>
void gemm_batched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, S alpha, const S* a, int64_t lda,
                  int64_t stride_a, const S* b, int64_t ldb, int64_t stride_b, S beta, S* c, int64_t ldc,
                  int64_t stride_c, int64_t batch) {
  if (batch == 0 || m == 0 || n == 0) return;
  const int threads = num_threads();
  const bool split_batch = threads > 1 && batch >= threads && batch * m * n * k >= kSplitWork;
  if (batch == 1 || k == 0 || !all_fit({stride_a, stride_b, stride_c, batch, m, n, k, lda, ldb, ldc}) ||
      (threads > 1 && !split_batch && batch * m * n * k >= kSplitWork)) {
    // One product at a time, each split over the pool.
    for (int64_t i = 0; i < batch; ++i) {
      gemm(trans_a, trans_b, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b, ldb, beta, c + i * stride_c, ldc);
    }
    return;
  }
  init_blas();
  auto products = [&](int64_t first, int64_t count) {
    blas_gemm_batched(trans_a, trans_b, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha,
                      a + first * stride_a, static_cast<int>(lda), static_cast<int>(stride_a), b + first * stride_b,
                      static_cast<int>(ldb), static_cast<int>(stride_b), beta, c + first * stride_c,
                      static_cast<int>(ldc), static_cast<int>(stride_c), static_cast<int>(count));
  };
  if (split_batch) {
    parallel_for(batch, 1, [&](int64_t begin, int64_t end) { products(begin, end - begin); });
  } else {
    products(0, batch);
  }
}

template <>
void gemm<int64_t>(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t alpha, const int64_t* a,
                   int64_t lda, const int64_t* b, int64_t ldb, int64_t beta, int64_t* c, int64_t ldc) {
  using U = uint64_t;
  const int64_t sa_i = trans_a ? 1 : lda, sa_p = trans_a ? lda : 1;
  const int64_t sb_p = trans_b ? 1 : ldb, sb_j = trans_b ? ldb : 1;
  parallel_for(m, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, n * k)), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        U acc = 0;
        for (int64_t p = 0; p < k; ++p) {
          acc += static_cast<U>(a[i * sa_i + p * sa_p]) * static_cast<U>(b[p * sb_p + j * sb_j]);
        }
        int64_t& out = c[i * ldc + j];
        const U prior = beta == 0 ? 0 : static_cast<U>(beta) * static_cast<U>(out);
        out = static_cast<int64_t>(static_cast<U>(alpha) * acc + prior);
      }
    }
  });
}

template <>
void gemm_batched<int64_t>(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t alpha,
                           const int64_t* a, int64_t lda, int64_t stride_a, const int64_t* b, int64_t ldb,
                           int64_t stride_b, int64_t beta, int64_t* c, int64_t ldc, int64_t stride_c, int64_t batch) {
  for (int64_t i = 0; i < batch; ++i) {
    gemm<int64_t>(trans_a, trans_b, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b, ldb, beta,
                  c + i * stride_c, ldc);
  }
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
                          float, float*, int64_t);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t, const double*,
                           int64_t, double, double*, int64_t);
template void gemm_batched<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, int64_t,
                                  const float*, int64_t, int64_t, float, float*, int64_t, int64_t, int64_t);
template void gemm_batched<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t, int64_t,
                                   const double*, int64_t, int64_t, double, double*, int64_t, int64_t, int64_t);

}  // namespace devx::cpu_sim::kern
