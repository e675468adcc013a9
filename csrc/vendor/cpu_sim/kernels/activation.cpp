// Activations, forward and backward.
#include <cmath>
#include <string>

#include "kernels/pointwise.h"
#include "kernels/pointwise_math.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

// out = f(ins...) in out's dtype, for the dtypes of Set; make(M{}) gives f.
template <int Set, size_t N, typename Make>
DevxStatus activation(const char* op, DevxKernelContext* ctx, const std::array<const DevxTensor*, N>& ins,
                      DevxTensor* out, Make make) {
  if (!out) return invalid(std::string(op) + ": NULL output");
  return dispatch_in<Set>(out->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    if constexpr (N == 1) {
      return Pointwise<T, T>::launch_on(ctx, ins, out, make(opmath_t<T>{}));
    } else {
      return Pointwise<T, T, T>::launch_on(ctx, ins, out, make(opmath_t<T>{}));
    }
  });
}

DevxStatus relu_out(DevxKernelContext* ctx, const DevxTensor* self, DevxTensor* out) {
  // NaN stays NaN, as in ATen (clamp_min(0) propagates it).
  return activation<kNumbers, 1>("relu", ctx, {self}, out, [](auto m) {
    using M = decltype(m);
    return [](M x) { return math::clamp_min(x, M(0)); };
  });
}

DevxStatus threshold_backward_out(DevxKernelContext* ctx, const DevxTensor* grad_output, const DevxTensor* self,
                                  const DevxScalar* threshold, DevxTensor* grad_input) {
  if (!threshold) return invalid("threshold_backward: NULL threshold");
  return activation<kNumbers, 2>("threshold_backward", ctx, {grad_output, self}, grad_input, [&](auto m) {
    using M = decltype(m);
    const M th = scalar_as<M>(threshold);
    return [th](M g, M x) { return x <= th ? M(0) : g; };
  });
}

bool tanh_approximation(const char* approximate, DevxStatus* status) {
  const std::string a = approximate ? approximate : "none";
  if (a != "none" && a != "tanh") *status = invalid("approximate argument must be either none or tanh.");
  return a == "tanh";
}

constexpr double kSqrt1_2 = 0.70710678118654752440;   // 1 / sqrt(2)
constexpr double kSqrt2_Pi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1 / sqrt(2 pi)
constexpr double kKappa = 0.044715;

DevxStatus gelu_out(DevxKernelContext* ctx, const DevxTensor* self, const char* approximate, DevxTensor* out) {
  DevxStatus status = DEVX_OK;
  const bool tanh = tanh_approximation(approximate, &status);
  if (status) return status;
  return activation<kFloats, 1>("gelu", ctx, {self}, out, [&](auto m) {
    using M = decltype(m);
    return [tanh](M x) {
      if (tanh) return M(0.5) * x * (M(1) + std::tanh(M(kSqrt2_Pi) * (x + M(kKappa) * x * x * x)));
      return M(0.5) * x * (M(1) + std::erf(x * M(kSqrt1_2)));
    };
  });
}

DevxStatus gelu_backward_out(DevxKernelContext* ctx, const DevxTensor* grad_output, const DevxTensor* self,
                             const char* approximate, DevxTensor* grad_input) {
  DevxStatus status = DEVX_OK;
  const bool tanh = tanh_approximation(approximate, &status);
  if (status) return status;
  return activation<kFloats, 2>("gelu_backward", ctx, {grad_output, self}, grad_input, [&](auto m) {
    using M = decltype(m);
    return [tanh](M g, M x) {
      if (tanh) {
        const M inner = M(kSqrt2_Pi) * (x + M(kKappa) * x * x * x);
        const M t = std::tanh(inner);
        const M d_inner = M(kSqrt2_Pi) * (M(1) + M(3 * kKappa) * x * x);
        return g * (M(0.5) * (M(1) + t) + M(0.5) * x * (M(1) - t * t) * d_inner);
      }
      const M cdf = M(0.5) * (M(1) + std::erf(x * M(kSqrt1_2)));
      const M pdf = M(kInvSqrt2Pi) * std::exp(M(-0.5) * x * x);
      return g * (cdf + x * pdf);
    };
  });
}

DevxStatus silu_out(DevxKernelContext* ctx, const DevxTensor* self, DevxTensor* out) {
  return activation<kFloats, 1>("silu", ctx, {self}, out, [](auto m) {
    using M = decltype(m);
    return [](M x) { return x / (M(1) + std::exp(-x)); };
  });
}

DevxStatus silu_backward_out(DevxKernelContext* ctx, const DevxTensor* grad_output, const DevxTensor* self,
                             DevxTensor* grad_input) {
  return activation<kFloats, 2>("silu_backward", ctx, {grad_output, self}, grad_input, [](auto m) {
    using M = decltype(m);
    return [](M g, M x) {
      const M s = M(1) / (M(1) + std::exp(-x));
      return g * s * (M(1) + x * (M(1) - s));
    };
  });
}

DevxStatus sigmoid_out(DevxKernelContext* ctx, const DevxTensor* self, DevxTensor* out) {
  return activation<kFloats, 1>("sigmoid", ctx, {self}, out, [](auto m) {
    using M = decltype(m);
    return [](M x) { return M(1) / (M(1) + std::exp(-x)); };
  });
}

