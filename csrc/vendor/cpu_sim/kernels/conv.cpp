// Convolution forward (transposed too), and the im2col + GEMM engine the backward kernel shares
// (conv_util.h).
#include <algorithm>

#include "kernels/conv_util.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

// Elements per batch chunk of the column matrix and its companions: bounds the workspaces while
// keeping the GEMMs large.
constexpr int64_t kChunkElements = int64_t{1} << 22;

// Calls f(T{}) for the real dtypes a convolution reads (conv_dtype).
template <typename F>
void dispatch_real(DevxDType dtype, F&& f) {
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!is_complex_v<T> && !std::is_same_v<T, bool>) f(tag);
  });
}

// Sums wrap around for the integer types, as their convolutions do in ATen.
template <typename S>
S add(S a, S b) {
  if constexpr (std::is_integral_v<S>) {
    return static_cast<S>(static_cast<std::make_unsigned_t<S>>(a) + static_cast<std::make_unsigned_t<S>>(b));
  } else {
    return a + b;
  }
}

// The output positions o in [0, size) whose input position o * stride + offset lies in [0, limit).
struct Span {
  int64_t lo, hi;
};

Span valid_span(int64_t size, int64_t stride, int64_t offset, int64_t limit) {
  int64_t lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  int64_t hi = limit - 1 - offset < 0 ? 0 : (limit - 1 - offset) / stride + 1;
  lo = std::min(lo, size);
  hi = std::clamp(hi, lo, size);
  return {lo, hi};
}

Tensor batch_slice(const Tensor& t, int64_t n0, int64_t count) {
  Tensor v = offset_view(t, n0 * t.strides[0]);
  v.sizes[0] = count;
  return v;
}

// col[(c, kernel offset)][b * P + output position] = x[b, c, input position] (0 in the padding),
// for the `batch` samples of x.
template <typename S>
void im2col(const Tensor& x, const ConvGeom& g, S* col, int64_t batch) {
  const int64_t ks = g.kernel_elems(), p = g.out_plane(), ld = batch * p, rows = g.c_in * ks;
  const auto& o = g.out;
  dispatch_real(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    parallel_for(batch * rows, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, p)), [&](int64_t begin, int64_t end) {
      for (int64_t u = begin; u < end; ++u) {
        const int64_t b = u / rows, r = u % rows, c = r / ks, kk = r % ks;
        const int64_t kz = kk / (g.k[1] * g.k[2]), ky = kk / g.k[2] % g.k[1], kx = kk % g.k[2];
        const int64_t oz = kz * g.dil[0] - g.pad[0], oy = ky * g.dil[1] - g.pad[1], ox = kx * g.dil[2] - g.pad[2];
        const Span sx = valid_span(o[2], g.stride[2], ox, g.in[2]);
        const T* src = x.ptr<const T>() + b * x.strides[0] + c * x.strides[1];
        S* dst = col + r * ld + b * p;
        for (int64_t z = 0; z < o[0]; ++z) {
          const int64_t iz = z * g.stride[0] + oz;
          for (int64_t y = 0; y < o[1]; ++y, dst += o[2]) {
            const int64_t iy = y * g.stride[1] + oy;
            if (iz < 0 || iz >= g.in[0] || iy < 0 || iy >= g.in[1]) {
              std::fill(dst, dst + o[2], S(0));
              continue;
            }
            const T* row = src + iz * x.strides[2] + iy * x.strides[3];
            std::fill(dst, dst + sx.lo, S(0));
            for (int64_t w = sx.lo; w < sx.hi; ++w) dst[w] = convert<S>(row[(w * g.stride[2] + ox) * x.strides[4]]);
            std::fill(dst + sx.hi, dst + o[2], S(0));
          }
        }
      }
    });
  });
}

// The adjoint of im2col: xbuf[b, c] = init[c] + the sum of the col entries that read each input
// position. One task per (sample, channel) plane, so no two tasks write the same element.
template <typename S>
void col2im(const S* col, const ConvGeom& g, S* xbuf, int64_t batch, const std::vector<S>& init) {
  const int64_t ks = g.kernel_elems(), p = g.out_plane(), ld = batch * p, plane = g.in_plane();
  const auto& o = g.out;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, ks * p));
  parallel_for(batch * g.c_in, grain, [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const int64_t b = u / g.c_in, c = u % g.c_in;
      S* dst = xbuf + u * plane;
      std::fill(dst, dst + plane, init.empty() ? S(0) : init[static_cast<size_t>(c)]);
      for (int64_t kk = 0; kk < ks; ++kk) {
        const int64_t kz = kk / (g.k[1] * g.k[2]), ky = kk / g.k[2] % g.k[1], kx = kk % g.k[2];
        const int64_t oz = kz * g.dil[0] - g.pad[0], oy = ky * g.dil[1] - g.pad[1], ox = kx * g.dil[2] - g.pad[2];
        const Span sx = valid_span(o[2], g.stride[2], ox, g.in[2]);
        const S* src = col + (c * ks + kk) * ld + b * p;
        for (int64_t z = 0; z < o[0]; ++z) {
          const int64_t iz = z * g.stride[0] + oz;
          for (int64_t y = 0; y < o[1]; ++y, src += o[2]) {
            const int64_t iy = y * g.stride[1] + oy;
            if (iz < 0 || iz >= g.in[0] || iy < 0 || iy >= g.in[1]) continue;
            S* row = dst + (iz * g.in[1] + iy) * g.in[2];
            for (int64_t w = sx.lo; w < sx.hi; ++w) row[w * g.stride[2] + ox] = add(row[w * g.stride[2] + ox], src[w]);
          }
        }
      }
    }
  });
}

