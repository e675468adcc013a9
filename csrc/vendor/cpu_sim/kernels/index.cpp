// Advanced indexing: x[i0, :, i2] (index.Tensor), assignment through it, x[...] = v or += v
// (index_put, _index_put_impl), and index_select, which is x[:, ..., idx] with one 1-d index.
#include "kernels/index_util.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

// Where each element of an advanced-indexing result comes from. The index tensors broadcast to
// one shape B, whose dims replace the indexed dims of the source: in their place when the indexed
// dims are adjacent, in front otherwise (NumPy's rule, which ATen follows).
struct IndexPlan {
  std::vector<int64_t> shape;   // the result
  std::vector<int64_t> bshape;  // B
  std::vector<int> source_dim;  // per result dim: the source dim it walks, or -1 within B
  int bpos = 0;                 // where B's dims start in `shape`
  std::vector<int> dims;        // the source dim of each index tensor
  std::vector<Tensor> index;
  bool wrap = true;  // negative indices count from the end (index_select: they are errors)

  // Strides of a tensor shaped as the source, per result dim (0 within B).
  std::vector<int64_t> source_strides(const std::vector<int64_t>& strides) const {
    std::vector<int64_t> s(shape.size(), 0);
    for (size_t r = 0; r < shape.size(); ++r) {
      if (source_dim[r] >= 0) s[r] = strides[static_cast<size_t>(source_dim[r])];
    }
    return s;
  }

  // Strides into offsets() (contiguous over B), per result dim (0 outside B).
  std::vector<int64_t> offset_strides() const {
    const Dims c = contiguous_strides(bshape);
    std::vector<int64_t> s(shape.size(), 0);
    for (size_t r = 0; r < shape.size(); ++r) {
      if (source_dim[r] < 0) s[r] = c[r - static_cast<size_t>(bpos)];
    }
    return s;
  }

  // Per element of B, the offset (in elements) of the position the indices pick in a tensor of
  // `sizes` and `strides`. Runs inside queued work: the indices are device memory.
  std::vector<int64_t> offsets(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) const {
    std::vector<int64_t> offs(static_cast<size_t>(numel_of(bshape)), 0);
    const Dims c = contiguous_strides(bshape);
    for (size_t k = 0; k < index.size(); ++k) {
      const Tensor& ix = index[k];
      const int dim = dims[k];
      const int64_t size = sizes[dim], stride = strides[dim];
      Loop<2> loop(bshape, {c, broadcast_strides(ix, bshape)});
      BadIndex bad;
      parallel_for(loop.numel(), kGrain, [&](int64_t begin, int64_t end) {
        loop.run(begin, end, [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
          for (int64_t i = 0; i < n; ++i) {
            int64_t v = read_index(ix, off[1] + i * st[1]);
            const int64_t given = v;
            if (v < 0 && wrap) v += size;
            if (v < 0 || v >= size) {
              bad.record(given);
              continue;
            }
            offs[off[0] + i * st[0]] += v * stride;
          }
        });
      });
      if (wrap) {
        bad.throw_if_any(dim, size);
      } else {
        bad.throw_if_any("index out of range in self");
      }
    }
    return offs;
  }
};

DevxStatus make_plan(const char* op, const std::vector<int64_t>& source, std::vector<int> dims,
                     std::vector<Tensor> index, bool wrap, IndexPlan* plan) {
  const int n = static_cast<int>(source.size());
  for (size_t k = 0; k < index.size(); ++k) {
    if (dims[k] >= n) {
      return invalid(std::string(op) + ": too many indices for tensor of dimension " + std::to_string(n));
    }
    if (!is_index_dtype(index[k].dtype)) {
      return decline(std::string(op) + ": indices of dtype " + dtype_name(index[k].dtype));
    }
    if (!broadcast_into(plan->bshape, index[k].sizes)) {
      std::string shapes;
      for (const Tensor& t : index) shapes += (shapes.empty() ? "" : ", ") + shape_str(t.sizes);
      return invalid(std::string(op) +
                     ": shape mismatch: indexing tensors could not be broadcast together with shapes " + shapes);
    }
  }
  const bool adjacent = dims.empty() || dims.back() - dims.front() + 1 == static_cast<int>(dims.size());
  plan->bpos = adjacent && !dims.empty() ? dims.front() : 0;
  std::vector<bool> indexed(static_cast<size_t>(n), false);
  for (int d : dims) indexed[d] = true;
  auto add_source_dims = [&](int from, int to) {
    for (int d = from; d < to; ++d) {
      if (indexed[d]) continue;
      plan->shape.push_back(source[d]);
      plan->source_dim.push_back(d);
    }
  };
  add_source_dims(0, plan->bpos);
  for (int64_t b : plan->bshape) {
    plan->shape.push_back(b);
    plan->source_dim.push_back(-1);
  }
  add_source_dims(plan->bpos, n);
  plan->dims = std::move(dims);
  plan->index = std::move(index);
  plan->wrap = wrap;
  return DEVX_OK;
}

