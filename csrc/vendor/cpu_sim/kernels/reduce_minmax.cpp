// Maxima and minima: amax/amin and max()/min() (values), argmax/argmin (indices), max.dim/min.dim
// (both). NaN propagates and wins, and among equal values the first one is taken, as in ATen.
#include <limits>

#include "kernels/reduce_util.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

using namespace reduce_util;

// Whether `v` replaces the current extreme `cur`: a NaN once taken stays.
template <bool Max, typename M>
inline bool beats(M v, M cur) {
  if (is_nan(cur)) return false;
  if (is_nan(v)) return true;
  return Max ? v > cur : v < cur;
}

template <bool Max, typename M>
constexpr M extreme_identity() {
  if constexpr (std::is_floating_point_v<M>) {
    return Max ? -std::numeric_limits<M>::infinity() : std::numeric_limits<M>::infinity();
  } else {
    return Max ? std::numeric_limits<M>::lowest() : std::numeric_limits<M>::max();
  }
}

struct Prepared {
  Tensor in;
  DimMask mask;
};

DevxStatus prepare_extreme(const std::string& op, const DevxTensor* self, const int64_t* dims, int64_t ndims, Prepared* p) {
  if (!self) return invalid(op + ": NULL input");
  p->in = take(self);
  if (std::string why = reduce_mask(p->in.ndim(), dims, ndims, &p->mask); !why.empty()) {
    return invalid(op + ": " + why);
  }
  return DEVX_OK;
}

template <size_t NO>
DevxStatus check_nonempty(const std::string& op, const Reduction<NO>& r) {
  if (r.n_red == 0 && r.n_out > 0) {
    return invalid(op + "(): Expected reduction dim to be specified for input.numel() == 0.");
  }
  return DEVX_OK;
}

template <bool Max>
DevxStatus extreme_out(DevxKernelContext* ctx, const std::string& op, const DevxTensor* self, const int64_t* dims,
                       int64_t ndims, DevxTensor* out) {
  Prepared p;
  if (DevxStatus s = prepare_extreme(op, self, dims, ndims, &p)) return s;
  if (!out) return invalid(op + ": NULL output");
  const Tensor o = take(out);
  if (o.dtype != p.in.dtype) return decline(op + ": output dtype differs from the input's");
  std::string why;
  const Reduction<1> r = make_reduction<1>(p.in, p.mask, {&o}, &why);
  if (!why.empty()) return invalid(op + ": " + why);
  if (DevxStatus s = check_nonempty(op, r)) return s;
  return dispatch_in<kNumbers | kBool>(o.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    return launch(ctx, [in = p.in, o, r] {
      const T* x = in.ptr<const T>();
      auto step = [x](M& acc, int64_t off, int64_t) {
        const M v = static_cast<M>(x[off]);
        if (beats<Max>(v, acc)) acc = v;
      };
      auto combine = [](M& a, const M& b) {
        if (beats<Max>(b, a)) a = b;
      };
      run_reduction(r, extreme_identity<Max, M>(), step, combine,
                    [&](const std::array<int64_t, 1>& off, const M& acc) { o.ptr<T>()[off[0]] = convert<T>(acc); });
    });
  });
}

template <typename M>
struct Best {
  M v;
  int64_t i;  // -1 before the first element
};

// The extreme along the reduced dimensions and its index; NO is 1 (the index) or 2 (value, index).
template <bool Max, size_t NO>
DevxStatus indexed_out(DevxKernelContext* ctx, const std::string& op, const Prepared& p,
                       const std::array<DevxTensor*, NO>& outs) {
  std::array<Tensor, NO> o;
  for (size_t k = 0; k < NO; ++k) {
    if (!outs[k]) return invalid(op + ": NULL output");
    o[k] = take(outs[k]);
  }
  if (o[NO - 1].dtype != DEVX_INT64) return decline(op + ": indices that are not int64");
  if (NO == 2 && o[0].dtype != p.in.dtype) return decline(op + ": values of another dtype than the input");
  std::string why;
  std::array<const Tensor*, NO> views;
  for (size_t k = 0; k < NO; ++k) views[k] = &o[k];
  const Reduction<NO> r = make_reduction<NO>(p.in, p.mask, views, &why);
  if (!why.empty()) return invalid(op + ": " + why);
  if (DevxStatus s = check_nonempty(op, r)) return s;
  return dispatch_in<kNumbers | kBool>(p.in.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    using B = Best<M>;
    return launch(ctx, [in = p.in, o, r] {
      const T* x = in.ptr<const T>();
      auto step = [x](B& acc, int64_t off, int64_t index) {
        const M v = static_cast<M>(x[off]);
        if (acc.i < 0 || beats<Max>(v, acc.v)) acc = B{v, index};
      };
      auto combine = [](B& a, const B& b) {
        if (b.i >= 0 && (a.i < 0 || beats<Max>(b.v, a.v))) a = b;
      };
      run_reduction(r, B{M(0), -1}, step, combine, [&](const std::array<int64_t, NO>& off, const B& acc) {
        if constexpr (NO == 2) o[0].template ptr<T>()[off[0]] = convert<T>(acc.v);
        o[NO - 1].template ptr<int64_t>()[off[NO - 1]] = acc.i;
      });
    });
  });
}

