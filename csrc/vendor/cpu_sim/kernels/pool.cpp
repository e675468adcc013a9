// 2-d pooling, forward and backward: max (with indices), average, adaptive average. Inputs are
// [C, H, W] or [N, C, H, W] with any strides (channels_last too); each (sample, channel) plane is
// one task, so backward scatters into a plane never race.
#include <algorithm>
#include <limits>
#include <stdexcept>

#include "kernels/elementwise.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

// [N, C, H, W] views of the operands (a 3-d tensor gets N = 1).
Tensor to_4d(const Tensor& t) {
  Tensor v = t;
  if (v.ndim() == 3) {
    v.sizes.insert(v.sizes.begin(), 1);
    v.strides.insert(v.strides.begin(), 0);
  }
  return v;
}

struct Plane {
  int64_t h, w, sh, sw;  // sizes and strides (elements)
};

template <typename T>
T* plane_ptr(const Tensor& t, int64_t u) {
  const int64_t c = t.sizes[1];
  return t.ptr<T>() + (u / c) * t.strides[0] + (u % c) * t.strides[1];
}

Plane plane_of(const Tensor& t) { return {t.sizes[2], t.sizes[3], t.strides[2], t.strides[3]}; }

bool pool_dims(const DevxTensor* t) { return t && (t->ndim == 3 || t->ndim == 4); }

// Runs body(plane index) over the N * C planes, `work` elements visited per plane.
template <typename F>
void for_planes(int64_t planes, int64_t work, F&& body) {
  parallel_for(planes, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, work)), [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) body(u);
  });
}

struct Window2d {
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
};

// The op's int[2] lists: one value for both dimensions or one each; an empty stride is the kernel.
bool window_params(DevxIntList kernel, DevxIntList stride, DevxIntList padding, const DevxIntList* dilation,
                   Window2d& p) {
  auto pick = [](DevxIntList l, int i, int64_t& dst) {
    if (l.len != 1 && l.len != 2) return false;
    dst = l.data[l.len == 1 ? 0 : i];
    return true;
  };
  bool ok = pick(kernel, 0, p.kh) && pick(kernel, 1, p.kw) && pick(padding, 0, p.ph) && pick(padding, 1, p.pw);
  if (stride.len == 0) {
    p.sh = p.kh;
    p.sw = p.kw;
  } else {
    ok = ok && pick(stride, 0, p.sh) && pick(stride, 1, p.sw);
  }
  p.dh = p.dw = 1;
  if (dilation) ok = ok && pick(*dilation, 0, p.dh) && pick(*dilation, 1, p.dw);
  return ok && p.kh > 0 && p.kw > 0 && p.sh > 0 && p.sw > 0 && p.ph >= 0 && p.pw >= 0 && p.dh > 0 && p.dw > 0;
}

// ---- max pooling

template <typename M>
bool is_nan(M v) {
  if constexpr (std::is_floating_point_v<M>) {
    return std::isnan(v);
  } else {
    return false;
  }
}

// The first in-range tap of a window starting at `start` (padding skipped in steps of the
// dilation) and the end of its taps.
struct Taps {
  int64_t first, end;
};

Taps taps(int64_t start, int64_t kernel, int64_t dilation, int64_t size) {
  const int64_t end = std::min(start + (kernel - 1) * dilation + 1, size);
  if (start < 0) start += (-start + dilation - 1) / dilation * dilation;
  return {start, end};
}

