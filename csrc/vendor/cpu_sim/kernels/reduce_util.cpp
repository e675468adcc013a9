#include "kernels/reduce_util.h"

#include <cstddef>
#include <cstring>
#include <memory>
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

// Accumulators of an erased type, as bytes: `n` of them, each starting as fns.init. (Not in an
// anonymous namespace: the driver's lambdas, of external linkage, hold them.)
class ErasedAccs {
 public:
  ErasedAccs(const ReduceFns& fns, int64_t n)
      : size_(fns.acc_size), bytes_(new std::max_align_t[(static_cast<size_t>(n) * size_ + sizeof(std::max_align_t) - 1) /
                                                         sizeof(std::max_align_t)]) {
    for (int64_t i = 0; i < n; ++i) std::memcpy(at(i), fns.init, size_);
  }
  void* at(int64_t i) { return reinterpret_cast<unsigned char*>(bytes_.get()) + i * static_cast<int64_t>(size_); }

 private:
  size_t size_;
  std::unique_ptr<std::max_align_t[]> bytes_;
};

template <size_t NO>
void run_reduction_fns(const Reduction<NO>& r, const ReduceFns& fns) {
  if (r.n_out == 0) return;
  using Offsets = std::array<int64_t, NO + 1>;
  auto store = [&](const Offsets& o, int64_t i, const Offsets& st, const void* acc) {
    std::array<int64_t, NO> out;
    for (size_t k = 0; k < NO; ++k) out[k] = o[k] + i * st[k];
    fns.store(fns.self, out.data(), acc);
  };
  const bool one_row = r.inner.shape.size() == 1;
  auto fold = [&](void* acc, int64_t base, int64_t begin, int64_t end) {
    if (one_row) {
      const int64_t st = r.inner.strides[0][0];
      if (fns.fold_row) {
        fns.fold_row(fns.self, acc, base + begin * st, st, end - begin);
      } else {
        fns.fold(fns.self, acc, base + begin * st, st, end - begin, begin);
      }
      return;
    }
    int64_t index = begin;
    r.inner.run(begin, end, [&](const std::array<int64_t, 1>& off, int64_t len, const std::array<int64_t, 1>& st) {
      fns.fold(fns.self, acc, base + off[0], st[0], len, index);
      index += len;
    });
  };
  const int threads = num_threads();
  if (r.n_out >= threads || r.n_red < 2 * kGrain) {
    // Where neighbouring outputs read neighbouring inputs and the reduced elements lie apart,
    // a block of outputs advances through the reduced elements together, reading memory in order.
    const int64_t in_stride = r.outer.strides.back()[NO];
    const bool blocked = r.outer.shape.back() > 1 && in_stride == 1 && r.inner.strides.back()[0] != 1 && r.n_red > 1;
    constexpr int64_t kBlock = 64;
    const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(1, r.n_red));
    parallel_for(r.n_out, grain, [&](int64_t begin, int64_t end) {
      r.outer.run(begin, end, [&](const Offsets& off, int64_t len, const Offsets& st) {
        if (!blocked) {
          ErasedAccs acc(fns, 1);
          for (int64_t i = 0; i < len; ++i) {
            if (i > 0) std::memcpy(acc.at(0), fns.init, fns.acc_size);
            fold(acc.at(0), off[NO] + i * st[NO], 0, r.n_red);
            store(off, i, st, acc.at(0));
          }
          return;
        }
        ErasedAccs acc(fns, kBlock);
        for (int64_t b0 = 0; b0 < len; b0 += kBlock) {
          const int64_t nb = std::min(kBlock, len - b0);
          const int64_t base = off[NO] + b0 * st[NO];
          if (b0 > 0) {
            for (int64_t b = 0; b < nb; ++b) std::memcpy(acc.at(b), fns.init, fns.acc_size);
          }
          visit_reduced(r.inner, 0, r.n_red,
                        [&](int64_t roff, int64_t index) { fns.step_block(fns.self, acc.at(0), nb, base + roff, index); });
          for (int64_t b = 0; b < nb; ++b) store(off, b0 + b, st, acc.at(b));
        }
      });
    });
    return;
  }
  const int64_t chunks = std::min<int64_t>(threads, (r.n_red + kGrain - 1) / kGrain);
  const int64_t chunk = (r.n_red + chunks - 1) / chunks;
  r.outer.run(0, r.n_out, [&](const Offsets& off, int64_t len, const Offsets& st) {
    for (int64_t i = 0; i < len; ++i) {
      ErasedAccs partial(fns, chunks);
      const int64_t base = off[NO] + i * st[NO];
      parallel_for(chunks, 1, [&](int64_t cb, int64_t ce) {
        for (int64_t c = cb; c < ce; ++c) fold(partial.at(c), base, c * chunk, std::min(r.n_red, (c + 1) * chunk));
      });
      for (int64_t c = 1; c < chunks; ++c) fns.combine(fns.self, partial.at(0), partial.at(c));
      store(off, i, st, partial.at(0));
    }
  });
}

template void run_reduction_fns<1>(const Reduction<1>&, const ReduceFns&);
template void run_reduction_fns<2>(const Reduction<2>&, const ReduceFns&);

void WorkError::throw_if_failed() const {
  if (failed()) throw std::runtime_error(message_);
}

}  // namespace devx::cpu_sim::kern::reduce_util
