// Sums (nansum: NaNs counted as 0), means, products, all and any over a list of dimensions (or all of them).
#include "kernels/reduce_util.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

using namespace reduce_util;

enum class Fold { kSum, kNanSum, kMean, kProd };

// The values are converted to the output's dtype (as ATen's dtype= argument does) and folded in
// acc_t of it.
DevxStatus fold_out(DevxKernelContext* ctx, const std::string& op, const DevxTensor* self, const int64_t* dims,
                    int64_t ndims, DevxTensor* out, Fold fold) {
  if (!self || !out) return invalid(op + ": NULL tensor");
  const Tensor in = take(self), o = take(out);
  DimMask mask;
  if (std::string why = reduce_mask(in.ndim(), dims, ndims, &mask); !why.empty()) return invalid(op + ": " + why);
  std::string why;
  const Reduction<1> r = make_reduction<1>(in, mask, {&o}, &why);
  if (!why.empty()) return invalid(op + ": " + why);
  if (fold == Fold::kMean && !is_floating(o.dtype) && !is_complex(o.dtype)) {
    return decline("mean: an integral output");
  }
  if (fold == Fold::kNanSum && is_complex(in.dtype)) return invalid("nansum does not support complex inputs");
  return dispatch_in<kAllTypes>(o.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using A = acc_t<T>;
    return launch(ctx, [in, o, r, fold] {
      const A init = fold == Fold::kProd ? A(1) : A(0);
      auto combine = [fold](A& a, const A& b) { a = fold == Fold::kProd ? acc_mul(a, b) : acc_add(a, b); };
      auto step = [&](A& acc, int64_t off, int64_t) {
        const A v = convert<A>(read_as<T>(in, off));
        if (fold != Fold::kNanSum || !is_nan(v)) combine(acc, v);
      };
      // Sums of a row in kLanes independent partial sums: no chain of dependent additions.
      auto row = [&](A& acc, int64_t off, int64_t st, int64_t len) {
        if (fold == Fold::kProd || fold == Fold::kNanSum || in.dtype != type_dtype<T>()) {
          for (int64_t i = 0; i < len; ++i) step(acc, off + i * st, 0);
          return;
        }
        constexpr int kLanes = 8;
        const T* x = in.ptr<const T>() + off;
        std::array<A, kLanes> part{};
        int64_t i = 0;
        for (; i + kLanes <= len; i += kLanes) {
          for (int k = 0; k < kLanes; ++k) part[k] = acc_add(part[k], convert<A>(x[(i + k) * st]));
        }
        for (; i < len; ++i) part[0] = acc_add(part[0], convert<A>(x[i * st]));
        for (int k = 0; k < kLanes; ++k) acc = acc_add(acc, part[k]);
      };
      const int64_t n = r.n_red;
      run_reduction(
          r, init, step, combine,
          [&](const std::array<int64_t, 1>& off, const A& acc) {
            if constexpr (std::is_same_v<A, int64_t>) {
              o.ptr<T>()[off[0]] = convert<T>(acc);
            } else {
              o.ptr<T>()[off[0]] = convert<T>(fold == Fold::kMean ? acc / static_cast<double>(n) : acc);
            }
          },
          row);
    });
  });
}

DevxStatus sum_dim_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxIntList* dim, int, const DevxDType*,
                       DevxTensor* out) {
  return fold_out(ctx, "sum", self, dim ? dim->data : nullptr, dim ? dim->len : 0, out, Fold::kSum);
}

DevxStatus sum_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxDType*, DevxTensor* out) {
  return fold_out(ctx, "sum", self, nullptr, 0, out, Fold::kSum);
}

DevxStatus nansum_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxIntList* dim, int, const DevxDType*,
                      DevxTensor* out) {
  return fold_out(ctx, "nansum", self, dim ? dim->data : nullptr, dim ? dim->len : 0, out, Fold::kNanSum);
}

DevxStatus mean_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxIntList* dim, int, const DevxDType*,
                    DevxTensor* out) {
  return fold_out(ctx, "mean", self, dim ? dim->data : nullptr, dim ? dim->len : 0, out, Fold::kMean);
}

DevxStatus prod_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxDType*, DevxTensor* out) {
  return fold_out(ctx, "prod", self, nullptr, 0, out, Fold::kProd);
}

// all/any of any dtype: a value counts as true when nonzero (NaN included); the output is bool,
// or uint8 for a uint8 input.
DevxStatus logical_reduce_out(DevxKernelContext* ctx, const std::string& op, const DevxTensor* self, const int64_t* dim,
                       DevxTensor* out, bool all) {
  if (!self || !out) return invalid(op + ": NULL tensor");
  const Tensor in = take(self), o = take(out);
  DimMask mask;
  if (std::string why = reduce_mask(in.ndim(), dim, dim ? 1 : 0, &mask); !why.empty()) return invalid(op + ": " + why);
  std::string why;
  const Reduction<1> r = make_reduction<1>(in, mask, {&o}, &why);
  if (!why.empty()) return invalid(op + ": " + why);
  if (o.dtype != DEVX_BOOL && o.dtype != DEVX_UINT8) return decline(op + ": output dtype " + dtype_name(o.dtype));
  return dispatch(in.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    return launch(ctx, [in, o, r, all] {
      const T* x = in.ptr<const T>();
      auto step = [&](bool& acc, int64_t off, int64_t) {
        bool v;
        if constexpr (is_complex_v<T>) v = x[off] != T(0);
        else v = convert<bool>(x[off]);
        acc = all ? acc && v : acc || v;
      };
      auto combine = [all](bool& a, const bool& b) { a = all ? a && b : a || b; };
      run_reduction(r, all, step, combine,
                    [&](const std::array<int64_t, 1>& off, const bool& acc) { write_as<bool>(o, off[0], acc); });
    });
  });
}

DevxStatus all_all_out(DevxKernelContext* ctx, const DevxTensor* self, DevxTensor* out) {
  return logical_reduce_out(ctx, "all", self, nullptr, out, true);
}
DevxStatus all_dim_out(DevxKernelContext* ctx, const DevxTensor* self, int64_t dim, int, DevxTensor* out) {
  return logical_reduce_out(ctx, "all", self, &dim, out, true);
}
DevxStatus any_all_out(DevxKernelContext* ctx, const DevxTensor* self, DevxTensor* out) {
  return logical_reduce_out(ctx, "any", self, nullptr, out, false);
}
DevxStatus any_dim_out(DevxKernelContext* ctx, const DevxTensor* self, int64_t dim, int, DevxTensor* out) {
  return logical_reduce_out(ctx, "any", self, &dim, out, false);
}

DEVX_SIM_REGISTER_KERNEL(sum_IntList_out, sum_dim_out);
DEVX_SIM_REGISTER_KERNEL(sum_out, sum_out);
DEVX_SIM_REGISTER_KERNEL(nansum_out, nansum_out);
DEVX_SIM_REGISTER_KERNEL(mean_out, mean_out);
DEVX_SIM_REGISTER_KERNEL(prod_out, prod_out);
DEVX_SIM_REGISTER_KERNEL(all_all_out, all_all_out);
DEVX_SIM_REGISTER_KERNEL(all_out, all_dim_out);
DEVX_SIM_REGISTER_KERNEL(any_all_out, any_all_out);
DEVX_SIM_REGISTER_KERNEL(any_out, any_dim_out);

}  // namespace
}  // namespace devx::cpu_sim::kern