DevxStatus plan_from_list(const char* op, const std::vector<int64_t>& source, DevxTensorList indices, IndexPlan* plan) {
  std::vector<int> dims;
  std::vector<Tensor> index;
  for (int64_t k = 0; k < indices.len; ++k) {
    if (!indices.items[k]) continue;
    dims.push_back(static_cast<int>(k));
    index.push_back(take(indices.items[k]));
  }
  if (indices.len > static_cast<int64_t>(source.size())) {
    return invalid(std::string(op) + ": too many indices for tensor of dimension " + std::to_string(source.size()));
  }
  return make_plan(op, source, std::move(dims), std::move(index), true, plan);
}

// out = source[plan], out shaped as the plan's result.
DevxStatus gather_plan(DevxKernelContext* ctx, const char* op, const Tensor& s, const Tensor& o, IndexPlan plan) {
  if (o.sizes != plan.shape) {
    return invalid(std::string(op) + ": output of shape " + shape_str(o.sizes) + " for a result of shape " +
                   shape_str(plan.shape));
  }
  if (o.dtype != s.dtype) return decline(std::string(op) + ": output dtype differs from the input's");
  Loop<3> loop(plan.shape, {o.strides, plan.source_strides(s.strides), plan.offset_strides()});
  if (loop.numel() == 0) return DEVX_OK;
  return launch(ctx, [s, o, plan = std::move(plan), loop] {
    const std::vector<int64_t> offs = plan.offsets(s.sizes, s.strides);
    dispatch_bytes(s.itemsize(), [&](auto tag) {
      using E = decltype(tag);
      E* out = o.ptr<E>();
      const E* in = s.ptr<const E>();
      parallel_for(loop.numel(), kGrain, [&](int64_t begin, int64_t end) {
        loop.run(begin, end, [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& st) {
          for (int64_t i = 0; i < n; ++i) out[off[0] + i * st[0]] = in[off[1] + i * st[1] + offs[off[2] + i * st[2]]];
        });
      });
    });
  });
}

DevxStatus index_out(DevxKernelContext* ctx, const DevxTensor* self, DevxTensorList indices, DevxTensor* out) {
  if (!self || !out) return invalid("index: NULL tensor");
  Tensor s = take(self), o = take(out);
  IndexPlan plan;
  if (DevxStatus st = plan_from_list("index", s.sizes, indices, &plan)) return st;
  return gather_plan(ctx, "index", s, o, std::move(plan));
}

DevxStatus index_select_out(DevxKernelContext* ctx, const DevxTensor* self, int64_t dim, const DevxTensor* index,
                            DevxTensor* out) {
  if (!self || !index || !out) return invalid("index_select: NULL tensor");
  Tensor s = take(self), ix = take(index), o = take(out);
  if (ix.ndim() > 1) return invalid("index_select(): Index is supposed to be a vector");
  if (!wrap_dim(dim, s.ndim())) return invalid("index_select: dim " + std::to_string(dim) + " out of range");
  as_1d(s);
  as_1d(ix);
  as_1d(o);
  IndexPlan plan;
  if (DevxStatus st = make_plan("index_select", s.sizes, {static_cast<int>(dim)}, {ix}, false, &plan)) return st;
  return gather_plan(ctx, "index_select", s, o, std::move(plan));
}

