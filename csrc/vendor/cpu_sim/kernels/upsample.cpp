// 2-d upsampling (interpolate's nearest and bilinear modes), forward and backward, on [N, C, H, W]
// tensors of any strides. Source coordinates are computed as ATen computes them (in opmath_t of the
// dtype: float for float32), so the picked pixels and weights agree; planes run in parallel, and
// a backward accumulates each plane in the order of its output pixels.
#include <cmath>

#include "kernels/index_util.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

// The ratio input/output of one dimension, or 1/scale where the caller gave a scale.
template <typename M>
M scale_of(int64_t in, int64_t out, const double* scale) {
  return scale && *scale > 0 ? static_cast<M>(1.0 / *scale) : static_cast<M>(in) / static_cast<M>(out);
}

// The input index output index `o` copies in nearest mode.
inline int64_t nearest_index(int64_t o, int64_t in, int64_t out, float scale) {
  if (out == in) return o;
  if (out == 2 * in) return o >> 1;
  return std::min(static_cast<int64_t>(std::floor(static_cast<float>(o) * scale)), in - 1);
}

// A bilinear tap: the two input indices and their weights along one dimension.
template <typename M>
struct Tap {
  int64_t i0, i1;
  M w0, w1;
};

template <typename M>
Tap<M> bilinear_tap(int64_t o, int64_t in, int64_t out, bool align_corners, const double* scale) {
  M ratio;
  if (align_corners) {
    ratio = out > 1 ? static_cast<M>(in - 1) / static_cast<M>(out - 1) : M(0);
  } else {
    ratio = scale_of<M>(in, out, scale);
  }
  const M real = align_corners ? ratio * static_cast<M>(o)
                               : std::max(ratio * (static_cast<M>(o) + M(0.5)) - M(0.5), M(0));
  const int64_t i0 = std::min(static_cast<int64_t>(real), in - 1);
  const int64_t i1 = i0 + (i0 < in - 1 ? 1 : 0);
  const M l1 = std::min(std::max(real - static_cast<M>(i0), M(0)), M(1));
  return {i0, i1, M(1) - l1, l1};
}

// An [N, C, H, W] tensor's plane p (= n * C + c) and its row and column strides.
struct Planes {
  Tensor t;
  int64_t channels = 0;
  int64_t offset(int64_t p) const { return (p / channels) * t.stride(0) + (p % channels) * t.stride(1); }
  int64_t sh() const { return t.stride(2); }
  int64_t sw() const { return t.stride(3); }
};

std::string check_4d(const char* op, const Tensor& small, const Tensor& big, const DevxIntList& output_size) {
  if (small.ndim() != 4 || big.ndim() != 4) return std::string(op) + ": expected 4-d input and output";
  if (output_size.len != 2 || big.size(2) != output_size.data[0] || big.size(3) != output_size.data[1] ||
      small.size(0) != big.size(0) || small.size(1) != big.size(1)) {
    return std::string(op) + ": input " + shape_str(small.sizes) + " and output " + shape_str(big.sizes) +
           " do not match the output size";
  }
  return {};
}

// Runs body(input plane, output plane) for every plane, in parallel.
template <typename Body>
void for_each_plane(const Planes& in, const Planes& out, Body body) {
  const int64_t planes = in.t.size(0) * in.t.size(1);
  const int64_t per_plane = std::max<int64_t>(1, out.t.size(2) * out.t.size(3));
  parallel_for(planes, std::max<int64_t>(1, kGrain / per_plane), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) body(in.offset(p), out.offset(p));
  });
}

DevxStatus upsample_nearest2d_out(DevxKernelContext* ctx, const DevxTensor* self, DevxIntList output_size,
                                  const double* scales_h, const double* scales_w, DevxTensor* out) {
  if (!self || !out) return invalid("upsample_nearest2d: NULL tensor");
  const Tensor x = take(self), o = take(out);
  if (std::string why = check_4d("upsample_nearest2d", x, o, output_size); !why.empty()) return invalid(why);
  if (x.dtype != o.dtype) return decline("upsample_nearest2d: output dtype differs from the input's");
  if (o.numel() == 0 || x.numel() == 0) return DEVX_OK;
  const int64_t ih = x.size(2), iw = x.size(3), oh = o.size(2), ow = o.size(3);
  const float rh = scale_of<float>(ih, oh, scales_h), rw = scale_of<float>(iw, ow, scales_w);
  return launch(ctx, [x, o, ih, iw, oh, ow, rh, rw] {
    std::vector<int64_t> cols(static_cast<size_t>(ow));
    for (int64_t j = 0; j < ow; ++j) cols[j] = nearest_index(j, iw, ow, rw) * x.stride(3);
    const Planes in{x, x.size(1)}, out{o, o.size(1)};
    dispatch_bytes(x.itemsize(), [&](auto tag) {
      using E = decltype(tag);
      for_each_plane(in, out, [&](int64_t ip, int64_t op) {
        for (int64_t i = 0; i < oh; ++i) {
          const E* src = x.ptr<const E>() + ip + nearest_index(i, ih, oh, rh) * in.sh();
          E* dst = o.ptr<E>() + op + i * out.sh();
          for (int64_t j = 0; j < ow; ++j) dst[j * out.sw()] = src[cols[j]];
        }
      });
    });
  });
}

