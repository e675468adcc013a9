// Group normalisation, forward and backward: input (N, C, *) of any strides, staged contiguous,
// normalised per (sample, group of C / group channels); statistics in double; weight, bias and
// the saved statistics of any floating dtype (float32 with a 16-bit input).
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

struct Groups {
  int64_t n = 0, c = 0, hw = 0, g = 0;
  int64_t per_group() const { return c / g; }  // channels in a group
};

DevxStatus check_groups(const char* op, const DevxTensor* input, const Groups& d) {
  if (d.g <= 0 || d.c % d.g != 0) {
    return invalid(std::string(op) + ": expected the number of channels (" + std::to_string(d.c) +
                   ") to be divisible by the number of groups (" + std::to_string(d.g) + ")");
  }
  if (numel_or_zero(input) != d.n * d.c * d.hw || input->ndim < 2 || input->sizes[0] != d.n || input->sizes[1] != d.c) {
    return invalid(std::string(op) + ": the input's shape does not match N, C and HxW");
  }
  return DEVX_OK;
}

DevxStatus check_group_norm_param(const char* op, const DevxTensor* t, int64_t size, const char* what) {
  if (!t) return DEVX_OK;
  if (!is_floating(t->dtype)) return decline(std::string(op) + ": " + what + " of dtype " + dtype_name(t->dtype));
  if (numel_or_zero(t) != size) {
    return invalid(std::string(op) + ": expected " + what + " to have " + std::to_string(size) + " elements");
  }
  return DEVX_OK;
}

struct GroupNormForward {
  Dense x, y;
  Tensor weight, bias, mean, rstd;
  Groups d;
  double eps = 0;
};

template <typename T>
void group_norm_work(const GroupNormForward& a) {
  const Groups& d = a.d;
  a.x.load();
  const std::vector<double> w = read_values(a.weight), b = read_values(a.bias);
  std::vector<double> mean(d.n * d.g), rstd(d.n * d.g);
  const T* x = a.x.ptr<const T>();
  const int64_t len = d.per_group() * d.hw;  // a group's values, contiguous
  parallel_for(d.n * d.g, grain_for(len), [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k) {
      if (len == 0) {
        // As ATen: an empty group has mean 0 and an undefined deviation.
        mean[k] = 0;
        rstd[k] = NAN;
        continue;
      }
      const T* xg = x + k * len;
      double s1 = 0;
      for (int64_t i = 0; i < len; ++i) s1 += static_cast<double>(xg[i]);
      const double mu = s1 / static_cast<double>(len);
      double s2 = 0;
      for (int64_t i = 0; i < len; ++i) {
        const double v = static_cast<double>(xg[i]) - mu;
        s2 += v * v;
      }
      const double rs = 1.0 / std::sqrt(s2 / static_cast<double>(len) + a.eps);
      mean[k] = mu;
      rstd[k] = rs;
      const int64_t c0 = (k % d.g) * d.per_group();
      for (int64_t j = 0; j < d.per_group(); ++j) {
        const double scale = rs * (w.empty() ? 1.0 : w[c0 + j]);
        const double shift = (b.empty() ? 0.0 : b[c0 + j]) - mu * scale;
        const int64_t base = k * len + j * d.hw;
        put_range<T>(a.y.t, base, base + d.hw, [&](int64_t i) { return static_cast<double>(x[i]) * scale + shift; });
      }
    }
  });
  a.y.store();
  write_values(a.mean, mean);
  write_values(a.rstd, rstd);
}

DevxStatus native_group_norm_out(DevxKernelContext* ctx, const DevxTensor* input, const DevxTensor* weight,
                                 const DevxTensor* bias, int64_t N, int64_t C, int64_t HxW, int64_t group, double eps,
                                 DevxTensor* out0, DevxTensor* out1, DevxTensor* out2) {
  if (!input || !out0) return invalid("group_norm: NULL tensor");
  if (!is_floating(out0->dtype)) return decline(std::string("group_norm: output of dtype ") + dtype_name(out0->dtype));
  const Groups d{N, C, HxW, group};
  if (DevxStatus s = check_groups("group_norm", input, d)) return s;
  if (DevxStatus s = check_group_norm_param("group_norm", weight, C, "weight")) return s;
  if (DevxStatus s = check_group_norm_param("group_norm", bias, C, "bias")) return s;
  for (const DevxTensor* t : {out1, out2}) {
    if (t && numel_or_zero(t) != N * group) return invalid("group_norm: mean/rstd outputs of a wrong size");
  }
  return dispatch_in<kFloats>(input->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    GroupNormForward a;
    if (DevxStatus s = norm_util::make_dense(ctx, take(input), &a.x)) return s;
    if (DevxStatus s = norm_util::make_dense(ctx, take(out0), &a.y)) return s;
    a.weight = take(weight);
    a.bias = take(bias);
    a.mean = take(out1);
    a.rstd = take(out2);
    a.d = d;
    a.eps = eps;
    if (N * group == 0) return DEVX_OK;
    return launch(ctx, [a] { group_norm_work<T>(a); });
  });
}

struct GroupNormBackward {
  Dense gy, x, gx;
  Tensor mean, rstd, weight, grad_weight, grad_bias;
  Groups d;
};

