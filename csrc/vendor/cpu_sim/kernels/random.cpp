// Random numbers and dropout, drawn from Philox 4x32-10 (philox.h) keyed by the seed and offset
// that ctx->philox_state reserves from the devx generator: a seeded generator, torch.manual_seed
// and get/set_rng_state replay the same numbers, and every element's draw depends only on its
// row-major index, so the threads split the work freely. The numbers are not the CPU's.
#include <cmath>
#include <limits>
#include <string>

#include "kernels/philox.h"
#include "kernels/pointwise.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

struct Key {
  uint64_t seed = 0, offset = 0;
};

DevxStatus reserve(DevxKernelContext* ctx, DevxGenerator generator, int64_t blocks, Key* key) {
  return ctx->philox_state(ctx, generator, static_cast<uint64_t>(blocks), &key->seed, &key->offset);
}

// The values of the elements of one Philox block: gen(block) gives the PerBlock values that
// consecutive elements take, made once per block (a Box-Muller pair shares its logarithm).
template <typename V, int PerBlock, typename G>
struct Draws {
  Key key;
  const G& gen;
  int64_t current = -1;
  std::array<V, PerBlock> values{};

  V at(int64_t i) {
    const int64_t b = i / PerBlock;
    if (b != current) {
      values = gen(philox::block(key.seed, key.offset, static_cast<uint64_t>(b)));
      current = b;
    }
    return values[static_cast<size_t>(i % PerBlock)];
  }
};

// out[i] = the value of element i from gen (see Draws), for every element of `out`, any strides.
template <typename T, int PerBlock, typename G>
DevxStatus fill(DevxKernelContext* ctx, DevxGenerator generator, DevxTensor* out, G gen) {
  Tensor o = take(out);
  const int64_t n = o.numel();
  if (n == 0) return DEVX_OK;
  Key key;
  if (DevxStatus s = reserve(ctx, generator, (n + PerBlock - 1) / PerBlock, &key)) return s;
  Loop<1> loop(o.sizes, {o.strides});
  return launch(ctx, [o, loop, key, gen] {
    parallel_for(loop.numel(), kGrain, [&](int64_t begin, int64_t end) {
      Draws<T, PerBlock, G> draws{key, gen};
      int64_t i = begin;
      loop.run(begin, end, [&](const std::array<int64_t, 1>& off, int64_t len, const std::array<int64_t, 1>& st) {
        T* p = o.ptr<T>() + off[0];
        for (int64_t k = 0; k < len; ++k, ++i) p[k * st[0]] = draws.at(i);
      });
    });
  });
}

// Significand bits of the floating types (the integers up to 2^digits are exact).
template <typename T>
constexpr int digits() {
  if constexpr (std::is_same_v<T, Half>) return 11;
  else if constexpr (std::is_same_v<T, BFloat16>) return 8;
  else return std::numeric_limits<T>::digits;
}

template <typename T>
double max_finite() {
  if constexpr (std::is_same_v<T, Half>) return 65504.0;
  else if constexpr (std::is_same_v<T, BFloat16>) return 3.3895313892515355e38;
  else return static_cast<double>(std::numeric_limits<T>::max());
}

// [0, 1) with the resolution of T, so that no draw rounds up to 1 in T.
template <typename T>
double unit_of(const philox::Block& b, int lane) {
  if constexpr (std::is_same_v<T, double>) {
    return philox::unit_double(b[2 * lane], b[2 * lane + 1]);
  } else {
    return static_cast<double>(b[lane] >> (32 - digits<T>())) * std::ldexp(1.0, -digits<T>());
  }
}

template <typename T>
constexpr int unit_per_block() {
  return std::is_same_v<T, double> ? 2 : 4;
}

DevxStatus uniform_out(DevxKernelContext* ctx, const DevxTensor* /*self*/, double from, double to,
                       DevxGenerator generator, DevxTensor* out) {
  if (!out) return invalid("uniform_: NULL output");
  return dispatch_in<kFloats>(out->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    if (!(from <= to)) {
      return invalid("uniform_ expects to return a [from, to) range, but found from=" + std::to_string(from) +
                     " > to=" + std::to_string(to));
    }
    if (to - from > max_finite<T>()) {
      return invalid(std::string("uniform_ expects to-from <= std::numeric_limits<") + dtype_name(out->dtype) +
                     ">::max(), but found to=" + std::to_string(to) + " and from=" + std::to_string(from));
    }
    constexpr int kPer = unit_per_block<T>();
    return fill<T, kPer>(ctx, generator, out, [from, to](const philox::Block& b) {
      std::array<T, kPer> v;
      for (int lane = 0; lane < kPer; ++lane) {
        v[lane] = convert<T>(from + unit_of<T>(b, lane) * (to - from));
        // Rounding to T may reach `to`, which the range excludes.
        if (convert<double>(v[lane]) >= to && to > from) v[lane] = convert<T>(from);
      }
      return v;
    });
  });
}

