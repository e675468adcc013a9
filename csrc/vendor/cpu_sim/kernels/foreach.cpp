// _foreach_* kernels (what torch.optim's foreach implementations call): the pointwise op on
// every tensor of the lists, with the semantics of the single-tensor op, issued as one launch.
// Tensors of one list may differ in dtype and shape.
#include <string>
#include <vector>

#include "kernels/pointwise.h"
#include "kernels/pointwise_math.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

const DevxTensor* item(DevxTensorList list, int64_t i) {
  return list.items[i];
}

// Checks that every list has out's length and no None, then runs each(i, &work) for every index
// and launches the works together. each dispatches on out[i]'s dtype.
template <typename Each>
DevxStatus for_each(const char* op, DevxKernelContext* ctx, std::initializer_list<DevxTensorList> inputs,
                    DevxTensorList out, int64_t scalars, Each each) {
  for (const DevxTensorList& list : inputs) {
    if (list.len != out.len) return invalid(std::string(op) + ": lists of different lengths");
    for (int64_t i = 0; i < list.len; ++i) {
      if (!list.items[i]) return invalid(std::string(op) + ": a None tensor in a list");
    }
  }
  if (scalars >= 0 && scalars != out.len) {
    return invalid(std::string(op) + ": Tensor list must have same number of elements as scalar list.");
  }
  std::vector<std::function<void()>> works(static_cast<size_t>(out.len));
  for (int64_t i = 0; i < out.len; ++i) {
    if (!out.items[i]) return invalid(std::string(op) + ": a None output");
    if (DevxStatus status = each(i, &works[i])) return status;
  }
  return launch_all(ctx, std::move(works));
}

// out[i] = f(ins[i]...) with f = make(T{}, i), computed in out[i]'s dtype T (the dtypes of Set).
template <int Set, size_t N, typename Make>
DevxStatus foreach_map(const char* op, DevxKernelContext* ctx, const std::array<DevxTensorList, N>& ins,
                       DevxTensorList out, int64_t scalars, Make make) {
  auto each = [&](int64_t i, std::function<void()>* work) -> DevxStatus {
    return dispatch_in<Set>(out.items[i]->dtype, [&](auto tag) -> DevxStatus {
      using T = decltype(tag);
      auto f = make(T{}, i);
      if constexpr (N == 1) {
        return Pointwise<T, T>::prepare({item(ins[0], i)}, out.items[i], f, work);
      } else if constexpr (N == 2) {
        return Pointwise<T, T, T>::prepare({item(ins[0], i), item(ins[1], i)}, out.items[i], f, work);
      } else {
        return Pointwise<T, T, T, T>::prepare({item(ins[0], i), item(ins[1], i), item(ins[2], i)}, out.items[i],
                                              f, work);
      }
    });
  };
  if constexpr (N == 1) {
    return for_each(op, ctx, {ins[0]}, out, scalars, each);
  } else if constexpr (N == 2) {
    return for_each(op, ctx, {ins[0], ins[1]}, out, scalars, each);
  } else {
    return for_each(op, ctx, {ins[0], ins[1], ins[2]}, out, scalars, each);
  }
}

constexpr int64_t kNoScalars = -1;

template <typename M>
M scalar_at(DevxScalarList scalars, int64_t i) {
  return scalar_as<M>(&scalars.data[i]);
}

// ---- add, sub

DevxStatus add_list(DevxKernelContext* ctx, DevxTensorList self, DevxTensorList other, const DevxScalar* alpha,
                    DevxTensorList out) {
  return foreach_map<kNumbers | kBool, 2>("_foreach_add", ctx, {self, other}, out, kNoScalars, [&](auto t, int64_t) {
    using M = opmath_t<decltype(t)>;
    const M a = scalar_in<decltype(t)>(alpha);
    return [a](M x, M y) { return math::add(x, y, a); };
  });
}

DevxStatus add_scalar(DevxKernelContext* ctx, DevxTensorList self, const DevxScalar* scalar, DevxTensorList out) {
  return foreach_map<kNumbers | kBool, 1>("_foreach_add", ctx, {self}, out, kNoScalars, [&](auto t, int64_t) {
    using M = opmath_t<decltype(t)>;
    const M s = scalar_in<decltype(t)>(scalar);
    return [s](M x) { return math::add(x, s, M(1)); };
  });
}

DevxStatus add_scalar_list(DevxKernelContext* ctx, DevxTensorList self, DevxScalarList scalars, DevxTensorList out) {
  return foreach_map<kNumbers | kBool, 1>("_foreach_add", ctx, {self}, out, scalars.len, [&](auto t, int64_t i) {
    using M = opmath_t<decltype(t)>;
    const M s = scalar_in<decltype(t)>(&scalars.data[i]);
    return [s](M x) { return math::add(x, s, M(1)); };
  });
}

DevxStatus sub_list(DevxKernelContext* ctx, DevxTensorList self, DevxTensorList other, const DevxScalar* alpha,
                    DevxTensorList out) {
  return foreach_map<kNumbers, 2>("_foreach_sub", ctx, {self, other}, out, kNoScalars, [&](auto t, int64_t) {
    using M = opmath_t<decltype(t)>;
    const M a = math::neg(scalar_in<decltype(t)>(alpha));
    return [a](M x, M y) { return math::add(x, y, a); };
  });
}

