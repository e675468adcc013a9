// constant_pad_nd: the input placed in a tensor of `value`, grown (or, for negative pads, cut) by
// pad[2k] before and pad[2k + 1] after the k-th dimension from the last.
#include "kernels/index_util.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

DevxStatus constant_pad_nd_out(DevxKernelContext* ctx, const DevxTensor* self, DevxIntList pad,
                               const DevxScalar* value, DevxTensor* out) {
  if (!self || !value || !out) return invalid("constant_pad_nd: NULL argument");
  Tensor s = take(self), o = take(out);
  if (pad.len % 2 != 0) return invalid("Length of pad must be even but instead it equals " + std::to_string(pad.len));
  if (pad.len / 2 > s.ndim()) {
    return invalid("Length of pad should be no more than twice the number of dimensions of the input. Dimension of "
                   "input is " + std::to_string(s.ndim()) + " but length of pad is " + std::to_string(pad.len));
  }
  if (o.ndim() != s.ndim() || o.dtype != s.dtype) return invalid("constant_pad_nd: output differs from self");
  // The part of the input that stays, and where it lands in the output.
  Tensor from = s, to = o;
  for (int64_t k = 0; k < pad.len / 2; ++k) {
    const int d = s.ndim() - 1 - static_cast<int>(k);
    const int64_t before = pad.data[2 * k], after = pad.data[2 * k + 1];
    const int64_t size = s.size(d) + before + after;
    if (size < 0 || o.size(d) != size) {
      return invalid("The input size " + std::to_string(s.size(d)) + ", plus negative padding " +
                     std::to_string(before) + " and " + std::to_string(after) +
                     " resulted in a negative output size, which is invalid. Check dimension " + std::to_string(d) +
                     " of your input.");
    }
    const int64_t kept = std::max<int64_t>(0, s.size(d) + std::min<int64_t>(before, 0) + std::min<int64_t>(after, 0));
    from.data += std::max<int64_t>(-before, 0) * s.stride(d) * static_cast<int64_t>(s.itemsize());
    to.data += std::max<int64_t>(before, 0) * o.stride(d) * static_cast<int64_t>(o.itemsize());
    from.sizes[d] = kept;
    to.sizes[d] = kept;
  }
  for (int d = 0; d < s.ndim() - static_cast<int>(pad.len / 2); ++d) {
    if (o.size(d) != s.size(d)) return invalid("constant_pad_nd: output of shape " + shape_str(o.sizes));
  }
  if (o.numel() == 0) return DEVX_OK;
  return dispatch_in<kAllTypes>(o.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    const T v = scalar_as<T>(value);
    return launch(ctx, [o, from, to, v] {
      Loop<1> all(o.sizes, {o.strides});
      T* dst = o.ptr<T>();
      parallel_for(all.numel(), kGrain, [&](int64_t begin, int64_t end) {
        all.run(begin, end, [&](const std::array<int64_t, 1>& off, int64_t n, const std::array<int64_t, 1>& st) {
          for (int64_t i = 0; i < n; ++i) dst[off[0] + i * st[0]] = v;
        });
      });
      if (numel_of(to.sizes) > 0) copy_elements(from, to);
    });
  });
}

DEVX_SIM_REGISTER_KERNEL(constant_pad_nd_out, constant_pad_nd_out);

}  // namespace
}  // namespace devx::cpu_sim::kern