DevxStatus max_pool2d_out(DevxKernelContext* ctx, const DevxTensor* self, DevxIntList kernel_size, DevxIntList stride,
                          DevxIntList padding, DevxIntList dilation, int ceil_mode, DevxTensor* out,
                          DevxTensor* indices) {
  (void)ceil_mode;  // decides the output size only, which out already has
  if (!pool_dims(self) || !out || !indices || out->ndim != self->ndim || indices->ndim != self->ndim) {
    return invalid("max_pool2d: expected 3-d or 4-d tensors");
  }
  Window2d p;
  if (!window_params(kernel_size, stride, padding, &dilation, p)) return invalid("max_pool2d: bad pooling parameters");
  if (indices->dtype != DEVX_INT64) return decline("max_pool2d: indices must be int64");
  const Tensor x = to_4d(take(self)), y = to_4d(take(out)), idx = to_4d(take(indices));
  if (y.numel() == 0) return DEVX_OK;
  if (self->dtype != out->dtype) return decline("max_pool2d: input and output dtypes differ");
  return dispatch_in<kFloats | kInts>(x.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    constexpr M kLowest = std::numeric_limits<M>::has_infinity ? -std::numeric_limits<M>::infinity()
                                                               : std::numeric_limits<M>::lowest();
    return launch(ctx, [x, y, idx, p] {
      const Plane in = plane_of(x), po = plane_of(y), pi = plane_of(idx);
      for_planes(x.sizes[0] * x.sizes[1], po.h * po.w * p.kh * p.kw, [&](int64_t u) {
        const T* src = plane_ptr<const T>(x, u);
        T* dst = plane_ptr<T>(y, u);
        int64_t* ind = plane_ptr<int64_t>(idx, u);
        for (int64_t oh = 0; oh < po.h; ++oh) {
          const Taps th = taps(oh * p.sh - p.ph, p.kh, p.dh, in.h);
          for (int64_t ow = 0; ow < po.w; ++ow) {
            const Taps tw = taps(ow * p.sw - p.pw, p.kw, p.dw, in.w);
            M best = kLowest;
            int64_t best_index = th.first * in.w + tw.first;
            for (int64_t ih = th.first; ih < th.end; ih += p.dh) {
              for (int64_t iw = tw.first; iw < tw.end; iw += p.dw) {
                const M v = static_cast<M>(src[ih * in.sh + iw * in.sw]);
                // NaN wins, as in ATen: a NaN anywhere in the window is the maximum.
                if (v > best || is_nan(v)) {
                  best = v;
                  best_index = ih * in.w + iw;
                }
              }
            }
            dst[oh * po.sh + ow * po.sw] = static_cast<T>(best);
            ind[oh * pi.sh + ow * pi.sw] = best_index;
          }
        }
      });
    });
  });
}

// Per-plane accumulation in M, stored into a plane of any strides once done.
template <typename T, typename M, typename F>
void accumulate_planes(const Tensor& grad_input, int64_t work, F&& scatter_plane) {
  const Plane gi = plane_of(grad_input);
  const int64_t planes = grad_input.sizes[0] * grad_input.sizes[1];
  parallel_for(planes, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, work)), [&](int64_t begin, int64_t end) {
    std::vector<M> acc(static_cast<size_t>(gi.h * gi.w));
    for (int64_t u = begin; u < end; ++u) {
      std::fill(acc.begin(), acc.end(), M(0));
      scatter_plane(u, acc.data());
      T* dst = plane_ptr<T>(grad_input, u);
      for (int64_t ih = 0; ih < gi.h; ++ih) {
        for (int64_t iw = 0; iw < gi.w; ++iw) dst[ih * gi.sh + iw * gi.sw] = static_cast<T>(acc[ih * gi.w + iw]);
      }
    }
  });
}

DevxStatus max_pool2d_backward_out(DevxKernelContext* ctx, const DevxTensor* grad_output, const DevxTensor* self,
                                   DevxIntList kernel_size, DevxIntList stride, DevxIntList padding,
                                   DevxIntList dilation, int ceil_mode, const DevxTensor* indices,
                                   DevxTensor* grad_input) {
  (void)kernel_size, (void)stride, (void)padding, (void)dilation, (void)ceil_mode;  // the indices say it all
  if (!pool_dims(self) || !pool_dims(grad_output) || !indices || !grad_input || grad_input->ndim != self->ndim ||
      indices->ndim != grad_output->ndim) {
    return invalid("max_pool2d_backward: expected 3-d or 4-d tensors");
  }
  if (indices->dtype != DEVX_INT64) return decline("max_pool2d_backward: indices must be int64");
  if (grad_output->dtype != grad_input->dtype) return decline("max_pool2d_backward: dtypes differ");
  const Tensor go = to_4d(take(grad_output)), idx = to_4d(take(indices)), gi = to_4d(take(grad_input));
  if (gi.numel() == 0) return DEVX_OK;
  if (go.sizes != idx.sizes || go.sizes[0] != gi.sizes[0] || go.sizes[1] != gi.sizes[1]) {
    return invalid("max_pool2d_backward: grad_output, indices and input shapes do not match");
  }
  return dispatch_in<kFloats>(gi.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    return launch(ctx, [go, idx, gi] {
      const Plane pg = plane_of(go), pi = plane_of(idx);
      const int64_t limit = gi.sizes[2] * gi.sizes[3];
      accumulate_planes<T, M>(gi, pg.h * pg.w + limit, [&](int64_t u, M* acc) {
        const T* g = plane_ptr<const T>(go, u);
        const int64_t* ind = plane_ptr<const int64_t>(idx, u);
        for (int64_t oh = 0; oh < pg.h; ++oh) {
          for (int64_t ow = 0; ow < pg.w; ++ow) {
            const int64_t i = ind[oh * pi.sh + ow * pi.sw];
            if (i < 0 || i >= limit) {
              throw std::runtime_error("max_pool2d_backward: index " + std::to_string(i) +
                                       " is out of bounds for an input plane of " + std::to_string(limit) +
                                       " elements");
            }
            acc[i] += static_cast<M>(g[oh * pg.sh + ow * pg.sw]);
          }
        }
      });
    });
  });
}