DevxStatus sub_scalar(DevxKernelContext* ctx, DevxTensorList self, const DevxScalar* scalar, DevxTensorList out) {
  return foreach_map<kNumbers, 1>("_foreach_sub", ctx, {self}, out, kNoScalars, [&](auto t, int64_t) {
    using M = opmath_t<decltype(t)>;
    const M s = scalar_in<decltype(t)>(scalar);
    return [s](M x) { return math::add(x, s, M(-1)); };
  });
}

// ---- mul, div

DevxStatus mul_list(DevxKernelContext* ctx, DevxTensorList self, DevxTensorList other, DevxTensorList out) {
  return foreach_map<kNumbers | kBool, 2>("_foreach_mul", ctx, {self, other}, out, kNoScalars, [](auto t, int64_t) {
    using M = opmath_t<decltype(t)>;
    return [](M x, M y) { return math::mul(x, y); };
  });
}

DevxStatus mul_scalar(DevxKernelContext* ctx, DevxTensorList self, const DevxScalar* scalar, DevxTensorList out) {
  return foreach_map<kNumbers | kBool, 1>("_foreach_mul", ctx, {self}, out, kNoScalars, [&](auto t, int64_t) {
    using M = opmath_t<decltype(t)>;
    const M s = scalar_as<M>(scalar);
    return [s](M x) { return math::mul(x, s); };
  });
}

DevxStatus mul_tensor(DevxKernelContext* ctx, DevxTensorList self, const DevxTensor* other, DevxTensorList out) {
  if (!other) return invalid("_foreach_mul: NULL tensor");
  bool single = true;
  for (int32_t d = 0; d < other->ndim; ++d) single = single && other->sizes[d] == 1;
  return for_each("_foreach_mul", ctx, {self}, out, kNoScalars, [&](int64_t i, std::function<void()>* work) {
    return dispatch_in<kNumbers | kBool>(out.items[i]->dtype, [&](auto tag) -> DevxStatus {
      using T = decltype(tag);
      using M = opmath_t<T>;
      const auto f = [](M x, M y) { return math::mul(x, y); };
      // A single value enters 16-bit float products unrounded, as in mul.
      if (single) return Pointwise<T, T, M>::prepare({self.items[i], other}, out.items[i], f, work);
      return Pointwise<T, T, T>::prepare({self.items[i], other}, out.items[i], f, work);
    });
  });
}

DevxStatus div_list(DevxKernelContext* ctx, DevxTensorList self, DevxTensorList other, DevxTensorList out) {
  return foreach_map<kFloats, 2>("_foreach_div", ctx, {self, other}, out, kNoScalars, [](auto t, int64_t) {
    using M = opmath_t<decltype(t)>;
    return [](M x, M y) { return x / y; };
  });
}

DevxStatus div_scalar(DevxKernelContext* ctx, DevxTensorList self, const DevxScalar* scalar, DevxTensorList out) {
  return foreach_map<kFloats, 1>("_foreach_div", ctx, {self}, out, kNoScalars, [&](auto t, int64_t) {
    using M = opmath_t<decltype(t)>;
    const M s = scalar_as<M>(scalar);
    return [s](M x) { return x / s; };
  });
}

DevxStatus div_scalar_list(DevxKernelContext* ctx, DevxTensorList self, DevxScalarList scalars, DevxTensorList out) {
  return foreach_map<kFloats, 1>("_foreach_div", ctx, {self}, out, scalars.len, [&](auto t, int64_t i) {
    using M = opmath_t<decltype(t)>;
    const M s = scalar_at<M>(scalars, i);
    return [s](M x) { return x / s; };
  });
}

// ---- addcmul, addcdiv

template <bool Div, typename Value>
DevxStatus addc(DevxKernelContext* ctx, DevxTensorList self, DevxTensorList tensor1, DevxTensorList tensor2,
                int64_t scalars, Value value, DevxTensorList out) {
  constexpr int kSet = Div ? kFloats : kNumbers;
  return foreach_map<kSet, 3>(Div ? "_foreach_addcdiv" : "_foreach_addcmul", ctx, {self, tensor1, tensor2}, out,
                              scalars, [&](auto t, int64_t i) {
                                using M = opmath_t<decltype(t)>;
                                const M v = value(M{}, i);
                                return [v](M x, M a, M b) {
                                  if constexpr (Div) {
                                    return math::addcdiv(x, a, b, v);
                                  } else {
                                    return math::addcmul(x, a, b, v);
                                  }
                                };
                              });
}

template <bool Div>
DevxStatus addc_scalar(DevxKernelContext* ctx, DevxTensorList self, DevxTensorList tensor1, DevxTensorList tensor2,
                       const DevxScalar* value, DevxTensorList out) {
  if (!value) return invalid("_foreach_addc: NULL value");
  return addc<Div>(ctx, self, tensor1, tensor2, kNoScalars,
                   [value](auto m, int64_t) { return scalar_as<decltype(m)>(value); }, out);
}

