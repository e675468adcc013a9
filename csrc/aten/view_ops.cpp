// Views: metadata over a devx storage; no device work at all.
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/view_native.h>

#include "aten/tensor_ops.h"
#include "runtime/device.h"

namespace devx::ops {

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> storage_offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

at::Tensor view(const at::Tensor& self, c10::IntArrayRef size) {
  return at::native::view(self, size);
}

at::Tensor reshape_alias(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::native::_reshape_alias(self, size, stride);
}

// `param.data = other` (what nn.Module.to()/.cuda() do to keep parameter identity and weight
// tying) needs devx and CPU tensors to be shallow-copy compatible; c10's default only knows the
// built-in dense backends.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](const at::Tensor& t) {
    return t.layout() == c10::kStrided && (t.device().type() == kDevx || t.device().type() == c10::kCPU);
  };
  return dense(self) && dense(from);
}

}  // namespace devx::ops