// ---- average pooling

// A window of avg_pool2d clipped to the input, and what its sum is divided by.
struct AvgWindow {
  int64_t h0, h1, w0, w1, divisor;
};

AvgWindow avg_window(const Window2d& p, int64_t oh, int64_t ow, int64_t h, int64_t w, int count_include_pad,
                     const int64_t* divisor_override) {
  AvgWindow a;
  a.h0 = oh * p.sh - p.ph;
  a.w0 = ow * p.sw - p.pw;
  a.h1 = std::min(a.h0 + p.kh, h + p.ph);
  a.w1 = std::min(a.w0 + p.kw, w + p.pw);
  const int64_t padded = (a.h1 - a.h0) * (a.w1 - a.w0);
  a.h0 = std::max<int64_t>(a.h0, 0);
  a.w0 = std::max<int64_t>(a.w0, 0);
  a.h1 = std::min(a.h1, h);
  a.w1 = std::min(a.w1, w);
  a.divisor = divisor_override ? *divisor_override : count_include_pad ? padded : (a.h1 - a.h0) * (a.w1 - a.w0);
  return a;
}

DevxStatus avg_pool2d_out(DevxKernelContext* ctx, const DevxTensor* self, DevxIntList kernel_size, DevxIntList stride,
                          DevxIntList padding, int ceil_mode, int count_include_pad, const int64_t* divisor_override,
                          DevxTensor* out) {
  (void)ceil_mode;  // decides the output size only, which out already has
  if (!pool_dims(self) || !out || out->ndim != self->ndim) return invalid("avg_pool2d: expected 3-d or 4-d tensors");
  Window2d p;
  if (!window_params(kernel_size, stride, padding, nullptr, p)) return invalid("avg_pool2d: bad pooling parameters");
  if (divisor_override && *divisor_override == 0) return invalid("avg_pool2d: divisor must be not zero");
  if (self->dtype != out->dtype) return decline("avg_pool2d: input and output dtypes differ");
  const Tensor x = to_4d(take(self)), y = to_4d(take(out));
  if (y.numel() == 0) return DEVX_OK;
  const bool has_divisor = divisor_override != nullptr;
  const int64_t divisor = has_divisor ? *divisor_override : 0;
  if (x.dtype != DEVX_INT64 && !is_floating(x.dtype)) {
    return decline(std::string("avg_pool2d: dtype ") + dtype_name(x.dtype));
  }
  return dispatch_in<kFloats | kInts>(x.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    // int64 sums divide as integers, truncating, as ATen's do.
    using M = std::conditional_t<is_float_v<T>, opmath_t<T>, int64_t>;
    return launch(ctx, [x, y, p, count_include_pad, has_divisor, divisor] {
      const Plane in = plane_of(x), po = plane_of(y);
      for_planes(x.sizes[0] * x.sizes[1], po.h * po.w * p.kh * p.kw, [&](int64_t u) {
        const T* src = plane_ptr<const T>(x, u);
        T* dst = plane_ptr<T>(y, u);
        for (int64_t oh = 0; oh < po.h; ++oh) {
          for (int64_t ow = 0; ow < po.w; ++ow) {
            const AvgWindow a = avg_window(p, oh, ow, in.h, in.w, count_include_pad, has_divisor ? &divisor : nullptr);
            M sum = 0;
            for (int64_t ih = a.h0; ih < a.h1; ++ih) {
              for (int64_t iw = a.w0; iw < a.w1; ++iw) sum += static_cast<M>(src[ih * in.sh + iw * in.sw]);
            }
            const bool empty = a.h0 >= a.h1 || a.w0 >= a.w1;
            dst[oh * po.sh + ow * po.sw] = empty ? T(0) : static_cast<T>(sum / static_cast<M>(a.divisor));
          }
        }
      });
    });
  });
}

