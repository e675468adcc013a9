// What the BLAS-backed kernels (matrix products, convolution) share: row-major GEMM on OpenBLAS,
// the layouts BLAS can read a strided matrix in, and converting copies between tensors of any
// strides and dtype and the dense float/double buffers BLAS works on.
#pragma once

#include <algorithm>
#include <climits>
#include <vector>

#include "kernels/common.h"

namespace devx::cpu_sim::kern {

// How BLAS reads a [rows, cols] matrix with strides (s0, s1) in place: row-major (trans false) or
// column-major (trans true, BLAS's transposed row-major) with leading dimension ld.
struct MatLayout {
  bool ok = false;
  bool trans = false;
  int64_t ld = 0;
};

inline bool fits_blas_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

inline MatLayout matrix_layout(int64_t rows, int64_t cols, int64_t s0, int64_t s1) {
  MatLayout l;
  // A dimension of size 1 has no stride to honour.
  if ((cols <= 1 || s1 == 1) && (rows <= 1 || s0 >= std::max<int64_t>(1, cols))) {
    l.ok = true;
    l.ld = rows <= 1 ? std::max<int64_t>(1, cols) : s0;
  } else if ((rows <= 1 || s0 == 1) && (cols <= 1 || s1 >= std::max<int64_t>(1, rows))) {
    l.ok = true;
    l.trans = true;
    l.ld = cols <= 1 ? std::max<int64_t>(1, rows) : s1;
  }
  l.ok = l.ok && fits_blas_int(l.ld);
  return l;
}

// C[m, n] = alpha * op(A)[m, k] * op(B)[k, n] + beta * C, row-major; beta == 0 never reads C.
// S is float or double (OpenBLAS, one call per block of C on the kernel pool's threads) or
// int64_t (a plain loop that wraps around as integer products do). To be called from launched
// work, outside parallel_for.
template <typename S>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, S alpha, const S* a, int64_t lda, const S* b,
          int64_t ldb, S beta, S* c, int64_t ldc);

// `batch` GEMMs whose operands are `stride_*` elements apart (a stride may be 0).
template <typename S>
void gemm_batched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, S alpha, const S* a, int64_t lda,
                  int64_t stride_a, const S* b, int64_t ldb, int64_t stride_b, S beta, S* c, int64_t ldc,
                  int64_t stride_c, int64_t batch);

template <>
void gemm<int64_t>(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t alpha, const int64_t* a,
                   int64_t lda, const int64_t* b, int64_t ldb, int64_t beta, int64_t* c, int64_t ldc);
template <>
void gemm_batched<int64_t>(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t alpha,
                           const int64_t* a, int64_t lda, int64_t stride_a, const int64_t* b, int64_t ldb,
                           int64_t stride_b, int64_t beta, int64_t* c, int64_t ldc, int64_t stride_c, int64_t batch);

// Copies `src` (its sizes and strides; 0 strides broadcast) into `dst` laid out by `dst_strides`,
// converting to D. Parallel; to be called from launched work.
template <typename D>
void gather(const Tensor& src, D* dst, const Dims& dst_strides) {
  std::array<Dims, 2> strides{dst_strides, src.strides};
  Loop<2> loop(src.sizes, strides);
  const int64_t n = loop.numel();
  dispatch(src.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* s = src.ptr<const T>();
    parallel_for(n, 32768, [&](int64_t begin, int64_t end) {
      loop.run(begin, end, [&](const std::array<int64_t, 2>& off, int64_t len, const std::array<int64_t, 2>& st) {
        D* d = dst + off[0];
        const T* p = s + off[1];
        for (int64_t i = 0; i < len; ++i) d[i * st[0]] = convert<D>(p[i * st[1]]);
      });
    });
  });
}

// Copies the buffer `src` (laid out by `src_strides`, shaped as `dst`) into the tensor `dst`.
template <typename S>
void scatter(const S* src, const Dims& src_strides, const Tensor& dst) {
  std::array<Dims, 2> strides{dst.strides, src_strides};
  Loop<2> loop(dst.sizes, strides);
  const int64_t n = loop.numel();
  dispatch(dst.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* d = dst.ptr<T>();
    parallel_for(n, 32768, [&](int64_t begin, int64_t end) {
      loop.run(begin, end, [&](const std::array<int64_t, 2>& off, int64_t len, const std::array<int64_t, 2>& st) {
        T* o = d + off[0];
        const S* p = src + off[1];
        for (int64_t i = 0; i < len; ++i) o[i * st[0]] = convert<T>(p[i * st[1]]);
      });
    });
  });
}

// Row-major strides of a dense buffer of shape `sizes`.
inline std::vector<int64_t> dense_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> s(sizes.size(), 1);
  for (int d = static_cast<int>(sizes.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * std::max<int64_t>(1, sizes[d + 1]);
  return s;
}

// A view of `t` whose first element is `offset` elements further on.
inline Tensor offset_view(Tensor t, int64_t offset) {
  t.data += offset * static_cast<int64_t>(t.itemsize());
  return t;
}

// Device memory from ctx->workspace for `count` elements of S (nullptr for none).
template <typename S>
DevxStatus workspace_of(DevxKernelContext* ctx, int64_t count, S** ptr) {
  *ptr = nullptr;
  if (count <= 0) return DEVX_OK;
  void* p = nullptr;
  const size_t bytes = static_cast<size_t>(count) * sizeof(S);
  if (DevxStatus status = ctx->workspace(ctx, bytes, &p)) {
    return fail(status, "cpu_sim kernel: no device memory for a workspace of " + format_bytes(bytes));
  }
  *ptr = static_cast<S*>(p);
  return DEVX_OK;
}

}  // namespace devx::cpu_sim::kern
