// Copies in every direction. Device-side work (dtype conversion, strides, broadcasting,
// conjugate/negative views) is done by the compute device's copy kernel on aliases; host<->device
// and device<->device byte moves go through the vendor's memcpy on the current stream.
#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/_copy_from_and_resize_ops.h>
#include <ATen/ops/_copy_from_ops.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/copy_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/resize_ops.h>

#include <string>

#include "aten/async_ops.h"
#include "aten/compute_scope.h"
#include "aten/diagnostics.h"
#include "aten/tensor_ops.h"
#include "aten/vendor_call.h"
#include "devx_kernels.h"
#include "profiler/device_activity.h"
#include "runtime/device.h"
#include "runtime/memcpy.h"
#include "runtime/vendor.h"

namespace devx::ops {

namespace {

void copy_inline(const at::Tensor& dst, const at::Tensor& src) {
  ComputeScope scope;
  at::Tensor a_dst = scope.in(dst);
  at::_ops::copy_::redispatch(scope.keyset(), a_dst, scope.in(src), false);
}

bool plain_contiguous(const at::Tensor& t) {
  return t.is_contiguous() && !t.is_conj() && !t.is_neg();
}

size_t nbytes(const at::Tensor& t) {
  return static_cast<size_t>(t.numel()) * t.element_size();
}

// The vendor's own copy kernel (copy.out), where it has one and takes the case.
bool vendor_copy(const at::Tensor& dst, const at::Tensor& src) {
  static const int kernel = kernel_index("copy.out");
  if (kernel < 0 || !g_vendor_kernels[kernel]) return false;
  // Conjugate and negative views are resolved by ATen's copy.
  if (dst.is_conj() || src.is_conj() || dst.is_neg() || src.is_neg()) return false;
  at::assert_no_internal_overlap(dst);
  at::assert_no_partial_overlap(dst, src);
  VendorCall call(-1, kernel);
  auto* fn = reinterpret_cast<DevxKernel_copy_out>(g_vendor_kernels[kernel]);
  const DevxTensor* self = call.arg(dst);
  const DevxTensor* source = call.arg(src);
  DevxTensor* out = call.out(dst);
  return call.finish(call.ready() ? fn(call.context(), self, source, 0, out) : DEVX_DECLINED);
}

void issue_copy_on_device(const at::Tensor& dst, const at::Tensor& src) {
  if (vendor_copy(dst, src)) return;
  if (C10_UNLIKELY(g_async_host_streams) && async::issuing()) {
    // The copy kernel's own checks would only surface at the next wait.
    at::assert_no_internal_overlap(dst);
    at::assert_no_partial_overlap(dst, src);
    async::launch({dst, src}, [](const std::vector<at::Tensor>& t) { copy_inline(t[0], t[1]); });
    return;
  }
  copy_inline(dst, src);
}

// The copy's device activity, as a CUDA trace shows it: moving bytes as they are is a memcpy;
// converting dtype or gathering strides is a kernel.
void profiled_copy_on_device(const at::Tensor& dst, const at::Tensor& src) {
  const bool byte_move = dst.scalar_type() == src.scalar_type() && dst.sizes() == src.sizes() &&
                         plain_contiguous(dst) && plain_contiguous(src);
  std::string name = byte_move ? memcpy_activity_name(DEVX_MEMCPY_D2D) : std::string(vendor().name) + "::copy_";
  profiler::DeviceSpan span(byte_move ? profiler::ActivityKind::kMemcpy : profiler::ActivityKind::kKernel,
                            std::move(name), getCurrentDevxStream(), byte_move ? nbytes(dst) : 0);
  issue_copy_on_device(dst, src);
  span.finish();
}

// dst <- src, both on the current devx device, in the current stream's order.
void copy_on_device(const at::Tensor& dst, const at::Tensor& src) {
  // A stream's worker copying an issued op's results is inside that op's span already, and an
  // event it recorded on its own stream would wait behind the work it is running.
  if (C10_UNLIKELY(profiler::recording()) && async::issuing()) {
    profiled_copy_on_device(dst, src);
    return;
  }
  issue_copy_on_device(dst, src);
}

// `src` converted to dst's dtype and shape, contiguous, on src's (devx) device.
at::Tensor staged_on_device(const at::Tensor& src, const at::Tensor& dst) {
  DevxGuard guard(src.device());
  at::Tensor staged = at::empty(dst.sizes(), dst.options().device(src.device()));
  copy_on_device(staged, src);
  return staged;
}

void host_to_devx(const at::Tensor& src, const at::Tensor& dst) {
  DevxGuard guard(dst.device());
  at::Tensor host = src.to(dst.scalar_type()).expand(dst.sizes()).contiguous().resolve_conj().resolve_neg();
  at::Tensor target = plain_contiguous(dst) ? dst : at::empty(dst.sizes(), dst.options());
  // Waits: the source is pageable host memory the caller may reuse as soon as copy_ returns.
  memcpy_and_wait(target.data_ptr(), host.data_ptr(), nbytes(target), DEVX_MEMCPY_H2D,
                  getCurrentDevxStream(dst.device().index()));
  if (!target.is_same(dst)) copy_on_device(dst, target);
}

void devx_to_host(const at::Tensor& src, const at::Tensor& dst) {
  DevxGuard guard(src.device());
  at::Tensor staged = plain_contiguous(src) && src.sizes() == dst.sizes() ? src : [&] {
    at::Tensor t = at::empty(src.sizes(), src.options());
    copy_on_device(t, src);
    return t;
  }();
  bool direct = plain_contiguous(dst) && dst.scalar_type() == staged.scalar_type() && dst.sizes() == staged.sizes();
  at::Tensor host = direct ? dst : at::empty(staged.sizes(), staged.options().device(c10::kCPU));
  memcpy_and_wait(host.data_ptr(), staged.data_ptr(), nbytes(staged), DEVX_MEMCPY_D2H,
                  getCurrentDevxStream(src.device().index()));
  if (!direct) dst.copy_(host);
}

void devx_to_devx(const at::Tensor& src, const at::Tensor& dst) {
  if (src.device() == dst.device()) {
    DevxGuard guard(dst.device());
    copy_on_device(dst, src);
    return;
  }
  // Across devices: stage contiguous in the destination's dtype, move the bytes, then lay them
  // out on the destination device.
  at::Tensor staged = staged_on_device(src, dst);
  getCurrentDevxStream(src.device().index()).synchronize();
  DevxGuard guard(dst.device());
  at::Tensor target = plain_contiguous(dst) ? dst : at::empty(dst.sizes(), dst.options());
  // Waits: the bytes must have landed before the destination's stream reads them.
  memcpy_and_wait(target.data_ptr(), staged.data_ptr(), nbytes(target), DEVX_MEMCPY_D2D,
                  getCurrentDevxStream(dst.device().index()));
  if (!target.is_same(dst)) copy_on_device(dst, target);
}

}  // namespace

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  if (dst.numel() == 0) return dst;
  bool src_devx = self.device().type() == kDevx;
  bool dst_devx = dst.device().type() == kDevx;
  if (src_devx && dst_devx) {
    devx_to_devx(self, dst);
  } else if (dst_devx) {
    TORCH_CHECK(self.device().type() == c10::kCPU, "devx: cannot copy from ", self.device(), " to ", dst.device());
    host_to_devx(self, dst);
  } else {
    TORCH_CHECK(dst.device().type() == c10::kCPU, "devx: cannot copy from ", self.device(), " to ", dst.device());
    devx_to_host(self, dst);
  }
  return dst;
}

