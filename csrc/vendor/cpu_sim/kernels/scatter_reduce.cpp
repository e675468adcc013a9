// Scatters that reduce into their target (scatter's reduce="add"/"multiply" and scatter_reduce's
// sum, prod, mean, amax, amin, with or without self's values taking part). out = self, then
// out[..., index[p], ...] (along dim) = reduce(out[...], src[p]) for every position p of index.
// Positions that differ outside `dim` never meet in out, so those run in parallel, each walking
// `dim` in order: repeated indices reduce in a fixed order.
#include <cstring>
#include <limits>

#include "kernels/index_util.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

enum class Op { kSum, kProd, kMean, kMax, kMin };

bool parse_op(const char* name, bool two, Op* op) {
  if (!name) return false;
  const std::string s(name);
  if (!two) {
    if (s == "add") *op = Op::kSum;
    else if (s == "multiply") *op = Op::kProd;
    else return false;
    return true;
  }
  if (s == "sum") *op = Op::kSum;
  else if (s == "prod") *op = Op::kProd;
  else if (s == "mean") *op = Op::kMean;
  else if (s == "amax") *op = Op::kMax;
  else if (s == "amin") *op = Op::kMin;
  else return false;
  return true;
}

template <typename M>
M scatter_reduce_identity(Op op) {
  switch (op) {
    case Op::kProd: return M(1);
    case Op::kMax:
      if constexpr (std::is_floating_point_v<M>) return -std::numeric_limits<M>::infinity();
      else return std::numeric_limits<M>::lowest();
    case Op::kMin:
      if constexpr (std::is_floating_point_v<M>) return std::numeric_limits<M>::infinity();
      else return std::numeric_limits<M>::max();
    default: return M(0);
  }
}

// A NaN on either side wins amax and amin.
template <typename M>
M combine(Op op, M a, M b) {
  if constexpr (std::is_same_v<M, bool>) {
    return op == Op::kProd || op == Op::kMin ? (a && b) : (a || b);
  } else {
    switch (op) {
      case Op::kProd: return a * b;
      case Op::kMax: return (a != a || a > b) ? a : b;
      case Op::kMin: return (a != a || a < b) ? a : b;
      default: return a + b;
    }
  }
}

struct Plan {
  Tensor self, index, src, out;
  Dims outer;
  int dim = 0;
  bool copy = false, include_self = true;
  Op op = Op::kSum;
};

template <typename T>
void run_plan(const Plan& p, T value) {
  using M = opmath_t<T>;
  if (p.copy) copy_elements(p.self, p.out);
  if (numel_of(p.outer) == 0) return;
  const int d = p.dim;
  const bool has_src = p.src.data != nullptr;
  const Loop<3> loop(p.outer, {p.out.strides, has_src ? p.src.strides : Dims(p.outer.size(), 0), p.index.strides});
  const int64_t k_len = p.index.size(d), k_ix = p.index.stride(d), k_src = has_src ? p.src.stride(d) : 0;
  const int64_t size = p.out.size(d), stride = p.out.stride(d);
  T* out = p.out.ptr<T>();
  const T* in = has_src ? p.src.ptr<const T>() : nullptr;
  // Per target along dim (reused by each position): scattered into yet, and how many times.
  const bool counts = p.op == Op::kMean || !p.include_self;
  BadIndex bad;
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(k_len, 1));
  parallel_for(loop.numel(), grain, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> count(counts ? static_cast<size_t>(size) : 0);
    std::vector<M> acc(static_cast<size_t>(size));
    loop.run(begin, end, [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& st) {
      for (int64_t i = 0; i < n; ++i) {
        T* base = out + off[0] + i * st[0];
        if (counts) std::fill(count.begin(), count.end(), 0);
        for (int64_t k = 0; k < k_len; ++k) {
          const int64_t v = read_index(p.index, off[2] + i * st[2] + k * k_ix);
          if (v < 0 || v >= size) {
            bad.record(v);
            continue;
          }
          const M x = static_cast<M>(in ? in[off[1] + i * st[1] + k * k_src] : value);
          T& dst = base[v * stride];
          if (counts && count[v]++ == 0 && !p.include_self) {
            acc[v] = combine(p.op, scatter_reduce_identity<M>(p.op), x);
          } else {
            acc[v] = combine(p.op, counts && count[v] > 1 ? acc[v] : static_cast<M>(dst), x);
          }
          if (!counts) dst = convert<T>(acc[v]);
        }
        if (!counts) continue;
        for (int64_t v = 0; v < size; ++v) {
          if (!count[v]) continue;
          M r = acc[v];
          if (p.op == Op::kMean) {
            const M c = static_cast<M>(count[v] + (p.include_self ? 1 : 0));
            if constexpr (std::is_integral_v<M>) {
              r = static_cast<M>(std::floor(static_cast<double>(r) / static_cast<double>(c)));
            } else if constexpr (!std::is_same_v<M, bool>) {
              r = r / c;
            }
          }
          base[v * stride] = convert<T>(r);
        }
      }
    });
  });
  bad.throw_if_any(d, size);
}

