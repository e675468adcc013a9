// Shape-like ops: cat, tril/triu, and the factories arange and kaiser_window.
#include <cmath>

#include "kernels/index_util.h"
#include "kernels/pointwise.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

DevxStatus cat_out(DevxKernelContext* ctx, DevxTensorList tensors, int64_t dim, DevxTensor* out) {
  if (!out) return invalid("cat: NULL output");
  Tensor o = take(out);
  if (o.ndim() == 0) return invalid("cat: zero-dimensional tensor cannot be concatenated");
  if (!wrap_dim(dim, o.ndim())) return invalid("cat: dim " + std::to_string(dim) + " out of range");
  const int d = static_cast<int>(dim);
  std::vector<Tensor> parts;
  std::vector<int64_t> at;  // where each part starts along dim
  int64_t pos = 0;
  for (int64_t k = 0; k < tensors.len; ++k) {
    if (!tensors.items[k]) return invalid("cat: NULL input");
    Tensor t = take(tensors.items[k]);
    // ATen's legacy rule: 1-d empty tensors are skipped whatever the others' shapes.
    if (t.ndim() == 1 && t.size(0) == 0) continue;
    bool fits = t.ndim() == o.ndim();
    for (int i = 0; fits && i < o.ndim(); ++i) fits = i == d || t.size(i) == o.size(i);
    if (!fits) {
      return invalid("cat: input " + std::to_string(k) + " of shape " + shape_str(t.sizes) + " does not fit output " +
                     shape_str(o.sizes) + " along dim " + std::to_string(d));
    }
    at.push_back(pos);
    pos += t.size(d);
    parts.push_back(std::move(t));
  }
  if (pos != o.size(d)) return invalid("cat: the inputs' total size along dim does not match the output's");
  if (o.numel() == 0) return DEVX_OK;
  return launch(ctx, [o, parts = std::move(parts), at = std::move(at), d] {
    for (size_t k = 0; k < parts.size(); ++k) {
      const Tensor& t = parts[k];
      if (t.numel() == 0) continue;
      Tensor slice = o;
      slice.data = o.data + at[k] * o.stride(d) * static_cast<int64_t>(o.itemsize());
      slice.sizes = t.sizes;
      if (t.dtype == o.dtype) {
        copy_elements(t, slice);
      } else {
        convert_elements(t, slice);
      }
    }
  });
}

// The type ATen's CPU arange computes `start + step * i` in (its acc_type): double for the
// 32- and 64-bit floats, float for the 16-bit ones, int64 for the integers.
template <typename T>
using arange_acc_t = std::conditional_t<is_float_v<T>, std::conditional_t<sizeof(T) == 2, float, double>, int64_t>;

DevxStatus arange_start_out(DevxKernelContext* ctx, const DevxScalar* start, const DevxScalar* end,
                            const DevxScalar* step, DevxTensor* out) {
  if (!start || !end || !step || !out) return invalid("arange: NULL argument");
  Tensor o = take(out);
  if (o.ndim() != 1) return invalid("arange: output must be 1-d, got shape " + shape_str(o.sizes));
  if (o.numel() == 0) return DEVX_OK;
  return dispatch_in<kNumbers>(o.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using A = arange_acc_t<T>;
    const A first = scalar_as<A>(start), delta = scalar_as<A>(step);
    return launch(ctx, [o, first, delta] {
      T* dst = o.ptr<T>();
      const int64_t stride = o.stride(0);
      parallel_for(o.numel(), kGrain, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) dst[i * stride] = convert<T>(first + delta * static_cast<A>(i));
      });
    });
  });
}

// linspace computes as ATen's CPU kernel: in T for the floating types (each operation of the
// 16-bit ones rounded to T, as their C++ arithmetic rounds), in double for the integers, from
// both ends towards the middle so that the last point is `end` exactly.
template <typename T>
using linspace_step_t = std::conditional_t<is_float_v<T>, opmath_t<T>, double>;

template <typename T, typename S>
inline S round_as(S v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return static_cast<S>(static_cast<float>(convert<T>(v)));
  } else {
    return v;
  }
}

DevxStatus linspace_out(DevxKernelContext* ctx, const DevxScalar* start, const DevxScalar* end, int64_t steps,
                        DevxTensor* out) {
  if (!start || !end || !out) return invalid("linspace: NULL argument");
  if (steps < 0) return invalid("number of steps must be non-negative");
  Tensor o = take(out);
  if (o.ndim() != 1 || o.numel() != steps) return invalid("linspace: output of shape " + shape_str(o.sizes));
  if (steps == 0) return DEVX_OK;
  return dispatch_in<kNumbers>(o.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using S = linspace_step_t<T>;
    const S first = convert<S>(scalar_as<T>(start)), last = convert<S>(scalar_as<T>(end));
    const S step = steps > 1 ? round_as<T>(round_as<T>(last - first) / static_cast<S>(steps - 1)) : S(0);
    return launch(ctx, [o, first, last, step, steps] {
      T* dst = o.ptr<T>();
      const int64_t stride = o.stride(0), halfway = steps / 2;
      parallel_for(steps, kGrain, [&](int64_t begin, int64_t stop) {
        for (int64_t i = begin; i < stop; ++i) {
          const S v = i < halfway ? round_as<T>(first + round_as<T>(step * static_cast<S>(i)))
                                  : round_as<T>(last - round_as<T>(step * static_cast<S>(steps - i - 1)));
          dst[i * stride] = steps == 1 ? convert<T>(first) : convert<T>(v);
        }
      });
    });
  });
}

