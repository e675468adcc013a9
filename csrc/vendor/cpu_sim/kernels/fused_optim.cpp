// The fused optimizer steps (what torch.optim.SGD/Adam/AdamW(..., fused=True) call): every
// parameter's update in one pass over its elements, with ATen's fused CPU formulas, computed in
// opmath_t of the parameter's dtype. grad_scale (an AMP scaler's scale) divides the gradients,
// which keep the unscaled values; found_inf == 1 skips the whole step. One launch per call.
#include <cmath>
#include <string>
#include <vector>

#include "kernels/elementwise.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

// The tensors of one parameter; absent ones have no data.
struct Param {
  Tensor self, out, grad, a, b, c;  // a, b, c: momentum buffer, or exp_avg, exp_avg_sq, max_exp_avg_sq
  Tensor step;
};

// Checks that the lists that must have one tensor per parameter do, with its shape and dtype.
DevxStatus gather(const char* op, DevxTensorList self, DevxTensorList out, DevxTensorList grads,
                  std::initializer_list<DevxTensorList> states, std::initializer_list<bool> required,
                  DevxTensorList steps, std::vector<Param>* params) {
  const int64_t n = self.len;
  if (out.len != n || grads.len != n || (steps.items && steps.len != n && steps.len != 0)) {
    return invalid(std::string(op) + ": lists of different lengths");
  }
  params->resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    Param& p = (*params)[static_cast<size_t>(i)];
    if (!self.items[i] || !out.items[i] || !grads.items[i]) return invalid(std::string(op) + ": a None tensor");
    p.self = take(self.items[i]);
    p.out = take(out.items[i]);
    p.grad = take(grads.items[i]);
    Tensor* slots[] = {&p.a, &p.b, &p.c};
    auto req = required.begin();
    int k = 0;
    for (const DevxTensorList& list : states) {
      const bool needed = *req++;
      if (list.len == 0 && !needed) {
        ++k;
        continue;
      }
      if (list.len != n || !list.items[i]) return invalid(std::string(op) + ": a state list of another length");
      *slots[k++] = take(list.items[i]);
    }
    if (steps.len) {
      if (!steps.items[i]) return invalid(std::string(op) + ": a None step");
      p.step = take(steps.items[i]);
    }
    for (const Tensor* t : {&p.out, &p.grad, &p.a, &p.b, &p.c}) {
      if (!t->data && t != &p.out && t != &p.grad) continue;
      if (t->sizes != p.self.sizes) return invalid(std::string(op) + ": tensors of a parameter differ in shape");
      if (t->dtype != p.self.dtype) return decline(std::string(op) + ": tensors of a parameter differ in dtype");
    }
    if (!is_floating(p.self.dtype)) return decline(std::string(op) + ": non-floating parameters");
  }
  return DEVX_OK;
}

// Whether found_inf says to skip the step, and 1 / grad_scale (1 without one).
struct Scaling {
  Tensor grad_scale, found_inf;
  bool skip() const { return found_inf.data && load_as<double>(found_inf.data, found_inf.dtype) == 1.0; }
  double inverse() const { return grad_scale.data ? 1.0 / load_as<double>(grad_scale.data, grad_scale.dtype) : 1.0; }
};

// f(M& param, M& grad, M* a, M* b, M* c) per element of parameter p (the states it has), written back.
template <typename T, typename F>
void update(const Param& p, bool scaled, F f) {
  using M = opmath_t<T>;
  const Dims none(p.self.sizes.size(), 0);
  const Loop<6> loop(p.self.sizes, {p.self.strides, p.out.strides, p.grad.strides, p.a.data ? p.a.strides : none,
                                    p.b.data ? p.b.strides : none, p.c.data ? p.c.strides : none});
  const T* x = p.self.ptr<const T>();
  T *y = p.out.ptr<T>(), *g = p.grad.ptr<T>(), *a = p.a.ptr<T>(), *b = p.b.ptr<T>(), *c = p.c.ptr<T>();
  parallel_for(loop.numel(), kGrain, [&](int64_t begin, int64_t end) {
    loop.run(begin, end, [&](const std::array<int64_t, 6>& off, int64_t n, const std::array<int64_t, 6>& st) {
      for (int64_t i = 0; i < n; ++i) {
        std::array<int64_t, 6> o;
        for (size_t k = 0; k < 6; ++k) o[k] = off[k] + i * st[k];
        M param = static_cast<M>(x[o[0]]), grad = static_cast<M>(g[o[2]]);
        M va = a ? static_cast<M>(a[o[3]]) : M(0), vb = b ? static_cast<M>(b[o[4]]) : M(0),
          vc = c ? static_cast<M>(c[o[5]]) : M(0);
        f(param, grad, va, vb, vc);
        y[o[1]] = convert<T>(param);
        if (scaled) g[o[2]] = convert<T>(grad);
        if (a) a[o[3]] = convert<T>(va);
        if (b) b[o[4]] = convert<T>(vb);
        if (c) c[o[5]] = convert<T>(vc);
      }
    });
  });
}

