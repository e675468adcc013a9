// Matrix products: mm, addmm, bmm, baddbmm, addmv, dot. All are one batched product
// out[b] = beta * self[b] + alpha * a[b] @ b[b] on [batch, rows, cols] views. float32/float64
// operands that BLAS can read in place (row- or column-major, any leading dimension: nn.Linear's
// weight.t() included) go to OpenBLAS as they are; other layouts and the 16-bit floats are
// converted tile by tile into float workspaces. Integer types take a plain loop.
#include <algorithm>
#include <utility>

#include "kernels/blas_util.h"
#include "kernels/elementwise.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

// At most this many elements per converted tile, so that converting keeps to bounded workspaces
// (a GPT-2 lm_head in float16 is 0.8 GB of output).
constexpr int64_t kTileElements = int64_t{1} << 22;

Tensor view(const Tensor& t, std::vector<int64_t> sizes, std::vector<int64_t> strides) {
  Tensor v = t;
  v.sizes = std::move(sizes);
  v.strides = std::move(strides);
  return v;
}

Tensor transposed(const Tensor& t) {
  Tensor v = t;
  std::swap(v.sizes[1], v.sizes[2]);
  std::swap(v.strides[1], v.strides[2]);
  return v;
}

Tensor tile(const Tensor& t, int64_t b0, int64_t nb, int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
  Tensor v = offset_view(t, b0 * t.strides[0] + r0 * t.strides[1] + c0 * t.strides[2]);
  v.sizes = {nb, nr, nc};
  return v;
}

bool same_tensor(const Tensor& x, const Tensor& y) {
  return x.data == y.data && x.dtype == y.dtype && x.strides == y.strides;
}

// The operands as [batch, rows, cols] views: a [B, M, K], b [B, K, N], out [B, M, N], and self
// broadcast to out's shape (data == nullptr: no self).
struct Product {
  Tensor a, b, self, out;
};

