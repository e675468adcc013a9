// softmax and log_softmax along one dimension, forward and backward, for any strides. The
// 16-bit floats compute in float, sums in double; half_to_float (a 16-bit input with a float32
// result) and its backward (float32 gradients for a 16-bit input) are served too.
#include <algorithm>
#include <cmath>

#include "kernels/reduce_util.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

using namespace reduce_util;

// Calls f(A{}, B{}) for the pairs of floating dtypes softmax meets: equal ones, or a 16-bit type
// with float32 on either side.
template <typename F>
DevxStatus dispatch_float_pair(DevxDType a, DevxDType b, F&& f) {
  if (a == b) {
    return dispatch_in<kFloats>(a, [&](auto tag) { return f(tag, tag); });
  }
  if (a == DEVX_FLOAT32 && b == DEVX_FLOAT16) return f(float{}, Half{});
  if (a == DEVX_FLOAT32 && b == DEVX_BFLOAT16) return f(float{}, BFloat16{});
  if (a == DEVX_FLOAT16 && b == DEVX_FLOAT32) return f(Half{}, float{});
  if (a == DEVX_BFLOAT16 && b == DEVX_FLOAT32) return f(BFloat16{}, float{});
  return decline(std::string("softmax: ") + dtype_name(a) + " with " + dtype_name(b));
}

template <typename TI, typename TO, bool Log>
void softmax_work(const Tensor& in, const Tensor& out, int dim) {
  using M = opmath_t<TI>;
  const int64_t n = in.size(dim), sx = in.stride(dim), sy = out.stride(dim);
  for_each_row<2>(in.sizes, dim, {in.strides, out.strides}, [&](const std::array<int64_t, 2>& off) {
    const TI* x = in.ptr<const TI>() + off[0];
    TO* y = out.ptr<TO>() + off[1];
    // On the stack for rows of up to 256 elements.
    SmallVec<M, 256> buf;
    buf.resize(static_cast<size_t>(n));
    M max = -INFINITY;
    for (int64_t k = 0; k < n; ++k) {
      buf[k] = static_cast<M>(x[k * sx]);
      max = std::max(max, buf[k]);
    }
    double sum = 0;
    for (int64_t k = 0; k < n; ++k) {
      const M e = std::exp(buf[k] - max);
      sum += e;
      if (!Log) buf[k] = e;
    }
    if constexpr (Log) {
      const M shift = max + static_cast<M>(std::log(sum));
      for (int64_t k = 0; k < n; ++k) y[k * sy] = convert<TO>(buf[k] - shift);
    } else {
      const M scale = static_cast<M>(1.0 / sum);
      for (int64_t k = 0; k < n; ++k) y[k * sy] = convert<TO>(buf[k] * scale);
    }
  });
}

template <bool Log>
DevxStatus softmax_out(DevxKernelContext* ctx, const DevxTensor* self, int64_t dim, int half_to_float,
                       DevxTensor* out) {
  const char* op = Log ? "log_softmax" : "softmax";
  if (!self || !out) return invalid(std::string(op) + ": NULL tensor");
  if (!wrap_dim(&dim, self->ndim)) return invalid(std::string(op) + ": dimension out of range");
  const Tensor in = at_least_1d(take(self)), o = at_least_1d(take(out));
  if (in.sizes != o.sizes) return invalid(std::string(op) + ": output shape differs from the input's");
  if (!half_to_float && in.dtype != o.dtype) return decline(std::string(op) + ": output dtype differs");
  if (in.numel() == 0) return DEVX_OK;
  return dispatch_float_pair(in.dtype, o.dtype, [&](auto ti, auto to) -> DevxStatus {
    using TI = decltype(ti);
    using TO = decltype(to);
    const int d = static_cast<int>(dim);
    return launch(ctx, [in, o, d] { softmax_work<TI, TO, Log>(in, o, d); });
  });
}

// softmax: gi = y * (g - sum(g * y)); log_softmax: gi = g - exp(y) * sum(g).
template <typename TG, typename TO, bool Log>
void softmax_backward_work(const Tensor& grad, const Tensor& y, const Tensor& gi, int dim) {
  using M = opmath_t<TG>;
  const int64_t n = grad.size(dim), sg = grad.stride(dim), sy = y.stride(dim), so = gi.stride(dim);
  for_each_row<3>(grad.sizes, dim, {grad.strides, y.strides, gi.strides}, [&](const std::array<int64_t, 3>& off) {
    const TG* g = grad.ptr<const TG>() + off[0];
    const TG* p = y.ptr<const TG>() + off[1];
    TO* r = gi.ptr<TO>() + off[2];
    double acc = 0;
    for (int64_t k = 0; k < n; ++k) {
      const M gk = static_cast<M>(g[k * sg]);
      acc += Log ? gk : gk * static_cast<M>(p[k * sy]);
    }
    const M s = static_cast<M>(acc);
    // Every input is read before its output is written: grad_input may be grad_output itself.
    for (int64_t k = 0; k < n; ++k) {
      const M gk = static_cast<M>(g[k * sg]), yk = static_cast<M>(p[k * sy]);
      r[k * so] = convert<TO>(Log ? gk - std::exp(yk) * s : yk * (gk - s));
    }
  });
}

template <bool Log>
DevxStatus softmax_backward_out(DevxKernelContext* ctx, const DevxTensor* grad_output, const DevxTensor* output,
                                int64_t dim, DevxDType input_dtype, DevxTensor* grad_input) {
  const char* op = Log ? "log_softmax_backward" : "softmax_backward";
  if (!grad_output || !output || !grad_input) return invalid(std::string(op) + ": NULL tensor");
  if (!wrap_dim(&dim, grad_output->ndim)) return invalid(std::string(op) + ": dimension out of range");
  const Tensor g = at_least_1d(take(grad_output)), y = at_least_1d(take(output)), gi = at_least_1d(take(grad_input));
  if (g.sizes != y.sizes || g.sizes != gi.sizes) return invalid(std::string(op) + ": shapes do not match");
  if (g.dtype != y.dtype) return decline(std::string(op) + ": grad_output and output of different dtypes");
  if (gi.dtype != input_dtype && gi.dtype != g.dtype) return decline(std::string(op) + ": grad_input dtype");
  if (g.numel() == 0) return DEVX_OK;
  return dispatch_float_pair(g.dtype, gi.dtype, [&](auto tg, auto to) -> DevxStatus {
    using TG = decltype(tg);
    using TO = decltype(to);
    const int d = static_cast<int>(dim);
    return launch(ctx, [g, y, gi, d] { softmax_backward_work<TG, TO, Log>(g, y, gi, d); });
  });
}

DEVX_SIM_REGISTER_KERNEL(_softmax_out, softmax_out<false>);
DEVX_SIM_REGISTER_KERNEL(_log_softmax_out, softmax_out<true>);
DEVX_SIM_REGISTER_KERNEL(_softmax_backward_data_out, softmax_backward_out<false>);
DEVX_SIM_REGISTER_KERNEL(_log_softmax_backward_data_out, softmax_backward_out<true>);

}  // namespace
}  // namespace devx::cpu_sim::kern