DevxStatus normal_out(DevxKernelContext* ctx, const DevxTensor* /*self*/, double mean, double std,
                      DevxGenerator generator, DevxTensor* out) {
  if (!out) return invalid("normal_: NULL output");
  if (!(std >= 0.0)) return invalid("normal expects std >= 0.0, but found std " + std::to_string(std));
  return dispatch_in<kFloats>(out->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    // Box-Muller: a pair of uniforms gives two normals, r cos(a) and r sin(a); the radius's uniform
    // is taken in (0, 1] for the logarithm. 16-bit and float32 results are computed in float.
    if constexpr (std::is_same_v<T, double>) {
      return fill<T, 2>(ctx, generator, out, [mean, std](const philox::Block& b) {
        const double r = std::sqrt(-2.0 * std::log(1.0 - philox::unit_double(b[0], b[1])));
        const double a = 6.283185307179586 * philox::unit_double(b[2], b[3]);
        return std::array<T, 2>{mean + std * r * std::cos(a), mean + std * r * std::sin(a)};
      });
    } else {
      const float m = static_cast<float>(mean), sd = static_cast<float>(std);
      return fill<T, 4>(ctx, generator, out, [m, sd](const philox::Block& b) {
        std::array<T, 4> v;
        for (int pair = 0; pair < 4; pair += 2) {
          const float r = std::sqrt(-2.0f * std::log(1.0f - philox::unit_float(b[pair])));
          const float a = 6.2831855f * philox::unit_float(b[pair + 1]);
          v[pair] = convert<T>(m + sd * r * std::cos(a));
          v[pair + 1] = convert<T>(m + sd * r * std::sin(a));
        }
        return v;
      });
    }
  });
}

DevxStatus bernoulli_float_out(DevxKernelContext* ctx, const DevxTensor* /*self*/, double p, DevxGenerator generator,
                               DevxTensor* out) {
  if (!out) return invalid("bernoulli_: NULL output");
  if (!(p >= 0.0 && p <= 1.0)) return invalid("bernoulli_ expects p to be in [0, 1], but got p=" + std::to_string(p));
  return dispatch_in<kFloats | kInts | kBool>(out->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    return fill<T, 4>(ctx, generator, out, [p](const philox::Block& b) {
      std::array<T, 4> v;
      for (int lane = 0; lane < 4; ++lane) v[lane] = convert<T>(philox::unit32(b[lane]) < p ? 1 : 0);
      return v;
    });
  });
}

// ---- random_: integers from + [0, range) (range 0: all 2^64 values), cast to the dtype

const char* c_type_name(DevxDType d) {
  switch (d) {
    case DEVX_BOOL: return "bool";
    case DEVX_UINT8: return "unsigned char";
    case DEVX_INT8: return "signed char";
    case DEVX_INT16: return "short int";
    case DEVX_INT32: return "int";
    default: return "long int";
  }
}

template <typename T>
DevxStatus random_range(DevxKernelContext* ctx, DevxGenerator generator, DevxTensor* out, int64_t from,
                        uint64_t range) {
  const auto value = [from, range](uint64_t bits) {
    return convert<T>(static_cast<int64_t>(static_cast<uint64_t>(from) + (range ? bits % range : bits)));
  };
  if (range == 0 || range > (uint64_t{1} << 32)) {
    return fill<T, 2>(ctx, generator, out, [value](const philox::Block& b) {
      return std::array<T, 2>{value((static_cast<uint64_t>(b[0]) << 32) | b[1]),
                              value((static_cast<uint64_t>(b[2]) << 32) | b[3])};
    });
  }
  return fill<T, 4>(ctx, generator, out, [value](const philox::Block& b) {
    return std::array<T, 4>{value(b[0]), value(b[1]), value(b[2]), value(b[3])};
  });
}

// The largest value random_ draws for T when no `to` is given: 2^digits for floating types (the
// integers above are not all exact), the type's maximum otherwise.
template <typename T>
int64_t random_max() {
  if constexpr (is_float_v<T>) return int64_t{1} << digits<T>();
  else if constexpr (std::is_same_v<T, bool>) return 1;
  else return static_cast<int64_t>(std::numeric_limits<T>::max());
}