template <typename T>
void group_norm_backward_work(const GroupNormBackward& a) {
  const Groups& d = a.d;
  a.gy.load();
  a.x.load();
  const std::vector<double> mean = read_values(a.mean), rstd = read_values(a.rstd), w = read_values(a.weight);
  const T* gy = a.gy.ptr<const T>();
  const T* x = a.x.ptr<const T>();
  // Per (sample, channel): sum(gy * x) and sum(gy).
  std::vector<double> ds(d.n * d.c), db(d.n * d.c);
  parallel_for(d.n * d.c, grain_for(d.hw), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      double s = 0, t = 0;
      for (int64_t i = 0; i < d.hw; ++i) {
        const double g = static_cast<double>(gy[r * d.hw + i]);
        s += g * static_cast<double>(x[r * d.hw + i]);
        t += g;
      }
      ds[r] = s;
      db[r] = t;
    }
  });
  const int64_t per = d.per_group();
  if (a.gx.t.data) {
    const double inv_count = 1.0 / static_cast<double>(per * d.hw);
    // gx = w * rstd * gy + c2 * x + c3, with c2 and c3 from the group's weighted sums.
    parallel_for(d.n * d.g, grain_for(per * d.hw), [&](int64_t k0, int64_t k1) {
      for (int64_t k = k0; k < k1; ++k) {
        const int64_t nc0 = (k / d.g) * d.c + (k % d.g) * per;  // first (sample, channel) row of the group
        const int64_t c0 = (k % d.g) * per;
        double ds_g = 0, db_g = 0;
        for (int64_t j = 0; j < per; ++j) {
          const double wj = w.empty() ? 1.0 : w[c0 + j];
          ds_g += ds[nc0 + j] * wj;
          db_g += db[nc0 + j] * wj;
        }
        const double mu = mean[k], rs = rstd[k];
        const double c2 = (db_g * mu - ds_g) * rs * rs * rs * inv_count;
        const double c3 = -c2 * mu - db_g * rs * inv_count;
        for (int64_t j = 0; j < per; ++j) {
          const double c1 = rs * (w.empty() ? 1.0 : w[c0 + j]);
          const int64_t base = (nc0 + j) * d.hw;
          put_range<T>(a.gx.t, base, base + d.hw, [&](int64_t i) {
            return c1 * static_cast<double>(gy[i]) + c2 * static_cast<double>(x[i]) + c3;
          });
        }
      }
    });
    a.gx.store();
  }
  if (a.grad_weight.data) {
    std::vector<double> gw(d.c, 0.0);
    for (int64_t n = 0; n < d.n; ++n) {
      for (int64_t c = 0; c < d.c; ++c) {
        const int64_t k = n * d.g + c / per;
        gw[c] += (ds[n * d.c + c] - db[n * d.c + c] * mean[k]) * rstd[k];
      }
    }
    write_values(a.grad_weight, gw);
  }
  if (a.grad_bias.data) {
    std::vector<double> gb(d.c, 0.0);
    for (int64_t n = 0; n < d.n; ++n) {
      for (int64_t c = 0; c < d.c; ++c) gb[c] += db[n * d.c + c];
    }
    write_values(a.grad_bias, gb);
  }
}

DevxStatus native_group_norm_backward_out(DevxKernelContext* ctx, const DevxTensor* grad_out, const DevxTensor* input,
                                          const DevxTensor* mean, const DevxTensor* rstd, const DevxTensor* weight,
                                          int64_t N, int64_t C, int64_t HxW, int64_t group, DevxBoolList output_mask,
                                          DevxTensor* out0, DevxTensor* out1, DevxTensor* out2) {
  const char* op = "group_norm_backward";
  if (!grad_out || !input || !mean || !rstd) return invalid("group_norm_backward: NULL tensor");
  if (grad_out->dtype != input->dtype) return decline("group_norm_backward: grad_out and input of different dtypes");
  const Groups d{N, C, HxW, group};
  if (DevxStatus s = check_groups(op, input, d)) return s;
  if (numel_or_zero(grad_out) != N * C * HxW) return invalid("group_norm_backward: grad_out and input differ in size");
  if (DevxStatus s = check_group_norm_param(op, mean, N * group, "mean")) return s;
  if (DevxStatus s = check_group_norm_param(op, rstd, N * group, "rstd")) return s;
  if (DevxStatus s = check_group_norm_param(op, weight, C, "weight")) return s;
  DevxTensor* const outs[3] = {out0, out1, out2};
  bool want[3];
  if (DevxStatus s = norm_util::outputs_wanted("group_norm_backward", output_mask, outs, want)) return s;
  if (want[0] && numel_or_zero(out0) != N * C * HxW) return invalid("group_norm_backward: grad_input of a wrong size");
  if (want[0] && !is_floating(out0->dtype)) return decline("group_norm_backward: grad_input of a non-floating dtype");
  for (int k = 1; k < 3; ++k) {
    if (want[k] && numel_or_zero(outs[k]) != C) {
      return invalid("group_norm_backward: a parameter gradient of a wrong size");
    }
  }
  return dispatch_in<kFloats>(input->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    GroupNormBackward a;
    if (DevxStatus s = norm_util::make_dense(ctx, take(grad_out), &a.gy)) return s;
    if (DevxStatus s = norm_util::make_dense(ctx, take(input), &a.x)) return s;
    if (want[0] && N * C * HxW > 0) {
      if (DevxStatus s = norm_util::make_dense(ctx, take(out0), &a.gx)) return s;
    }
    a.mean = take(mean);
    a.rstd = take(rstd);
    a.weight = take(weight);
    if (want[1]) a.grad_weight = take(out1);
    if (want[2]) a.grad_bias = take(out2);
    a.d = d;
    if (C == 0) return DEVX_OK;
    return launch(ctx, [a] { group_norm_backward_work<T>(a); });
  });
}

DEVX_SIM_REGISTER_KERNEL(native_group_norm_out, native_group_norm_out);
DEVX_SIM_REGISTER_KERNEL(native_group_norm_backward_out, native_group_norm_backward_out);

}  // namespace
}  // namespace devx::cpu_sim::kern