template <bool Div>
DevxStatus addc_scalar_list(DevxKernelContext* ctx, DevxTensorList self, DevxTensorList tensor1,
                            DevxTensorList tensor2, DevxScalarList scalars, DevxTensorList out) {
  return addc<Div>(ctx, self, tensor1, tensor2, scalars.len,
                   [scalars](auto m, int64_t i) { return scalar_at<decltype(m)>(scalars, i); }, out);
}

// ---- the rest

DevxStatus sqrt_list(DevxKernelContext* ctx, DevxTensorList self, DevxTensorList out) {
  return foreach_map<kFloats, 1>("_foreach_sqrt", ctx, {self}, out, kNoScalars, [](auto t, int64_t) {
    using M = opmath_t<decltype(t)>;
    return [](M x) { return std::sqrt(x); };
  });
}

DevxStatus neg_list(DevxKernelContext* ctx, DevxTensorList self, DevxTensorList out) {
  return foreach_map<kNumbers, 1>("_foreach_neg", ctx, {self}, out, kNoScalars, [](auto t, int64_t) {
    using M = opmath_t<decltype(t)>;
    return [](M x) { return math::neg(x); };
  });
}

DevxStatus lerp_scalar(DevxKernelContext* ctx, DevxTensorList self, DevxTensorList tensors1, const DevxScalar* weight,
                       DevxTensorList out) {
  if (!weight) return invalid("_foreach_lerp: NULL weight");
  return foreach_map<kFloats, 2>("_foreach_lerp", ctx, {self, tensors1}, out, kNoScalars, [&](auto t, int64_t) {
    using M = opmath_t<decltype(t)>;
    const M w = scalar_as<M>(weight);
    return [w](M a, M b) { return math::lerp(a, b, w); };
  });
}

DevxStatus maximum_list(DevxKernelContext* ctx, DevxTensorList self, DevxTensorList other, DevxTensorList out) {
  return foreach_map<kNumbers | kBool, 2>("_foreach_maximum", ctx, {self, other}, out, kNoScalars,
                                          [](auto t, int64_t) {
                                            using M = opmath_t<decltype(t)>;
                                            return [](M x, M y) { return math::maximum(x, y); };
                                          });
}

DevxStatus copy_list(DevxKernelContext* ctx, DevxTensorList self, DevxTensorList src, int /*non_blocking*/,
                     DevxTensorList out) {
  if (self.len != out.len) return invalid("_foreach_copy: lists of different lengths");
  return foreach_map<kAllTypes, 1>("_foreach_copy", ctx, {src}, out, kNoScalars, [](auto t, int64_t) {
    using M = opmath_t<decltype(t)>;
    return [](M x) { return x; };
  });
}

DEVX_SIM_REGISTER_KERNEL(_foreach_add_List_out, add_list);
DEVX_SIM_REGISTER_KERNEL(_foreach_add_Scalar_out, add_scalar);
DEVX_SIM_REGISTER_KERNEL(_foreach_add_ScalarList_out, add_scalar_list);
DEVX_SIM_REGISTER_KERNEL(_foreach_sub_List_out, sub_list);
DEVX_SIM_REGISTER_KERNEL(_foreach_sub_Scalar_out, sub_scalar);
DEVX_SIM_REGISTER_KERNEL(_foreach_mul_List_out, mul_list);
DEVX_SIM_REGISTER_KERNEL(_foreach_mul_Scalar_out, mul_scalar);
DEVX_SIM_REGISTER_KERNEL(_foreach_mul_Tensor_out, mul_tensor);
DEVX_SIM_REGISTER_KERNEL(_foreach_div_List_out, div_list);
DEVX_SIM_REGISTER_KERNEL(_foreach_div_Scalar_out, div_scalar);
DEVX_SIM_REGISTER_KERNEL(_foreach_div_ScalarList_out, div_scalar_list);
DEVX_SIM_REGISTER_KERNEL(_foreach_addcmul_Scalar_out, addc_scalar<false>);
DEVX_SIM_REGISTER_KERNEL(_foreach_addcmul_ScalarList_out, addc_scalar_list<false>);
DEVX_SIM_REGISTER_KERNEL(_foreach_addcdiv_Scalar_out, addc_scalar<true>);
DEVX_SIM_REGISTER_KERNEL(_foreach_addcdiv_ScalarList_out, addc_scalar_list<true>);
DEVX_SIM_REGISTER_KERNEL(_foreach_sqrt_out, sqrt_list);
DEVX_SIM_REGISTER_KERNEL(_foreach_neg_out, neg_list);
DEVX_SIM_REGISTER_KERNEL(_foreach_lerp_Scalar_out, lerp_scalar);
DEVX_SIM_REGISTER_KERNEL(_foreach_maximum_List_out, maximum_list);
DEVX_SIM_REGISTER_KERNEL(_foreach_copy_out, copy_list);

}  // namespace
}  // namespace devx::cpu_sim::kern
