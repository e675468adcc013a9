// embedding_bag: each bag (a run of indices between consecutive offsets) reduced to one row, by
// sum (weighted by per_sample_weights where given), mean or max, with the padding index skipped;
// and its backward: into the weight's gradient, and into the per-sample weights' gradient.
// The forward's side outputs have CUDA's layouts (what the meta function gives a device):
// offset2bag [indices], bag_size [offsets] (padding not counted), max_indices [bags, features]
// in max mode (-1 for an empty bag).
#include <limits>

#include "kernels/index_util.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

constexpr int64_t kSum = 0, kMean = 1, kMax = 2;

// A 1-d int32/int64 tensor's values.
std::vector<int64_t> read_all(const Tensor& t) {
  std::vector<int64_t> v(static_cast<size_t>(t.numel()));
  const int64_t stride = t.ndim() ? t.stride(0) : 0;
  for (size_t k = 0; k < v.size(); ++k) v[k] = read_index(t, static_cast<int64_t>(k) * stride);
  return v;
}

void write_index(const Tensor& t, int64_t offset, int64_t v) {
  if (t.dtype == DEVX_INT64) {
    t.ptr<int64_t>()[offset] = v;
  } else {
    t.ptr<int32_t>()[offset] = static_cast<int32_t>(v);
  }
}

// Bag b covers indices [start[b], start[b + 1]).
std::vector<int64_t> bag_starts(const std::vector<int64_t>& offsets, int64_t bags, int64_t n) {
  if (!offsets.empty() && offsets[0] != 0) {
    throw std::invalid_argument("offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start "
                                "from position 0. However, got " + std::to_string(offsets[0]));
  }
  std::vector<int64_t> start(static_cast<size_t>(bags) + 1);
  for (int64_t b = 0; b <= bags; ++b) {
    start[b] = b < static_cast<int64_t>(offsets.size()) ? std::min(offsets[b], n) : n;
    if (b > 0 && start[b] < start[b - 1]) {
      throw std::invalid_argument("offsets[" + std::to_string(b - 1) + "] must not exceed offsets[" +
                                  std::to_string(b) + "]");
    }
  }
  return start;
}

struct BagArgs {
  Tensor weight, indices, offsets, psw, out, offset2bag, bag_size, max_indices;
  int64_t mode = kSum, padding_idx = -1, bags = 0;
};

template <typename T>
void bag_forward(const BagArgs& a) {
  using M = opmath_t<T>;
  const int64_t n = a.indices.numel(), rows = a.weight.size(0), width = a.weight.size(1);
  const std::vector<int64_t> idx = read_all(a.indices);
  const std::vector<int64_t> start = bag_starts(read_all(a.offsets), a.bags, n);
  for (int64_t i = 0; i < n; ++i) {
    if (idx[i] < 0 || idx[i] >= rows) {
      throw std::out_of_range("embedding_bag: Expected idx >= 0 && idx < num_embeddings but found idx to be " +
                              std::to_string(idx[i]));
    }
  }
  const int64_t w0 = a.weight.stride(0), w1 = a.weight.stride(1), o0 = a.out.stride(0), o1 = a.out.stride(1);
  const T* w = a.weight.ptr<const T>();
  T* out = a.out.ptr<T>();
  const int64_t ps = a.psw.ndim() ? a.psw.stride(0) : 0;
  const bool mx = a.mode == kMax;
  // Indices after the last bag (include_last_offset with a last offset short of the end) join none.
  for (int64_t i = start[a.bags]; i < n; ++i) write_index(a.offset2bag, i * a.offset2bag.stride(0), -1);
  parallel_for(a.bags, std::max<int64_t>(1, kGrain / std::max<int64_t>(width, 1)), [&](int64_t begin, int64_t end) {
    std::vector<M> acc(static_cast<size_t>(width));
    std::vector<int64_t> arg(static_cast<size_t>(width));
    for (int64_t b = begin; b < end; ++b) {
      std::fill(acc.begin(), acc.end(), mx ? -std::numeric_limits<M>::infinity() : M(0));
      std::fill(arg.begin(), arg.end(), -1);
      int64_t count = 0;
      for (int64_t i = start[b]; i < start[b + 1]; ++i) {
        write_index(a.offset2bag, i * a.offset2bag.stride(0), b);
        if (idx[i] == a.padding_idx) continue;
        ++count;
        const T* row = w + idx[i] * w0;
        const M scale = a.psw.data ? static_cast<M>(a.psw.ptr<const T>()[i * ps]) : M(1);
        for (int64_t j = 0; j < width; ++j) {
          const M v = static_cast<M>(row[j * w1]);
          if (!mx) {
            acc[j] += scale * v;
          } else if (arg[j] < 0 || (acc[j] == acc[j] && (v > acc[j] || v != v))) {
            // A NaN, once met, stays the maximum.
            acc[j] = v;
            arg[j] = idx[i];
          }
        }
      }
      for (int64_t j = 0; j < width; ++j) {
        M v = acc[j];
        if (mx && arg[j] < 0) v = M(0);
        if (a.mode == kMean) v = count ? v / static_cast<M>(count) : M(0);
        out[b * o0 + j * o1] = convert<T>(v);
        if (mx) write_index(a.max_indices, b * a.max_indices.stride(0) + j * a.max_indices.stride(1), arg[j]);
      }
      write_index(a.bag_size, b * a.bag_size.stride(0), count);
    }
  });
  // With include_last_offset, bag_size has an entry for the last offset, which starts no bag.
  for (int64_t b = a.bags; b < a.bag_size.numel(); ++b) write_index(a.bag_size, b * a.bag_size.stride(0), 0);
}