template <typename S>
DevxStatus product_float(DevxKernelContext* ctx, Product p, const DevxScalar* beta, const DevxScalar* alpha) {
  const S alpha_v = alpha ? scalar_as<S>(alpha) : S(1);
  // beta == 0 ignores self entirely, NaN included, as ATen does.
  const bool use_self = p.self.data && beta && scalar_as<double>(beta) != 0.0;
  const S beta_v = use_self ? scalar_as<S>(beta) : S(0);
  const DevxDType s_dtype = type_dtype<S>();
  auto layout = [&](const Tensor& t) {
    return t.dtype == s_dtype ? matrix_layout(t.sizes[1], t.sizes[2], t.strides[1], t.strides[2]) : MatLayout{};
  };
  MatLayout lc = layout(p.out);
  if (lc.ok && lc.trans) {
    // A column-major output is the row-major transposed product: out^T = b^T @ a^T.
    Product t{transposed(p.b), transposed(p.a), p.self.data ? transposed(p.self) : p.self, transposed(p.out)};
    p = t;
    lc = layout(p.out);
  }
  const MatLayout la = layout(p.a), lb = layout(p.b);
  const bool a_direct = la.ok, b_direct = lb.ok, c_direct = lc.ok && !lc.trans;
  const int64_t batch = p.out.sizes[0], m = p.out.sizes[1], n = p.out.sizes[2], k = p.a.sizes[2];
  if (!fits_blas_int(m) || !fits_blas_int(n) || !fits_blas_int(k)) return decline("matrix too large for 32-bit BLAS");

  int64_t mb = m, nb = n;
  const int64_t k1 = std::max<int64_t>(1, k);
  if (!a_direct && mb * k1 > kTileElements) mb = std::max<int64_t>(1, kTileElements / k1);
  if (!b_direct && nb * k1 > kTileElements) nb = std::max<int64_t>(1, kTileElements / k1);
  while (!c_direct && mb * nb > kTileElements) {
    if (nb >= mb) {
      nb = (nb + 1) / 2;
    } else {
      mb = (mb + 1) / 2;
    }
  }
  int64_t group = 1;  // batches converted together, when whole matrices fit a tile
  if (mb == m && nb == n) {
    const int64_t per = std::max({int64_t{1}, a_direct ? 0 : m * k, b_direct ? 0 : k * n, c_direct ? 0 : m * n});
    group = std::clamp<int64_t>(kTileElements / per, 1, batch);
  }
  S *abuf, *bbuf, *cbuf;
  if (DevxStatus s = workspace_of(ctx, a_direct ? 0 : group * mb * k, &abuf)) return s;
  if (DevxStatus s = workspace_of(ctx, b_direct ? 0 : group * k * nb, &bbuf)) return s;
  if (DevxStatus s = workspace_of(ctx, c_direct ? 0 : group * mb * nb, &cbuf)) return s;

  return launch(ctx, [p, la, lb, lc, a_direct, b_direct, c_direct, use_self, alpha_v, beta_v, batch, m, n, k, mb, nb,
                      group, abuf, bbuf, cbuf] {
    const bool self_is_out = use_self && same_tensor(p.self, p.out);
    for (int64_t b0 = 0; b0 < batch; b0 += group) {
      const int64_t gb = std::min(group, batch - b0);
      for (int64_t m0 = 0; m0 < m; m0 += mb) {
        const int64_t mr = std::min(mb, m - m0);
        const S* ap = abuf;
        bool ta = false;
        int64_t lda = k, sa = mr * k;
        if (a_direct) {
          ap = p.a.ptr<const S>() + b0 * p.a.strides[0] + m0 * p.a.strides[1];
          ta = la.trans, lda = la.ld, sa = p.a.strides[0];
        } else {
          gather<S>(tile(p.a, b0, gb, m0, mr, 0, k), abuf, {mr * k, k, 1});
        }
        for (int64_t n0 = 0; n0 < n; n0 += nb) {
          const int64_t nr = std::min(nb, n - n0);
          const S* bp = bbuf;
          bool tb = false;
          int64_t ldb = nr, sb = k * nr;
          if (b_direct) {
            bp = p.b.ptr<const S>() + b0 * p.b.strides[0] + n0 * p.b.strides[2];
            tb = lb.trans, ldb = lb.ld, sb = p.b.strides[0];
          } else if (m0 == 0 || nb < n) {
            gather<S>(tile(p.b, b0, gb, 0, k, n0, nr), bbuf, {k * nr, nr, 1});
          }
          const Tensor out_tile = tile(p.out, b0, gb, m0, mr, n0, nr);
          S* cp = cbuf;
          int64_t ldc = nr, sc = mr * nr;
          if (c_direct) {
            cp = out_tile.ptr<S>();
            ldc = lc.ld, sc = p.out.strides[0];
            if (use_self && !self_is_out) gather<S>(tile(p.self, b0, gb, m0, mr, n0, nr), cp, p.out.strides);
          } else if (use_self) {
            gather<S>(tile(p.self, b0, gb, m0, mr, n0, nr), cbuf, {mr * nr, nr, 1});
          }
          gemm_batched<S>(ta, tb, mr, nr, k, alpha_v, ap, lda, sa, bp, ldb, sb, beta_v, cp, ldc, sc, gb);
          if (!c_direct) scatter<S>(cbuf, {mr * nr, nr, 1}, out_tile);
        }
      }
    }
  });
}

