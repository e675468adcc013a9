// Losses, forward and backward: nll_loss (and nll_loss2d, the same over spatial dimensions),
// mse_loss, binary_cross_entropy. Reductions: 0 none, 1 mean, 2 sum; sums in double.
#include <algorithm>
#include <cmath>

#include "kernels/pointwise.h"
#include "kernels/reduce_util.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

using namespace reduce_util;

struct Sums {
  double loss = 0, weight = 0;
};

// nll's positions are the target's elements; `self` (and grad_input) add the class dimension,
// dimension 1 (or 0 for a single sample of shape [C] with a 0-dim target).
struct NllLayout {
  int class_dim = 0;
  std::vector<int64_t> mapped;  // the strides of `t` at the target's positions
};

std::string nll_layout(const Tensor& t, const Tensor& target, NllLayout* layout) {
  if (t.ndim() != target.ndim() + 1) return "expected input with one dimension more than target";
  layout->class_dim = t.ndim() == 1 ? 0 : 1;
  layout->mapped.clear();
  for (int j = 0; j < target.ndim(); ++j) {
    const int d = j == 0 ? 0 : j + 1;
    if (t.size(d) != target.size(j)) return "input and target sizes do not match";
    layout->mapped.push_back(t.stride(d));
  }
  return {};
}

std::string target_error(int64_t t) {
  return "Target " + std::to_string(t) + " is out of bounds.";
}

DevxStatus nll_forward(DevxKernelContext* ctx, const std::string& op, const DevxTensor* self,
                       const DevxTensor* target, const DevxTensor* weight, int64_t reduction, int64_t ignore_index,
                       DevxTensor* output, DevxTensor* total_weight) {
  if (!self || !target || !output || !total_weight) return invalid(op + ": NULL tensor");
  const Tensor x = take(self), tg = take(target), w = take(weight), o = take(output), tw = take(total_weight);
  NllLayout layout;
  if (std::string why = nll_layout(x, tg, &layout); !why.empty()) return invalid(op + ": " + why);
  if (reduction == kReductionNone && o.sizes != tg.sizes) return invalid(op + ": output shape differs from the target's");
  if (reduction != kReductionNone && o.ndim() != 0) return invalid(op + ": a reduced output should be 0-dim");
  if (reduction < kReductionNone || reduction > kReductionSum) return invalid(op + ": unknown reduction");
  if (!is_integral(tg.dtype)) return decline(op + ": target dtype " + dtype_name(tg.dtype));
  const Dims out_strides = reduction == kReductionNone ? o.strides : Dims(tg.ndim(), 0);
  const Loop<3> loop(tg.sizes, {tg.strides, layout.mapped, out_strides});
  return dispatch_in<kFloats>(x.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    const int cd = layout.class_dim;
    return launch(ctx, [x, tg, w, o, tw, loop, reduction, ignore_index, cd] {
      const int64_t classes = x.size(cd), sc = x.stride(cd);
      WorkError error;
      // The class of a position, or -1 where it is ignored (or out of range, which is reported).
      auto class_at = [&](int64_t off) -> int64_t {
        const int64_t t = read_as<int64_t>(tg, off);
        if (t == ignore_index) return -1;
        if (t < 0 || t >= classes) {
          error.set(target_error(t));
          return -1;
        }
        return t;
      };
      auto weight_of = [&](int64_t t) { return w.data ? read_as<M>(w, t * w.stride(0)) : M(1); };
      if (reduction == kReductionNone) {
        for_each_element(loop, [&](const std::array<int64_t, 3>& off) {
          const int64_t t = class_at(off[0]);
          const M v = t < 0 ? M(0) : -weight_of(t) * static_cast<M>(x.ptr<const T>()[off[1] + t * sc]);
          o.ptr<T>()[off[2]] = convert<T>(v);
        });
        error.throw_if_failed();
        write_as<double>(tw, 0, 0.0);
        return;
      }
      const Sums sums = reduce_loop(
          loop, Sums{},
          [&](Sums& acc, const std::array<int64_t, 3>& off) {
            const int64_t t = class_at(off[0]);
            if (t < 0) return;
            const M wt = weight_of(t);
            acc.loss -= static_cast<double>(wt * static_cast<M>(x.ptr<const T>()[off[1] + t * sc]));
            acc.weight += wt;
          },
          [](Sums& a, const Sums& b) {
            a.loss += b.loss;
            a.weight += b.weight;
          });
      error.throw_if_failed();
      o.ptr<T>()[0] = convert<T>(reduction == kReductionMean ? sums.loss / sums.weight : sums.loss);
      write_as<double>(tw, 0, sums.weight);
    });
  });
}

