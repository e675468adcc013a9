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

at::Tensor convolution_overrideable_meta(const at::Tensor& input, const at::Tensor& weight,
                                         const std::optional<at::Tensor>& bias, c10::SymIntArrayRef stride,
                                         c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed,
                                         c10::SymIntArrayRef output_padding, c10::SymInt groups) {
  return at::_ops::convolution::call(input, weight, bias, stride, padding, dilation, transposed, output_padding,
                                     std::move(groups));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable_meta(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::SymIntArrayRef stride,
    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, std::array<bool, 3> output_mask) {
  return at::_ops::convolution_backward::call(grad_output, input, weight, conv_bias_sizes(weight, transposed, groups),
                                              stride, padding, dilation, transposed, output_padding, groups,
                                              output_mask);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, Meta, m) {
  m.impl("convolution_overrideable", TORCH_FN(convolution_overrideable_meta));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward_overrideable_meta));
}

}  // namespace devx
