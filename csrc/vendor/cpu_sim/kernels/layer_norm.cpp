// Layer normalisation over the trailing `normalized_shape` dimensions, forward and backward.
// Input of any strides, staged contiguous as (M rows, N normalised values); statistics in double;
// weight, bias and the saved statistics of any floating dtype (float32 with a 16-bit input).
#include <cmath>
#include <string>

#include "kernels/elementwise.h"
#include "kernels/norm_util.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

using norm_util::Dense;
using norm_util::grain_for;
using norm_util::numel_or_zero;
using norm_util::put_range;
using norm_util::read_values;
using norm_util::write_values;

// Splits `input` into M rows of N values at the normalised dimensions; an error if they differ.
DevxStatus layer_norm_rows(const DevxTensor* input, DevxIntList normalized_shape, int64_t* m, int64_t* n) {
  const int64_t axis = input->ndim - normalized_shape.len;
  if (normalized_shape.len < 1 || axis < 0) return invalid("layer_norm: normalized_shape does not fit the input");
  *m = 1;
  *n = 1;
  for (int64_t d = 0; d < input->ndim; ++d) {
    if (d < axis) {
      *m *= input->sizes[d];
    } else if (input->sizes[d] != normalized_shape.data[d - axis]) {
      return invalid("layer_norm: the input's trailing sizes differ from normalized_shape");
    } else {
      *n *= input->sizes[d];
    }
  }
  return DEVX_OK;
}

DevxStatus check_layer_norm_param(const DevxTensor* t, int64_t n, const char* what) {
  if (!t) return DEVX_OK;
  if (!is_floating(t->dtype)) return decline(std::string("layer_norm: ") + what + " of dtype " + dtype_name(t->dtype));
  if (numel_or_zero(t) != n) return invalid(std::string("layer_norm: ") + what + " does not match normalized_shape");
  return DEVX_OK;
}

struct LayerNormForward {
  Dense x, y;
  Tensor weight, bias, mean, rstd;
  int64_t m = 0, n = 0;
  double eps = 0;
};

template <typename T>
void layer_norm_work(const LayerNormForward& a) {
  a.x.load();
  const std::vector<double> w = read_values(a.weight), b = read_values(a.bias);
  std::vector<double> mean(a.m), rstd(a.m);
  const T* x = a.x.ptr<const T>();
  const int64_t n = a.n;
  parallel_for(a.m, grain_for(n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * n;
      if (n == 0) {
        // As ATen: an empty row has mean 0 and an undefined deviation.
        mean[r] = 0;
        rstd[r] = NAN;
        continue;
      }
      double s1 = 0;
      for (int64_t i = 0; i < n; ++i) s1 += static_cast<double>(xr[i]);
      const double mu = s1 / static_cast<double>(n);
      double s2 = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double v = static_cast<double>(xr[i]) - mu;
        s2 += v * v;
      }
      const double rs = 1.0 / std::sqrt(s2 / static_cast<double>(n) + a.eps);
      mean[r] = mu;
      rstd[r] = rs;
      const int64_t base = r * n;
      put_range<T>(a.y.t, base, base + n, [&](int64_t i) {
        const double v = (static_cast<double>(xr[i - base]) - mu) * rs;
        return (w.empty() ? v : v * w[i - base]) + (b.empty() ? 0.0 : b[i - base]);
      });
    }
  });
  a.y.store();
  write_values(a.mean, mean);
  write_values(a.rstd, rstd);
}

DevxStatus native_layer_norm_out(DevxKernelContext* ctx, const DevxTensor* input, DevxIntList normalized_shape,
                                 const DevxTensor* weight, const DevxTensor* bias, double eps, DevxTensor* out0,
                                 DevxTensor* out1, DevxTensor* out2) {
  if (!input || !out0) return invalid("layer_norm: NULL tensor");
  if (!is_floating(out0->dtype)) return decline(std::string("layer_norm: output of dtype ") + dtype_name(out0->dtype));
  int64_t m = 0, n = 0;
  if (DevxStatus s = layer_norm_rows(input, normalized_shape, &m, &n)) return s;
  if (DevxStatus s = check_layer_norm_param(weight, n, "weight")) return s;
  if (DevxStatus s = check_layer_norm_param(bias, n, "bias")) return s;
  for (const DevxTensor* t : {out1, out2}) {
    if (t && numel_or_zero(t) != m) return invalid("layer_norm: mean/rstd outputs of a wrong size");
  }
  return dispatch_in<kFloats>(input->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    LayerNormForward a;
    if (DevxStatus s = norm_util::make_dense(ctx, take(input), &a.x)) return s;
    if (DevxStatus s = norm_util::make_dense(ctx, take(out0), &a.y)) return s;
    a.weight = take(weight);
    a.bias = take(bias);
    a.mean = take(out1);
    a.rstd = take(out2);
    a.m = m;
    a.n = n;
    a.eps = eps;
    if (m == 0) return DEVX_OK;
    return launch(ctx, [a] { layer_norm_work<T>(a); });
  });
}

struct LayerNormBackward {
  Dense gy, x, gx;
  Tensor mean, rstd, weight, grad_weight, grad_bias;
  int64_t m = 0, n = 0;
};

