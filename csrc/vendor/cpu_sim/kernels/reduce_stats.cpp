// Statistics over dimensions: var and std (with a correction), vector norms (linalg_vector_norm
// and _foreach_norm). Computed in double whatever the dtype.
#include <cmath>
#include <limits>

#include "kernels/reduce_util.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

using namespace reduce_util;

// Welford's running mean and sum of squared deviations: one pass, and chunks merge exactly.
struct Welford {
  double n = 0, mean = 0, m2 = 0;
  void add(double x) {
    n += 1;
    const double d = x - mean;
    mean += d / n;
    m2 += d * (x - mean);
  }
  void merge(const Welford& b) {
    if (b.n == 0) return;
    if (n == 0) {
      *this = b;
      return;
    }
    const double total = n + b.n, d = b.mean - mean;
    mean += d * b.n / total;
    m2 += b.m2 + d * d * n * b.n / total;
    n = total;
  }
};

// A complex value's variance is the sum of its parts' variances.
struct Moments {
  Welford re, im;
};

template <bool Std>
DevxStatus var_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxIntList* dim,
                   const DevxScalar* correction, int, DevxTensor* out) {
  const std::string op = Std ? "std" : "var";
  if (!self || !out) return invalid(op + ": NULL tensor");
  const Tensor in = take(self), o = take(out);
  DimMask mask;
  if (std::string why = reduce_mask(in.ndim(), dim, &mask); !why.empty()) return invalid(op + ": " + why);
  std::string why;
  const Reduction<1> r = make_reduction<1>(in, mask, {&o}, &why);
  if (!why.empty()) return invalid(op + ": " + why);
  const double c = correction ? scalar_as<double>(correction) : 1.0;
  return dispatch_in<kFloats | kComplex>(in.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    return launch(ctx, [in, o, r, c] {
      const T* x = in.ptr<const T>();
      auto step = [x](Moments& m, int64_t off, int64_t) {
        if constexpr (is_complex_v<T>) {
          m.re.add(x[off].real());
          m.im.add(x[off].imag());
        } else {
          m.re.add(static_cast<double>(static_cast<opmath_t<T>>(x[off])));
        }
      };
      auto combine = [](Moments& a, const Moments& b) {
        a.re.merge(b.re);
        a.im.merge(b.im);
      };
      const double divisor = std::max(0.0, static_cast<double>(r.n_red) - c);
      run_reduction(r, Moments{}, step, combine, [&](const std::array<int64_t, 1>& off, const Moments& m) {
        const double var = (m.re.m2 + m.im.m2) / divisor;
        write_as<double>(o, off[0], Std ? std::sqrt(var) : var);
      });
    });
  });
}

// var_mean: the variance (as var) into out0 and the mean into out1, from one pass.
DevxStatus var_mean_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxIntList* dim,
                        const DevxScalar* correction, int, DevxTensor* out0, DevxTensor* out1) {
  if (!self || !out0 || !out1) return invalid("var_mean: NULL tensor");
  const Tensor in = take(self), var = take(out0), mean = take(out1);
  DimMask mask;
  if (std::string why = reduce_mask(in.ndim(), dim, &mask); !why.empty()) return invalid("var_mean: " + why);
  std::string why;
  const Reduction<2> r = make_reduction<2>(in, mask, {&var, &mean}, &why);
  if (!why.empty()) return invalid("var_mean: " + why);
  const double c = correction ? scalar_as<double>(correction) : 1.0;
  return dispatch_in<kFloats | kComplex>(in.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    return launch(ctx, [in, var, mean, r, c] {
      const T* x = in.ptr<const T>();
      auto step = [x](Moments& m, int64_t off, int64_t) {
        if constexpr (is_complex_v<T>) {
          m.re.add(x[off].real());
          m.im.add(x[off].imag());
        } else {
          m.re.add(static_cast<double>(static_cast<opmath_t<T>>(x[off])));
        }
      };
      auto combine = [](Moments& a, const Moments& b) {
        a.re.merge(b.re);
        a.im.merge(b.im);
      };
      const double divisor = std::max(0.0, static_cast<double>(r.n_red) - c);
      run_reduction(r, Moments{}, step, combine, [&](const std::array<int64_t, 2>& off, const Moments& m) {
        write_as<double>(var, off[0], (m.re.m2 + m.im.m2) / divisor);
        // An empty reduction's mean is NaN, as 0 / 0.
        const double n = m.re.n;
        if constexpr (is_complex_v<T>) {
          write_as<c128>(mean, off[1], n ? c128(m.re.mean, m.im.mean) : c128(NAN, NAN));
        } else {
          write_as<double>(mean, off[1], n ? m.re.mean : NAN);
        }
      });
    });
  });
}

