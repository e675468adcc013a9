#include "aten/vendor_kernels.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/ScalarType.h>
#include <c10/util/irange.h>

#include <optional>
#include <string>

#include "aten/op_registry.h"
#include "aten/op_wrapper.h"
#include "runtime/exception.h"
#include "runtime/stream.h"
#include "runtime/vendor.h"

namespace devx {
namespace {

std::optional<DevxDType> vendor_dtype(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float:
      return DEVX_FLOAT32;
    case c10::ScalarType::Double:
      return DEVX_FLOAT64;
    case c10::ScalarType::Half:
      return DEVX_FLOAT16;
    case c10::ScalarType::BFloat16:
      return DEVX_BFLOAT16;
    default:
      return std::nullopt;
  }
}

DevxTensorDesc describe(const at::Tensor& t, DevxDType dtype) {
  return DevxTensorDesc{t.data_ptr(), dtype, static_cast<int>(t.dim()), t.sizes().data(), t.strides().data()};
}

// Keeps `t`'s memory from being handed to a new owner before `stream` has run the work issued so
// far (the kernel may still read it after the adapter returns).
void keep_alive_until_run(const at::Tensor& t, const DevxStream& stream) {
  auto* held = new at::Tensor(t);
  DevxStatus status = g_vendor->launch_host_func(
      stream.handle(), [](void* p) { delete static_cast<at::Tensor*>(p); }, held);
  if (status != DEVX_OK) {
    stream.synchronize();
    delete held;
    DEVX_VENDOR_CHECK(status);
  }
}

struct SoftmaxAdapter {
  static inline DevxSoftmaxKernel vendor = nullptr;
  static inline void* otherwise = nullptr;
  static inline int op = -1;

  static at::Tensor run(const at::Tensor& self, int64_t dim, bool half_to_float) {
    const std::optional<DevxDType> dtype = vendor_dtype(self.scalar_type());
    if (!half_to_float && dtype && self.dim() > 0) {
      const int64_t d = c10::maybe_wrap_dim(dim, self.dim());
      at::Tensor in = self.contiguous();
      at::Tensor out = at::empty(in.sizes(), in.options());
      const DevxStream stream = getCurrentDevxStream(in.device().index());
      const DevxTensorDesc in_desc = describe(in, *dtype);
      const DevxTensorDesc out_desc = describe(out, *dtype);
      const DevxStatus status = vendor(&in_desc, static_cast<int>(d), &out_desc, stream.handle());
      if (status == DEVX_OK) {
        keep_alive_until_run(in, stream);
        return out;
      }
      if (status != DEVX_ERROR_INVALID) DEVX_VENDOR_CHECK(status);
    }
    if (otherwise) {
      return reinterpret_cast<at::Tensor (*)(const at::Tensor&, int64_t, bool)>(otherwise)(self, dim, half_to_float);
    }
    return call_boxed<at::Tensor(const at::Tensor&, int64_t, bool)>(
        fallback_kernel(), op, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), self, dim, half_to_float);
  }
};

}  // namespace

void* adapt_vendor_kernel(int op, void* fn, void* otherwise) {
  const std::string name = op_overload_name(op);
  if (name == "_softmax") {
    SoftmaxAdapter::vendor = reinterpret_cast<DevxSoftmaxKernel>(fn);
    SoftmaxAdapter::otherwise = otherwise;
    SoftmaxAdapter::op = op;
    return reinterpret_cast<void*>(&SoftmaxAdapter::run);
  }
  return nullptr;
}

}  // namespace devx