DevxStatus avg_pool2d_backward_out(DevxKernelContext* ctx, const DevxTensor* grad_output, const DevxTensor* self,
                                   DevxIntList kernel_size, DevxIntList stride, DevxIntList padding, int ceil_mode,
                                   int count_include_pad, const int64_t* divisor_override, DevxTensor* grad_input) {
  (void)ceil_mode;
  if (!pool_dims(self) || !pool_dims(grad_output) || !grad_input || grad_input->ndim != self->ndim) {
    return invalid("avg_pool2d_backward: expected 3-d or 4-d tensors");
  }
  Window2d p;
  if (!window_params(kernel_size, stride, padding, nullptr, p)) {
    return invalid("avg_pool2d_backward: bad pooling parameters");
  }
  if (divisor_override && *divisor_override == 0) return invalid("avg_pool2d_backward: divisor must be not zero");
  if (grad_output->dtype != grad_input->dtype) return decline("avg_pool2d_backward: dtypes differ");
  const Tensor go = to_4d(take(grad_output)), gi = to_4d(take(grad_input));
  if (gi.numel() == 0) return DEVX_OK;
  if (go.sizes[0] != gi.sizes[0] || go.sizes[1] != gi.sizes[1]) {
    return invalid("avg_pool2d_backward: shapes do not match");
  }
  const bool has_divisor = divisor_override != nullptr;
  const int64_t divisor = has_divisor ? *divisor_override : 0;
  return dispatch_in<kFloats>(gi.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    return launch(ctx, [go, gi, p, count_include_pad, has_divisor, divisor] {
      const Plane pg = plane_of(go);
      const int64_t h = gi.sizes[2], w = gi.sizes[3];
      accumulate_planes<T, M>(gi, pg.h * pg.w * p.kh * p.kw + h * w, [&](int64_t u, M* acc) {
        const T* g = plane_ptr<const T>(go, u);
        for (int64_t oh = 0; oh < pg.h; ++oh) {
          for (int64_t ow = 0; ow < pg.w; ++ow) {
            const AvgWindow a = avg_window(p, oh, ow, h, w, count_include_pad, has_divisor ? &divisor : nullptr);
            if (a.h0 >= a.h1 || a.w0 >= a.w1) continue;
            const M delta = static_cast<M>(g[oh * pg.sh + ow * pg.sw]) / static_cast<M>(a.divisor);
            for (int64_t ih = a.h0; ih < a.h1; ++ih) {
              for (int64_t iw = a.w0; iw < a.w1; ++iw) acc[ih * w + iw] += delta;
            }
          }
        }
      });
    });
  });
}

// ---- adaptive average pooling: output cell o of n covers [floor(o * size / n), ceil((o + 1) * size / n)).

int64_t adaptive_start(int64_t o, int64_t n, int64_t size) { return o * size / n; }
int64_t adaptive_end(int64_t o, int64_t n, int64_t size) { return ((o + 1) * size + n - 1) / n; }