enum class NormKind { kZero, kOne, kTwo, kInf, kNegInf, kPow };

NormKind norm_kind(double p) {
  if (p == 0) return NormKind::kZero;
  if (p == 1) return NormKind::kOne;
  if (p == 2) return NormKind::kTwo;
  if (std::isinf(p)) return p > 0 ? NormKind::kInf : NormKind::kNegInf;
  return NormKind::kPow;
}

// A NaN once met stays the extreme, as in ATen's max/min norms.
inline void keep_extreme(double& acc, double v, bool max) {
  if (acc != acc) return;
  if (v != v || (max ? v > acc : v < acc)) acc = v;
}

template <typename T>
inline double magnitude(T v) {
  if constexpr (is_complex_v<T>) {
    return std::abs(convert<c128>(v));
  } else {
    return std::abs(static_cast<double>(static_cast<opmath_t<T>>(v)));
  }
}

// One |x| folded into the accumulator of norm K.
template <NormKind K>
inline void norm_add(double& acc, double a, double p) {
  if constexpr (K == NormKind::kZero) acc += a != 0;
  else if constexpr (K == NormKind::kOne) acc += a;
  else if constexpr (K == NormKind::kTwo) acc += a * a;
  else if constexpr (K == NormKind::kInf) keep_extreme(acc, a, true);
  else if constexpr (K == NormKind::kNegInf) keep_extreme(acc, a, false);
  else acc += std::pow(a, p);
}

// The norm K of `in` over `r`'s reduced dimensions, its values read as T (the dtype= argument, or
// the input's dtype).
template <typename T, NormKind K>
void norm_work(const Tensor& in, const Tensor& o, const Reduction<1>& r, double p) {
  constexpr bool extreme = K == NormKind::kInf || K == NormKind::kNegInf;
  auto step = [&](double& acc, int64_t off, int64_t) { norm_add<K>(acc, magnitude(read_as<T>(in, off)), p); };
  // Sums of a row in kLanes independent partial sums: no chain of dependent additions.
  auto row = [&](double& acc, int64_t off, int64_t st, int64_t len) {
    if (extreme || in.dtype != type_dtype<T>()) {
      for (int64_t i = 0; i < len; ++i) step(acc, off + i * st, 0);
      return;
    }
    constexpr int kLanes = 8;
    const T* x = in.ptr<const T>() + off;
    std::array<double, kLanes> part{};
    int64_t i = 0;
    for (; i + kLanes <= len; i += kLanes) {
      for (int k = 0; k < kLanes; ++k) norm_add<K>(part[k], magnitude(x[(i + k) * st]), p);
    }
    for (; i < len; ++i) norm_add<K>(part[0], magnitude(x[i * st]), p);
    for (int k = 0; k < kLanes; ++k) acc += part[k];
  };
  auto combine = [](double& a, const double& b) {
    if constexpr (extreme) {
      keep_extreme(a, b, K == NormKind::kInf);
    } else {
      a += b;
    }
  };
  const double init = K == NormKind::kNegInf ? std::numeric_limits<double>::infinity() : 0.0;
  run_reduction(
      r, init, step, combine,
      [&](const std::array<int64_t, 1>& off, const double& acc) {
        const double v = K == NormKind::kTwo ? std::sqrt(acc) : K == NormKind::kPow ? std::pow(acc, 1.0 / p) : acc;
        write_as<double>(o, off[0], v);
      },
      row);
}

