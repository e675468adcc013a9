// Convolution backward: input and weight gradients through the im2col + GEMM engine
// (conv_util.h), the bias gradient as a reduction of grad_output.
#include "kernels/conv_util.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

// grad_bias[c] = the sum of grad_output[:, c, ...], accumulated in double.
DevxStatus bias_grad(DevxKernelContext* ctx, const Tensor& grad_output, const Tensor& grad_bias) {
  return launch(ctx, [go = grad_output, gb = grad_bias] {
    const int64_t channels = go.sizes[1];
    std::vector<double> sums(static_cast<size_t>(channels));
    Dims sizes = go.sizes, strides = go.strides;
    sizes.erase(sizes.begin() + 1);
    strides.erase(strides.begin() + 1);
    std::array<Dims, 1> loop_strides{strides};
    const Loop<1> loop(sizes, loop_strides);
    const int64_t n = loop.numel();
    const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, n));
    dispatch(go.dtype, [&](auto tag) {
      using T = decltype(tag);
      parallel_for(channels, grain, [&](int64_t begin, int64_t end) {
        for (int64_t c = begin; c < end; ++c) {
          const T* base = go.ptr<const T>() + c * go.strides[1];
          double acc = 0;
          loop.run(0, n, [&](const std::array<int64_t, 1>& off, int64_t len, const std::array<int64_t, 1>& st) {
            for (int64_t i = 0; i < len; ++i) acc += convert<double>(base[off[0] + i * st[0]]);
          });
          sums[static_cast<size_t>(c)] = acc;
        }
      });
    });
    scatter<double>(sums.data(), {1}, gb);
  });
}

DevxStatus convolution_backward_out(DevxKernelContext* ctx, const DevxTensor* grad_output, const DevxTensor* input,
                                    const DevxTensor* weight, DevxIntList stride, DevxIntList padding,
                                    DevxIntList dilation, int transposed, DevxIntList output_padding, int64_t groups,
                                    DevxBoolList output_mask, DevxTensor* out0, DevxTensor* out1, DevxTensor* out2) {
  if (!grad_output || !input || !weight) return invalid("convolution_backward: NULL tensor");
  const int nd = input->ndim;
  if (nd < 3 || nd > 5 || weight->ndim != nd || grad_output->ndim != nd) {
    return decline("convolution_backward: not a 1-, 2- or 3-d convolution");
  }
  auto wanted = [&](int i, DevxTensor* t) { return i < output_mask.len && output_mask.data[i] && t ? t : nullptr; };
  DevxTensor* grad_input = wanted(0, out0);
  DevxTensor* grad_weight = wanted(1, out1);
  DevxTensor* grad_bias = wanted(2, out2);
  for (const DevxTensor* t : {grad_output, input, weight, static_cast<const DevxTensor*>(grad_input),
                              static_cast<const DevxTensor*>(grad_weight), static_cast<const DevxTensor*>(grad_bias)}) {
    if (t && !conv_dtype(t->dtype)) return decline(std::string("convolution_backward: dtype ") + dtype_name(t->dtype));
  }
  ConvJob job;
  const Tensor x = to_5d(take(input)), gy = to_5d(take(grad_output));
  job.weight = to_5d(take(weight));
  if (DevxStatus s = conv_geometry("convolution_backward", nd - 2, job.g, x, job.weight, gy, stride, padding, dilation,
                                   transposed, output_padding, groups)) {
    return s;
  }
  const Tensor gx = grad_input ? to_5d(take(grad_input)) : Tensor{};
  const Tensor gw = grad_weight ? to_5d(take(grad_weight)) : Tensor{};
  const Tensor gb = take(grad_bias);
  if ((gx.data && gx.sizes != x.sizes) || (gw.data && gw.sizes != job.weight.sizes) ||
      (gb.data && (gb.ndim() != 1 || gb.sizes[0] != gy.sizes[1]))) {
    return invalid("convolution_backward: gradient shapes do not match");
  }
  // In the convolution's own terms (conv_util.h): for a transposed one, grad_output is its input
  // and the op's input its output gradient.
  if (transposed) {
    job.x = gy;
    job.dy = x;
    if (gx.numel() > 0) job.y = gx;
  } else {
    job.dy = gy;
    job.x = x;
    if (gx.numel() > 0) job.dx = gx;
  }
  if (gw.numel() > 0) job.dw = gw;
  if (job.y.data || job.dx.data || job.dw.data) {
    if (DevxStatus s = run_conv(ctx, job)) return s;
  }
  if (gb.numel() > 0) return bias_grad(ctx, gy, gb);
  return DEVX_OK;
}

DEVX_SIM_REGISTER_KERNEL(convolution_backward_overrideable_out, convolution_backward_out);

}  // namespace
}  // namespace devx::cpu_sim::kern
