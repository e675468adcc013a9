// Gathering and scattering along one dim (gather, scatter, scatter_add) and the backward of
// embedding, which scatters rows of the gradient into the rows of the weight they came from.
#include "kernels/index_util.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

DevxStatus gather_out(DevxKernelContext* ctx, const DevxTensor* self, int64_t dim, const DevxTensor* index,
                      int /*sparse_grad*/, DevxTensor* out) {
  if (!self || !index || !out) return invalid("gather: NULL tensor");
  Tensor s = take(self), ix = take(index), o = take(out);
  if (!wrap_dim(dim, s.ndim())) return invalid("gather: dim " + std::to_string(dim) + " out of range");
  as_1d(s);
  as_1d(ix);
  as_1d(o);
  // ATen takes an empty index of any dtype and shape.
  if (ix.numel() == 0) return o.numel() == 0 ? DEVX_OK : invalid("gather: output should be empty for an empty index");
  if (!is_index_dtype(ix.dtype)) return decline(std::string("gather: index of dtype ") + dtype_name(ix.dtype));
  if (ix.ndim() != s.ndim() || o.sizes != ix.sizes) return invalid("gather: index and output shapes do not match");
  if (o.dtype != s.dtype) return decline("gather: output dtype differs from the input's");
  Dims src_strides = s.strides;
  src_strides[dim] = 0;
  Loop<3> loop(ix.sizes, {o.strides, src_strides, ix.strides});
  if (loop.numel() == 0) return DEVX_OK;
  const int64_t size = s.size(static_cast<int>(dim)), stride = s.stride(static_cast<int>(dim));
  return launch(ctx, [s, ix, o, loop, dim, size, stride] {
    BadIndex bad;
    dispatch_bytes(s.itemsize(), [&](auto tag) {
      using E = decltype(tag);
      E* dst = o.ptr<E>();
      const E* src = s.ptr<const E>();
      parallel_for(loop.numel(), kGrain, [&](int64_t begin, int64_t end) {
        loop.run(begin, end, [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& st) {
          for (int64_t i = 0; i < n; ++i) {
            const int64_t v = read_index(ix, off[2] + i * st[2]);
            if (v < 0 || v >= size) {
              bad.record(v);
              continue;
            }
            dst[off[0] + i * st[0]] = src[off[1] + i * st[1] + v * stride];
          }
        });
      });
    });
    bad.throw_if_any(dim, size);
  });
}

enum class Reduce { kAssign, kAdd };

// out = self, then out[..., index[p], ...] (along dim) = or += src[p] for every position p of
// index. Positions that differ outside `dim` never meet in out, so those run in parallel and
// each walks `dim` in order: repeated indices of scatter_add sum in a fixed order. `o` holds
// elements of type A, the sources of type T.
template <typename A, typename T, Reduce R>
void scatter_rows(const Tensor& o, const Tensor& ix, const Tensor* src, T value, const Dims& outer,
                  int dim, BadIndex& bad) {
  using M = opmath_t<T>;
  Loop<3> loop(outer, {o.strides, src ? src->strides : Dims(outer.size(), 0), ix.strides});
  const int64_t k_len = ix.size(dim), k_ix = ix.stride(dim);
  const int64_t k_src = src ? src->stride(dim) : 0;
  const int64_t size = o.size(dim), stride = o.stride(dim);
  A* out = o.ptr<A>();
  const T* in = src ? src->ptr<const T>() : nullptr;
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(k_len, 1));
  parallel_for(loop.numel(), grain, [&](int64_t begin, int64_t end) {
    loop.run(begin, end, [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& st) {
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t k = 0; k < k_len; ++k) {
          const int64_t v = read_index(ix, off[2] + i * st[2] + k * k_ix);
          if (v < 0 || v >= size) {
            bad.record(v);
            continue;
          }
          const T x = in ? in[off[1] + i * st[1] + k * k_src] : value;
          A& d = out[off[0] + i * st[0] + v * stride];
          if constexpr (R == Reduce::kAssign) {
            d = convert<A>(x);
          } else if constexpr (std::is_same_v<T, bool>) {
            d = d || x;
          } else {
            d = convert<A>(static_cast<M>(d) + static_cast<M>(x));
          }
        }
      }
    });
  });
}