template <typename T>
DevxStatus product_int(DevxKernelContext* ctx, const Product& p, const DevxScalar* beta, const DevxScalar* alpha) {
  if (p.a.dtype != p.out.dtype || p.b.dtype != p.out.dtype) return decline("integer product of mixed dtypes");
  // Unsigned arithmetic wraps as the integer types' products do in ATen, without signed overflow.
  const uint64_t alpha_v = static_cast<uint64_t>(alpha ? scalar_as<int64_t>(alpha) : 1);
  const bool use_self = p.self.data && beta && scalar_as<int64_t>(beta) != 0;
  const uint64_t beta_v = static_cast<uint64_t>(use_self ? scalar_as<int64_t>(beta) : 0);
  const int64_t batch = p.out.sizes[0], m = p.out.sizes[1], n = p.out.sizes[2], k = p.a.sizes[2];
  return launch(ctx, [p, use_self, alpha_v, beta_v, batch, m, n, k] {
    const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, n * k));
    parallel_for(batch * m, grain, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t bi = row / m, i = row % m;
        const T* a = p.a.ptr<const T>() + bi * p.a.strides[0] + i * p.a.strides[1];
        const T* b = p.b.ptr<const T>() + bi * p.b.strides[0];
        T* o = p.out.ptr<T>() + bi * p.out.strides[0] + i * p.out.strides[1];
        for (int64_t j = 0; j < n; ++j) {
          uint64_t acc = 0;
          for (int64_t x = 0; x < k; ++x) {
            acc += static_cast<uint64_t>(static_cast<int64_t>(a[x * p.a.strides[2]])) *
                   static_cast<uint64_t>(static_cast<int64_t>(b[x * p.b.strides[1] + j * p.b.strides[2]]));
          }
          uint64_t r = alpha_v * acc;
          if (use_self) {
            const char* s = p.self.data +
                            (bi * p.self.strides[0] + i * p.self.strides[1] + j * p.self.strides[2]) *
                                static_cast<int64_t>(p.self.itemsize());
            r += beta_v * static_cast<uint64_t>(load_as<int64_t>(s, p.self.dtype));
          }
          o[j * p.out.strides[2]] = static_cast<T>(static_cast<int64_t>(r));
        }
      }
    });
  });
}

DevxStatus product(DevxKernelContext* ctx, const char* name, const Product& p, const DevxScalar* beta,
                   const DevxScalar* alpha) {
  const int64_t batch = p.out.sizes[0], m = p.out.sizes[1], n = p.out.sizes[2];
  if (p.a.sizes[0] != batch || p.b.sizes[0] != batch || p.a.sizes[1] != m || p.b.sizes[2] != n ||
      p.a.sizes[2] != p.b.sizes[1]) {
    return invalid(std::string(name) + ": operand shapes do not match the output");
  }
  if (p.out.numel() == 0) return DEVX_OK;
  switch (p.out.dtype) {
    case DEVX_FLOAT32:
    case DEVX_FLOAT16:
    case DEVX_BFLOAT16: return product_float<float>(ctx, p, beta, alpha);
    case DEVX_FLOAT64: return product_float<double>(ctx, p, beta, alpha);
    case DEVX_UINT8: return product_int<uint8_t>(ctx, p, beta, alpha);
    case DEVX_INT8: return product_int<int8_t>(ctx, p, beta, alpha);
    case DEVX_INT16: return product_int<int16_t>(ctx, p, beta, alpha);
    case DEVX_INT32: return product_int<int32_t>(ctx, p, beta, alpha);
    case DEVX_INT64: return product_int<int64_t>(ctx, p, beta, alpha);
    default: return decline(std::string(name) + ": dtype " + dtype_name(p.out.dtype) + " is not supported");
  }
}

bool has_dims(std::initializer_list<std::pair<const DevxTensor*, int>> tensors) {
  for (const auto& [t, nd] : tensors) {
    if (!t || t->ndim != nd) return false;
  }
  return true;
}

// A matrix [rows, cols] as a [batch, rows, cols] view repeated over the batch.
Tensor batched(const Tensor& t, int64_t batch) {
  return view(t, {batch, t.sizes[0], t.sizes[1]}, {0, t.strides[0], t.strides[1]});
}

// self broadcast to the [batch, m, n] view of out (whose own shape is `out_shape`).
Tensor broadcast_self(const DevxTensor* self, const std::vector<int64_t>& out_shape,
                      const std::vector<int64_t>& view_sizes, const std::vector<int64_t>& dim_of_view) {
  const Tensor s = take(self);
  const std::vector<int64_t> bs = broadcast_strides(s, out_shape);
  std::vector<int64_t> strides(3, 0);
  for (size_t d = 0; d < 3; ++d) {
    if (dim_of_view[d] >= 0) strides[d] = bs[static_cast<size_t>(dim_of_view[d])];
  }
  return view(s, view_sizes, strides);
}

