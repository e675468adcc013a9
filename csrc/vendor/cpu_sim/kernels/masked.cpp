// Masks: masked_fill, and the two ops whose output size depends on the data, nonzero and
// masked_select (they count first, size their output, then fill it).
#include <future>

#include "kernels/index_util.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

// out = mask ? value : self, mask and self broadcast to out. `value` is a 0-dim tensor
// (masked_fill.Tensor: read when the work runs, it may be device memory) or else `fill`.
template <typename T>
DevxStatus masked_fill(DevxKernelContext* ctx, const char* op, const DevxTensor* self, const DevxTensor* mask,
                       const DevxTensor* value, T fill, DevxTensor* out) {
  Tensor s = take(self), m = take(mask), v = take(value), o = take(out);
  if (m.dtype != DEVX_BOOL && m.dtype != DEVX_UINT8) {
    return invalid(std::string(op) + " only supports boolean masks, but got mask with dtype " + dtype_name(m.dtype));
  }
  if (s.dtype != o.dtype) return decline(std::string(op) + ": output dtype differs from self's");
  if (value && v.ndim() != 0) {
    return invalid(std::string(op) + " only supports a 0-dimensional value tensor, but got tensor with " +
                   std::to_string(v.ndim()) + " dimension(s).");
  }
  Loop<3> loop(o.sizes, {o.strides, broadcast_strides(s, o.sizes), broadcast_strides(m, o.sizes)});
  if (loop.numel() == 0) return DEVX_OK;
  return launch(ctx, [s, m, v, o, loop, fill, has_value = value != nullptr] {
    const T x = has_value ? load_as<T>(v.data, v.dtype) : fill;
    T* dst = o.ptr<T>();
    const T* src = s.ptr<const T>();
    const uint8_t* keep = m.ptr<const uint8_t>();
    parallel_for(loop.numel(), kGrain, [&](int64_t begin, int64_t end) {
      loop.run(begin, end, [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& st) {
        for (int64_t i = 0; i < n; ++i) {
          dst[off[0] + i * st[0]] = keep[off[2] + i * st[2]] ? x : src[off[1] + i * st[1]];
        }
      });
    });
  });
}

DevxStatus masked_fill_scalar_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* mask,
                                  const DevxScalar* value, DevxTensor* out) {
  if (!self || !mask || !value || !out) return invalid("masked_fill: NULL argument");
  return dispatch_in<kAllTypes>(out->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    return masked_fill<T>(ctx, "masked_fill_", self, mask, nullptr, scalar_as<T>(value), out);
  });
}

DevxStatus masked_fill_tensor_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* mask,
                                  const DevxTensor* value, DevxTensor* out) {
  if (!self || !mask || !value || !out) return invalid("masked_fill: NULL argument");
  return dispatch_in<kAllTypes>(out->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    return masked_fill<T>(ctx, "masked_fill_", self, mask, value, T{}, out);
  });
}

// How the data-dependent kernels split their elements: the counting pass and the filling pass
// use the same chunks, so each chunk writes from the sum of the counts before it.
struct Chunks {
  int64_t n, size, count;
  explicit Chunks(int64_t numel) : n(numel) {
    count = std::max<int64_t>(1, std::min<int64_t>((n + kGrain - 1) / kGrain, 4 * num_threads()));
    size = std::max<int64_t>(1, (n + count - 1) / count);
    count = std::max<int64_t>(1, (n + size - 1) / size);
  }
  int64_t begin(int64_t c) const { return std::min(n, c * size); }
  int64_t end(int64_t c) const { return std::min(n, (c + 1) * size); }
};

// Runs `work` on the kernel's stream after everything queued there before, and waits for it:
// the output's size is needed before the kernel returns. Waiting on the work itself rather than
// synchronising the stream also serves a kernel called from the stream's own thread, where the
// work runs at once.
DevxStatus run_and_wait(DevxKernelContext* ctx, std::function<void()> work) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> finished = done->get_future();
  DevxStatus status = launch(ctx, [done, work = std::move(work)] {
    try {
      work();
      done->set_value();
    } catch (...) {
      done->set_exception(std::current_exception());
    }
  });
  if (status != DEVX_OK) return status;
  try {
    finished.get();
  } catch (const std::exception& e) {
    return invalid(std::string("counting the output's size failed: ") + e.what());
  }
  return DEVX_OK;
}

// Counts per chunk of `loop`'s elements where keep(offset of operand 0) holds.
template <size_t N, typename Keep>
DevxStatus count_chunks(DevxKernelContext* ctx, const Loop<N>& loop, const Chunks& chunks, Keep keep,
                        std::vector<int64_t>* counts) {
  auto result = std::make_shared<std::vector<int64_t>>(static_cast<size_t>(chunks.count), 0);
  if (loop.numel() == 0) {
    *counts = *result;
    return DEVX_OK;
  }
  DevxStatus status = run_and_wait(ctx, [loop, chunks, keep, result] {
    parallel_for(chunks.count, 1, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        int64_t k = 0;
        loop.run(chunks.begin(c), chunks.end(c), [&](const std::array<int64_t, N>& off, int64_t n,
                                                     const std::array<int64_t, N>& st) {
          for (int64_t i = 0; i < n; ++i) k += keep(off[0] + i * st[0]) ? 1 : 0;
        });
        (*result)[c] = k;
      }
    });
  });
  *counts = *result;
  return status;
}