DevxStatus scatter_reduce_common(DevxKernelContext* ctx, const char* name, const DevxTensor* self, int64_t dim,
                                 const DevxTensor* index, const DevxTensor* source, const DevxScalar* value, Op op,
                                 bool include_self, DevxTensor* out) {
  if (!self || !index || !out || (!source && !value)) return invalid(std::string(name) + ": NULL argument");
  Plan p;
  p.self = take(self);
  p.index = take(index);
  p.out = take(out);
  p.src = take(source);
  if (!source) p.src = Tensor();
  if (!wrap_dim(dim, p.self.ndim())) return invalid(std::string(name) + ": dim " + std::to_string(dim) + " out of range");
  as_1d(p.self);
  as_1d(p.index);
  as_1d(p.out);
  if (source) as_1d(p.src);
  if (p.out.sizes != p.self.sizes || p.out.dtype != p.self.dtype) return invalid(std::string(name) + ": output differs from self");
  p.dim = static_cast<int>(dim);
  p.op = op;
  p.include_self = include_self;
  p.outer = p.index.numel() == 0 ? Dims(p.out.ndim(), 0) : p.index.sizes;
  if (p.index.numel() != 0) {
    if (!is_index_dtype(p.index.dtype)) return decline(std::string(name) + ": index of dtype " + dtype_name(p.index.dtype));
    if (source && p.src.dtype != p.out.dtype) return decline(std::string(name) + ": src dtype differs from self's");
    if (p.index.ndim() != p.out.ndim() || (source && p.src.ndim() != p.out.ndim())) {
      return invalid(std::string(name) + ": index, self and src must have the same number of dimensions");
    }
    p.outer[p.dim] = 1;
  }
  p.copy = !same_view(p.self, p.out);
  if (op == Op::kMean && p.out.dtype == DEVX_BOOL) return decline(std::string(name) + ": mean of bools");
  return dispatch_in<kNumbers | kBool>(p.out.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    const T v = value ? scalar_as<T>(value) : T{};
    return launch(ctx, [p, v] { run_plan<T>(p, v); });
  });
}

DevxStatus scatter_reduce_out(DevxKernelContext* ctx, const DevxTensor* self, int64_t dim, const DevxTensor* index,
                              const DevxTensor* src, const char* reduce, DevxTensor* out) {
  Op op;
  if (!parse_op(reduce, false, &op)) return invalid("reduce argument must be either add or multiply.");
  if (!src) return invalid("scatter: NULL src");
  return scatter_reduce_common(ctx, "scatter", self, dim, index, src, nullptr, op, true, out);
}

DevxStatus scatter_value_reduce_out(DevxKernelContext* ctx, const DevxTensor* self, int64_t dim,
                                    const DevxTensor* index, const DevxScalar* value, const char* reduce,
                                    DevxTensor* out) {
  Op op;
  if (!parse_op(reduce, false, &op)) return invalid("reduce argument must be either add or multiply.");
  if (!value) return invalid("scatter: NULL value");
  return scatter_reduce_common(ctx, "scatter", self, dim, index, nullptr, value, op, true, out);
}

DevxStatus scatter_reduce_two_out(DevxKernelContext* ctx, const DevxTensor* self, int64_t dim, const DevxTensor* index,
                                  const DevxTensor* src, const char* reduce, int include_self, DevxTensor* out) {
  Op op;
  if (!parse_op(reduce, true, &op)) {
    return invalid(std::string("reduce argument must be either sum, prod, mean, amax or amin, got ") +
                   (reduce ? reduce : "None"));
  }
  if (!src) return invalid("scatter_reduce: NULL src");
  return scatter_reduce_common(ctx, "scatter_reduce", self, dim, index, src, nullptr, op, include_self != 0, out);
}

DEVX_SIM_REGISTER_KERNEL(scatter_reduce_out, scatter_reduce_out);
DEVX_SIM_REGISTER_KERNEL(scatter_value_reduce_out, scatter_value_reduce_out);
DEVX_SIM_REGISTER_KERNEL(scatter_reduce_two_out, scatter_reduce_two_out);

}  // namespace
}  // namespace devx::cpu_sim::kern