template <typename T>
bool in_range(int64_t v) {
  if constexpr (is_float_v<T>) return true;  // ATen warns only
  else if constexpr (std::is_same_v<T, bool>) return v == 0 || v == 1;
  else return v >= static_cast<int64_t>(std::numeric_limits<T>::lowest()) &&
              v <= static_cast<int64_t>(std::numeric_limits<T>::max());
}

DevxStatus random_from_to(DevxKernelContext* ctx, DevxGenerator generator, DevxTensor* out, int64_t from,
                          const int64_t* to) {
  if (!out) return invalid("random_: NULL output");
  return dispatch_in<kFloats | kInts | kBool>(out->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    if (to) {
      if (from >= *to) {
        return invalid("random_ expects 'from' to be less than 'to', but got from=" + std::to_string(from) +
                       " >= to=" + std::to_string(*to));
      }
      if (!in_range<T>(from)) return invalid(std::string("from is out of bounds for ") + c_type_name(out->dtype));
      if (!in_range<T>(*to - 1)) return invalid(std::string("to - 1 is out of bounds for ") + c_type_name(out->dtype));
      return random_range<T>(ctx, generator, out, from, static_cast<uint64_t>(*to) - static_cast<uint64_t>(from));
    }
    if (!in_range<T>(from)) return invalid(std::string("from is out of bounds for ") + c_type_name(out->dtype));
    const int64_t to_inc = random_max<T>();
    if (from > to_inc) {
      return invalid("random_ expects 'from' casted to dtype to be less than or equal to 'to_inc' casted to dtype, "
                     "but got from=" + std::to_string(from) + " > to_inc=" + std::to_string(to_inc));
    }
    if (std::is_same_v<T, int64_t> && from == std::numeric_limits<int64_t>::min()) {
      return random_range<T>(ctx, generator, out, from, 0);
    }
    return random_range<T>(ctx, generator, out, from, static_cast<uint64_t>(to_inc) - static_cast<uint64_t>(from) + 1);
  });
}

DevxStatus random_out(DevxKernelContext* ctx, const DevxTensor* /*self*/, DevxGenerator generator, DevxTensor* out) {
  if (!out) return invalid("random_: NULL output");
  return dispatch_in<kFloats | kInts | kBool>(out->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    return random_range<T>(ctx, generator, out, 0, static_cast<uint64_t>(random_max<T>()) + 1);
  });
}

DevxStatus random_from_out(DevxKernelContext* ctx, const DevxTensor* /*self*/, int64_t from, const int64_t* to,
                           DevxGenerator generator, DevxTensor* out) {
  return random_from_to(ctx, generator, out, from, to);
}

DevxStatus random_to_out(DevxKernelContext* ctx, const DevxTensor* /*self*/, int64_t to, DevxGenerator generator,
                         DevxTensor* out) {
  return random_from_to(ctx, generator, out, 0, &to);
}

// ---- randperm: a Fisher-Yates shuffle, serial (each swap depends on the previous ones)

DevxStatus randperm(DevxKernelContext* ctx, int64_t n, DevxGenerator generator, DevxTensor* out) {
  if (!out) return invalid("randperm: NULL output");
  if (n < 0) return invalid("n must be non-negative, got " + std::to_string(n));
  Tensor o = take(out);
  if (o.numel() != n) return invalid("randperm: the output does not have n elements");
  if (n == 0) return DEVX_OK;
  return dispatch_in<kFloats | kInts>(out->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    Key key;
    if (DevxStatus s = reserve(ctx, generator, (n + 1) / 2, &key)) return s;
    return launch(ctx, [o, n, key] {
      std::vector<int64_t> perm(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) perm[i] = i;
      const auto words = [](const philox::Block& b) {
        return std::array<uint64_t, 2>{(static_cast<uint64_t>(b[0]) << 32) | b[1],
                                       (static_cast<uint64_t>(b[2]) << 32) | b[3]};
      };
      Draws<uint64_t, 2, decltype(words)> draws{key, words};
      for (int64_t i = n - 1, k = 0; i > 0; --i, ++k) {
        std::swap(perm[i], perm[draws.at(k) % static_cast<uint64_t>(i + 1)]);
      }
      const int64_t stride = o.ndim() ? o.stride(0) : 1;
      for (int64_t i = 0; i < n; ++i) o.ptr<T>()[i * stride] = convert<T>(perm[i]);
    });
  });
}