DevxStatus embedding_bag_out(DevxKernelContext* ctx, const DevxTensor* weight, const DevxTensor* indices,
                             const DevxTensor* offsets, int /*scale_grad_by_freq*/, int64_t mode, int /*sparse*/,
                             const DevxTensor* per_sample_weights, int include_last_offset, int64_t padding_idx,
                             DevxTensor* out0, DevxTensor* out1, DevxTensor* out2, DevxTensor* out3) {
  if (!weight || !indices || !offsets || !out0 || !out1 || !out2 || !out3) return invalid("embedding_bag: NULL tensor");
  BagArgs a;
  a.weight = take(weight);
  a.indices = take(indices);
  a.offsets = take(offsets);
  a.psw = take(per_sample_weights);
  a.out = take(out0);
  a.offset2bag = take(out1);
  a.bag_size = take(out2);
  a.max_indices = take(out3);
  a.mode = mode;
  a.padding_idx = padding_idx;
  if (a.weight.ndim() != 2 || a.indices.ndim() != 1 || a.offsets.ndim() != 1) {
    return invalid("embedding_bag: expected a 2-d weight and 1-d indices and offsets");
  }
  if (!is_index_dtype(a.indices.dtype) || !is_index_dtype(a.offsets.dtype)) {
    return invalid("embedding_bag: expected indices and offsets to be long or int");
  }
  if (mode < kSum || mode > kMax) return invalid("embedding_bag: unknown mode " + std::to_string(mode));
  if (per_sample_weights && mode != kSum) {
    return invalid("embedding_bag: per_sample_weights only supported with mode='sum'");
  }
  if (per_sample_weights && (a.psw.ndim() != 1 || a.psw.numel() != a.indices.numel())) {
    return invalid("embedding_bag: expected per_sample_weights of the indices' size");
  }
  if (per_sample_weights && a.psw.dtype != a.weight.dtype) {
    return decline("embedding_bag: per_sample_weights dtype differs from the weight's");
  }
  a.bags = a.offsets.numel() - (include_last_offset ? 1 : 0);
  if (a.bags < 0) return invalid("include_last_offset: numBags should be at least 1");
  if (a.out.dtype != a.weight.dtype || a.out.ndim() != 2 || a.out.size(0) != a.bags ||
      a.out.size(1) != a.weight.size(1)) {
    return invalid("embedding_bag: output of shape " + shape_str(a.out.sizes));
  }
  if (!is_index_dtype(a.offset2bag.dtype) || !is_index_dtype(a.bag_size.dtype) ||
      !is_index_dtype(a.max_indices.dtype) || a.offset2bag.numel() != a.indices.numel() ||
      a.bag_size.numel() < a.bags || (mode == kMax && a.max_indices.numel() != a.out.numel())) {
    return decline("embedding_bag: side outputs of other layouts than CUDA's");
  }
  if (mode == kMax && a.max_indices.ndim() != 2) return decline("embedding_bag: max_indices not 2-d");
  return dispatch_in<kFloats>(a.weight.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    return launch(ctx, [a] { bag_forward<T>(a); });
  });
}

