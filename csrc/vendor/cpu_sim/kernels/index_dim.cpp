// Slices picked along one dim by a 1-d index: index_add (out[idx[k]] += alpha * source[k]),
// index_copy (out[idx[k]] = source[k]) and index_fill (out[idx[k]] = value), each on a copy of self
// unless the call is in-place.
#include "kernels/index_util.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

struct IndexDim {
  Tensor self, index, out, source;  // source: empty for index_fill
  int dim = 0;
  bool copy = false;  // out is not self: copy self first
};

// The checks ATen makes before it runs (shapes, dtypes); the values of the index are read by the work.
DevxStatus prepare_index_dim(const char* op, const DevxTensor* self, int64_t dim, const DevxTensor* index,
                   const DevxTensor* source, DevxTensor* out, bool int32_index, IndexDim* p) {
  if (!self || !index || !out) return invalid(std::string(op) + ": NULL tensor");
  p->self = take(self);
  p->index = take(index);
  p->out = take(out);
  if (!wrap_dim(dim, p->self.ndim())) return invalid(std::string(op) + ": dim " + std::to_string(dim) + " out of range");
  as_1d(p->self);
  as_1d(p->out);
  as_1d(p->index);
  if (p->index.ndim() != 1) return invalid(std::string(op) + "(): Index is supposed to be a vector");
  if (p->index.dtype != DEVX_INT64 && !(int32_index && p->index.dtype == DEVX_INT32)) {
    return invalid(std::string(op) + (int32_index ? "(): Expected dtype int32/int64 for index" : "(): Expected dtype int64 for index"));
  }
  if (p->out.sizes != p->self.sizes || p->out.dtype != p->self.dtype) {
    return invalid(std::string(op) + ": output differs from self in shape or dtype");
  }
  p->dim = static_cast<int>(dim);
  if (source) {
    p->source = take(source);
    as_1d(p->source);
    if (p->source.dtype != p->self.dtype) return decline(std::string(op) + ": source dtype differs from self's");
    bool shapes = p->source.ndim() == p->self.ndim() && p->source.size(p->dim) == p->index.numel();
    for (int d = 0; shapes && d < p->self.ndim(); ++d) shapes = d == p->dim || p->source.size(d) == p->self.size(d);
    if (!shapes) {
      return invalid(std::string(op) + ": source of shape " + shape_str(p->source.sizes) + " for self " +
                     shape_str(p->self.sizes) + " and " + std::to_string(p->index.numel()) + " indices");
    }
  }
  p->copy = !same_view(p->self, p->out);
  return DEVX_OK;
}

// The index's values, checked against the dim's size (negative ones wrapped where `wrap`).
std::vector<int64_t> read_indices(const Tensor& ix, int64_t size, int dim, bool wrap) {
  std::vector<int64_t> v(static_cast<size_t>(ix.numel()));
  for (int64_t k = 0; k < ix.numel(); ++k) {
    int64_t i = read_index(ix, k * ix.stride(0));
    if (wrap && i < 0 && i >= -size) i += size;
    if (i < 0 || i >= size) {
      if (wrap) throw std::out_of_range(out_of_bounds(i, dim, size));
      throw std::out_of_range("index out of range in self");
    }
    v[static_cast<size_t>(k)] = i;
  }
  return v;
}

// For every position outside `dim` (in parallel) and every index k in order:
// body(out offset at idx[k], source offset at k).
template <typename Body>
void along_index(const IndexDim& p, const std::vector<int64_t>& idx, Body body) {
  Dims outer = p.out.sizes;
  outer[p.dim] = 1;
  const bool has_src = p.source.data != nullptr;
  Loop<2> loop(outer, {p.out.strides, has_src ? p.source.strides : Dims(outer.size(), 0)});
  const int64_t ostride = p.out.stride(p.dim), sstride = has_src ? p.source.stride(p.dim) : 0;
  const int64_t n = static_cast<int64_t>(idx.size());
  parallel_for(loop.numel(), std::max<int64_t>(1, kGrain / std::max<int64_t>(n, 1)), [&](int64_t begin, int64_t end) {
    loop.run(begin, end, [&](const std::array<int64_t, 2>& off, int64_t len, const std::array<int64_t, 2>& st) {
      for (int64_t i = 0; i < len; ++i) {
        for (int64_t k = 0; k < n; ++k) body(off[0] + i * st[0] + idx[k] * ostride, off[1] + i * st[1] + k * sstride);
      }
    });
  });
}