// grad_input is zero but at each position's target class: -weight * grad (grad divided by the
// total weight for a mean).
DevxStatus nll_backward(DevxKernelContext* ctx, const std::string& op, const DevxTensor* grad_output,
                        const DevxTensor* self, const DevxTensor* target, const DevxTensor* weight, int64_t reduction,
                        int64_t ignore_index, const DevxTensor* total_weight, DevxTensor* grad_input) {
  if (!grad_output || !self || !target || !total_weight || !grad_input) return invalid(op + ": NULL tensor");
  const Tensor g = take(grad_output), tg = take(target), w = take(weight), tw = take(total_weight),
               gi = take(grad_input);
  NllLayout layout;
  if (std::string why = nll_layout(gi, tg, &layout); !why.empty()) return invalid(op + ": " + why);
  if (reduction == kReductionNone && g.sizes != tg.sizes) return invalid(op + ": grad_output shape differs from the target's");
  if (reduction != kReductionNone && g.numel() != 1) return invalid(op + ": expected a single grad_output");
  if (!is_integral(tg.dtype)) return decline(op + ": target dtype " + dtype_name(tg.dtype));
  const Dims grad_strides = reduction == kReductionNone ? g.strides : Dims(tg.ndim(), 0);
  const Loop<3> loop(tg.sizes, {tg.strides, layout.mapped, grad_strides});
  const Loop<1> all(gi.sizes, {gi.strides});
  return dispatch_in<kFloats>(gi.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    const int cd = layout.class_dim;
    return launch(ctx, [g, tg, w, tw, gi, loop, all, reduction, ignore_index, cd] {
      const int64_t classes = gi.size(cd), sc = gi.stride(cd);
      for_each_element(all, [&](const std::array<int64_t, 1>& off) { gi.ptr<T>()[off[0]] = T(0); });
      const M total = read_as<M>(tw, 0);
      WorkError error;
      for_each_element(loop, [&](const std::array<int64_t, 3>& off) {
        const int64_t t = read_as<int64_t>(tg, off[0]);
        if (t == ignore_index) return;
        if (t < 0 || t >= classes) {
          error.set(target_error(t));
          return;
        }
        const M go = read_as<M>(g, off[2]);
        const M grad = -(reduction == kReductionMean ? go / total : go);
        const M wt = w.data ? read_as<M>(w, t * w.stride(0)) : M(1);
        gi.ptr<T>()[off[1] + t * sc] = convert<T>(wt * grad);
      });
      error.throw_if_failed();
    });
  });
}

DevxStatus nll_loss_forward_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* target,
                                const DevxTensor* weight, int64_t reduction, int64_t ignore_index, DevxTensor* output,
                                DevxTensor* total_weight) {
  return nll_forward(ctx, "nll_loss", self, target, weight, reduction, ignore_index, output, total_weight);
}
DevxStatus nll_loss2d_forward_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* target,
                                  const DevxTensor* weight, int64_t reduction, int64_t ignore_index,
                                  DevxTensor* output, DevxTensor* total_weight) {
  return nll_forward(ctx, "nll_loss2d", self, target, weight, reduction, ignore_index, output, total_weight);
}
DevxStatus nll_loss_backward_out(DevxKernelContext* ctx, const DevxTensor* grad_output, const DevxTensor* self,
                                 const DevxTensor* target, const DevxTensor* weight, int64_t reduction,
                                 int64_t ignore_index, const DevxTensor* total_weight, DevxTensor* grad_input) {
  return nll_backward(ctx, "nll_loss_backward", grad_output, self, target, weight, reduction, ignore_index,
                      total_weight, grad_input);
}
DevxStatus nll_loss2d_backward_out(DevxKernelContext* ctx, const DevxTensor* grad_output, const DevxTensor* self,
                                   const DevxTensor* target, const DevxTensor* weight, int64_t reduction,
                                   int64_t ignore_index, const DevxTensor* total_weight, DevxTensor* grad_input) {
  return nll_backward(ctx, "nll_loss2d_backward", grad_output, self, target, weight, reduction, ignore_index,
                      total_weight, grad_input);
}