DevxStatus upsample_nearest2d_backward_out(DevxKernelContext* ctx, const DevxTensor* grad_output,
                                           DevxIntList output_size, DevxIntList input_size, const double* scales_h,
                                           const double* scales_w, DevxTensor* grad_input) {
  if (!grad_output || !grad_input) return invalid("upsample_nearest2d_backward: NULL tensor");
  const Tensor g = take(grad_output), gi = take(grad_input);
  if (std::string why = check_4d("upsample_nearest2d_backward", gi, g, output_size); !why.empty()) return invalid(why);
  if (input_size.len != 4 || gi.sizes != Dims(input_size.data, input_size.data + 4)) {
    return invalid("upsample_nearest2d_backward: grad_input does not have input_size");
  }
  if (g.dtype != gi.dtype) return decline("upsample_nearest2d_backward: mixed dtypes");
  if (gi.numel() == 0) return DEVX_OK;
  return dispatch_in<kFloats>(gi.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    const int64_t ih = gi.size(2), iw = gi.size(3), oh = g.size(2), ow = g.size(3);
    const float rh = scale_of<float>(ih, oh, scales_h), rw = scale_of<float>(iw, ow, scales_w);
    return launch(ctx, [g, gi, ih, iw, oh, ow, rh, rw] {
      std::vector<int64_t> cols(static_cast<size_t>(ow));
      for (int64_t j = 0; j < ow; ++j) cols[j] = nearest_index(j, iw, ow, rw);
      const Planes in{gi, gi.size(1)}, out{g, g.size(1)};
      for_each_plane(in, out, [&](int64_t ip, int64_t op) {
        std::vector<M> acc(static_cast<size_t>(ih * iw), M(0));
        for (int64_t i = 0; i < oh; ++i) {
          const int64_t r = nearest_index(i, ih, oh, rh);
          const T* src = g.ptr<const T>() + op + i * out.sh();
          for (int64_t j = 0; j < ow; ++j) acc[r * iw + cols[j]] += static_cast<M>(src[j * out.sw()]);
        }
        T* dst = gi.ptr<T>() + ip;
        for (int64_t i = 0; i < ih; ++i) {
          for (int64_t j = 0; j < iw; ++j) dst[i * in.sh() + j * in.sw()] = convert<T>(acc[i * iw + j]);
        }
      });
    });
  });
}

DevxStatus upsample_bilinear2d_out(DevxKernelContext* ctx, const DevxTensor* self, DevxIntList output_size,
                                   int align_corners, const double* scales_h, const double* scales_w, DevxTensor* out) {
  if (!self || !out) return invalid("upsample_bilinear2d: NULL tensor");
  const Tensor x = take(self), o = take(out);
  if (std::string why = check_4d("upsample_bilinear2d", x, o, output_size); !why.empty()) return invalid(why);
  if (x.dtype != o.dtype) return decline("upsample_bilinear2d: output dtype differs from the input's");
  if (o.numel() == 0 || x.numel() == 0) return DEVX_OK;
  return dispatch_in<kFloats>(x.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    const int64_t ih = x.size(2), iw = x.size(3), oh = o.size(2), ow = o.size(3);
    std::vector<Tap<M>> rows(static_cast<size_t>(oh)), cols(static_cast<size_t>(ow));
    for (int64_t i = 0; i < oh; ++i) rows[i] = bilinear_tap<M>(i, ih, oh, align_corners != 0, scales_h);
    for (int64_t j = 0; j < ow; ++j) cols[j] = bilinear_tap<M>(j, iw, ow, align_corners != 0, scales_w);
    return launch(ctx, [x, o, oh, ow, rows, cols] {
      const Planes in{x, x.size(1)}, out{o, o.size(1)};
      for_each_plane(in, out, [&](int64_t ip, int64_t op) {
        const T* src = x.ptr<const T>() + ip;
        for (int64_t i = 0; i < oh; ++i) {
          const Tap<M>& r = rows[i];
          const T* r0 = src + r.i0 * in.sh();
          const T* r1 = src + r.i1 * in.sh();
          T* dst = o.ptr<T>() + op + i * out.sh();
          for (int64_t j = 0; j < ow; ++j) {
            const Tap<M>& c = cols[j];
            const int64_t c0 = c.i0 * in.sw(), c1 = c.i1 * in.sw();
            const M top = c.w0 * static_cast<M>(r0[c0]) + c.w1 * static_cast<M>(r0[c1]);
            const M bottom = c.w0 * static_cast<M>(r1[c0]) + c.w1 * static_cast<M>(r1[c1]);
            dst[j * out.sw()] = convert<T>(r.w0 * top + r.w1 * bottom);
          }
        }
      });
    });
  });
}

