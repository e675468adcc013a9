// copy_ within a device: dtype conversion, any strides, broadcasting of the source.
#include "kernels/elementwise.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

// `self` is `out` (copy_ writes in place), and a copy on the stream never blocks the host: neither is read.
DevxStatus copy_out(DevxKernelContext* ctx, const DevxTensor* /*self*/, const DevxTensor* src, int /*non_blocking*/,
                    DevxTensor* out) {
  if (!src || !out) return invalid("copy: NULL tensor");
  // Computed in the destination's type: every source value is converted once, as ATen's copy does.
  return dispatch(out->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    return elementwise<T, 1>(ctx, {src}, out, [](opmath_t<T> v) { return v; });
  });
}

DEVX_SIM_REGISTER_KERNEL(copy_out, copy_out);

}  // namespace
}  // namespace devx::cpu_sim::kern