template <typename S>
DevxStatus run_conv_as(DevxKernelContext* ctx, const ConvJob& job) {
  const ConvGeom& g = job.g;
  const int64_t p = g.out_plane(), ks = g.kernel_elems(), kg = g.kg(), cog = g.c_out / g.groups;
  const bool fwd = job.y.data != nullptr, bwd_in = job.dx.data != nullptr, bwd_w = job.dw.data != nullptr;
  const bool im2col_x = fwd || bwd_w;
  const int64_t per_sample =
      (im2col_x || bwd_in ? g.c_in * ks * p : 0) + g.c_out * p + (bwd_in ? g.c_in * g.in_plane() : 0);
  const int64_t chunk =
      std::clamp<int64_t>(kChunkElements / std::max<int64_t>(1, per_sample), 1, std::max<int64_t>(1, g.n));
  if (!fits_blas_int(chunk * p) || !fits_blas_int(kg) || !fits_blas_int(g.c_out * kg) ||
      !fits_blas_int(kg * chunk * p) || !fits_blas_int(cog * chunk * p)) {
    return decline("convolution: too large for 32-bit BLAS indices");
  }
  S *col, *ybuf, *w, *dwbuf, *xbuf;
  if (DevxStatus s = workspace_of(ctx, im2col_x || bwd_in ? g.c_in * ks * chunk * p : 0, &col)) return s;
  if (DevxStatus s = workspace_of(ctx, g.c_out * chunk * p, &ybuf)) return s;
  if (DevxStatus s = workspace_of(ctx, fwd || bwd_in ? g.c_out * kg : 0, &w)) return s;
  if (DevxStatus s = workspace_of(ctx, bwd_w ? g.c_out * kg : 0, &dwbuf)) return s;
  if (DevxStatus s = workspace_of(ctx, bwd_in ? chunk * g.c_in * g.in_plane() : 0, &xbuf)) return s;

  return launch(ctx, [job, p, kg, cog, chunk, fwd, bwd_in, bwd_w, im2col_x, col, ybuf, w, dwbuf, xbuf] {
    const ConvGeom& g = job.g;
    std::vector<S> bias;
    if (job.bias.data) {
      bias.resize(static_cast<size_t>(job.bias.sizes[0]));
      gather<S>(job.bias, bias.data(), {1});
    }
    if (fwd || bwd_in) gather<S>(job.weight, w, dense_strides(job.weight.sizes));
    if (bwd_w) std::fill(dwbuf, dwbuf + g.c_out * kg, S(0));
    for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
      const int64_t b = std::min(chunk, g.n - n0), bp = b * p;
      // ybuf and col are [channel][sample][position] with leading dimension bp.
      const std::vector<int64_t> y_strides{p, bp, g.out[1] * g.out[2], g.out[2], 1};
      if (im2col_x) im2col<S>(batch_slice(job.x, n0, b), g, col, b);
      if (bwd_w || bwd_in) gather<S>(batch_slice(job.dy, n0, b), ybuf, y_strides);
      if (bwd_w) {
        gemm_batched<S>(false, true, cog, kg, bp, S(1), ybuf, bp, cog * bp, col, bp, kg * bp, S(1), dwbuf, kg, cog * kg,
                        g.groups);
      }
      if (fwd) {
        if (!bias.empty()) {
          const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, bp));
          parallel_for(g.c_out, grain, [&](int64_t begin, int64_t end) {
            for (int64_t c = begin; c < end; ++c) {
              std::fill(ybuf + c * bp, ybuf + (c + 1) * bp, bias[static_cast<size_t>(c)]);
            }
          });
        }
        gemm_batched<S>(false, false, cog, bp, kg, S(1), w, kg, cog * kg, col, bp, kg * bp, bias.empty() ? S(0) : S(1),
                        ybuf, bp, cog * bp, g.groups);
        scatter<S>(ybuf, y_strides, batch_slice(job.y, n0, b));
      }
      if (bwd_in) {
        gemm_batched<S>(true, false, kg, bp, cog, S(1), w, kg, cog * kg, ybuf, bp, cog * bp, S(0), col, bp, kg * bp,
                        g.groups);
        col2im<S>(col, g, xbuf, b, bias);
        scatter<S>(xbuf, dense_strides({b, g.c_in, g.in[0], g.in[1], g.in[2]}), batch_slice(job.dx, n0, b));
      }
    }
    if (bwd_w) scatter<S>(dwbuf, dense_strides(job.dw.sizes), job.dw);
  });
}