DevxStatus index_add_out(DevxKernelContext* ctx, const DevxTensor* self, int64_t dim, const DevxTensor* index,
                         const DevxTensor* source, const DevxScalar* alpha, DevxTensor* out) {
  if (!source) return invalid("index_add: NULL source");
  IndexDim p;
  if (DevxStatus s = prepare_index_dim("index_add", self, dim, index, source, out, true, &p)) return s;
  return dispatch_in<kNumbers | kBool | kComplex>(p.out.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    const M a = alpha ? convert<M>(scalar_as<T>(alpha)) : M(1);
    return launch(ctx, [p, a] {
      if (p.copy) copy_elements(p.self, p.out);
      const std::vector<int64_t> idx = read_indices(p.index, p.out.size(p.dim), p.dim, false);
      T* o = p.out.ptr<T>();
      const T* s = p.source.ptr<const T>();
      // Each add rounds to T, as ATen adds one source slice at a time.
      along_index(p, idx, [&](int64_t oo, int64_t so) {
        if constexpr (std::is_same_v<T, bool>) {
          o[oo] = o[oo] || (s[so] && a);
        } else {
          o[oo] = convert<T>(static_cast<M>(o[oo]) + a * static_cast<M>(s[so]));
        }
      });
    });
  });
}

DevxStatus index_copy_out(DevxKernelContext* ctx, const DevxTensor* self, int64_t dim, const DevxTensor* index,
                          const DevxTensor* source, DevxTensor* out) {
  if (!source) return invalid("index_copy: NULL source");
  IndexDim p;
  if (DevxStatus s = prepare_index_dim("index_copy", self, dim, index, source, out, false, &p)) return s;
  return launch(ctx, [p] {
    if (p.copy) copy_elements(p.self, p.out);
    const std::vector<int64_t> idx = read_indices(p.index, p.out.size(p.dim), p.dim, false);
    dispatch_bytes(p.out.itemsize(), [&](auto tag) {
      using E = decltype(tag);
      E* o = p.out.ptr<E>();
      const E* s = p.source.ptr<const E>();
      along_index(p, idx, [&](int64_t oo, int64_t so) { o[oo] = s[so]; });
    });
  });
}

// The fill value is read when the work runs: a 0-dim device tensor holds it until then.
DevxStatus index_fill(DevxKernelContext* ctx, const DevxTensor* self, int64_t dim, const DevxTensor* index,
                      const DevxScalar* scalar, const DevxTensor* value, DevxTensor* out) {
  IndexDim p;
  if (DevxStatus s = prepare_index_dim("index_fill_", self, dim, index, nullptr, out, false, &p)) return s;
  const Tensor v = take(value);
  if (value && v.ndim() != 0) {
    return invalid("index_fill_ only supports a 0-dimensional value tensor, but got tensor with " +
                   std::to_string(v.ndim()) + " dimension(s).");
  }
  return dispatch_in<kAllTypes>(p.out.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    const T given = scalar ? scalar_as<T>(scalar) : T{};
    return launch(ctx, [p, v, given, from_tensor = value != nullptr] {
      if (p.copy) copy_elements(p.self, p.out);
      const T fill = from_tensor ? load_as<T>(v.data, v.dtype) : given;
      const std::vector<int64_t> idx = read_indices(p.index, p.out.size(p.dim), p.dim, true);
      T* o = p.out.ptr<T>();
      along_index(p, idx, [&](int64_t oo, int64_t) { o[oo] = fill; });
    });
  });
}

DevxStatus index_fill_scalar_out(DevxKernelContext* ctx, const DevxTensor* self, int64_t dim, const DevxTensor* index,
                                 const DevxScalar* value, DevxTensor* out) {
  if (!value) return invalid("index_fill_: NULL value");
  return index_fill(ctx, self, dim, index, value, nullptr, out);
}

DevxStatus index_fill_tensor_out(DevxKernelContext* ctx, const DevxTensor* self, int64_t dim, const DevxTensor* index,
                                 const DevxTensor* value, DevxTensor* out) {
  if (!value) return invalid("index_fill_: NULL value");
  return index_fill(ctx, self, dim, index, nullptr, value, out);
}

DEVX_SIM_REGISTER_KERNEL(index_add_out, index_add_out);
DEVX_SIM_REGISTER_KERNEL(index_copy_out, index_copy_out);
DEVX_SIM_REGISTER_KERNEL(index_fill_int_Scalar_out, index_fill_scalar_out);
DEVX_SIM_REGISTER_KERNEL(index_fill_int_Tensor_out, index_fill_tensor_out);

}  // namespace
}  // namespace devx::cpu_sim::kern
