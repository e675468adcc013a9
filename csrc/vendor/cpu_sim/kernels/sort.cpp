// Sorting along one dimension: sort (always stable) and topk. NaN orders above every number, as
// in ATen.
#include <algorithm>

#include "kernels/reduce_util.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

using namespace reduce_util;

template <typename M>
struct Keyed {
  M key;
  int64_t index;
};

// a before b in ascending (or descending) order, NaN being the largest value.
template <typename M>
inline bool ordered_before(M a, M b, bool descending) {
  return descending ? (a > b || (is_nan(a) && !is_nan(b))) : (a < b || (is_nan(b) && !is_nan(a)));
}

struct SortRows {
  Tensor in, values, indices;
  int dim = 0;
};

DevxStatus prepare_sort(const std::string& op, const DevxTensor* self, int64_t dim, DevxTensor* values,
                   DevxTensor* indices, SortRows* rows) {
  if (!self || !values || !indices) return invalid(op + ": NULL tensor");
  if (!wrap_dim(&dim, self->ndim)) return invalid(op + ": dimension out of range");
  rows->in = at_least_1d(take(self));
  rows->values = at_least_1d(take(values));
  rows->indices = at_least_1d(take(indices));
  rows->dim = static_cast<int>(dim);
  if (rows->values.dtype != rows->in.dtype) return decline(op + ": values of another dtype than the input");
  if (rows->indices.dtype != DEVX_INT64) return decline(op + ": indices that are not int64");
  if (rows->values.sizes != rows->indices.sizes || rows->values.ndim() != rows->in.ndim()) {
    return invalid(op + ": output shapes do not match");
  }
  return DEVX_OK;
}

// Calls order(buffer of the row's keyed values) per row, then writes the row's first `k` entries.
template <typename T, typename Order>
void sort_rows(const SortRows& r, int64_t k, Order order) {
  using M = opmath_t<T>;
  const int d = r.dim;
  const int64_t n = r.in.size(d), sx = r.in.stride(d), sv = r.values.stride(d), si = r.indices.stride(d);
  for_each_row<3>(r.in.sizes, d, {r.in.strides, r.values.strides, r.indices.strides},
                  [&](const std::array<int64_t, 3>& off) {
                    std::vector<Keyed<M>> buf(static_cast<size_t>(n));
                    const T* x = r.in.ptr<const T>() + off[0];
                    for (int64_t j = 0; j < n; ++j) buf[j] = {static_cast<M>(x[j * sx]), j};
                    order(buf);
                    T* v = r.values.ptr<T>() + off[1];
                    int64_t* idx = r.indices.ptr<int64_t>() + off[2];
                    for (int64_t j = 0; j < k; ++j) {
                      v[j * sv] = convert<T>(buf[j].key);
                      idx[j * si] = buf[j].index;
                    }
                  });
}

DevxStatus sort_out(DevxKernelContext* ctx, const DevxTensor* self, const int*, int64_t dim, int descending,
                    DevxTensor* values, DevxTensor* indices) {
  SortRows rows;
  if (DevxStatus s = prepare_sort("sort", self, dim, values, indices, &rows)) return s;
  if (rows.values.sizes != rows.in.sizes) return invalid("sort: output shapes do not match");
  if (rows.in.numel() == 0) return DEVX_OK;
  return dispatch_in<kNumbers | kBool>(rows.in.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    const bool desc = descending != 0;
    return launch(ctx, [rows, desc] {
      sort_rows<T>(rows, rows.in.size(rows.dim), [desc](std::vector<Keyed<M>>& buf) {
        std::stable_sort(buf.begin(), buf.end(),
                         [desc](const Keyed<M>& a, const Keyed<M>& b) { return ordered_before(a.key, b.key, desc); });
      });
    });
  });
}

// Ties keep their order in the row (ATen leaves it unspecified). `sorted` false gets them sorted too.
DevxStatus topk_out(DevxKernelContext* ctx, const DevxTensor* self, int64_t k, int64_t dim, int largest, int,
                    DevxTensor* values, DevxTensor* indices) {
  SortRows rows;
  if (DevxStatus s = prepare_sort("topk", self, dim, values, indices, &rows)) return s;
  if (k < 0 || k > rows.in.size(rows.dim)) return invalid("topk: selected index k out of range");
  if (rows.values.size(rows.dim) != k) return invalid("topk: output shapes do not match");
  if (rows.values.numel() == 0) return DEVX_OK;
  return dispatch_in<kNumbers | kBool>(rows.in.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    const bool desc = largest != 0;
    return launch(ctx, [rows, k, desc] {
      sort_rows<T>(rows, k, [desc, k](std::vector<Keyed<M>>& buf) {
        std::partial_sort(buf.begin(), buf.begin() + k, buf.end(), [desc](const Keyed<M>& a, const Keyed<M>& b) {
          if (ordered_before(a.key, b.key, desc)) return true;
          return !ordered_before(b.key, a.key, desc) && a.index < b.index;
        });
      });
    });
  });
}

DEVX_SIM_REGISTER_KERNEL(sort_values_stable, sort_out);
DEVX_SIM_REGISTER_KERNEL(topk_values, topk_out);

}  // namespace
}  // namespace devx::cpu_sim::kern