template <typename T>
T accumulate_value(T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    return a || b;
  } else {
    using M = opmath_t<T>;
    return convert<T>(static_cast<M>(a) + static_cast<M>(b));
  }
}

template <typename T>
void put_values(const Tensor& o, const Tensor& v, const Loop<3>& loop, const std::vector<int64_t>& offs,
                bool accumulate) {
  T* out = o.ptr<T>();
  const bool same = v.dtype == o.dtype;
  const int64_t vsize = static_cast<int64_t>(v.itemsize());
  auto value = [&](int64_t off) -> T {
    return same ? v.ptr<const T>()[off] : load_as<T>(v.data + off * vsize, v.dtype);
  };
  if (accumulate) {
    // Repeated indices must all add: one thread, in the indices' order, as ATen's CPU kernel,
    // so that float sums round alike.
    loop.run(0, loop.numel(), [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& st) {
      for (int64_t i = 0; i < n; ++i) {
        T& d = out[off[0] + i * st[0] + offs[off[2] + i * st[2]]];
        d = accumulate_value(d, value(off[1] + i * st[1]));
      }
    });
    return;
  }
  parallel_for(loop.numel(), kGrain, [&](int64_t begin, int64_t end) {
    loop.run(begin, end, [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& st) {
      for (int64_t i = 0; i < n; ++i) out[off[0] + i * st[0] + offs[off[2] + i * st[2]]] = value(off[1] + i * st[1]);
    });
  });
}

DevxStatus index_put_out(DevxKernelContext* ctx, const DevxTensor* self, DevxTensorList indices,
                         const DevxTensor* values, int accumulate, DevxTensor* out) {
  if (!self || !values || !out) return invalid("index_put: NULL tensor");
  Tensor s = take(self), v = take(values), o = take(out);
  if (o.sizes != s.sizes || o.dtype != s.dtype) return invalid("index_put: output differs from self in shape or dtype");
  if (is_complex(o.dtype) != is_complex(v.dtype)) return decline("index_put: complex values with real self");
  IndexPlan plan;
  if (DevxStatus st = plan_from_list("index_put", o.sizes, indices, &plan)) return st;
  // Values broadcast to the indexing result; leading 1s beyond its rank are dropped as in ATen.
  while (v.ndim() > static_cast<int>(plan.shape.size()) && v.sizes.front() == 1) {
    v.sizes.erase(v.sizes.begin());
    v.strides.erase(v.strides.begin());
  }
  std::vector<int64_t> check = plan.shape;
  if (v.ndim() > static_cast<int>(plan.shape.size()) || !broadcast_into(check, v.sizes) || check != plan.shape) {
    return invalid("shape mismatch: value tensor of shape " + shape_str(take(values).sizes) +
                   " cannot be broadcast to indexing result of shape " + shape_str(plan.shape));
  }
  const bool copy = !same_view(s, o);
  Loop<3> loop(plan.shape, {plan.source_strides(o.strides), broadcast_strides(v, plan.shape), plan.offset_strides()});
  if (!copy && loop.numel() == 0) return DEVX_OK;
  return launch(ctx, [s, v, o, plan = std::move(plan), loop, copy, accumulate] {
    if (copy) copy_elements(s, o);
    if (loop.numel() == 0) return;
    const std::vector<int64_t> offs = plan.offsets(o.sizes, o.strides);
    dispatch(o.dtype, [&](auto tag) { put_values<decltype(tag)>(o, v, loop, offs, accumulate != 0); });
  });
}

DevxStatus index_put_impl_out(DevxKernelContext* ctx, const DevxTensor* self, DevxTensorList indices,
                              const DevxTensor* values, int accumulate, int /*unsafe*/, DevxTensor* out) {
  return index_put_out(ctx, self, indices, values, accumulate, out);
}

DEVX_SIM_REGISTER_KERNEL(index_Tensor_out, index_out);
DEVX_SIM_REGISTER_KERNEL(index_select_out, index_select_out);
DEVX_SIM_REGISTER_KERNEL(index_put_out, index_put_out);
DEVX_SIM_REGISTER_KERNEL(_index_put_impl_out, index_put_impl_out);

}  // namespace
}  // namespace devx::cpu_sim::kern
