// Batch normalisation, forward (training with batch statistics and the running-statistics update,
// evaluation with the running statistics) and backward. Input (N, C, *) of any strides, staged
// contiguous; statistics in double; per-channel tensors of any floating dtype (float32 weights
// with a 16-bit input, as ATen allows).
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

// The input seen as (n, c, s): batch, channels, and everything after the channels.
struct Nc {
  int64_t n = 0, c = 0, s = 1;
  int64_t count() const { return n * s; }  // values per channel
};

Nc nc_of(const DevxTensor* input) {
  Nc d;
  d.n = input->sizes[0];
  d.c = input->sizes[1];
  for (int32_t k = 2; k < input->ndim; ++k) d.s *= input->sizes[k];
  return d;
}

DevxStatus check_channel_tensor(const DevxTensor* t, int64_t c, const char* what) {
  if (!t) return DEVX_OK;
  if (!is_floating(t->dtype)) return decline(std::string("batch_norm: ") + what + " of dtype " + dtype_name(t->dtype));
  if (numel_or_zero(t) != c) {
    return invalid(std::string("batch_norm: ") + what + " should contain " + std::to_string(c) + " elements not " +
                   std::to_string(numel_or_zero(t)));
  }
  return DEVX_OK;
}

// Per channel: the mean and the sum of squared deviations from it (two passes, in double).
template <typename T>
void channel_moments(const T* x, const Nc& d, std::vector<double>* mean, std::vector<double>* sq) {
  const double count = static_cast<double>(d.count());
  parallel_for(d.c, grain_for(d.count()), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double s1 = 0;
      for (int64_t n = 0; n < d.n; ++n) {
        const T* row = x + (n * d.c + c) * d.s;
        for (int64_t i = 0; i < d.s; ++i) s1 += static_cast<double>(row[i]);
      }
      const double m = s1 / count;
      double s2 = 0;
      for (int64_t n = 0; n < d.n; ++n) {
        const T* row = x + (n * d.c + c) * d.s;
        for (int64_t i = 0; i < d.s; ++i) {
          const double v = static_cast<double>(row[i]) - m;
          s2 += v * v;
        }
      }
      (*mean)[c] = m;
      (*sq)[c] = s2;
    }
  });
}

// y = x * scale[c] + shift[c]
template <typename T>
void affine_rows(const T* x, const Dense& y, const Nc& d, const std::vector<double>& scale,
                 const std::vector<double>& shift) {
  parallel_for(d.n * d.c, grain_for(d.s), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t c = r % d.c;
      const double sc = scale[c], sh = shift[c];
      put_range<T>(y.t, r * d.s, (r + 1) * d.s, [&](int64_t i) { return static_cast<double>(x[i]) * sc + sh; });
    }
  });
}

struct BatchNormForward {
  Dense x, y;
  Tensor weight, bias, running_mean, running_var, save_mean, save_invstd;
  bool training = false;
  double momentum = 0, eps = 0;
  Nc d;
};

template <typename T>
void batch_norm_forward_work(const BatchNormForward& a) {
  const Nc& d = a.d;
  a.x.load();
  std::vector<double> mean(d.c), invstd(d.c);
  if (a.training) {
    std::vector<double> sq(d.c);
    channel_moments<T>(a.x.ptr<const T>(), d, &mean, &sq);
    for (int64_t c = 0; c < d.c; ++c) invstd[c] = 1.0 / std::sqrt(sq[c] / static_cast<double>(d.count()) + a.eps);
    if (a.running_mean.data) {
      std::vector<double> rm = read_values(a.running_mean);
      for (int64_t c = 0; c < d.c; ++c) rm[c] = a.momentum * mean[c] + (1 - a.momentum) * rm[c];
      write_values(a.running_mean, rm);
    }
    if (a.running_var.data) {
      std::vector<double> rv = read_values(a.running_var);
      for (int64_t c = 0; c < d.c; ++c) {
        rv[c] = a.momentum * (sq[c] / static_cast<double>(d.count() - 1)) + (1 - a.momentum) * rv[c];
      }
      write_values(a.running_var, rv);
    }
    if (a.save_mean.numel() == d.c) write_values(a.save_mean, mean);
    if (a.save_invstd.numel() == d.c) write_values(a.save_invstd, invstd);
  } else {
    mean = read_values(a.running_mean);
    const std::vector<double> var = read_values(a.running_var);
    for (int64_t c = 0; c < d.c; ++c) invstd[c] = 1.0 / std::sqrt(var[c] + a.eps);
  }
  const std::vector<double> w = read_values(a.weight), b = read_values(a.bias);
  std::vector<double> scale(d.c), shift(d.c);
  for (int64_t c = 0; c < d.c; ++c) {
    scale[c] = invstd[c] * (w.empty() ? 1.0 : w[c]);
    shift[c] = (b.empty() ? 0.0 : b[c]) - mean[c] * scale[c];
  }
  affine_rows<T>(a.x.ptr<const T>(), a.y, d, scale, shift);
  a.y.store();
}