// tril keeps the elements on and below diagonal `diagonal` of the last two dims (j - i <= it),
// triu those on and above (j - i >= it); the others become zero.
template <bool Upper>
DevxStatus tri_out(DevxKernelContext* ctx, const DevxTensor* self, int64_t diagonal, DevxTensor* out) {
  const char* op = Upper ? "triu" : "tril";
  if (!self || !out) return invalid(std::string(op) + ": NULL tensor");
  Tensor s = take(self), o = take(out);
  if (s.ndim() < 2) return invalid(std::string(op) + ": input tensor must have at least 2 dimensions");
  if (o.sizes != s.sizes) return invalid(std::string(op) + ": output shape differs from the input's");
  if (o.dtype != s.dtype) return decline(std::string(op) + ": output dtype differs from the input's");
  if (o.numel() == 0) return DEVX_OK;
  const bool in_place = same_view(s, o);
  return launch(ctx, [s, o, diagonal, in_place] {
    const int nd = s.ndim();
    const int64_t rows = s.size(nd - 2), cols = s.size(nd - 1);
    const int64_t si = s.stride(nd - 2), sj = s.stride(nd - 1), oi = o.stride(nd - 2), oj = o.stride(nd - 1);
    dispatch_bytes(s.itemsize(), [&](auto tag) {
      using E = decltype(tag);
      const E* src = s.ptr<const E>();
      E* dst = o.ptr<E>();
      const int64_t n = s.numel() / cols;
      parallel_for(n, std::max<int64_t>(1, kGrain / cols), [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const int64_t i = r % rows;
          int64_t so = i * si, oo = i * oi;
          for (int64_t b = r / rows, d = nd - 3; d >= 0; --d) {
            so += (b % s.size(static_cast<int>(d))) * s.stride(static_cast<int>(d));
            oo += (b % s.size(static_cast<int>(d))) * o.stride(static_cast<int>(d));
            b /= s.size(static_cast<int>(d));
          }
          for (int64_t j = 0; j < cols; ++j) {
            const bool keep = Upper ? j - i >= diagonal : j - i <= diagonal;
            if (!keep) {
              dst[oo + j * oj] = E{};
            } else if (!in_place) {
              dst[oo + j * oj] = src[so + j * sj];
            }
          }
        }
      });
    });
  });
}

// The modified Bessel function of the first kind, order 0: sum over k of ((x/2)^k / k!)^2.
double bessel_i0(double x) {
  const double q = x * x / 4;
  double term = 1, sum = 1;
  for (int k = 1; k < 1000 && term > sum * 1e-17; ++k) {
    term *= q / (static_cast<double>(k) * k);
    sum += term;
  }
  return sum;
}

// w[i] = I0(beta * sqrt(1 - ((i - a) / a)^2)) / I0(beta), a = (L - 1) / 2, over L points, or
// over L + 1 of which the last is dropped when periodic.
DevxStatus kaiser_window(DevxKernelContext* ctx, int64_t window_length, bool periodic, double beta, DevxTensor* out) {
  if (!out) return invalid("kaiser_window: NULL output");
  Tensor o = take(out);
  if (window_length < 0) return invalid("kaiser_window: requires non-negative window_length");
  if (o.ndim() != 1 || o.size(0) != window_length) {
    return invalid("kaiser_window: output of shape " + shape_str(o.sizes) + " for window_length " +
                   std::to_string(window_length));
  }
  if (window_length == 0) return DEVX_OK;
  return dispatch_in<kFloats>(o.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    return launch(ctx, [o, window_length, periodic, beta] {
      T* dst = o.ptr<T>();
      const int64_t stride = o.stride(0);
      if (window_length == 1) {
        dst[0] = T(1);
        return;
      }
      const int64_t points = periodic ? window_length + 1 : window_length;
      const double alpha = static_cast<double>(points - 1) / 2;
      const double norm = bessel_i0(beta);
      parallel_for(window_length, 4096, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          // ATen evaluates on arange(points) in the output's dtype, which rounds large i in
          // the 16-bit floats.
          const double x = (static_cast<double>(static_cast<opmath_t<T>>(convert<T>(i))) - alpha) / alpha;
          dst[i * stride] = convert<T>(bessel_i0(beta * std::sqrt(std::abs(1 - x * x))) / norm);
        }
      });
    });
  });
}

DevxStatus kaiser_window_out(DevxKernelContext* ctx, int64_t window_length, DevxTensor* out) {
  return kaiser_window(ctx, window_length, true, 12.0, out);
}

DevxStatus kaiser_window_periodic_out(DevxKernelContext* ctx, int64_t window_length, int periodic, DevxTensor* out) {
  return kaiser_window(ctx, window_length, periodic != 0, 12.0, out);
}

DevxStatus kaiser_window_beta_out(DevxKernelContext* ctx, int64_t window_length, int periodic, double beta,
                                  DevxTensor* out) {
  return kaiser_window(ctx, window_length, periodic != 0, beta, out);
}

DEVX_SIM_REGISTER_KERNEL(cat_out, cat_out);
DEVX_SIM_REGISTER_KERNEL(arange_start_out, arange_start_out);
DEVX_SIM_REGISTER_KERNEL(linspace_out, linspace_out);
DEVX_SIM_REGISTER_KERNEL(tril_out, tri_out<false>);
DEVX_SIM_REGISTER_KERNEL(triu_out, tri_out<true>);
DEVX_SIM_REGISTER_KERNEL(kaiser_window_out, kaiser_window_out);
DEVX_SIM_REGISTER_KERNEL(kaiser_window_periodic_out, kaiser_window_periodic_out);
DEVX_SIM_REGISTER_KERNEL(kaiser_window_beta_out, kaiser_window_beta_out);

}  // namespace
}  // namespace devx::cpu_sim::kern