// grad_weight[k] = the sum, over the indices i equal to k, of grad[bag of i] (times the sample's
// weight, over the bag's size for a mean, over k's count with scale_grad_by_freq); in max mode
// each (bag, feature) sends its gradient to the row that won it. Rows are summed in parallel and
// each in the indices' order.
template <typename T>
void bag_backward(const Tensor& g, const Tensor& ix, const Tensor& o2b, const Tensor& bag_size, const Tensor& maxi,
                  const Tensor& psw, const Tensor& o, int64_t mode, int64_t padding_idx, bool scale) {
  using M = opmath_t<T>;
  const int64_t rows = o.size(0), width = o.size(1);
  T* out = o.ptr<T>();
  const int64_t o0 = o.stride(0), o1 = o.stride(1), g0 = g.stride(0), g1 = g.stride(1);
  const T* grad = g.ptr<const T>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < width; ++j) out[r * o0 + j * o1] = T(0);
  }
  if (mode == kMax) {
    const int64_t bags = maxi.size(0);
    parallel_for(width, std::max<int64_t>(1, kGrain / std::max<int64_t>(bags, 1)), [&](int64_t begin, int64_t end) {
      for (int64_t j = begin; j < end; ++j) {
        for (int64_t b = 0; b < bags; ++b) {
          const int64_t r = read_index(maxi, b * maxi.stride(0) + j * maxi.stride(1));
          if (r < 0 || r == padding_idx) continue;
          if (r >= rows) throw std::out_of_range(out_of_bounds(r, 0, rows));
          T& d = out[r * o0 + j * o1];
          d = convert<T>(static_cast<M>(d) + static_cast<M>(grad[b * g0 + j * g1]));
        }
      }
    });
    return;
  }
  const std::vector<int64_t> idx = read_all(ix), bag = read_all(o2b);
  const int64_t n = static_cast<int64_t>(idx.size());
  std::vector<int64_t> start(static_cast<size_t>(rows) + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    if (idx[i] < 0 || idx[i] >= rows) throw std::out_of_range(out_of_bounds(idx[i], 0, rows));
    ++start[idx[i] + 1];
  }
  for (int64_t r = 0; r < rows; ++r) start[r + 1] += start[r];
  std::vector<int64_t> order(static_cast<size_t>(n));
  {
    std::vector<int64_t> next(start.begin(), start.end() - 1);
    for (int64_t i = 0; i < n; ++i) order[next[idx[i]]++] = i;
  }
  const int64_t ps = psw.ndim() ? psw.stride(0) : 0;
  parallel_for(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(width, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      if (r == padding_idx || start[r] == start[r + 1]) continue;
      const M freq = scale ? static_cast<M>(1.0 / static_cast<double>(start[r + 1] - start[r])) : M(1);
      T* row = out + r * o0;
      for (int64_t p = start[r]; p < start[r + 1]; ++p) {
        const int64_t i = order[p], b = bag[i];
        if (b < 0) continue;
        if (b >= g.size(0)) throw std::out_of_range(out_of_bounds(b, 0, g.size(0)));
        M factor = freq;
        if (psw.data) factor *= static_cast<M>(psw.ptr<const T>()[i * ps]);
        if (mode == kMean) {
          const int64_t size = read_index(bag_size, b * bag_size.stride(0));
          factor /= static_cast<M>(std::max<int64_t>(size, 1));
        }
        const T* src = grad + b * g0;
        for (int64_t j = 0; j < width; ++j) {
          row[j * o1] = convert<T>(static_cast<M>(row[j * o1]) + factor * static_cast<M>(src[j * g1]));
        }
      }
    }
  });
}

DevxStatus embedding_bag_dense_backward_out(DevxKernelContext* ctx, const DevxTensor* grad, const DevxTensor* indices,
                                            const DevxTensor* offset2bag, const DevxTensor* bag_size,
                                            const DevxTensor* maximum_indices, int64_t num_weights,
                                            int scale_grad_by_freq, int64_t mode, const DevxTensor* per_sample_weights,
                                            int64_t padding_idx, DevxTensor* out) {
  if (!grad || !indices || !offset2bag || !bag_size || !maximum_indices || !out) {
    return invalid("_embedding_bag_dense_backward: NULL tensor");
  }
  const Tensor g = take(grad), ix = take(indices), o2b = take(offset2bag), bs = take(bag_size),
               mi = take(maximum_indices), psw = take(per_sample_weights), o = take(out);
  if (g.ndim() != 2 || o.ndim() != 2 || o.size(0) != num_weights || o.size(1) != g.size(1) || ix.ndim() != 1) {
    return invalid("_embedding_bag_dense_backward: grad " + shape_str(g.sizes) + " and output " + shape_str(o.sizes));
  }
  if (g.dtype != o.dtype || (psw.data && psw.dtype != o.dtype)) {
    return decline("_embedding_bag_dense_backward: mixed dtypes");
  }
  if (!is_index_dtype(ix.dtype) || !is_index_dtype(o2b.dtype) || !is_index_dtype(bs.dtype) ||
      !is_index_dtype(mi.dtype)) {
    return decline("_embedding_bag_dense_backward: index tensors of other dtypes");
  }
  if (mode == kMax ? (mi.ndim() != 2 || mi.size(0) != g.size(0) || mi.size(1) != g.size(1))
                   : o2b.numel() != ix.numel()) {
    return decline("_embedding_bag_dense_backward: side outputs of other layouts than CUDA's");
  }
  if (o.numel() == 0) return DEVX_OK;
  return dispatch_in<kFloats>(o.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    return launch(ctx, [g, ix, o2b, bs, mi, psw, o, mode, padding_idx, scale = scale_grad_by_freq != 0] {
      bag_backward<T>(g, ix, o2b, bs, mi, psw, o, mode, padding_idx, scale);
    });
  });
}