DevxStatus adaptive_avg_pool2d_out(DevxKernelContext* ctx, const DevxTensor* self, DevxIntList output_size,
                                   DevxTensor* out) {
  if (!pool_dims(self) || !out || out->ndim != self->ndim) {
    return invalid("adaptive_avg_pool2d: expected 3-d or 4-d tensors");
  }
  if (self->dtype != out->dtype) return decline("adaptive_avg_pool2d: input and output dtypes differ");
  const Tensor x = to_4d(take(self)), y = to_4d(take(out));
  if (output_size.len != 2 || y.sizes[2] != output_size.data[0] || y.sizes[3] != output_size.data[1]) {
    return invalid("adaptive_avg_pool2d: output_size does not match the output");
  }
  if (y.numel() == 0) return DEVX_OK;
  return dispatch_in<kFloats>(x.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    return launch(ctx, [x, y] {
      const Plane in = plane_of(x), po = plane_of(y);
      for_planes(x.sizes[0] * x.sizes[1], in.h * in.w + po.h * po.w, [&](int64_t u) {
        const T* src = plane_ptr<const T>(x, u);
        T* dst = plane_ptr<T>(y, u);
        for (int64_t oh = 0; oh < po.h; ++oh) {
          const int64_t h0 = adaptive_start(oh, po.h, in.h), h1 = adaptive_end(oh, po.h, in.h);
          for (int64_t ow = 0; ow < po.w; ++ow) {
            const int64_t w0 = adaptive_start(ow, po.w, in.w), w1 = adaptive_end(ow, po.w, in.w);
            double sum = 0;
            for (int64_t ih = h0; ih < h1; ++ih) {
              for (int64_t iw = w0; iw < w1; ++iw) sum += convert<double>(src[ih * in.sh + iw * in.sw]);
            }
            dst[oh * po.sh + ow * po.sw] = convert<T>(sum / static_cast<double>((h1 - h0) * (w1 - w0)));
          }
        }
      });
    });
  });
}

DevxStatus adaptive_avg_pool2d_backward_out(DevxKernelContext* ctx, const DevxTensor* grad_output,
                                            const DevxTensor* self, DevxTensor* out) {
  if (!pool_dims(self) || !pool_dims(grad_output) || !out || out->ndim != self->ndim) {
    return invalid("adaptive_avg_pool2d_backward: expected 3-d or 4-d tensors");
  }
  if (grad_output->dtype != out->dtype) return decline("adaptive_avg_pool2d_backward: dtypes differ");
  const Tensor go = to_4d(take(grad_output)), gi = to_4d(take(out));
  if (gi.numel() == 0) return DEVX_OK;
  if (go.sizes[0] != gi.sizes[0] || go.sizes[1] != gi.sizes[1]) {
    return invalid("adaptive_avg_pool2d_backward: shapes do not match");
  }
  return dispatch_in<kFloats>(gi.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    return launch(ctx, [go, gi] {
      const Plane pg = plane_of(go);
      const int64_t h = gi.sizes[2], w = gi.sizes[3];
      accumulate_planes<T, M>(gi, 2 * h * w + pg.h * pg.w, [&](int64_t u, M* acc) {
        const T* g = plane_ptr<const T>(go, u);
        for (int64_t oh = 0; oh < pg.h; ++oh) {
          const int64_t h0 = adaptive_start(oh, pg.h, h), h1 = adaptive_end(oh, pg.h, h);
          for (int64_t ow = 0; ow < pg.w; ++ow) {
            const int64_t w0 = adaptive_start(ow, pg.w, w), w1 = adaptive_end(ow, pg.w, w);
            const M delta = static_cast<M>(g[oh * pg.sh + ow * pg.sw]) / static_cast<M>((h1 - h0) * (w1 - w0));
            for (int64_t ih = h0; ih < h1; ++ih) {
              for (int64_t iw = w0; iw < w1; ++iw) acc[ih * w + iw] += delta;
            }
          }
        }
      });
    });
  });
}

DEVX_SIM_REGISTER_KERNEL(max_pool2d_with_indices_out, max_pool2d_out);
DEVX_SIM_REGISTER_KERNEL(max_pool2d_with_indices_backward_grad_input, max_pool2d_backward_out);
DEVX_SIM_REGISTER_KERNEL(avg_pool2d_out, avg_pool2d_out);
DEVX_SIM_REGISTER_KERNEL(avg_pool2d_backward_grad_input, avg_pool2d_backward_out);
DEVX_SIM_REGISTER_KERNEL(_adaptive_avg_pool2d_out, adaptive_avg_pool2d_out);
DEVX_SIM_REGISTER_KERNEL(_adaptive_avg_pool2d_backward_out, adaptive_avg_pool2d_backward_out);

}  // namespace
}  // namespace devx::cpu_sim::kern