DevxStatus convolution_out(DevxKernelContext* ctx, const DevxTensor* input, const DevxTensor* weight,
                           const DevxTensor* bias, DevxIntList stride, DevxIntList padding, DevxIntList dilation,
                           int transposed, DevxIntList output_padding, int64_t groups, DevxTensor* out) {
  if (!input || !weight || !out) return invalid("convolution: NULL tensor");
  const int nd = input->ndim;
  if (nd < 3 || nd > 5 || weight->ndim != nd || out->ndim != nd) {
    return decline("convolution: not a 1-, 2- or 3-d convolution");
  }
  for (const DevxTensor* t : {input, weight, bias, static_cast<const DevxTensor*>(out)}) {
    if (t && !conv_dtype(t->dtype)) return decline(std::string("convolution: dtype ") + dtype_name(t->dtype));
  }
  ConvJob job;
  const Tensor x = to_5d(take(input)), y = to_5d(take(out));
  job.weight = to_5d(take(weight));
  if (DevxStatus s = conv_geometry("convolution", nd - 2, job.g, x, job.weight, y, stride, padding, dilation,
                                   transposed, output_padding, groups)) {
    return s;
  }
  job.bias = take(bias);
  if (job.bias.data && (job.bias.ndim() != 1 || job.bias.sizes[0] != y.sizes[1])) {
    return invalid("convolution: bias shape does not match the output channels");
  }
  if (transposed) {
    job.dy = x;
    job.dx = y;
  } else {
    job.x = x;
    job.y = y;
  }
  if (y.numel() == 0) return DEVX_OK;
  return run_conv(ctx, job);
}

DEVX_SIM_REGISTER_KERNEL(convolution_overrideable_out, convolution_out);

}  // namespace

Tensor to_5d(const Tensor& t) {
  Tensor v = t;
  const int missing = 5 - t.ndim();
  v.sizes.insert(v.sizes.begin() + 2, static_cast<size_t>(missing), 1);
  v.strides.insert(v.strides.begin() + 2, static_cast<size_t>(missing), 0);
  return v;
}

DevxStatus conv_geometry(const char* op, int spatial, ConvGeom& g, const Tensor& input, const Tensor& weight,
                         const Tensor& output, DevxIntList stride, DevxIntList padding, DevxIntList dilation,
                         int transposed, DevxIntList output_padding, int64_t groups) {
  const std::string name(op);
  if (groups <= 0) return invalid(name + ": groups must be positive");
  // One value for every spatial dimension, or one each; the padded dimensions keep the defaults.
  auto fill = [&](DevxIntList list, std::array<int64_t, 3>* dst, int64_t min, bool empty_ok) {
    if (list.len == 0 && empty_ok) return true;
    if (list.len != 1 && list.len != spatial) return false;
    for (int d = 0; d < spatial; ++d) {
      const int64_t v = list.data[list.len == 1 ? 0 : d];
      if (v < min) return false;
      if (dst) (*dst)[3 - spatial + d] = v;
    }
    return true;
  };
  std::array<int64_t, 3> out_pad{0, 0, 0};
  if (!fill(stride, &g.stride, 1, false) || !fill(padding, &g.pad, 0, false) || !fill(dilation, &g.dil, 1, false) ||
      !fill(output_padding, transposed ? &out_pad : nullptr, 0, true)) {
    return invalid(name + ": bad stride, padding, dilation or output_padding");
  }
  const Tensor& conv_in = transposed ? output : input;
  const Tensor& conv_out = transposed ? input : output;
  g.n = input.sizes[0];
  g.groups = groups;
  g.c_in = conv_in.sizes[1];
  g.c_out = conv_out.sizes[1];
  for (int d = 0; d < 3; ++d) {
    g.k[d] = weight.sizes[2 + d];
    g.in[d] = conv_in.sizes[2 + d];
    g.out[d] = conv_out.sizes[2 + d];
  }
  if (output.sizes[0] != g.n || weight.sizes[0] != g.c_out || weight.sizes[1] * groups != g.c_in ||
      g.c_out % groups != 0) {
    return invalid(name + ": weight, input and output shapes do not match");
  }
  for (int d = 0; d < 3; ++d) {
    const int64_t reach = g.dil[d] * (g.k[d] - 1) + 1;
    const bool fits = transposed ? (g.out[d] - 1) * g.stride[d] - 2 * g.pad[d] + reach + out_pad[d] == g.in[d]
                                 : (g.in[d] + 2 * g.pad[d] - reach) / g.stride[d] + 1 == g.out[d];
    if (!fits) return invalid(name + ": output size does not match the input");
  }
  return DEVX_OK;
}

DevxStatus run_conv(DevxKernelContext* ctx, const ConvJob& job) {
  bool integral = false, wide = false;
  for (const Tensor* t : {&job.x, &job.dy, &job.y, &job.dx, &job.weight, &job.dw}) {
    integral = integral || (t->data && is_integral(t->dtype));
    wide = wide || (t->data && t->dtype == DEVX_FLOAT64);
  }
  if (integral) return run_conv_as<int64_t>(ctx, job);
  return wide ? run_conv_as<double>(ctx, job) : run_conv_as<float>(ctx, job);
}

}  // namespace devx::cpu_sim::kern
