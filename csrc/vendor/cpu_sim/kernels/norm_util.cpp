#include "kernels/norm_util.h"

#include "kernels/elementwise.h"

namespace devx::cpu_sim::kern::norm_util {
namespace {

// Moves elements of `size` bytes; the fixed sizes become plain loads and stores.
template <size_t Size>
void copy_rows(const Loop<2>& loop, const Tensor& src, const Tensor& dst) {
  parallel_for(loop.numel(), kGrain, [&](int64_t begin, int64_t end) {
    loop.run(begin, end, [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
      const char* s = src.data + off[0] * static_cast<int64_t>(Size);
      char* d = dst.data + off[1] * static_cast<int64_t>(Size);
      for (int64_t i = 0; i < n; ++i) {
        std::memcpy(d + i * st[1] * static_cast<int64_t>(Size), s + i * st[0] * static_cast<int64_t>(Size), Size);
      }
    });
  });
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size());
  int64_t s = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    strides[d] = s;
    s *= sizes[d] > 1 ? sizes[d] : 1;
  }
  return strides;
}

}  // namespace

void copy_strided(const Tensor& src, const Tensor& dst) {
  const Loop<2> loop(dst.sizes, {src.strides, dst.strides});
  if (loop.numel() == 0) return;
  switch (src.itemsize()) {
    case 1: copy_rows<1>(loop, src, dst); break;
    case 2: copy_rows<2>(loop, src, dst); break;
    case 4: copy_rows<4>(loop, src, dst); break;
    case 8: copy_rows<8>(loop, src, dst); break;
    default: copy_rows<16>(loop, src, dst); break;
  }
}

std::vector<double> read_values(const Tensor& t) {
  std::vector<double> v;
  if (!t.data) return v;
  v.reserve(static_cast<size_t>(t.numel()));
  const Loop<1> loop(t.sizes, {t.strides});
  const int64_t size = static_cast<int64_t>(t.itemsize());
  loop.run(0, loop.numel(), [&](const std::array<int64_t, 1>& off, int64_t n, const std::array<int64_t, 1>& st) {
    for (int64_t i = 0; i < n; ++i) v.push_back(load_as<double>(t.data + (off[0] + i * st[0]) * size, t.dtype));
  });
  return v;
}

void write_values(const Tensor& t, const std::vector<double>& v) {
  if (!t.data) return;
  const Loop<1> loop(t.sizes, {t.strides});
  const int64_t size = static_cast<int64_t>(t.itemsize());
  size_t k = 0;
  loop.run(0, loop.numel(), [&](const std::array<int64_t, 1>& off, int64_t n, const std::array<int64_t, 1>& st) {
    for (int64_t i = 0; i < n; ++i) store_as(t.data + (off[0] + i * st[0]) * size, t.dtype, v[k++]);
  });
}

DevxStatus make_dense(DevxKernelContext* ctx, const Tensor& src, Dense* out) {
  out->t = src;
  out->staged = false;
  if (src.contiguous() || src.numel() == 0) return DEVX_OK;
  void* buf = nullptr;
  if (DevxStatus status = ctx->workspace(ctx, static_cast<size_t>(src.numel()) * src.itemsize(), &buf)) return status;
  out->strided = src;
  out->t.data = static_cast<char*>(buf);
  out->t.strides = contiguous_strides(src.sizes);
  out->staged = true;
  return DEVX_OK;
}

}  // namespace devx::cpu_sim::kern::norm_util
