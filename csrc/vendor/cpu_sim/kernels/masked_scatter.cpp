// masked_scatter: out = self, with the k-th position (row-major) where the mask is true taking
// the k-th element of source.
#include "kernels/index_util.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

DevxStatus masked_scatter_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* mask,
                              const DevxTensor* source, DevxTensor* out) {
  if (!self || !mask || !source || !out) return invalid("masked_scatter: NULL tensor");
  Tensor s = take(self), m = take(mask), src = take(source), o = take(out);
  if (m.dtype != DEVX_BOOL && m.dtype != DEVX_UINT8) {
    return invalid(std::string("masked_scatter_ only supports boolean masks, but got mask with dtype ") +
                   dtype_name(m.dtype));
  }
  if (src.dtype != o.dtype || s.dtype != o.dtype) {
    return invalid(std::string("masked_scatter_: expected self and source to have same dtypes but got ") +
                   dtype_name(o.dtype) + " and " + dtype_name(src.dtype));
  }
  Loop<3> loop(o.sizes, {o.strides, broadcast_strides(s, o.sizes), broadcast_strides(m, o.sizes)});
  if (loop.numel() == 0) return DEVX_OK;
  return launch(ctx, [s, m, src, o, loop] {
    // The source in row-major order, whatever its strides.
    const Loop<1> from(src.sizes, {src.strides});
    std::vector<int64_t> src_off;
    src_off.reserve(static_cast<size_t>(src.numel()));
    from.run(0, from.numel(), [&](const std::array<int64_t, 1>& off, int64_t n, const std::array<int64_t, 1>& st) {
      for (int64_t i = 0; i < n; ++i) src_off.push_back(off[0] + i * st[0]);
    });
    const int64_t available = src.numel();
    bool short_source = false;
    // Serial: each true position's source element depends on the count of those before it.
    dispatch_bytes(o.itemsize(), [&](auto tag) {
      using E = decltype(tag);
      E* dst = o.ptr<E>();
      const E* in = s.ptr<const E>();
      const E* values = src.ptr<const E>();
      const uint8_t* keep = m.ptr<const uint8_t>();
      int64_t k = 0;
      loop.run(0, loop.numel(), [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& st) {
        for (int64_t i = 0; i < n; ++i) {
          if (keep[off[2] + i * st[2]]) {
            if (k >= available) {
              short_source = true;
              dst[off[0] + i * st[0]] = in[off[1] + i * st[1]];
              continue;
            }
            dst[off[0] + i * st[0]] = values[src_off[static_cast<size_t>(k++)]];
          } else {
            dst[off[0] + i * st[0]] = in[off[1] + i * st[1]];
          }
        }
      });
    });
    if (short_source) throw std::invalid_argument("Number of elements of source < number of ones in mask");
  });
}

DEVX_SIM_REGISTER_KERNEL(masked_scatter_out, masked_scatter_out);

}  // namespace
}  // namespace devx::cpu_sim::kern
