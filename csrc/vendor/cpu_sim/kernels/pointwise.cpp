// The pointwise driver, once per arity (see PointwiseWork in pointwise.h).
#include "kernels/pointwise.h"

namespace devx::cpu_sim::kern {

template <size_t N>
DevxStatus take_operands(const std::array<const DevxTensor*, N>& ins, DevxTensor* out,
                         const std::array<bool, N>& complex_in, std::shared_ptr<const Operands<N>>* result) {
  if (!out) return invalid("NULL output");
  std::array<Tensor, N> in;
  std::array<Dims, N + 1> strides;
  Tensor o = take(out);
  strides[0] = o.strides;
  for (size_t k = 0; k < N; ++k) {
    if (!ins[k]) return invalid("NULL input");
    // Reading a complex value as a real type would drop its imaginary part.
    if (is_complex(ins[k]->dtype) && !complex_in[k]) return decline("complex input");
    in[k] = take(ins[k]);
    strides[k + 1] = broadcast_strides(in[k], o.sizes);
  }
  Loop<N + 1> loop(o.sizes, strides);
  const int64_t n = loop.numel();
  if (n > 0) *result = std::make_shared<const Operands<N>>(Operands<N>{o, in, loop, n});
  return DEVX_OK;
}

template <size_t N>
void PointwiseWork<N>::operator()() const {
  // Room for kStage elements of the widest type (complex double).
  constexpr size_t kStageBytes = kStage * 16;
  const Tensor& o = ops->out;
  const std::array<Tensor, N>& in = ops->in;
  const PointwiseSignature<N>& s = *sig;
  alignas(16) char single[N > 0 ? N : 1][16];
  std::array<const char*, N> data;
  std::array<DevxDType, N> dtype;
  for (size_t k = 0; k < N; ++k) {
    data[k] = in[k].data;
    dtype[k] = in[k].dtype;
    s.retype[k](in[k], single[k], &data[k], &dtype[k]);
  }
  const bool typed_out = o.dtype == s.out;
  const std::array<int64_t, N>& in_size = s.in_size;
  const int64_t out_size = s.out_size;
  const void* f = fn.get();
  parallel_for(ops->numel, kGrain, [&](int64_t begin, int64_t end) {
    ops->loop.run(begin, end, [&](const std::array<int64_t, N + 1>& off, int64_t len,
                                  const std::array<int64_t, N + 1>& st) {
      std::array<const void*, N> p;
      bool typed = typed_out && st[0] == 1;
      for (size_t k = 0; k < N; ++k) typed = typed && dtype[k] == s.in[k] && st[k + 1] == 1;
      if (typed) {
        for (size_t k = 0; k < N; ++k) p[k] = data[k] + off[k + 1] * in_size[k];
        row(f, len, o.data + off[0] * out_size, p.data());
        return;
      }
      // As ATen's TensorIterator: inputs cast to their compute type, the result cast to out's.
      alignas(16) unsigned char staged[N > 0 ? N : 1][kStageBytes];
      alignas(16) unsigned char result[kStageBytes];
      for (int64_t c = 0; c < len; c += kStage) {
        const int64_t m = std::min<int64_t>(kStage, len - c);
        void* dst = typed_out && st[0] == 1 ? static_cast<void*>(o.data + (off[0] + c) * out_size) : result;
        for (size_t k = 0; k < N; ++k) {
          p[k] = s.stage[k](data[k], dtype[k], off[k + 1] + c * st[k + 1], st[k + 1], m, staged[k]);
        }
        row(f, m, dst, p.data());
        if (dst == result) s.unstage(result, m, o.data, o.dtype, off[0] + c * st[0], st[0]);
      }
    });
  });
}

template <size_t N>
DevxStatus launch_pointwise(DevxKernelContext* ctx, PointwiseWork<N>&& work) {
  return launch(ctx, std::move(work));
}

template <size_t N>
void keep_pointwise(PointwiseWork<N>&& work, std::function<void()>* out) {
  *out = std::move(work);
}

// The source is read through staging (a converter picked per tensor): one loop per output dtype
// rather than one per pair of dtypes.
void convert_elements(const Tensor& src, const Tensor& dst) {
  Loop<2> loop(dst.sizes, {dst.strides, src.strides});
  dispatch(dst.dtype, [&](auto to) {
    using To = decltype(to);
    To* out = dst.ptr<To>();
    parallel_for(loop.numel(), kGrain, [&](int64_t begin, int64_t end) {
      loop.run(begin, end, [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
        std::array<To, kStage> buf;
        for (int64_t c = 0; c < n; c += kStage) {
          const int64_t m = std::min<int64_t>(kStage, n - c);
          const To* v = stage<To>(src.data, src.dtype, off[1] + c * st[1], st[1], m, buf.data());
          To* o = out + off[0] + c * st[0];
          for (int64_t i = 0; i < m; ++i) o[i * st[0]] = v[i];
        }
      });
    });
  });
}

#define DEVX_SIM_POINTWISE_ARITY(N)                                                                       \
  template DevxStatus take_operands<N>(const std::array<const DevxTensor*, N>&, DevxTensor*,               \
                                       const std::array<bool, N>&, std::shared_ptr<const Operands<N>>*); \
  template void PointwiseWork<N>::operator()() const;                                                     \
  template DevxStatus launch_pointwise<N>(DevxKernelContext*, PointwiseWork<N>&&);                        \
  template void keep_pointwise<N>(PointwiseWork<N>&&, std::function<void()>*);
DEVX_SIM_POINTWISE_ARITY(0)
DEVX_SIM_POINTWISE_ARITY(1)
DEVX_SIM_POINTWISE_ARITY(2)
DEVX_SIM_POINTWISE_ARITY(3)
DEVX_SIM_POINTWISE_ARITY(4)
#undef DEVX_SIM_POINTWISE_ARITY

}  // namespace devx::cpu_sim::kern