std::vector<int64_t> broadcast_shape(const Tensor& a, const Tensor& b) {
  const int n = std::max(a.ndim(), b.ndim());
  std::vector<int64_t> shape(static_cast<size_t>(n), 1);
  for (int d = 0; d < n; ++d) {
    const int da = d - (n - a.ndim()), db = d - (n - b.ndim());
    const int64_t sa = da >= 0 ? a.size(da) : 1, sb = db >= 0 ? b.size(db) : 1;
    shape[d] = sa == 1 ? sb : sa;
  }
  return shape;
}

// A reduced loss: the pointwise losses, rounded to T as ATen's intermediate tensor rounds them,
// summed in double over `loop` (operand 0 unused: the output is 0-dim).
template <typename T, size_t N, typename F>
void reduce_loss(const Loop<N>& loop, int64_t reduction, const Tensor& o, F loss) {
  const double sum = reduce_loop(
      loop, 0.0,
      [&](double& acc, const std::array<int64_t, N>& off) {
        acc += static_cast<double>(static_cast<opmath_t<T>>(convert<T>(loss(off))));
      },
      [](double& a, const double& b) { a += b; });
  const double n = static_cast<double>(loop.numel());
  o.ptr<T>()[0] = convert<T>(reduction == kReductionMean ? sum / n : sum);
}

DevxStatus mse_loss_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* target, int64_t reduction,
                        DevxTensor* out) {
  if (!self || !target || !out) return invalid("mse_loss: NULL tensor");
  if (reduction == kReductionNone) {
    return dispatch_in<kFloats>(out->dtype, [&](auto tag) -> DevxStatus {
      using M = opmath_t<decltype(tag)>;
      return elementwise<decltype(tag), 2>(ctx, {self, target}, out, [](M x, M y) { return (x - y) * (x - y); });
    });
  }
  const Tensor x = take(self), y = take(target), o = take(out);
  const std::vector<int64_t> shape = broadcast_shape(x, y);
  const Loop<3> loop(shape,
                     {std::vector<int64_t>(shape.size()), broadcast_strides(x, shape), broadcast_strides(y, shape)});
  return dispatch_in<kFloats>(o.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    return launch(ctx, [x, y, o, loop, reduction] {
      reduce_loss<T>(loop, reduction, o, [&](const std::array<int64_t, 3>& off) {
        const M d = read_as<M>(x, off[1]) - read_as<M>(y, off[2]);
        return d * d;
      });
    });
  });
}

DevxStatus mse_loss_backward_out(DevxKernelContext* ctx, const DevxTensor* grad_output, const DevxTensor* self,
                                 const DevxTensor* target, int64_t reduction, DevxTensor* grad_input) {
  if (!grad_output || !self || !target || !grad_input) return invalid("mse_loss_backward: NULL tensor");
  int64_t n = 1;
  for (int d = 0; d < self->ndim; ++d) n *= self->sizes[d];
  return dispatch_in<kFloats>(grad_input->dtype, [&](auto tag) -> DevxStatus {
    using M = opmath_t<decltype(tag)>;
    const M norm = static_cast<M>(reduction == kReductionMean ? 2.0 / static_cast<double>(n) : 2.0);
    return elementwise<decltype(tag), 3>(ctx, {grad_output, self, target}, grad_input,
                                         [norm](M g, M x, M y) { return norm * (x - y) * g; });
  });
}

// ATen's per-element loss: logs clamped at -100, so that 0 and 1 give finite losses.
template <typename M>
inline M bce(M x, M t) {
  const M log_x = std::max(static_cast<M>(std::log(x)), M(-100));
  const M log_1mx = std::max(static_cast<M>(std::log1p(-x)), M(-100));
  return (t - M(1)) * log_1mx - t * log_x;
}

