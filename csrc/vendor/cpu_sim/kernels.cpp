// cpu_sim's own kernels, offered with DEVX_SIM_VENDOR_KERNELS=1: what a vendor with its own kernel
// library does (DIOPI-style C signatures from vendor_api.h), run on the simulated streams. Without
// the switch the table is empty and ATen's CPU kernels run on aliases of the arena instead.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "api.h"
#include "error.h"
#include "runtime.h"

namespace devx::cpu_sim {
namespace {

template <typename T>
void softmax_rows(const T* in, T* out, int64_t outer, int64_t n, int64_t inner) {
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      const T* x = in + o * n * inner + i;
      T* y = out + o * n * inner + i;
      T max = x[0];
      for (int64_t k = 1; k < n; ++k) max = std::max(max, x[k * inner]);
      T sum = 0;
      for (int64_t k = 0; k < n; ++k) {
        y[k * inner] = std::exp(x[k * inner] - max);
        sum += y[k * inner];
      }
      for (int64_t k = 0; k < n; ++k) y[k * inner] /= sum;
    }
  }
}

// Row-major dense (an empty tensor has nothing to lay out).
bool contiguous(const DevxTensorDesc& t) {
  for (int d = 0; d < t.ndim; ++d) {
    if (t.sizes[d] == 0) return true;
  }
  int64_t expected = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    if (t.sizes[d] != 1 && t.strides[d] != expected) return false;
    expected *= t.sizes[d];
  }
  return true;
}

DevxStatus softmax_forward(const DevxTensorDesc* in, int dim, const DevxTensorDesc* out, DevxStreamHandle stream) {
  if (in == nullptr || out == nullptr) return fail(DEVX_ERROR_INVALID, "cpu_sim softmax: NULL descriptor");
  if (in->dtype != out->dtype || in->ndim != out->ndim || dim < 0 || dim >= in->ndim) {
    return fail(DEVX_ERROR_INVALID, "cpu_sim softmax: input and output disagree, or dim is out of range");
  }
  if ((in->dtype != DEVX_FLOAT32 && in->dtype != DEVX_FLOAT64) || !contiguous(*in) || !contiguous(*out)) {
    return fail(DEVX_ERROR_INVALID, "cpu_sim softmax: only contiguous float32/float64 tensors");
  }
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= in->sizes[d];
  for (int d = dim + 1; d < in->ndim; ++d) inner *= in->sizes[d];
  const int64_t n = in->sizes[dim];
  std::shared_ptr<Stream> target;
  if (DevxStatus status = Runtime::get().find_stream(stream, &target)) return status;
  if (outer * n * inner == 0) return DEVX_OK;
  const DevxDType dtype = in->dtype;
  void* src = in->data;
  void* dst = out->data;
  return target->submit([=] {
    if (dtype == DEVX_FLOAT32) {
      softmax_rows(static_cast<const float*>(src), static_cast<float*>(dst), outer, n, inner);
    } else {
      softmax_rows(static_cast<const double*>(src), static_cast<double*>(dst), outer, n, inner);
    }
  });
}

DevxVendorKernel g_table[] = {{nullptr, nullptr}, {nullptr, nullptr}};

}  // namespace

const DevxVendorKernel* own_kernels() {
  return g_table;
}

void offer_own_kernels(bool on) {
  g_table[0] = on ? DevxVendorKernel{"_softmax", reinterpret_cast<void*>(&softmax_forward)}
                  : DevxVendorKernel{nullptr, nullptr};
}

}  // namespace devx::cpu_sim
