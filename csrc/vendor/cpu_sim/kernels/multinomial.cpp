// multinomial: category indices drawn per row of a probability matrix, from Philox 4x32-10 keyed
// by what ctx->philox_state reserves (seeding works, as for the other random kernels). With
// replacement each sample inverts the row's cumulative sums at a uniform draw; without, the
// categories with the num_samples largest p / E (E exponential, one per category) are taken, which
// is sampling one after the other without putting back. Rows run in parallel.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/elementwise.h"
#include "kernels/philox.h"
#include "kernels/reduce_util.h"
#include "kernels/registry.h"

namespace devx::cpu_sim::kern {
namespace {

using reduce_util::read_as;

// Draw `i` of a call: a double in [0, 1) from half a Philox block.
inline double draw(uint64_t seed, uint64_t offset, int64_t i) {
  const philox::Block b = philox::block(seed, offset, static_cast<uint64_t>(i / 2));
  return i % 2 ? philox::unit_double(b[2], b[3]) : philox::unit_double(b[0], b[1]);
}

DevxStatus multinomial_out(DevxKernelContext* ctx, const DevxTensor* self, int64_t num_samples, int replacement,
                           DevxGenerator generator, DevxTensor* out) {
  if (!self || !out) return invalid("multinomial: NULL tensor");
  const Tensor p = take(self), o = take(out);
  if (p.ndim() != 1 && p.ndim() != 2) return invalid("prob_dist must be 1 or 2 dim");
  if (!is_floating(p.dtype)) {
    return invalid(std::string("multinomial only supports floating-point dtypes for input, got: ") +
                   dtype_name(p.dtype));
  }
  if (num_samples <= 0) return invalid("cannot sample n_sample <= 0 samples");
  const int64_t categories = p.size(p.ndim() - 1), rows = p.ndim() == 2 ? p.size(0) : 1;
  if (!replacement && num_samples > categories) {
    return invalid("cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  }
  if (categories > (int64_t{1} << 24)) return invalid("number of categories cannot exceed 2^24");
  if (o.dtype != DEVX_INT64 || o.numel() != rows * num_samples) return invalid("multinomial: output of another shape or dtype");
  if (o.numel() == 0) return DEVX_OK;
  const int64_t draws = rows * (replacement ? num_samples : categories);
  uint64_t seed = 0, offset = 0;
  if (DevxStatus s = ctx->philox_state(ctx, generator, static_cast<uint64_t>((draws + 1) / 2), &seed, &offset)) return s;
  return dispatch_in<kFloats>(p.dtype, [&](auto tag) -> DevxStatus {
    using T = decltype(tag);
    return launch(ctx, [p, o, rows, categories, num_samples, replacement, seed, offset] {
      const int64_t pr = p.ndim() == 2 ? p.stride(0) : 0, pc = p.stride(p.ndim() - 1);
      const int64_t orow = o.ndim() == 2 ? o.stride(0) : 0, ocol = o.stride(o.ndim() - 1);
      reduce_util::WorkError error;
      parallel_for(rows, 1, [&](int64_t begin, int64_t end) {
        std::vector<double> w(static_cast<size_t>(categories));
        std::vector<int64_t> order(static_cast<size_t>(categories));
        for (int64_t r = begin; r < end; ++r) {
          double total = 0;
          bool bad = false;
          for (int64_t c = 0; c < categories; ++c) {
            w[c] = static_cast<double>(static_cast<opmath_t<T>>(read_as<T>(p, r * pr + c * pc)));
            bad = bad || !(w[c] >= 0) || std::isinf(w[c]);
            total += w[c];
          }
          if (bad) {
            error.set("probability tensor contains either `inf`, `nan` or element < 0");
            continue;
          }
          if (!(total > 0)) {
            error.set("invalid multinomial distribution (sum of probabilities <= 0)");
            continue;
          }
          int64_t* dst = o.ptr<int64_t>() + r * orow;
          if (replacement) {
            std::partial_sum(w.begin(), w.end(), w.begin());
            for (int64_t s = 0; s < num_samples; ++s) {
              const double u = draw(seed, offset, r * num_samples + s) * total;
              // The first category whose cumulative sum exceeds u: never one of probability 0.
              int64_t c = std::upper_bound(w.begin(), w.end(), u) - w.begin();
              c = std::min(c, categories - 1);
              while (c > 0 && w[c] == w[c - 1]) --c;
              dst[s * ocol] = c;
            }
            continue;
          }
          for (int64_t c = 0; c < categories; ++c) {
            const double e = -std::log1p(-draw(seed, offset, r * categories + c));
            w[c] = w[c] / e;
          }
          std::iota(order.begin(), order.end(), int64_t{0});
          std::partial_sort(order.begin(), order.begin() + num_samples, order.end(),
                            [&](int64_t a, int64_t b) { return w[a] > w[b] || (w[a] == w[b] && a < b); });
          for (int64_t s = 0; s < num_samples; ++s) dst[s * ocol] = order[s];
        }
      });
      error.throw_if_failed();
    });
  });
}

DEVX_SIM_REGISTER_KERNEL(multinomial_out, multinomial_out);

}  // namespace
}  // namespace devx::cpu_sim::kern
