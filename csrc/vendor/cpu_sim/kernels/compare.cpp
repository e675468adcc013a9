// Comparisons eq, ne, lt, le, gt, ge: the inputs compared in their promoted dtype (as ATen's
// TensorIterator computes it), the result in out's dtype (bool unless given with out=).
#include <string>

#include "kernels/pointwise.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

enum class Cmp { kEq, kNe, kLt, kLe, kGt, kGe };

template <Cmp C, typename M>
bool compare(M x, M y) {
  if constexpr (C == Cmp::kEq) return x == y;
  else if constexpr (C == Cmp::kNe) return x != y;
  else if constexpr (C == Cmp::kLt) return x < y;
  else if constexpr (C == Cmp::kLe) return x <= y;
  else if constexpr (C == Cmp::kGt) return x > y;
  else return x >= y;
}

template <Cmp C>
DevxStatus compare_tensor(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* other, DevxTensor* out) {
  if (!self || !other || !out) return invalid("comparison: NULL tensor");
  constexpr int kSet = C == Cmp::kEq || C == Cmp::kNe ? kAllTypes : kNumbers | kBool;
  return dispatch_in<kSet>(compute_dtype({self, other}), [&](auto tag) -> DevxStatus {
    using S = decltype(tag);
    using M = opmath_t<S>;
    return Pointwise<bool, S, S>::launch_on(ctx, {self, other}, out, [](M x, M y) { return compare<C>(x, y); });
  });
}

// A Scalar operand is a Python number: the same comparison with it as a wrapped host scalar.
template <Cmp C>
DevxStatus compare_scalar(DevxKernelContext* ctx, const DevxTensor* self, const DevxScalar* other, DevxTensor* out) {
  if (!other) return invalid("comparison: NULL scalar");
  alignas(16) char value[16] = {};
  DevxTensor wrapped{};
  wrapped.data = value;
  wrapped.ndim = 0;
  wrapped.device = DEVX_HOST_SCALAR;
  switch (other->kind) {
    case DEVX_SCALAR_BOOL: {
      const bool b = other->i != 0;
      std::memcpy(value, &b, sizeof(b));
      wrapped.dtype = DEVX_BOOL;
      break;
    }
    case DEVX_SCALAR_INT:
      std::memcpy(value, &other->i, sizeof(other->i));
      wrapped.dtype = DEVX_INT64;
      break;
    case DEVX_SCALAR_FLOAT:
      std::memcpy(value, &other->f, sizeof(other->f));
      wrapped.dtype = DEVX_FLOAT64;
      break;
    case DEVX_SCALAR_COMPLEX: {
      const c128 c(other->f, other->imag);
      std::memcpy(value, &c, sizeof(c));
      wrapped.dtype = DEVX_COMPLEX128;
      break;
    }
  }
  return compare_tensor<C>(ctx, self, &wrapped, out);
}

DEVX_SIM_REGISTER_KERNEL(eq_Tensor_out, compare_tensor<Cmp::kEq>);
DEVX_SIM_REGISTER_KERNEL(ne_Tensor_out, compare_tensor<Cmp::kNe>);
DEVX_SIM_REGISTER_KERNEL(lt_Tensor_out, compare_tensor<Cmp::kLt>);
DEVX_SIM_REGISTER_KERNEL(le_Tensor_out, compare_tensor<Cmp::kLe>);
DEVX_SIM_REGISTER_KERNEL(gt_Tensor_out, compare_tensor<Cmp::kGt>);
DEVX_SIM_REGISTER_KERNEL(ge_Tensor_out, compare_tensor<Cmp::kGe>);
DEVX_SIM_REGISTER_KERNEL(eq_Scalar_out, compare_scalar<Cmp::kEq>);
DEVX_SIM_REGISTER_KERNEL(ne_Scalar_out, compare_scalar<Cmp::kNe>);
DEVX_SIM_REGISTER_KERNEL(lt_Scalar_out, compare_scalar<Cmp::kLt>);
DEVX_SIM_REGISTER_KERNEL(le_Scalar_out, compare_scalar<Cmp::kLe>);
DEVX_SIM_REGISTER_KERNEL(gt_Scalar_out, compare_scalar<Cmp::kGt>);
DEVX_SIM_REGISTER_KERNEL(ge_Scalar_out, compare_scalar<Cmp::kGe>);

}  // namespace
}  // namespace devx::cpu_sim::kern