DevxStatus upsample_bilinear2d_backward_out(DevxKernelContext* ctx, const DevxTensor* grad_output,
                                            DevxIntList output_size, DevxIntList input_size, int align_corners,
                                            const double* scales_h, const double* scales_w, DevxTensor* grad_input) {
  if (!grad_output || !grad_input) return invalid("upsample_bilinear2d_backward: NULL tensor");
  const Tensor g = take(grad_output), gi = take(grad_input);
  if (std::string why = check_4d("upsample_bilinear2d_backward", gi, g, output_size); !why.empty()) return invalid(why);
  if (input_size.len != 4 || gi.sizes != Dims(input_size.data, input_size.data + 4)) {
    return invalid("upsample_bilinear2d_backward: grad_input does not have input_size");
  }
  if (g.dtype != gi.dtype) return decline("upsample_bilinear2d_backward: mixed dtypes");
  if (gi.numel() == 0) return DEVX_OK;
  return dispatch_in<kFloats>(gi.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    const int64_t ih = gi.size(2), iw = gi.size(3), oh = g.size(2), ow = g.size(3);
    std::vector<Tap<M>> rows(static_cast<size_t>(oh)), cols(static_cast<size_t>(ow));
    for (int64_t i = 0; i < oh; ++i) rows[i] = bilinear_tap<M>(i, ih, oh, align_corners != 0, scales_h);
    for (int64_t j = 0; j < ow; ++j) cols[j] = bilinear_tap<M>(j, iw, ow, align_corners != 0, scales_w);
    return launch(ctx, [g, gi, ih, iw, oh, ow, rows, cols] {
      const Planes in{gi, gi.size(1)}, out{g, g.size(1)};
      for_each_plane(in, out, [&](int64_t ip, int64_t op) {
        std::vector<M> acc(static_cast<size_t>(ih * iw), M(0));
        for (int64_t i = 0; i < oh; ++i) {
          const Tap<M>& r = rows[i];
          const T* src = g.ptr<const T>() + op + i * out.sh();
          for (int64_t j = 0; j < ow; ++j) {
            const Tap<M>& c = cols[j];
            const M v = static_cast<M>(src[j * out.sw()]);
            acc[r.i0 * iw + c.i0] += r.w0 * c.w0 * v;
            acc[r.i0 * iw + c.i1] += r.w0 * c.w1 * v;
            acc[r.i1 * iw + c.i0] += r.w1 * c.w0 * v;
            acc[r.i1 * iw + c.i1] += r.w1 * c.w1 * v;
          }
        }
        T* dst = gi.ptr<T>() + ip;
        for (int64_t i = 0; i < ih; ++i) {
          for (int64_t j = 0; j < iw; ++j) dst[i * in.sh() + j * in.sw()] = convert<T>(acc[i * iw + j]);
        }
      });
    });
  });
}

DEVX_SIM_REGISTER_KERNEL(upsample_nearest2d_out, upsample_nearest2d_out);
DEVX_SIM_REGISTER_KERNEL(upsample_nearest2d_backward_grad_input, upsample_nearest2d_backward_out);
DEVX_SIM_REGISTER_KERNEL(upsample_bilinear2d_out, upsample_bilinear2d_out);
DEVX_SIM_REGISTER_KERNEL(upsample_bilinear2d_backward_grad_input, upsample_bilinear2d_backward_out);

}  // namespace
}  // namespace devx::cpu_sim::kern