DevxStatus batch_norm_forward(DevxKernelContext* ctx, const DevxTensor* input, const DevxTensor* weight,
                              const DevxTensor* bias, const DevxTensor* running_mean, const DevxTensor* running_var,
                              bool training, double momentum, double eps, DevxTensor* out, DevxTensor* save_mean,
                              DevxTensor* save_invstd) {
  if (!input || !out) return invalid("batch_norm: NULL tensor");
  if (input->ndim < 2) return invalid("batch_norm: the input needs at least 2 dimensions (N, C, ...)");
  if (!is_floating(out->dtype)) return decline(std::string("batch_norm: output of dtype ") + dtype_name(out->dtype));
  const Nc d = nc_of(input);
  for (const auto& [t, what] : {std::pair{weight, "weight"}, {bias, "bias"}, {running_mean, "running_mean"},
                                {running_var, "running_var"}}) {
    if (DevxStatus s = check_channel_tensor(t, d.c, what)) return s;
  }
  if (!training && (!running_mean || !running_var)) {
    return invalid("batch_norm: running_mean and running_var must be defined in evaluation mode");
  }
  for (const DevxTensor* t : {save_mean, save_invstd}) {
    if (t && numel_or_zero(t) != 0 && numel_or_zero(t) != d.c) {
      return invalid("batch_norm: saved statistics of a wrong size");
    }
  }
  // ATen's CPU kernels return empty saved statistics in evaluation mode (the meta functions say C).
  if (!training) {
    const int64_t empty[1] = {0};
    for (DevxTensor* t : {save_mean, save_invstd}) {
      if (t && numel_or_zero(t) != 0) {
        if (DevxStatus s = ctx->resize_output(ctx, t, 1, empty)) return s;
      }
    }
  }
  if (training && d.count() == 0) {
    return invalid("batch_norm: input tensor must have at least one element per channel when training");
  }
  return dispatch_in<kFloats>(input->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    BatchNormForward a;
    if (DevxStatus s = norm_util::make_dense(ctx, take(input), &a.x)) return s;
    if (DevxStatus s = norm_util::make_dense(ctx, take(out), &a.y)) return s;
    a.weight = take(weight);
    a.bias = take(bias);
    a.running_mean = take(running_mean);
    a.running_var = take(running_var);
    a.save_mean = take(save_mean);
    a.save_invstd = take(save_invstd);
    a.training = training;
    a.momentum = momentum;
    a.eps = eps;
    a.d = d;
    if (d.c == 0) return DEVX_OK;
    return launch(ctx, [a] { batch_norm_forward_work<T>(a); });
  });
}

DevxStatus native_batch_norm_out(DevxKernelContext* ctx, const DevxTensor* input, const DevxTensor* weight,
                                 const DevxTensor* bias, const DevxTensor* running_mean, const DevxTensor* running_var,
                                 int training, double momentum, double eps, DevxTensor* out, DevxTensor* save_mean,
                                 DevxTensor* save_invstd) {
  return batch_norm_forward(ctx, input, weight, bias, running_mean, running_var, training != 0, momentum, eps, out,
                            save_mean, save_invstd);
}