// out[i] = grad[bag of i] . weight[indices[i]] (0 for the padding index).
DevxStatus embedding_bag_per_sample_weights_backward_out(DevxKernelContext* ctx, const DevxTensor* grad,
                                                         const DevxTensor* weight, const DevxTensor* indices,
                                                         const DevxTensor* offsets, const DevxTensor* /*offset2bag*/,
                                                         int64_t mode, int64_t padding_idx, DevxTensor* out) {
  if (!grad || !weight || !indices || !offsets || !out) {
    return invalid("_embedding_bag_per_sample_weights_backward: NULL tensor");
  }
  if (mode != kSum) return invalid("embedding_bag_backward: per_sample_weights only supported for mode='sum'");
  const Tensor g = take(grad), w = take(weight), ix = take(indices), off = take(offsets), o = take(out);
  if (g.ndim() != 2 || w.ndim() != 2 || ix.ndim() != 1 || off.ndim() != 1 || g.size(1) != w.size(1) ||
      o.numel() != ix.numel()) {
    return invalid("_embedding_bag_per_sample_weights_backward: shapes do not match");
  }
  if (g.dtype != o.dtype || w.dtype != o.dtype) return decline("_embedding_bag_per_sample_weights_backward: mixed dtypes");
  if (!is_index_dtype(ix.dtype) || !is_index_dtype(off.dtype)) {
    return invalid("_embedding_bag_per_sample_weights_backward: indices and offsets must be long or int");
  }
  if (o.numel() == 0) return DEVX_OK;
  return dispatch_in<kFloats>(o.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    return launch(ctx, [g, w, ix, off, o, padding_idx] {
      const std::vector<int64_t> idx = read_all(ix);
      const int64_t n = static_cast<int64_t>(idx.size());
      // The offsets may count one bag more than grad has rows (include_last_offset).
      const std::vector<int64_t> start = bag_starts(read_all(off), g.size(0), n);
      std::vector<int64_t> bag(static_cast<size_t>(n), -1);
      for (int64_t b = 0; b < g.size(0); ++b) {
        for (int64_t i = start[b]; i < start[b + 1]; ++i) bag[i] = b;
      }
      const int64_t width = g.size(1), os = o.ndim() ? o.stride(0) : 0;
      parallel_for(n, std::max<int64_t>(1, kGrain / std::max<int64_t>(width, 1)), [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          M dot = M(0);
          if (idx[i] != padding_idx && bag[i] >= 0 && idx[i] >= 0 && idx[i] < w.size(0)) {
            const T* gr = g.ptr<const T>() + bag[i] * g.stride(0);
            const T* wr = w.ptr<const T>() + idx[i] * w.stride(0);
            for (int64_t j = 0; j < width; ++j) dot += static_cast<M>(gr[j * g.stride(1)]) * static_cast<M>(wr[j * w.stride(1)]);
          }
          o.ptr<T>()[i * os] = convert<T>(dot);
        }
      });
    });
  });
}

DEVX_SIM_REGISTER_KERNEL(_embedding_bag_out, embedding_bag_out);
DEVX_SIM_REGISTER_KERNEL(_embedding_bag_forward_only_out, embedding_bag_out);
DEVX_SIM_REGISTER_KERNEL(_embedding_bag_dense_backward_out, embedding_bag_dense_backward_out);
DEVX_SIM_REGISTER_KERNEL(_embedding_bag_per_sample_weights_backward_out, embedding_bag_per_sample_weights_backward_out);

}  // namespace
}  // namespace devx::cpu_sim::kern