DevxStatus sigmoid_backward_out(DevxKernelContext* ctx, const DevxTensor* grad_output, const DevxTensor* output,
                                DevxTensor* grad_input) {
  if (!grad_input) return invalid("sigmoid_backward: NULL output");
  return dispatch_in<kFloats>(grad_input->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    // ATen computes float16 (not bfloat16) in float16 arithmetic, rounding every step.
    constexpr bool kRoundSteps = std::is_same_v<T, Half>;
    return Pointwise<T, T, T>::launch_on(ctx, {grad_output, output}, grad_input, [](M g, M y) {
      if constexpr (kRoundSteps) {
        const M one_minus = convert<M>(T(M(1) - y));
        return convert<M>(T(g * one_minus)) * y;
      } else {
        return g * (M(1) - y) * y;
      }
    });
  });
}

DevxStatus tanh_out(DevxKernelContext* ctx, const DevxTensor* self, DevxTensor* out) {
  return activation<kFloats, 1>("tanh", ctx, {self}, out, [](auto m) {
    using M = decltype(m);
    return [](M x) { return std::tanh(x); };
  });
}

DevxStatus tanh_backward_out(DevxKernelContext* ctx, const DevxTensor* grad_output, const DevxTensor* output,
                             DevxTensor* grad_input) {
  return activation<kFloats, 2>("tanh_backward", ctx, {grad_output, output}, grad_input, [](auto m) {
    using M = decltype(m);
    return [](M g, M y) { return g * (M(1) - y * y); };
  });
}

DevxStatus leaky_relu_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxScalar* negative_slope,
                          DevxTensor* out) {
  if (!negative_slope) return invalid("leaky_relu: NULL negative_slope");
  return activation<kFloats, 1>("leaky_relu", ctx, {self}, out, [&](auto m) {
    using M = decltype(m);
    const M slope = scalar_as<M>(negative_slope);
    return [slope](M x) { return x > M(0) ? x : x * slope; };
  });
}

DevxStatus leaky_relu_backward_out(DevxKernelContext* ctx, const DevxTensor* grad_output, const DevxTensor* self,
                                   const DevxScalar* negative_slope, int self_is_result, DevxTensor* grad_input) {
  if (!negative_slope) return invalid("leaky_relu_backward: NULL negative_slope");
  if (self_is_result && scalar_as<double>(negative_slope) < 0) {
    return invalid(
        "In-place leakyReLu backward calculation is triggered with a negative slope which is not supported. This is "
        "caused by calling in-place forward function with a negative slope, please call out-of-place version "
        "instead.");
  }
  return activation<kFloats, 2>("leaky_relu_backward", ctx, {grad_output, self}, grad_input, [&](auto m) {
    using M = decltype(m);
    const M slope = scalar_as<M>(negative_slope);
    return [slope](M g, M x) { return x > M(0) ? g : g * slope; };
  });
}

DevxStatus hardtanh_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxScalar* min_val,
                        const DevxScalar* max_val, DevxTensor* out) {
  if (!min_val || !max_val) return invalid("hardtanh: NULL bound");
  return activation<kNumbers, 1>("hardtanh", ctx, {self}, out, [&](auto m) {
    using M = decltype(m);
    const M lo = scalar_as<M>(min_val), hi = scalar_as<M>(max_val);
    return [lo, hi](M x) { return math::clamp(x, lo, hi); };
  });
}

DevxStatus hardtanh_backward_out(DevxKernelContext* ctx, const DevxTensor* grad_output, const DevxTensor* self,
                                 const DevxScalar* min_val, const DevxScalar* max_val, DevxTensor* grad_input) {
  if (!min_val || !max_val) return invalid("hardtanh_backward: NULL bound");
  return activation<kNumbers, 2>("hardtanh_backward", ctx, {grad_output, self}, grad_input, [&](auto m) {
    using M = decltype(m);
    const M lo = scalar_as<M>(min_val), hi = scalar_as<M>(max_val);
    // NaN inputs get 0, as in ATen's vectorised loop.
    return [lo, hi](M g, M x) { return x > lo && x < hi ? g : M(0); };
  });
}

DEVX_SIM_REGISTER_KERNEL(relu_out, relu_out);
DEVX_SIM_REGISTER_KERNEL(threshold_backward_grad_input, threshold_backward_out);
DEVX_SIM_REGISTER_KERNEL(gelu_out, gelu_out);
DEVX_SIM_REGISTER_KERNEL(gelu_backward_grad_input, gelu_backward_out);
DEVX_SIM_REGISTER_KERNEL(silu_out, silu_out);
DEVX_SIM_REGISTER_KERNEL(silu_backward_grad_input, silu_backward_out);
DEVX_SIM_REGISTER_KERNEL(sigmoid_out, sigmoid_out);
DEVX_SIM_REGISTER_KERNEL(sigmoid_backward_grad_input, sigmoid_backward_out);
DEVX_SIM_REGISTER_KERNEL(tanh_out, tanh_out);
DEVX_SIM_REGISTER_KERNEL(tanh_backward_grad_input, tanh_backward_out);
DEVX_SIM_REGISTER_KERNEL(leaky_relu_out, leaky_relu_out);
DEVX_SIM_REGISTER_KERNEL(leaky_relu_backward_grad_input, leaky_relu_backward_out);
DEVX_SIM_REGISTER_KERNEL(hardtanh_out, hardtanh_out);
DEVX_SIM_REGISTER_KERNEL(hardtanh_backward_grad_input, hardtanh_backward_out);

}  // namespace
}  // namespace devx::cpu_sim::kern
