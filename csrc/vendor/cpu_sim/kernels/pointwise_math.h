// Scalar formulas shared by the pointwise and the _foreach_ kernels, on the arithmetic types
// (opmath_t): where ATen's result depends on the formula (NaN propagation, lerp's two halves,
// integer wrap-around), both paths must use the same one.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/common.h"

namespace devx::cpu_sim::kern::math {

template <typename M>
constexpr bool is_int_v = std::is_integral_v<M> && !std::is_same_v<M, bool>;

template <typename M>
inline bool is_nan(M x) {
  if constexpr (std::is_floating_point_v<M>) {
    return x != x;
  } else {
    return false;
  }
}

// Two's complement negation without signed overflow (-INT64_MIN wraps, as in ATen).
template <typename M>
inline M neg(M x) {
  if constexpr (is_int_v<M>) {
    using U = std::make_unsigned_t<M>;
    return static_cast<M>(static_cast<U>(U(0) - static_cast<U>(x)));
  } else {
    return -x;
  }
}

// x + alpha * y, wrapping for integers.
template <typename M>
inline M add(M x, M y, M alpha) {
  if constexpr (std::is_same_v<M, bool>) {
    return x || (alpha && y);
  } else if constexpr (is_int_v<M>) {
    using U = std::make_unsigned_t<M>;
    return static_cast<M>(static_cast<U>(static_cast<U>(x) + static_cast<U>(alpha) * static_cast<U>(y)));
  } else {
    return x + alpha * y;
  }
}

template <typename M>
inline M mul(M x, M y) {
  if constexpr (std::is_same_v<M, bool>) {
    return x && y;
  } else if constexpr (is_int_v<M>) {
    using U = std::make_unsigned_t<M>;
    return static_cast<M>(static_cast<U>(static_cast<U>(x) * static_cast<U>(y)));
  } else {
    return x * y;
  }
}

// maximum / minimum: a NaN operand gives NaN.
template <typename M>
inline M maximum(M x, M y) {
  if constexpr (std::is_same_v<M, bool>) {
    return x || y;
  } else {
    if (is_nan(x)) return x;
    if (is_nan(y)) return y;
    return x < y ? y : x;
  }
}

template <typename M>
inline M minimum(M x, M y) {
  if constexpr (std::is_same_v<M, bool>) {
    return x && y;
  } else {
    if (is_nan(x)) return x;
    if (is_nan(y)) return y;
    return y < x ? y : x;
  }
}

// clamp: a NaN bound gives NaN, a NaN x stays NaN; min then max, so that min > max gives max.
template <typename M>
inline M clamp_min(M x, M lo) {
  if (is_nan(lo)) return lo;
  return x < lo ? lo : x;
}

template <typename M>
inline M clamp_max(M x, M hi) {
  if (is_nan(hi)) return hi;
  return hi < x ? hi : x;
}

template <typename M>
inline M clamp(M x, M lo, M hi) {
  return clamp_max(clamp_min(x, lo), hi);
}

// lerp in the form ATen uses: from the nearer end, so that weight 1 gives `end` exactly.
template <typename M>
inline M lerp(M self, M end, M weight) {
  return std::abs(weight) < M(0.5) ? self + weight * (end - self) : end - (end - self) * (M(1) - weight);
}

template <typename M>
inline M addcmul(M self, M t1, M t2, M value) {
  if constexpr (is_int_v<M>) {
    return add(self, mul(t1, t2), value);
  } else {
    return self + value * t1 * t2;
  }
}

template <typename M>
inline M addcdiv(M self, M t1, M t2, M value) {
  return self + value * t1 / t2;
}

}  // namespace devx::cpu_sim::kern::math