template <Reduce R>
DevxStatus scatter_common(DevxKernelContext* ctx, const char* op, const DevxTensor* self, int64_t dim,
                          const DevxTensor* index, const DevxTensor* source, const DevxScalar* value, DevxTensor* out) {
  if (!self || !index || !out || (!source && !value)) return invalid(std::string(op) + ": NULL argument");
  Tensor s = take(self), ix = take(index), o = take(out), src = take(source);
  if (!wrap_dim(dim, s.ndim())) return invalid(std::string(op) + ": dim " + std::to_string(dim) + " out of range");
  as_1d(s);
  as_1d(ix);
  as_1d(o);
  if (source) as_1d(src);
  if (o.sizes != s.sizes || o.dtype != s.dtype) return invalid(std::string(op) + ": output differs from self");
  const int d = static_cast<int>(dim);
  // One loop position per index position outside `dim`; scatter_rows walks `dim` itself. ATen
  // takes an empty index of any dtype and shape: then out is self.
  Dims outer = ix.numel() == 0 ? Dims(o.ndim(), 0) : ix.sizes;
  if (ix.numel() != 0) {
    if (!is_index_dtype(ix.dtype)) return decline(std::string(op) + ": index of dtype " + dtype_name(ix.dtype));
    if (source && src.dtype != o.dtype) return decline(std::string(op) + ": src dtype differs from self's");
    if (ix.ndim() != o.ndim() || (source && src.ndim() != o.ndim())) {
      return invalid(std::string(op) + ": index, self and src must have the same number of dimensions");
    }
    outer[d] = 1;
  }
  const bool copy = !same_view(s, o);
  if (!copy && numel_of(outer) == 0) return DEVX_OK;
  return dispatch_in<kAllTypes>(o.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    const T v = value ? scalar_as<T>(value) : T{};
    return launch(ctx, [s, ix, o, src, has_src = source != nullptr, outer, d, v, copy] {
      if (copy) copy_elements(s, o);
      if (numel_of(outer) == 0) return;
      BadIndex bad;
      const Tensor* from = has_src ? &src : nullptr;
      if constexpr (R == Reduce::kAdd && std::is_same_v<opmath_t<T>, float> && !std::is_same_v<T, float>) {
        // ATen's CPU scatter_add sums the 16-bit floats in float, rounding once per element.
        std::vector<float> buf(static_cast<size_t>(o.numel()));
        Tensor acc = o;
        acc.data = reinterpret_cast<char*>(buf.data());
        acc.dtype = DEVX_FLOAT32;
        acc.strides = contiguous_strides(o.sizes);
        convert_into<float, T>(o, acc);
        scatter_rows<float, T, R>(acc, ix, from, v, outer, d, bad);
        convert_into<T, float>(acc, o);
      } else {
        scatter_rows<T, T, R>(o, ix, from, v, outer, d, bad);
      }
      bad.throw_if_any(d, o.size(d));
    });
  });
}

DevxStatus scatter_src_out(DevxKernelContext* ctx, const DevxTensor* self, int64_t dim, const DevxTensor* index,
                           const DevxTensor* src, DevxTensor* out) {
  if (!src) return invalid("scatter: NULL src");
  return scatter_common<Reduce::kAssign>(ctx, "scatter", self, dim, index, src, nullptr, out);
}

DevxStatus scatter_value_out(DevxKernelContext* ctx, const DevxTensor* self, int64_t dim, const DevxTensor* index,
                             const DevxScalar* value, DevxTensor* out) {
  if (!value) return invalid("scatter: NULL value");
  return scatter_common<Reduce::kAssign>(ctx, "scatter", self, dim, index, nullptr, value, out);
}

DevxStatus scatter_add_out(DevxKernelContext* ctx, const DevxTensor* self, int64_t dim, const DevxTensor* index,
                           const DevxTensor* src, DevxTensor* out) {
  if (!src) return invalid("scatter_add: NULL src");
  return scatter_common<Reduce::kAdd>(ctx, "scatter_add", self, dim, index, src, nullptr, out);
}

