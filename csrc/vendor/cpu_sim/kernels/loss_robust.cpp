// The losses quadratic near zero and linear beyond a threshold, forward and backward:
// smooth_l1_loss (0.5 d^2 / beta, then |d| - 0.5 beta) and huber_loss (0.5 d^2, then
// delta (|d| - 0.5 delta)). Reductions: 0 none, 1 mean, 2 sum; reduced losses are the pointwise
// losses rounded to the dtype (as ATen's intermediate tensor rounds them), summed in double.
#include <cmath>

#include "kernels/index_util.h"
#include "kernels/pointwise.h"
#include "kernels/reduce_util.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

using namespace reduce_util;

// out = the loss f(x - y) of every element, or its mean or sum.
template <typename Loss>
DevxStatus robust_loss(DevxKernelContext* ctx, const char* op, const DevxTensor* self, const DevxTensor* target,
                       int64_t reduction, DevxTensor* out, double threshold, Loss loss) {
  if (!self || !target || !out) return invalid(std::string(op) + ": NULL tensor");
  if (reduction < kReductionNone || reduction > kReductionSum) return invalid(std::string(op) + ": unknown reduction");
  return dispatch_in<kFloats>(out->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    const M t = static_cast<M>(threshold);
    if (reduction == kReductionNone) {
      return elementwise<T, 2>(ctx, {self, target}, out, [t, loss](M x, M y) { return loss(x - y, t); });
    }
    const Tensor x = take(self), y = take(target), o = take(out);
    std::vector<int64_t> shape = x.sizes;
    if (!broadcast_into(shape, y.sizes)) return invalid(std::string(op) + ": input and target do not broadcast");
    const Loop<2> loop(shape, {broadcast_strides(x, shape), broadcast_strides(y, shape)});
    return launch(ctx, [x, y, o, loop, reduction, t, loss] {
      const double sum = reduce_loop(
          loop, 0.0,
          [&](double& acc, const std::array<int64_t, 2>& off) {
            const M l = loss(read_as<M>(x, off[0]) - read_as<M>(y, off[1]), t);
            acc += static_cast<double>(static_cast<M>(convert<T>(l)));
          },
          [](double& a, const double& b) { a += b; });
      const double n = static_cast<double>(loop.numel());
      write_as<double>(o, 0, reduction == kReductionMean ? sum / n : sum);
    });
  });
}

// grad_input = grad * f'(x - y), over the element count for a mean.
template <typename Grad>
DevxStatus robust_loss_backward(DevxKernelContext* ctx, const char* op, const DevxTensor* grad_output,
                                const DevxTensor* self, const DevxTensor* target, int64_t reduction, double threshold,
                                DevxTensor* grad_input, Grad grad) {
  if (!grad_output || !self || !target || !grad_input) return invalid(std::string(op) + ": NULL tensor");
  int64_t n = 1;
  for (int d = 0; d < grad_input->ndim; ++d) n *= grad_input->sizes[d];
  return dispatch_in<kFloats>(grad_input->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    const M norm = static_cast<M>(reduction == kReductionMean ? 1.0 / static_cast<double>(n) : 1.0), t = static_cast<M>(threshold);
    return elementwise<T, 3>(ctx, {grad_output, self, target}, grad_input,
                             [norm, t, grad](M g, M x, M y) { return grad(x - y, t, norm * g); });
  });
}

struct SmoothL1 {
  template <typename M>
  M operator()(M d, M beta) const {
    const M z = std::abs(d);
    return z < beta ? M(0.5) * z * z / beta : z - M(0.5) * beta;
  }
};

struct SmoothL1Grad {
  template <typename M>
  M operator()(M d, M beta, M g) const {
    return d <= -beta ? -g : d >= beta ? g : d * g / beta;
  }
};

struct Huber {
  template <typename M>
  M operator()(M d, M delta) const {
    const M z = std::abs(d);
    return z < delta ? M(0.5) * z * z : delta * (z - M(0.5) * delta);
  }
};

struct HuberGrad {
  template <typename M>
  M operator()(M d, M delta, M g) const {
    return d <= -delta ? -g * delta : d >= delta ? g * delta : d * g;
  }
};

DevxStatus smooth_l1_loss_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* target,
                              int64_t reduction, double beta, DevxTensor* out) {
  if (beta < 0) return invalid("smooth_l1_loss does not support negative values for beta.");
  return robust_loss(ctx, "smooth_l1_loss", self, target, reduction, out, beta, SmoothL1{});
}

DevxStatus smooth_l1_loss_backward_out(DevxKernelContext* ctx, const DevxTensor* grad_output, const DevxTensor* self,
                                       const DevxTensor* target, int64_t reduction, double beta,
                                       DevxTensor* grad_input) {
  return robust_loss_backward(ctx, "smooth_l1_loss_backward", grad_output, self, target, reduction, beta, grad_input,
                              SmoothL1Grad{});
}

DevxStatus huber_loss_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* target, int64_t reduction,
                          double delta, DevxTensor* out) {
  if (delta <= 0) return invalid("huber_loss does not support non-positive values for delta.");
  return robust_loss(ctx, "huber_loss", self, target, reduction, out, delta, Huber{});
}

DevxStatus huber_loss_backward_out(DevxKernelContext* ctx, const DevxTensor* grad_output, const DevxTensor* self,
                                   const DevxTensor* target, int64_t reduction, double delta, DevxTensor* grad_input) {
  return robust_loss_backward(ctx, "huber_loss_backward", grad_output, self, target, reduction, delta, grad_input,
                              HuberGrad{});
}

DEVX_SIM_REGISTER_KERNEL(smooth_l1_loss_out, smooth_l1_loss_out);
DEVX_SIM_REGISTER_KERNEL(smooth_l1_loss_backward_grad_input, smooth_l1_loss_backward_out);
DEVX_SIM_REGISTER_KERNEL(huber_loss_out, huber_loss_out);
DEVX_SIM_REGISTER_KERNEL(huber_loss_backward_out, huber_loss_backward_out);

}  // namespace
}  // namespace devx::cpu_sim::kern
