// copy_ within a device: dtype conversion, any strides, broadcasting of the source.
#include "kernels/pointwise.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

// `self` is `out` (copy_ writes in place), and a copy on the stream never blocks the host: neither is read.
DevxStatus copy_out(DevxKernelContext* ctx, const DevxTensor* /*self*/, const DevxTensor* src, int /*non_blocking*/,
                    DevxTensor* out) {
  if (!src || !out) return invalid("copy: NULL tensor");
  const Tensor o = take(out);
  Tensor s = take(src);
  // The source broadcast to the destination's shape.
  s.strides = broadcast_strides(s, o.sizes);
  s.sizes = o.sizes;
  if (o.numel() == 0) return DEVX_OK;
  // Every source value is converted once, to the destination's type, as ATen's copy does.
  return launch(ctx, [s, o] { convert_elements(s, o); });
}

DEVX_SIM_REGISTER_KERNEL(copy_out, copy_out);

}  // namespace
}  // namespace devx::cpu_sim::kern