DevxStatus mm_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* mat2, DevxTensor* out) {
  if (!has_dims({{self, 2}, {mat2, 2}, {out, 2}})) return invalid("mm: expected 2-d tensors");
  Product p{batched(take(self), 1), batched(take(mat2), 1), Tensor{}, batched(take(out), 1)};
  return product(ctx, "mm", p, nullptr, nullptr);
}

DevxStatus addmm_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* mat1, const DevxTensor* mat2,
                     const DevxScalar* beta, const DevxScalar* alpha, DevxTensor* out) {
  if (!self || !has_dims({{mat1, 2}, {mat2, 2}, {out, 2}})) return invalid("addmm: expected 2-d tensors");
  Tensor o = take(out);
  Product p{batched(take(mat1), 1), batched(take(mat2), 1),
            broadcast_self(self, o.sizes, {1, o.sizes[0], o.sizes[1]}, {-1, 0, 1}), batched(o, 1)};
  return product(ctx, "addmm", p, beta, alpha);
}

DevxStatus bmm_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* mat2, DevxTensor* out) {
  if (!has_dims({{self, 3}, {mat2, 3}, {out, 3}})) return invalid("bmm: expected 3-d tensors");
  Product p{take(self), take(mat2), Tensor{}, take(out)};
  return product(ctx, "bmm", p, nullptr, nullptr);
}

DevxStatus baddbmm_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* batch1,
                       const DevxTensor* batch2, const DevxScalar* beta, const DevxScalar* alpha, DevxTensor* out) {
  if (!self || !has_dims({{batch1, 3}, {batch2, 3}, {out, 3}})) return invalid("baddbmm: expected 3-d tensors");
  Tensor o = take(out);
  Product p{take(batch1), take(batch2), broadcast_self(self, o.sizes, o.sizes, {0, 1, 2}), o};
  return product(ctx, "baddbmm", p, beta, alpha);
}

DevxStatus addmv_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* mat, const DevxTensor* vec,
                     const DevxScalar* beta, const DevxScalar* alpha, DevxTensor* out) {
  if (!self || !has_dims({{mat, 2}, {vec, 1}, {out, 1}})) return invalid("addmv: expected a matrix and vectors");
  const Tensor m = take(mat), v = take(vec), o = take(out);
  Product p{batched(m, 1), view(v, {1, v.sizes[0], 1}, {0, v.strides[0], 1}),
            broadcast_self(self, o.sizes, {1, o.sizes[0], 1}, {-1, 0, -1}),
            view(o, {1, o.sizes[0], 1}, {0, o.strides[0], 1})};
  if (m.numel() == 0) {
    // ATen's result then has self's shape, whatever the matrix's: beta * self, a product over k = 0.
    p.a = view(m, {1, o.sizes[0], 0}, {0, 0, 0});
    p.b = view(v, {1, 0, 1}, {0, 0, 0});
  }
  return product(ctx, "addmv", p, beta, alpha);
}

DevxStatus dot_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* tensor, DevxTensor* out) {
  if (!has_dims({{self, 1}, {tensor, 1}, {out, 0}})) return invalid("dot: expected 1-d tensors");
  const Tensor x = take(self), y = take(tensor);
  if (x.sizes[0] != y.sizes[0]) return invalid("dot: inconsistent tensor size");
  Product p{view(x, {1, 1, x.sizes[0]}, {0, 0, x.strides[0]}), view(y, {1, y.sizes[0], 1}, {0, y.strides[0], 0}),
            Tensor{}, view(take(out), {1, 1, 1}, {0, 0, 0})};
  return product(ctx, "dot", p, nullptr, nullptr);
}

DEVX_SIM_REGISTER_KERNEL(mm_out, mm_out);
DEVX_SIM_REGISTER_KERNEL(addmm_out, addmm_out);
DEVX_SIM_REGISTER_KERNEL(bmm_out, bmm_out);
DEVX_SIM_REGISTER_KERNEL(baddbmm_out, baddbmm_out);
DEVX_SIM_REGISTER_KERNEL(addmv_out, addmv_out);
DEVX_SIM_REGISTER_KERNEL(dot_out, dot_out);

}  // namespace
}  // namespace devx::cpu_sim::kern
