#include "kernels/reduce_util.h"

#include <stdexcept>

namespace devx::cpu_sim::kern::reduce_util {

bool wrap_dim(int64_t* dim, int ndim) {
  const int64_t n = std::max(ndim, 1);
  if (*dim < -n || *dim >= n) return false;
  if (*dim < 0) *dim += n;
  return true;
}

std::string reduce_mask(int ndim, const int64_t* dims, int64_t n, DimMask* mask) {
  mask->assign(static_cast<size_t>(ndim), n == 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t d = dims[i];
    if (!wrap_dim(&d, ndim)) {
      return "Dimension out of range (expected to be in range of [" + std::to_string(-std::max(ndim, 1)) + ", " +
             std::to_string(std::max(ndim, 1) - 1) + "], but got " + std::to_string(dims[i]) + ")";
    }
    if (ndim == 0) continue;
    if ((*mask)[d]) return "dim " + std::to_string(d) + " appears multiple times in the list of dims";
    (*mask)[d] = true;
  }
  return {};
}

void WorkError::throw_if_failed() const {
  if (failed()) throw std::runtime_error(message_);
}

}  // namespace devx::cpu_sim::kern::reduce_util