DevxStatus binary_cross_entropy_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* target,
                                    const DevxTensor* weight, int64_t reduction, DevxTensor* out) {
  if (!self || !target || !out) return invalid("binary_cross_entropy: NULL tensor");
  const Tensor x = take(self), y = take(target), w = take(weight), o = take(out);
  if (x.sizes != y.sizes) return invalid("binary_cross_entropy: input and target sizes differ");
  if (reduction == kReductionNone && o.sizes != x.sizes) return invalid("binary_cross_entropy: output shape differs");
  const Dims zeros(x.sizes.size(), 0);
  const Loop<4> loop(x.sizes, {reduction == kReductionNone ? o.strides : zeros, x.strides, y.strides,
                               w.data ? broadcast_strides(w, x.sizes) : zeros});
  return dispatch_in<kFloats>(o.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    return launch(ctx, [x, y, w, o, loop, reduction] {
      WorkError error;
      auto loss = [&](const std::array<int64_t, 4>& off) -> M {
        const M xv = read_as<M>(x, off[1]), tv = read_as<M>(y, off[2]);
        if (!(xv >= M(0) && xv <= M(1))) error.set("all elements of input should be between 0 and 1");
        if (!(tv >= M(0) && tv <= M(1))) error.set("all elements of target should be between 0 and 1");
        const M l = bce(xv, tv);
        return w.data ? static_cast<M>(convert<T>(l)) * read_as<M>(w, off[3]) : l;
      };
      if (reduction == kReductionNone) {
        for_each_element(loop, [&](const std::array<int64_t, 4>& off) { o.ptr<T>()[off[0]] = convert<T>(loss(off)); });
      } else {
        reduce_loss<T>(loop, reduction, o, loss);
      }
      error.throw_if_failed();
    });
  });
}

DevxStatus binary_cross_entropy_backward_out(DevxKernelContext* ctx, const DevxTensor* grad_output,
                                             const DevxTensor* self, const DevxTensor* target, const DevxTensor* weight,
                                             int64_t reduction, DevxTensor* grad_input) {
  if (!grad_output || !self || !target || !grad_input) return invalid("binary_cross_entropy_backward: NULL tensor");
  int64_t n = 1;
  for (int d = 0; d < self->ndim; ++d) n *= self->sizes[d];
  return dispatch_in<kFloats>(grad_input->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    const M scale = static_cast<M>(reduction == kReductionMean ? static_cast<double>(n) : 1.0);
    // The 1e-12 floor keeps x = 0 or 1 finite, as in ATen.
    auto grad = [](M g, M x, M t) { return g * (x - t) / std::max((M(1) - x) * x, M(1e-12)); };
    if (weight) {
      return elementwise<T, 4>(ctx, {grad_output, self, target, weight}, grad_input,
                               [grad, scale](M g, M x, M t, M w) { return grad(g, x, t) * w / scale; });
    }
    return elementwise<T, 3>(ctx, {grad_output, self, target}, grad_input,
                             [grad, scale](M g, M x, M t) { return grad(g, x, t) / scale; });
  });
}

DEVX_SIM_REGISTER_KERNEL(nll_loss_forward_output, nll_loss_forward_out);
DEVX_SIM_REGISTER_KERNEL(nll_loss_backward_grad_input, nll_loss_backward_out);
DEVX_SIM_REGISTER_KERNEL(nll_loss2d_forward_output, nll_loss2d_forward_out);
DEVX_SIM_REGISTER_KERNEL(nll_loss2d_backward_grad_input, nll_loss2d_backward_out);
DEVX_SIM_REGISTER_KERNEL(mse_loss_out, mse_loss_out);
DEVX_SIM_REGISTER_KERNEL(mse_loss_backward_grad_input, mse_loss_backward_out);
DEVX_SIM_REGISTER_KERNEL(binary_cross_entropy_out, binary_cross_entropy_out);
DEVX_SIM_REGISTER_KERNEL(binary_cross_entropy_backward_grad_input, binary_cross_entropy_backward_out);

}  // namespace
}  // namespace devx::cpu_sim::kern