DevxStatus amax_out(DevxKernelContext* ctx, const DevxTensor* self, DevxIntList dim, int, DevxTensor* out) {
  return extreme_out<true>(ctx, "amax", self, dim.data, dim.len, out);
}
DevxStatus amin_out(DevxKernelContext* ctx, const DevxTensor* self, DevxIntList dim, int, DevxTensor* out) {
  return extreme_out<false>(ctx, "amin", self, dim.data, dim.len, out);
}
DevxStatus max_unary_out(DevxKernelContext* ctx, const DevxTensor* self, DevxTensor* out) {
  return extreme_out<true>(ctx, "max", self, nullptr, 0, out);
}
DevxStatus min_unary_out(DevxKernelContext* ctx, const DevxTensor* self, DevxTensor* out) {
  return extreme_out<false>(ctx, "min", self, nullptr, 0, out);
}

template <bool Max>
DevxStatus arg_out(DevxKernelContext* ctx, const DevxTensor* self, const int64_t* dim, int, DevxTensor* out) {
  const std::string op = Max ? "argmax" : "argmin";
  Prepared p;
  if (DevxStatus s = prepare_extreme(op, self, dim, dim ? 1 : 0, &p)) return s;
  return indexed_out<Max, 1>(ctx, op, p, {out});
}

template <bool Max>
DevxStatus dim_out(DevxKernelContext* ctx, const DevxTensor* self, int64_t dim, int, DevxTensor* values,
                   DevxTensor* indices) {
  const std::string op = Max ? "max" : "min";
  Prepared p;
  if (DevxStatus s = prepare_extreme(op, self, &dim, 1, &p)) return s;
  return indexed_out<Max, 2>(ctx, op, p, {values, indices});
}

// aminmax: both extremes in one pass, over one dim or all of them.
DevxStatus aminmax_out(DevxKernelContext* ctx, const DevxTensor* self, const int64_t* dim, int, DevxTensor* min,
                       DevxTensor* max) {
  Prepared p;
  if (DevxStatus s = prepare_extreme("aminmax", self, dim, dim ? 1 : 0, &p)) return s;
  if (!min || !max) return invalid("aminmax: NULL output");
  const Tensor lo = take(min), hi = take(max);
  if (lo.dtype != p.in.dtype || hi.dtype != p.in.dtype) return decline("aminmax: outputs of another dtype than the input");
  std::string why;
  const Reduction<2> r = make_reduction<2>(p.in, p.mask, {&lo, &hi}, &why);
  if (!why.empty()) return invalid("aminmax: " + why);
  if (r.n_red == 0 && r.n_out > 0) {
    return invalid("aminmax(): cannot compute aminmax over an empty dimension as the operation has no identity.");
  }
  return dispatch_in<kNumbers | kBool>(p.in.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    using Pair = std::array<M, 2>;
    return launch(ctx, [in = p.in, lo, hi, r] {
      const T* x = in.ptr<const T>();
      auto step = [x](Pair& acc, int64_t off, int64_t) {
        const M v = static_cast<M>(x[off]);
        if (beats<false>(v, acc[0])) acc[0] = v;
        if (beats<true>(v, acc[1])) acc[1] = v;
      };
      auto combine = [](Pair& a, const Pair& b) {
        if (beats<false>(b[0], a[0])) a[0] = b[0];
        if (beats<true>(b[1], a[1])) a[1] = b[1];
      };
      run_reduction(r, Pair{extreme_identity<false, M>(), extreme_identity<true, M>()}, step, combine,
                    [&](const std::array<int64_t, 2>& off, const Pair& acc) {
                      lo.ptr<T>()[off[0]] = convert<T>(acc[0]);
                      hi.ptr<T>()[off[1]] = convert<T>(acc[1]);
                    });
    });
  });
}

DEVX_SIM_REGISTER_KERNEL(amax_out, amax_out);
DEVX_SIM_REGISTER_KERNEL(aminmax_out, aminmax_out);
DEVX_SIM_REGISTER_KERNEL(amin_out, amin_out);
DEVX_SIM_REGISTER_KERNEL(max_unary_out, max_unary_out);
DEVX_SIM_REGISTER_KERNEL(min_unary_out, min_unary_out);
DEVX_SIM_REGISTER_KERNEL(argmax_out, arg_out<true>);
DEVX_SIM_REGISTER_KERNEL(argmin_out, arg_out<false>);
DEVX_SIM_REGISTER_KERNEL(max_dim_max, dim_out<true>);
DEVX_SIM_REGISTER_KERNEL(min_dim_min, dim_out<false>);

}  // namespace
}  // namespace devx::cpu_sim::kern