at::Tensor& copy_diagnosed(c10::DispatchKeySet ks, at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  if (C10_LIKELY(!diag::gate_open()) || !diag::intercepts_copy()) return at::native::copy_(self, src, non_blocking);
  static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::copy_", "");
  torch::jit::Stack stack{self, src, non_blocking};
  diag::run(
      op, ks, &stack,
      [](torch::jit::Stack* s) {
        at::Tensor dst = (*s)[s->size() - 3].toTensor();
        at::native::copy_(dst, (*s)[s->size() - 2].toTensor(), (*s)[s->size() - 1].toBool());
        torch::jit::drop(*s, 3);
        s->emplace_back(std::move(dst));
      },
      diag::DeviceActivity::kOwn);
  return self;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) at::_ops::resize_::call(dst, self.sym_sizes(), std::nullopt);
  return copy_from(self, dst, false);
}

c10::Scalar local_scalar_dense(const at::Tensor& self) {
  DevxGuard guard(self.device());
  at::Tensor host = at::empty({}, self.options().device(c10::kCPU));
  memcpy_and_wait(host.data_ptr(), self.const_data_ptr(), self.element_size(), DEVX_MEMCPY_D2H,
                  getCurrentDevxStream(self.device().index()));
  if (self.is_conj()) host = host.conj().resolve_conj();
  if (self.is_neg()) host = host.neg();
  return host.item();
}

}  // namespace devx::ops
