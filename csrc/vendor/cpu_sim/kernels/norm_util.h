// What the normalisation kernels share: tensors staged as contiguous arrays (so that the statistics
// loops see one layout whatever the caller's strides), and the small per-channel tensors (weights,
// running and saved statistics) read and written as double.
#pragma once

#include <string>
#include <vector>

#include "kernels/common.h"

namespace devx::cpu_sim::kern::norm_util {

// Copies `src` into `dst`: same dtype and sizes, any strides.
void copy_strided(const Tensor& src, const Tensor& dst);

// `t`'s values in row-major order, as double; empty for an absent tensor.
std::vector<double> read_values(const Tensor& t);

// Stores `v` (row-major, t.numel() values) into `t`, converted to its dtype.
void write_values(const Tensor& t, const std::vector<double>& v);

// A tensor that launched work accesses as a contiguous row-major array: the tensor itself when it
// is laid out so, otherwise a copy in a workspace of the call (load() fills it from the tensor,
// store() writes it back).
struct Dense {
  Tensor t;        // what the work reads and writes
  Tensor strided;  // the caller's tensor, when `t` is a copy
  bool staged = false;

  void load() const {
    if (staged) copy_strided(strided, t);
  }
  void store() const {
    if (staged) copy_strided(t, strided);
  }
  template <typename T>
  T* ptr() const {
    return t.ptr<T>();
  }
};

// Sets `*out` up for `src` (inputs and outputs alike), taking a workspace where `src` is strided.
DevxStatus make_dense(DevxKernelContext* ctx, const Tensor& src, Dense* out);

// out[i] = f(i) for i in [begin, end) of contiguous `out`: stored directly when its dtype is T,
// the type the kernel was compiled for, converted otherwise (the meta functions give some
// outputs other dtypes than the CPU kernels do, a float32 gradient for a 16-bit input).
template <typename T, typename F>
inline void put_range(const Tensor& out, int64_t begin, int64_t end, F f) {
  if (out.dtype == type_dtype<T>()) {
    T* p = out.ptr<T>();
    for (int64_t i = begin; i < end; ++i) p[i] = convert<T>(f(i));
  } else {
    const int64_t size = static_cast<int64_t>(out.itemsize());
    for (int64_t i = begin; i < end; ++i) store_as(out.data + i * size, out.dtype, f(i));
  }
}

// Which of a backward kernel's three outputs to compute: those the core passes (NULL: masked off
// by output_mask). One passed though masked off (a meta function that allocates it anyway) is
// computed too, so that no uninitialised memory reaches the caller.
inline DevxStatus outputs_wanted(const char* op, DevxBoolList output_mask, DevxTensor* const outs[3], bool want[3]) {
  for (int k = 0; k < 3; ++k) {
    want[k] = outs[k] != nullptr;
    if (!want[k] && k < output_mask.len && output_mask.data[k]) {
      return invalid(std::string(op) + ": output " + std::to_string(k) + " is asked for but not passed");
    }
  }
  return DEVX_OK;
}

// The number of elements of optional tensor `t` (0 when absent).
inline int64_t numel_or_zero(const DevxTensor* t) {
  if (!t) return 0;
  int64_t n = 1;
  for (int32_t d = 0; d < t->ndim; ++d) n *= t->sizes[d];
  return n;
}

// A parallel_for grain for items that each touch `n` elements: about 32768 elements a chunk.
inline int64_t grain_for(int64_t n) {
  return n >= 32768 ? 1 : 32768 / (n > 0 ? n : 1);
}

}  // namespace devx::cpu_sim::kern::norm_util