// counts -> where each chunk starts writing, and the total.
int64_t exclusive_sum(std::vector<int64_t>& counts) {
  int64_t total = 0;
  for (int64_t& c : counts) {
    const int64_t k = c;
    c = total;
    total += k;
  }
  return total;
}

template <typename T>
bool is_nonzero(T v) {
  if constexpr (is_complex_v<T>) {
    return v != T(0);
  } else {
    return static_cast<opmath_t<T>>(v) != opmath_t<T>(0);
  }
}

DevxStatus nonzero_out(DevxKernelContext* ctx, const DevxTensor* self, DevxTensor* out) {
  if (!self || !out) return invalid("nonzero: NULL tensor");
  if (out->dtype != DEVX_INT64) {
    return invalid(std::string("nonzero: Expected out tensor to have scalar type Long but got scalar type ") +
                   dtype_name(out->dtype));
  }
  Tensor s = take(self);
  const int nd = s.ndim();
  Loop<1> loop(s.sizes, {s.strides});
  const Chunks chunks(loop.numel());
  std::vector<int64_t> starts;
  DevxStatus status = dispatch(s.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    const T* p = s.ptr<const T>();
    return count_chunks<1>(ctx, loop, chunks, [p](int64_t off) { return is_nonzero(p[off]); }, &starts);
  });
  if (status != DEVX_OK) return status;
  const int64_t total = exclusive_sum(starts);
  const int64_t sizes[2] = {total, nd};
  if (DevxStatus st = ctx->resize_output(ctx, out, 2, sizes)) return st;
  if (total == 0 || nd == 0) return DEVX_OK;
  Tensor o = take(out);
  return dispatch(s.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    return launch(ctx, [s, o, loop, chunks, starts] {
      const T* p = s.ptr<const T>();
      int64_t* dst = o.ptr<int64_t>();
      const int64_t row = o.stride(0), col = o.stride(1);
      const int dims = s.ndim();
      parallel_for(chunks.count, 1, [&](int64_t begin, int64_t end) {
        for (int64_t c = begin; c < end; ++c) {
          int64_t pos = starts[c], flat = chunks.begin(c);
          loop.run(chunks.begin(c), chunks.end(c), [&](const std::array<int64_t, 1>& off, int64_t n,
                                                       const std::array<int64_t, 1>& st) {
            for (int64_t i = 0; i < n; ++i, ++flat) {
              if (!is_nonzero(p[off[0] + i * st[0]])) continue;
              int64_t rem = flat;
              for (int d = dims - 1; d >= 0; --d) {
                dst[pos * row + d * col] = rem % s.size(d);
                rem /= s.size(d);
              }
              ++pos;
            }
          });
        }
      });
    });
  });
}

DevxStatus masked_select_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* mask, DevxTensor* out) {
  if (!self || !mask || !out) return invalid("masked_select: NULL tensor");
  Tensor s = take(self), m = take(mask);
  if (m.dtype != DEVX_BOOL && m.dtype != DEVX_UINT8) {
    return invalid(std::string("masked_select: expected BoolTensor for mask, got ") + dtype_name(m.dtype));
  }
  if (out->dtype != s.dtype) return invalid("masked_select(): self and result must have the same scalar type");
  std::vector<int64_t> shape = s.sizes;
  if (!broadcast_into(shape, m.sizes)) {
    return invalid("masked_select: mask of shape " + shape_str(m.sizes) + " does not broadcast with self of shape " +
                   shape_str(s.sizes));
  }
  Loop<2> loop(shape, {broadcast_strides(m, shape), broadcast_strides(s, shape)});
  const Chunks chunks(loop.numel());
  std::vector<int64_t> starts;
  const uint8_t* keep = m.ptr<const uint8_t>();
  if (DevxStatus st = count_chunks<2>(ctx, loop, chunks, [keep](int64_t off) { return keep[off] != 0; }, &starts)) {
    return st;
  }
  const int64_t total = exclusive_sum(starts);
  if (DevxStatus st = ctx->resize_output(ctx, out, 1, &total)) return st;
  if (total == 0) return DEVX_OK;
  Tensor o = take(out);
  return launch(ctx, [m, s, o, loop, chunks, starts] {
    dispatch_bytes(s.itemsize(), [&](auto tag) {
      using E = decltype(tag);
      const uint8_t* keep = m.ptr<const uint8_t>();
      const E* src = s.ptr<const E>();
      E* dst = o.ptr<E>();
      const int64_t step = o.stride(0);
      parallel_for(chunks.count, 1, [&](int64_t begin, int64_t end) {
        for (int64_t c = begin; c < end; ++c) {
          int64_t pos = starts[c];
          loop.run(chunks.begin(c), chunks.end(c), [&](const std::array<int64_t, 2>& off, int64_t n,
                                                       const std::array<int64_t, 2>& st) {
            for (int64_t i = 0; i < n; ++i) {
              if (keep[off[0] + i * st[0]]) dst[step * pos++] = src[off[1] + i * st[1]];
            }
          });
        }
      });
    });
  });
}

DEVX_SIM_REGISTER_KERNEL(masked_fill_Scalar_out, masked_fill_scalar_out);
DEVX_SIM_REGISTER_KERNEL(masked_fill_Tensor_out, masked_fill_tensor_out);
DEVX_SIM_REGISTER_KERNEL(nonzero_out, nonzero_out);
DEVX_SIM_REGISTER_KERNEL(masked_select_out, masked_select_out);

}  // namespace
}  // namespace devx::cpu_sim::kern
