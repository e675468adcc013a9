// Scans along one dimension: cumsum and cumprod.
#include "kernels/reduce_util.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

using namespace reduce_util;

// The values are converted to the output's dtype and summed (or multiplied) in acc_t of it (double for float32,
// as ATen's CPU scan does). In-place calls are safe: each element is read before it is written.
template <bool Prod>
DevxStatus scan_out(DevxKernelContext* ctx, const DevxTensor* self, int64_t dim, const DevxDType*, DevxTensor* out) {
  const std::string op = Prod ? "cumprod" : "cumsum";
  if (!self || !out) return invalid(op + ": NULL tensor");
  const Tensor in = at_least_1d(take(self)), o = at_least_1d(take(out));
  if (!wrap_dim(&dim, self->ndim)) return invalid(op + ": dimension out of range");
  if (in.sizes != o.sizes) return invalid(op + ": output shape differs from the input's");
  if (in.numel() == 0) return DEVX_OK;
  return dispatch_in<kNumbers | kComplex>(o.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using A = acc_t<T>;
    const int d = static_cast<int>(dim);
    return launch(ctx, [in, o, d] {
      const int64_t n = in.size(d), si = in.stride(d), so = o.stride(d);
      for_each_row<2>(in.sizes, d, {in.strides, o.strides}, [&](const std::array<int64_t, 2>& off) {
        A acc = Prod ? A(1) : A(0);
        for (int64_t k = 0; k < n; ++k) {
          const A v = convert<A>(read_as<T>(in, off[0] + k * si));
          acc = Prod ? acc_mul(acc, v) : acc_add(acc, v);
          o.ptr<T>()[off[1] + k * so] = convert<T>(acc);
        }
      });
    });
  });
}

DEVX_SIM_REGISTER_KERNEL(cumsum_out, scan_out<false>);
DEVX_SIM_REGISTER_KERNEL(cumprod_out, scan_out<true>);

}  // namespace
}  // namespace devx::cpu_sim::kern