// grad_weight[k] = sum of grad_output rows whose index is k (scaled by 1/count(k) with
// scale_grad_by_freq), the padding row left zero. Indices are bucketed by row, so rows are
// summed in parallel and each in the indices' order, as ATen's CPU kernel sums them.
template <typename T>
void embedding_backward(const Tensor& g, const Tensor& ix, const Tensor& o, int64_t padding_idx, bool scale) {
  using M = opmath_t<T>;
  const int64_t rows = o.size(0), width = o.size(1);
  const int64_t n = ix.numel();
  const int nd = ix.ndim();
  // Each index with the offset of its gradient row, in the indices' row-major order.
  std::vector<int64_t> value(static_cast<size_t>(n)), grad_off(static_cast<size_t>(n));
  std::vector<int64_t> coord(static_cast<size_t>(nd), 0);
  int64_t ioff = 0, goff = 0;
  for (int64_t i = 0; i < n; ++i) {
    value[i] = read_index(ix, ioff);
    grad_off[i] = goff;
    if (value[i] < 0 || value[i] >= rows) throw std::out_of_range(out_of_bounds(value[i], 0, rows));
    for (int d = nd - 1; d >= 0; --d) {
      ioff += ix.stride(d);
      goff += g.stride(d);
      if (++coord[d] < ix.size(d)) break;
      ioff -= ix.stride(d) * ix.size(d);
      goff -= g.stride(d) * ix.size(d);
      coord[d] = 0;
    }
  }
  std::vector<int64_t> start(static_cast<size_t>(rows) + 1, 0);
  for (int64_t i = 0; i < n; ++i) ++start[value[i] + 1];
  for (int64_t r = 0; r < rows; ++r) start[r + 1] += start[r];
  std::vector<int64_t> order(static_cast<size_t>(n));
  {
    std::vector<int64_t> next(start.begin(), start.end() - 1);
    for (int64_t i = 0; i < n; ++i) order[next[value[i]]++] = i;
  }
  const int64_t gw = g.ndim() > nd ? g.stride(nd) : 0;
  const int64_t o0 = o.stride(0), o1 = o.stride(1);
  T* out = o.ptr<T>();
  const T* grad = g.ptr<const T>();
  parallel_for(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(width, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      T* row = out + r * o0;
      for (int64_t j = 0; j < width; ++j) row[j * o1] = T(0);
      if (r == padding_idx || start[r] == start[r + 1]) continue;
      const M factor = scale ? static_cast<M>(1.0 / static_cast<double>(start[r + 1] - start[r])) : M(1);
      for (int64_t p = start[r]; p < start[r + 1]; ++p) {
        const T* src = grad + grad_off[order[p]];
        for (int64_t j = 0; j < width; ++j) {
          row[j * o1] = convert<T>(static_cast<M>(row[j * o1]) + factor * static_cast<M>(src[j * gw]));
        }
      }
    }
  });
}

DevxStatus embedding_dense_backward_out(DevxKernelContext* ctx, const DevxTensor* grad_output,
                                        const DevxTensor* indices, int64_t num_weights, int64_t padding_idx,
                                        int scale_grad_by_freq, DevxTensor* out) {
  if (!grad_output || !indices || !out) return invalid("embedding_dense_backward: NULL tensor");
  Tensor g = take(grad_output), ix = take(indices), o = take(out);
  if (!is_index_dtype(ix.dtype)) {
    return decline(std::string("embedding_dense_backward: indices of dtype ") + dtype_name(ix.dtype));
  }
  if (g.dtype != o.dtype) return decline("embedding_dense_backward: output dtype differs from grad_output's");
  const int64_t width = g.ndim() > 0 ? g.sizes.back() : 1;
  bool shapes = g.ndim() == ix.ndim() + 1 && o.ndim() == 2 && o.size(0) == num_weights && o.size(1) == width;
  for (int d = 0; shapes && d < ix.ndim(); ++d) shapes = g.size(d) == ix.size(d);
  if (!shapes) {
    return invalid("embedding_dense_backward: grad_output " + shape_str(g.sizes) + ", indices " + shape_str(ix.sizes) +
                   " and output " + shape_str(o.sizes) + " do not match");
  }
  if (o.numel() == 0) return DEVX_OK;
  return dispatch_in<kFloats>(o.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    return launch(ctx, [g, ix, o, padding_idx, scale = scale_grad_by_freq != 0] {
      embedding_backward<T>(g, ix, o, padding_idx, scale);
    });
  });
}

DEVX_SIM_REGISTER_KERNEL(gather_out, gather_out);
DEVX_SIM_REGISTER_KERNEL(scatter_src_out, scatter_src_out);
DEVX_SIM_REGISTER_KERNEL(scatter_value_out, scatter_value_out);
DEVX_SIM_REGISTER_KERNEL(scatter_add_out, scatter_add_out);
DEVX_SIM_REGISTER_KERNEL(embedding_dense_backward_out, embedding_dense_backward_out);

}  // namespace
}  // namespace devx::cpu_sim::kern