template <typename T>
void norm_work(const Tensor& in, const Tensor& o, const Reduction<1>& r, double p) {
  switch (norm_kind(p)) {
    case NormKind::kZero: return norm_work<T, NormKind::kZero>(in, o, r, p);
    case NormKind::kOne: return norm_work<T, NormKind::kOne>(in, o, r, p);
    case NormKind::kTwo: return norm_work<T, NormKind::kTwo>(in, o, r, p);
    case NormKind::kInf: return norm_work<T, NormKind::kInf>(in, o, r, p);
    case NormKind::kNegInf: return norm_work<T, NormKind::kNegInf>(in, o, r, p);
    case NormKind::kPow: return norm_work<T, NormKind::kPow>(in, o, r, p);
  }
}

// Issues nothing: checks the arguments and returns the work computing one norm.
DevxStatus norm_job(const std::string& op, const DevxTensor* self, const DevxScalar* ord, const int64_t* dims,
                    int64_t ndims, const DevxDType* dtype, const DevxTensor* out, std::function<void()>* job) {
  if (!self || !out) return invalid(op + ": NULL tensor");
  const Tensor in = take(self), o = take(out);
  DimMask mask;
  if (std::string why = reduce_mask(in.ndim(), dims, ndims, &mask); !why.empty()) return invalid(op + ": " + why);
  std::string why;
  const Reduction<1> r = make_reduction<1>(in, mask, {&o}, &why);
  if (!why.empty()) return invalid(op + ": " + why);
  const double p = ord ? scalar_as<double>(ord) : 2.0;
  if (r.n_red == 0 && r.n_out > 0 && (p < 0 || std::isinf(p))) {
    return invalid(op + " cannot compute the " + (std::isinf(p) ? std::string(p > 0 ? "inf" : "-inf") : "negative") +
                   " norm on an empty tensor because the operation does not have an identity");
  }
  if (!is_floating(o.dtype)) return decline(op + ": output dtype " + dtype_name(o.dtype));
  return dispatch_in<kFloats | kComplex>(dtype ? *dtype : in.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    *job = [in, o, r, p] { norm_work<T>(in, o, r, p); };
    return DEVX_OK;
  });
}

DevxStatus vector_norm_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxScalar* ord,
                           const DevxIntList* dim, int, const DevxDType* dtype, DevxTensor* out) {
  std::function<void()> job;
  if (DevxStatus s = norm_job("linalg.vector_norm", self, ord, dim ? dim->data : nullptr, dim ? dim->len : 0, dtype,
                              out, &job)) {
    return s;
  }
  return launch(ctx, std::move(job));
}

DevxStatus foreach_norm_out(DevxKernelContext* ctx, DevxTensorList self, const DevxScalar* ord, const DevxDType* dtype,
                            DevxTensorList out) {
  if (self.len != out.len) return invalid("_foreach_norm: as many outputs as inputs expected");
  std::vector<std::function<void()>> jobs(static_cast<size_t>(self.len));
  for (int64_t i = 0; i < self.len; ++i) {
    if (DevxStatus s = norm_job("_foreach_norm", self.items[i], ord, nullptr, 0, dtype, out.items[i], &jobs[i])) {
      return s;
    }
  }
  if (jobs.empty()) return DEVX_OK;
  return launch(ctx, [jobs = std::move(jobs)] {
    for (const auto& job : jobs) job();
  });
}

DEVX_SIM_REGISTER_KERNEL(var_correction_out, var_out<false>);
DEVX_SIM_REGISTER_KERNEL(std_correction_out, var_out<true>);
DEVX_SIM_REGISTER_KERNEL(var_mean_correction_out, var_mean_out);
DEVX_SIM_REGISTER_KERNEL(linalg_vector_norm_out, vector_norm_out);
DEVX_SIM_REGISTER_KERNEL(_foreach_norm_Scalar_out, foreach_norm_out);

}  // namespace
}  // namespace devx::cpu_sim::kern