DevxStatus native_batch_norm_legit_no_training_out(DevxKernelContext* ctx, const DevxTensor* input,
                                                   const DevxTensor* weight, const DevxTensor* bias,
                                                   const DevxTensor* running_mean, const DevxTensor* running_var,
                                                   double momentum, double eps, DevxTensor* out0, DevxTensor* out1,
                                                   DevxTensor* out2) {
  return batch_norm_forward(ctx, input, weight, bias, running_mean, running_var, false, momentum, eps, out0, out1,
                            out2);
}

DevxStatus batch_norm_with_update_out(DevxKernelContext* ctx, const DevxTensor* input, const DevxTensor* weight,
                                      const DevxTensor* bias, const DevxTensor* running_mean,
                                      const DevxTensor* running_var, double momentum, double eps, DevxTensor* out,
                                      DevxTensor* save_mean, DevxTensor* save_invstd, DevxTensor* /*reserve*/) {
  return batch_norm_forward(ctx, input, weight, bias, running_mean, running_var, true, momentum, eps, out, save_mean,
                            save_invstd);
}

struct BatchNormBackward {
  Dense gy, x, gx;
  Tensor weight, running_mean, running_var, save_mean, save_invstd, grad_weight, grad_bias;
  bool train = false, want_gx = false;
  double eps = 0;
  Nc d;
};

template <typename T>
void batch_norm_backward_work(const BatchNormBackward& a) {
  const Nc& d = a.d;
  a.gy.load();
  a.x.load();
  std::vector<double> mean, invstd;
  if (a.train) {
    mean = read_values(a.save_mean);
    invstd = read_values(a.save_invstd);
  } else {
    mean = read_values(a.running_mean);
    invstd = read_values(a.running_var);
    for (double& v : invstd) v = 1.0 / std::sqrt(v + a.eps);
  }
  const T* gy = a.gy.ptr<const T>();
  const T* x = a.x.ptr<const T>();
  // Per channel: the sum of the gradient and its dot product with the centred input.
  std::vector<double> sum_gy(d.c), dot(d.c);
  parallel_for(d.c, grain_for(d.count()), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double s = 0, p = 0;
      for (int64_t n = 0; n < d.n; ++n) {
        const int64_t base = (n * d.c + c) * d.s;
        for (int64_t i = 0; i < d.s; ++i) {
          const double g = static_cast<double>(gy[base + i]);
          s += g;
          p += g * (static_cast<double>(x[base + i]) - mean[c]);
        }
      }
      sum_gy[c] = s;
      dot[c] = p;
    }
  });
  if (a.want_gx) {
    const std::vector<double> w = read_values(a.weight);
    const double count = static_cast<double>(d.count());
    // gx = (gy - mean(gy) - (x - mean) * proj) * invstd * w, the centring terms only when training.
    std::vector<double> scale(d.c), proj(d.c), mean_gy(d.c);
    for (int64_t c = 0; c < d.c; ++c) {
      scale[c] = invstd[c] * (w.empty() ? 1.0 : w[c]);
      proj[c] = a.train ? dot[c] * invstd[c] * invstd[c] / count : 0.0;
      mean_gy[c] = a.train ? sum_gy[c] / count : 0.0;
    }
    parallel_for(d.n * d.c, grain_for(d.s), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t c = r % d.c, base = r * d.s;
        const double mu = mean[c], mg = mean_gy[c], pj = proj[c], sc = scale[c];
        put_range<T>(a.gx.t, base, base + d.s, [&](int64_t i) {
          return (static_cast<double>(gy[i]) - mg - (static_cast<double>(x[i]) - mu) * pj) * sc;
        });
      }
    });
    a.gx.store();
  }
  if (a.grad_weight.data) {
    std::vector<double> gw(d.c);
    for (int64_t c = 0; c < d.c; ++c) gw[c] = dot[c] * invstd[c];
    write_values(a.grad_weight, gw);
  }
  if (a.grad_bias.data) write_values(a.grad_bias, sum_gy);
}