DevxStatus fused_sgd_out(DevxKernelContext* ctx, DevxTensorList self, DevxTensorList grads,
                         DevxTensorList momentum_buffer_list, double weight_decay, double momentum, double lr,
                         double dampening, int nesterov, int maximize, int is_first_step, const DevxTensor* grad_scale,
                         const DevxTensor* found_inf, DevxTensorList out) {
  std::vector<Param> params;
  if (DevxStatus s = gather("_fused_sgd_", self, out, grads, {momentum_buffer_list}, {momentum != 0.0},
                            DevxTensorList{nullptr, 0}, &params)) {
    return s;
  }
  const Scaling scaling{take(grad_scale), take(found_inf)};
  const bool scaled = grad_scale != nullptr;
  return launch(ctx, [params, scaling, scaled, weight_decay, momentum, lr, dampening, nesterov, maximize,
                      is_first_step] {
    if (scaling.skip()) return;
    const double inv = scaling.inverse();
    for (const Param& p : params) {
      dispatch(p.self.dtype, [&](auto tag) {
        using T = decltype(tag);
        if constexpr (is_float_v<T>) {
          using M = opmath_t<T>;
          const M wd = static_cast<M>(weight_decay), mom = static_cast<M>(momentum), rate = static_cast<M>(lr),
                  damp = static_cast<M>(dampening), unscale = static_cast<M>(inv);
          update<T>(p, scaled, [&](M& param, M& grad, M& buf, M&, M&) {
            if (scaled) grad *= unscale;
            M d = maximize ? -grad : grad;
            if (wd != M(0)) d += param * wd;
            if (mom != M(0)) {
              buf = is_first_step ? d : buf * mom + d * (M(1) - damp);
              d = nesterov ? d + buf * mom : buf;
            }
            param -= d * rate;
          });
        }
      });
    }
  });
}

template <bool AdamW>
DevxStatus fused_adam(DevxKernelContext* ctx, DevxTensorList self, DevxTensorList grads, DevxTensorList exp_avgs,
                      DevxTensorList exp_avg_sqs, DevxTensorList max_exp_avg_sqs, DevxTensorList state_steps,
                      double lr, double beta1, double beta2, double weight_decay, double eps, int amsgrad,
                      int maximize, const DevxTensor* grad_scale, const DevxTensor* found_inf, DevxTensorList out) {
  const char* op = AdamW ? "_fused_adamw_" : "_fused_adam_";
  std::vector<Param> params;
  if (DevxStatus s = gather(op, self, out, grads, {exp_avgs, exp_avg_sqs, max_exp_avg_sqs}, {true, true, amsgrad != 0},
                            state_steps, &params)) {
    return s;
  }
  if (state_steps.len != self.len) return invalid(std::string(op) + ": state_steps of another length");
  const Scaling scaling{take(grad_scale), take(found_inf)};
  const bool scaled = grad_scale != nullptr;
  return launch(ctx, [params, scaling, scaled, lr, beta1, beta2, weight_decay, eps, amsgrad, maximize] {
    if (scaling.skip()) return;
    const double inv = scaling.inverse();
    for (const Param& p : params) {
      dispatch(p.self.dtype, [&](auto tag) {
        using T = decltype(tag);
        if constexpr (is_float_v<T>) {
          using M = opmath_t<T>;
          const double step = load_as<double>(p.step.data, p.step.dtype);
          const double bc1 = 1 - std::pow(beta1, step), bc2 = 1 - std::pow(beta2, step);
          const M step_size = static_cast<M>(lr / bc1), bc2_sqrt = static_cast<M>(std::sqrt(bc2));
          const M b1 = static_cast<M>(beta1), b2 = static_cast<M>(beta2), wd = static_cast<M>(weight_decay),
                  rate = static_cast<M>(lr), e = static_cast<M>(eps), unscale = static_cast<M>(inv);
          const M c1 = M(1) - b1, c2 = M(1) - b2;
          update<T>(p, scaled, [&](M& param, M& grad, M& exp_avg, M& exp_avg_sq, M& max_sq) {
            if (scaled) grad *= unscale;
            M d = maximize ? -grad : grad;
            if (wd != M(0)) {
              if constexpr (AdamW) {
                param -= rate * wd * param;
              } else {
                d += param * wd;
              }
            }
            exp_avg = d * c1 + exp_avg * b1;
            exp_avg_sq = d * d * c2 + exp_avg_sq * b2;
            M second = exp_avg_sq;
            if (amsgrad) {
              max_sq = std::max(max_sq, exp_avg_sq);
              second = max_sq;
            }
            const M denom = std::sqrt(second) / bc2_sqrt + e;
            param -= step_size * exp_avg / denom;
          });
        }
      });
    }
  });
}

DEVX_SIM_REGISTER_KERNEL(_fused_sgd_out, fused_sgd_out);
DEVX_SIM_REGISTER_KERNEL(_fused_adam_out, fused_adam<false>);
DEVX_SIM_REGISTER_KERNEL(_fused_adamw_out, fused_adam<true>);

}  // namespace
}  // namespace devx::cpu_sim::kern
