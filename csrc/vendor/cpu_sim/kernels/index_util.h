// What the indexing, gathering and shape kernels share (index.cpp, scatter.cpp, masked.cpp,
// shape.cpp): index reading, bounds errors raised from queued work, value-blind element copies.
#pragma once

#include <algorithm>
#include <atomic>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/elementwise.h"

namespace devx::cpu_sim::kern {

// Element copies that do not look at values (same dtype on both sides) move an integer of the
// element's size, so one instantiation per size serves every dtype.
struct Bytes16 {
  uint64_t lo, hi;
};

template <typename F>
decltype(auto) dispatch_bytes(size_t size, F&& f) {
  switch (size) {
    case 1: return f(uint8_t{});
    case 2: return f(uint16_t{});
    case 4: return f(uint32_t{});
    case 8: return f(uint64_t{});
    default: return f(Bytes16{});
  }
}

// ATen takes int64 indices everywhere and int32 ones in most places; masks arrive as the long
// indices of their nonzero elements.
inline bool is_index_dtype(DevxDType d) { return d == DEVX_INT64 || d == DEVX_INT32; }

inline int64_t read_index(const Tensor& t, int64_t offset) {
  return t.dtype == DEVX_INT64 ? t.ptr<const int64_t>()[offset] : t.ptr<const int32_t>()[offset];
}

// ATen treats a 0-dim operand of these ops as 1-d of size 1.
inline void as_1d(Tensor& t) {
  if (t.ndim() != 0) return;
  t.sizes = {1};
  t.strides = {0};
}

inline bool wrap_dim(int64_t& dim, int ndim) {
  const int64_t n = std::max(ndim, 1);
  if (dim < -n || dim >= n) return false;
  if (dim < 0) dim += n;
  return true;
}

// An out= output that is the input itself (the in-place variants) needs no copy of the input.
inline bool same_view(const Tensor& a, const Tensor& b) {
  return a.data == b.data && a.dtype == b.dtype && a.sizes == b.sizes && a.strides == b.strides;
}

inline Dims contiguous_strides(const Dims& sizes) {
  Dims s(sizes.size(), 0);
  int64_t n = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    s[d] = n;
    n *= std::max<int64_t>(sizes[d], 1);
  }
  return s;
}

inline int64_t numel_of(const Dims& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

// `acc` broadcast with `sizes` (right-aligned); false if they do not broadcast.
inline bool broadcast_into(std::vector<int64_t>& acc, const std::vector<int64_t>& sizes) {
  if (sizes.size() > acc.size()) acc.insert(acc.begin(), sizes.size() - acc.size(), 1);
  const size_t offset = acc.size() - sizes.size();
  for (size_t d = 0; d < sizes.size(); ++d) {
    int64_t& a = acc[d + offset];
    if (a == sizes[d] || sizes[d] == 1) continue;
    if (a != 1) return false;
    a = sizes[d];
  }
  return true;
}

inline std::string shape_str(const std::vector<int64_t>& sizes) {
  std::string s = "[";
  for (size_t d = 0; d < sizes.size(); ++d) s += (d ? ", " : "") + std::to_string(sizes[d]);
  return s + "]";
}

inline std::string out_of_bounds(int64_t index, int64_t dim, int64_t size) {
  return "index " + std::to_string(index) + " is out of bounds for dimension " + std::to_string(dim) +
         " with size " + std::to_string(size);
}

// The first bad index that parallel work met. An exception must not leave a pool thread, so the
// work records it, skips the element, and throws once the parallel loop is over (the stream
// reports it as the kernel's error).
class BadIndex {
 public:
  void record(int64_t index) {
    if (seen_.load(std::memory_order_relaxed)) return;
    std::lock_guard lock(mu_);
    if (!seen_.load(std::memory_order_relaxed)) {
      index_ = index;
      seen_.store(true, std::memory_order_relaxed);
    }
  }
  void throw_if_any(int64_t dim, int64_t size) const {
    if (seen_.load()) throw std::out_of_range(out_of_bounds(index_, dim, size));
  }
  void throw_if_any(const std::string& message) const {
    if (seen_.load()) throw std::out_of_range(message);
  }

 private:
  std::atomic<bool> seen_{false};
  std::mutex mu_;
  int64_t index_ = 0;
};

// dst = src elementwise, same dtype and shape, any strides; runs inside queued work.
inline void copy_elements(const Tensor& src, const Tensor& dst) {
  Loop<2> loop(dst.sizes, {dst.strides, src.strides});
  dispatch_bytes(dst.itemsize(), [&](auto tag) {
    using E = decltype(tag);
    E* out = dst.ptr<E>();
    const E* in = src.ptr<const E>();
    parallel_for(loop.numel(), kGrain, [&](int64_t begin, int64_t end) {
      loop.run(begin, end, [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
        for (int64_t i = 0; i < n; ++i) out[off[0] + i * st[0]] = in[off[1] + i * st[1]];
      });
    });
  });
}

// dst = src converted from From to To elementwise, same shape, any strides; inside queued work.
template <typename To, typename From>
void convert_into(const Tensor& src, const Tensor& dst) {
  Loop<2> loop(dst.sizes, {dst.strides, src.strides});
  To* out = dst.ptr<To>();
  const From* in = src.ptr<const From>();
  parallel_for(loop.numel(), kGrain, [&](int64_t begin, int64_t end) {
    loop.run(begin, end, [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
      for (int64_t i = 0; i < n; ++i) out[off[0] + i * st[0]] = convert<To>(in[off[1] + i * st[1]]);
    });
  });
}

}  // namespace devx::cpu_sim::kern