template <typename T>
void layer_norm_backward_work(const LayerNormBackward& a) {
  a.gy.load();
  a.x.load();
  const std::vector<double> mean = read_values(a.mean), rstd = read_values(a.rstd), w = read_values(a.weight);
  const T* gy = a.gy.ptr<const T>();
  const T* x = a.x.ptr<const T>();
  const int64_t m = a.m, n = a.n;
  if (a.gx.t.data) {
    // gx = rstd / N * (N * w * gy - sum(w * gy) - xhat * sum(w * gy * xhat)), xhat = (x - mean) * rstd
    parallel_for(m, grain_for(n), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t base = r * n;
        double s_wg = 0, s_wgx = 0;
        for (int64_t i = 0; i < n; ++i) {
          const double wg = static_cast<double>(gy[base + i]) * (w.empty() ? 1.0 : w[i]);
          s_wg += wg;
          s_wgx += wg * (static_cast<double>(x[base + i]) - mean[r]) * rstd[r];
        }
        const double k = rstd[r] / static_cast<double>(n);
        put_range<T>(a.gx.t, base, base + n, [&](int64_t i) {
          const double wg = static_cast<double>(gy[i]) * (w.empty() ? 1.0 : w[i - base]);
          const double xhat = (static_cast<double>(x[i]) - mean[r]) * rstd[r];
          return k * (static_cast<double>(n) * wg - s_wg - xhat * s_wgx);
        });
      }
    });
    a.gx.store();
  }
  if (!a.grad_weight.data && !a.grad_bias.data) return;
  // Column sums over the rows: partial sums per block of rows, added in block order, so that
  // runs repeat bit for bit whichever thread took which block.
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(m, num_threads()));
  const int64_t rows_per_block = (m + blocks - 1) / blocks;
  std::vector<std::vector<double>> pw(blocks, std::vector<double>(n)), pb(blocks, std::vector<double>(n));
  parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t r_end = std::min(m, (blk + 1) * rows_per_block);
      for (int64_t r = blk * rows_per_block; r < r_end; ++r) {
        const int64_t base = r * n;
        for (int64_t i = 0; i < n; ++i) {
          const double g = static_cast<double>(gy[base + i]);
          pw[blk][i] += g * (static_cast<double>(x[base + i]) - mean[r]) * rstd[r];
          pb[blk][i] += g;
        }
      }
    }
  });
  for (int64_t blk = 1; blk < blocks; ++blk) {
    for (int64_t i = 0; i < n; ++i) {
      pw[0][i] += pw[blk][i];
      pb[0][i] += pb[blk][i];
    }
  }
  write_values(a.grad_weight, pw[0]);
  write_values(a.grad_bias, pb[0]);
}

DevxStatus native_layer_norm_backward_out(DevxKernelContext* ctx, const DevxTensor* grad_out, const DevxTensor* input,
                                          DevxIntList normalized_shape, const DevxTensor* mean, const DevxTensor* rstd,
                                          const DevxTensor* weight, const DevxTensor* bias, DevxBoolList output_mask,
                                          DevxTensor* out0, DevxTensor* out1, DevxTensor* out2) {
  if (!grad_out || !input || !mean || !rstd) return invalid("layer_norm_backward: NULL tensor");
  if (grad_out->dtype != input->dtype) return decline("layer_norm_backward: grad_out and input of different dtypes");
  int64_t m = 0, n = 0;
  if (DevxStatus s = layer_norm_rows(input, normalized_shape, &m, &n)) return s;
  if (numel_or_zero(grad_out) != m * n) return invalid("layer_norm_backward: grad_out and input differ in size");
  if (numel_or_zero(mean) != m || numel_or_zero(rstd) != m) {
    return invalid("layer_norm_backward: mean/rstd of a wrong size");
  }
  if (DevxStatus s = check_layer_norm_param(weight, n, "weight")) return s;
  if (DevxStatus s = check_layer_norm_param(bias, n, "bias")) return s;
  if (!is_floating(mean->dtype) || !is_floating(rstd->dtype)) return decline("layer_norm_backward: mean/rstd dtype");
  DevxTensor* const outs[3] = {out0, out1, out2};
  bool want[3];
  if (DevxStatus s = norm_util::outputs_wanted("layer_norm_backward", output_mask, outs, want)) return s;
  if (want[0] && numel_or_zero(out0) != m * n) return invalid("layer_norm_backward: grad_input of a wrong size");
  if (want[0] && !is_floating(out0->dtype)) return decline("layer_norm_backward: grad_input of a non-floating dtype");
  for (int k = 1; k < 3; ++k) {
    if (want[k] && numel_or_zero(outs[k]) != n) {
      return invalid("layer_norm_backward: a parameter gradient of a wrong size");
    }
  }
  return dispatch_in<kFloats>(input->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    LayerNormBackward a;
    if (DevxStatus s = norm_util::make_dense(ctx, take(grad_out), &a.gy)) return s;
    if (DevxStatus s = norm_util::make_dense(ctx, take(input), &a.x)) return s;
    if (want[0] && m * n > 0) {
      if (DevxStatus s = norm_util::make_dense(ctx, take(out0), &a.gx)) return s;
    }
    a.mean = take(mean);
    a.rstd = take(rstd);
    a.weight = take(weight);
    if (want[1]) a.grad_weight = take(out1);
    if (want[2]) a.grad_bias = take(out2);
    a.m = m;
    a.n = n;
    if (n == 0) return DEVX_OK;
    return launch(ctx, [a] { layer_norm_backward_work<T>(a); });
  });
}

DEVX_SIM_REGISTER_KERNEL(native_layer_norm_out, native_layer_norm_out);
DEVX_SIM_REGISTER_KERNEL(native_layer_norm_backward_out, native_layer_norm_backward_out);

}  // namespace
}  // namespace devx::cpu_sim::kern
