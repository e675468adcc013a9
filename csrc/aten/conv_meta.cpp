// Meta kernels for the convolutions a PrivateUse1 backend receives. PyTorch gives the
// *_overrideable ops none, so their results' shapes could not be known before the kernel ran;
// issuing them to a stream (async_ops.h) needs exactly that. They are the shapes of the
// convolutions the devx kernels compute with (ops.yaml).
#include "aten/op_wrapper.h"

#include <ATen/ops/convolution_backward_ops.h>
#include <ATen/ops/convolution_ops.h>
#include <torch/library.h>

namespace devx {

namespace {

// The layout the compute devices' convolution kernels give their results (the CPU's mkldnn and
// slow kernels, cuDNN): channels-last when the input or the weight is. The meta convolution
// ignores it, and an issued op's result must be laid out as the kernel's.
c10::MemoryFormat conv_result_format(const at::Tensor& input, const at::Tensor& weight) {
  const c10::MemoryFormat in = input.suggest_memory_format(), w = weight.suggest_memory_format();
  if (in == c10::MemoryFormat::ChannelsLast || w == c10::MemoryFormat::ChannelsLast) {
    return c10::MemoryFormat::ChannelsLast;
  }
  if (in == c10::MemoryFormat::ChannelsLast3d || w == c10::MemoryFormat::ChannelsLast3d) {
    return c10::MemoryFormat::ChannelsLast3d;
  }
  return c10::MemoryFormat::Contiguous;
}

at::Tensor laid_out(const at::Tensor& meta, c10::MemoryFormat format) {
  const int64_t dims = format == c10::MemoryFormat::ChannelsLast ? 4 : 5;
  if (!meta.defined() || format == c10::MemoryFormat::Contiguous || meta.dim() != dims) return meta;
  return meta.contiguous(format);
}

at::Tensor convolution_overrideable_meta(const at::Tensor& input, const at::Tensor& weight,
                                         const std::optional<at::Tensor>& bias, c10::SymIntArrayRef stride,
                                         c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed,
                                         c10::SymIntArrayRef output_padding, c10::SymInt groups) {
  return laid_out(at::_ops::convolution::call(input, weight, bias, stride, padding, dilation, transposed,
                                              output_padding, std::move(groups)),
                  conv_result_format(input, weight));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable_meta(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::SymIntArrayRef stride,
    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, std::array<bool, 3> output_mask) {
  auto [grad_input, grad_weight, grad_bias] = at::_ops::convolution_backward::call(
      grad_output, input, weight, conv_bias_sizes(weight, transposed, groups), stride, padding, dilation, transposed,
      output_padding, groups, output_mask);
  const c10::MemoryFormat format = conv_result_format(input, weight);
  return {laid_out(grad_input, format), laid_out(grad_weight, format), grad_bias};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, Meta, m) {
  m.impl("convolution_overrideable", TORCH_FN(convolution_overrideable_meta));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward_overrideable_meta));
}

}  // namespace devx
