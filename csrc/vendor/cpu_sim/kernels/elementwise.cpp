#include "kernels/elementwise.h"

namespace devx::cpu_sim::kern {
namespace {

int category(DevxDType d) {
  return d == DEVX_BOOL ? 0 : is_integral(d) ? 1 : is_floating(d) ? 2 : 3;
}

DevxDType promote(DevxDType a, DevxDType b) {
  if (a == b) return a;
  const int ca = category(a), cb = category(b);
  if (ca != cb) return ca > cb ? a : b;
  if (ca == 1) {
    if ((a == DEVX_UINT8) != (b == DEVX_UINT8)) {  // uint8 with a signed type
      const DevxDType s = a == DEVX_UINT8 ? b : a;
      return s == DEVX_INT8 ? DEVX_INT16 : s;
    }
    return itemsize(a) >= itemsize(b) ? a : b;
  }
  if (ca == 2) {
    if (itemsize(a) == 2 && itemsize(b) == 2) return DEVX_FLOAT32;  // float16 with bfloat16
    return itemsize(a) >= itemsize(b) ? a : b;
  }
  return itemsize(a) >= itemsize(b) ? a : b;
}

DevxDType default_of(int cat, DevxDType fallback) {
  switch (cat) {
    case 1: return DEVX_INT64;
    case 2: return DEVX_FLOAT32;
    case 3: return DEVX_COMPLEX64;
    default: return fallback;
  }
}

}  // namespace

DevxDType compute_dtype(std::initializer_list<const DevxTensor*> tensors) {
  // ATen's tiers: tensors with dimensions, then 0-dim tensors, then wrapped numbers; a lower tier
  // counts only where its category is higher.
  int have[3] = {0, 0, 0};
  DevxDType tier[3] = {DEVX_BOOL, DEVX_BOOL, DEVX_BOOL};
  for (const DevxTensor* t : tensors) {
    if (!t) continue;
    const int k = t->device == DEVX_HOST_SCALAR ? 2 : t->ndim == 0 ? 1 : 0;
    tier[k] = have[k] ? promote(tier[k], t->dtype) : t->dtype;
    have[k] = 1;
  }
  DevxDType result = DEVX_BOOL;
  bool any = false;
  for (int k = 0; k < 3; ++k) {
    if (!have[k]) continue;
    if (!any) {
      result = tier[k];
      any = true;
    } else if (category(tier[k]) > category(result)) {
      result = k == 2 ? default_of(category(tier[k]), tier[k]) : promote(result, tier[k]);
    }
  }
  return result;
}

}  // namespace devx::cpu_sim::kern