DevxStatus randperm_out(DevxKernelContext* ctx, int64_t n, DevxTensor* out) {
  return randperm(ctx, n, nullptr, out);
}

DevxStatus randperm_generator_out(DevxKernelContext* ctx, int64_t n, DevxGenerator generator, DevxTensor* out) {
  return randperm(ctx, n, generator, out);
}

// ---- dropout: keep each element with probability 1 - p and scale the kept ones by 1 / (1 - p)

DevxStatus native_dropout_out(DevxKernelContext* ctx, const DevxTensor* input, double p, const int* train,
                              DevxTensor* out0, DevxTensor* out1) {
  if (!input || !out0 || !out1) return invalid("native_dropout: NULL tensor");
  if (out0->dtype != input->dtype) return decline("native_dropout: output dtype differs from the input's");
  const bool training = !train || *train;
  if (training && !(p >= 0.0 && p <= 1.0)) {
    return invalid("dropout probability has to be between 0 and 1, but got " + std::to_string(p));
  }
  return dispatch_in<kFloats>(input->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    Tensor x = take(input), y = take(out0), mask = take(out1);
    if (x.numel() == 0) return DEVX_OK;
    if (y.sizes != x.sizes || mask.sizes != x.sizes) return invalid("native_dropout: outputs of another shape");
    const Loop<3> loop(x.sizes, {y.strides, mask.strides, x.strides});
    Key key;
    if (training) {
      if (DevxStatus s = reserve(ctx, nullptr, (x.numel() + 3) / 4, &key)) return s;
    }
    const double keep = 1.0 - p;
    const M scale = static_cast<M>(keep == 0.0 ? 0.0 : 1.0 / keep);
    return launch(ctx, [x, y, mask, loop, key, keep, scale, training] {
      const int64_t msize = static_cast<int64_t>(mask.itemsize());
      const auto keeps = [keep](const philox::Block& b) {
        return std::array<bool, 4>{philox::unit32(b[0]) < keep, philox::unit32(b[1]) < keep,
                                   philox::unit32(b[2]) < keep, philox::unit32(b[3]) < keep};
      };
      parallel_for(loop.numel(), kGrain, [&](int64_t begin, int64_t end) {
        Draws<bool, 4, decltype(keeps)> draws{key, keeps};
        int64_t i = begin;
        loop.run(begin, end, [&](const std::array<int64_t, 3>& off, int64_t len, const std::array<int64_t, 3>& st) {
          for (int64_t k = 0; k < len; ++k, ++i) {
            const bool kept = !training || draws.at(i);
            const M v = static_cast<M>(x.ptr<const T>()[off[2] + k * st[2]]);
            y.ptr<T>()[off[0] + k * st[0]] = convert<T>(training ? v * static_cast<M>(kept) * scale : v);
            store_as(mask.data + (off[1] + k * st[1]) * msize, mask.dtype, kept);
          }
        });
      });
    });
  });
}

DevxStatus native_dropout_backward_out(DevxKernelContext* ctx, const DevxTensor* grad_output, const DevxTensor* mask,
                                       double scale, DevxTensor* out) {
  if (!out) return invalid("native_dropout_backward: NULL output");
  return dispatch_in<kFloats>(out->dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    using M = opmath_t<T>;
    const M s = static_cast<M>(scale);
    return elementwise<T, 2>(ctx, {grad_output, mask}, out, [s](M g, M m) { return g * m * s; });
  });
}

DEVX_SIM_REGISTER_KERNEL(uniform_out, uniform_out);
DEVX_SIM_REGISTER_KERNEL(normal_out, normal_out);
DEVX_SIM_REGISTER_KERNEL(bernoulli_float_out, bernoulli_float_out);
DEVX_SIM_REGISTER_KERNEL(random_out, random_out);
DEVX_SIM_REGISTER_KERNEL(random_from_out, random_from_out);
DEVX_SIM_REGISTER_KERNEL(random_to_out, random_to_out);
DEVX_SIM_REGISTER_KERNEL(randperm_out, randperm_out);
DEVX_SIM_REGISTER_KERNEL(randperm_generator_out, randperm_generator_out);
DEVX_SIM_REGISTER_KERNEL(native_dropout_out, native_dropout_out);
DEVX_SIM_REGISTER_KERNEL(native_dropout_backward_out, native_dropout_backward_out);

}  // namespace
}  // namespace devx::cpu_sim::kern