DevxStatus native_batch_norm_backward_out(DevxKernelContext* ctx, const DevxTensor* grad_out, const DevxTensor* input,
                                          const DevxTensor* weight, const DevxTensor* running_mean,
                                          const DevxTensor* running_var, const DevxTensor* save_mean,
                                          const DevxTensor* save_invstd, int train, double eps,
                                          DevxBoolList output_mask, DevxTensor* out0, DevxTensor* out1,
                                          DevxTensor* out2) {
  if (!grad_out || !input) return invalid("batch_norm_backward: NULL tensor");
  if (input->ndim < 2) return invalid("batch_norm_backward: the input needs at least 2 dimensions (N, C, ...)");
  if (grad_out->dtype != input->dtype) return decline("batch_norm_backward: grad_out and input of different dtypes");
  const Nc d = nc_of(input);
  if (numel_or_zero(grad_out) != numel_or_zero(input)) {
    return invalid("batch_norm_backward: grad_out and input differ in size");
  }
  // Evaluation mode uses the running statistics only (the saved ones are empty then).
  for (const auto& [t, what] : {std::pair{weight, "weight"}, {train ? save_mean : running_mean, "mean"},
                                {train ? save_invstd : running_var, "invstd/var"}}) {
    if (DevxStatus s = check_channel_tensor(t, d.c, what)) return s;
  }
  if (train && (!save_mean || !save_invstd)) {
    return invalid("batch_norm_backward: save_mean and save_invstd are needed when training");
  }
  if (!train && (!running_mean || !running_var)) {
    return invalid("batch_norm_backward: running_mean and running_var are needed in evaluation mode");
  }
  DevxTensor* const outs[3] = {out0, out1, out2};
  bool want[3];
  if (DevxStatus s = norm_util::outputs_wanted("batch_norm_backward", output_mask, outs, want)) return s;
  if (want[0] && numel_or_zero(out0) != numel_or_zero(input)) {
    return invalid("batch_norm_backward: grad_input of a wrong size");
  }
  if (want[0] && !is_floating(out0->dtype)) return decline("batch_norm_backward: grad_input of a non-floating dtype");
  for (int k = 1; k < 3; ++k) {
    if (want[k] && numel_or_zero(outs[k]) != d.c) {
      return invalid("batch_norm_backward: a parameter gradient of a wrong size");
    }
  }
  return dispatch_in<kFloats>(input->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    BatchNormBackward a;
    if (DevxStatus s = norm_util::make_dense(ctx, take(grad_out), &a.gy)) return s;
    if (DevxStatus s = norm_util::make_dense(ctx, take(input), &a.x)) return s;
    if (want[0]) {
      if (DevxStatus s = norm_util::make_dense(ctx, take(out0), &a.gx)) return s;
    }
    a.weight = take(weight);
    a.running_mean = take(running_mean);
    a.running_var = take(running_var);
    a.save_mean = take(save_mean);
    a.save_invstd = take(save_invstd);
    if (want[1]) a.grad_weight = take(out1);
    if (want[2]) a.grad_bias = take(out2);
    a.train = train != 0;
    a.want_gx = want[0] && d.n * d.c * d.s > 0;
    a.eps = eps;
    a.d = d;
    if (d.c == 0) return DEVX_OK;
    return launch(ctx, [a] { batch_norm_backward_work<T>(a); });
  });
}

DEVX_SIM_REGISTER_KERNEL(native_batch_norm_out, native_batch_norm_out);
DEVX_SIM_REGISTER_KERNEL(_native_batch_norm_legit_out, native_batch_norm_out);
DEVX_SIM_REGISTER_KERNEL(_native_batch_norm_legit_no_training_out, native_batch_norm_legit_no_training_out);
DEVX_SIM_REGISTER_KERNEL(_batch_norm_with_update_out, batch_norm_with_update_out);
DEVX_SIM_REGISTER_KERNEL(native_batch_norm_backward_out, native_batch_norm_backward_out);

}  // namespace
}  // namespace devx::cpu_sim::kern
