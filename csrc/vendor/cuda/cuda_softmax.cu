// The cuda vendor's own softmax forward (the kernel ABI's "_softmax.out", as in DIOPI's example):
// one thread block per (outer, inner) row of a contiguous tensor, block reductions for the row's
// maximum and sum. float32 and float64; other cases are declined (DEVX_DECLINED) and the core
// runs ATen's kernel instead.
#include <cuda_runtime.h>

#include <cfloat>
#include <cmath>

#include "cuda_error.h"
#include "cuda_vendor.h"

namespace devx::cuda_vendor {
namespace {

constexpr int kThreads = 256;

template <typename T>
__device__ T block_reduce(T value, T* shared, bool take_max) {
  const int lane = threadIdx.x;
  shared[lane] = value;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (lane < stride) {
      shared[lane] = take_max ? max(shared[lane], shared[lane + stride]) : shared[lane] + shared[lane + stride];
    }
    __syncthreads();
  }
  T result = shared[0];
  __syncthreads();
  return result;
}

template <typename T>
__global__ void softmax_kernel(const T* in, T* out, int64_t n, int64_t inner) {
  __shared__ T shared[kThreads];
  const int64_t row = blockIdx.x;
  const int64_t outer_index = row / inner;
  const int64_t inner_index = row % inner;
  const T* x = in + outer_index * n * inner + inner_index;
  T* y = out + outer_index * n * inner + inner_index;

  T local_max = -INFINITY;
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) local_max = max(local_max, x[k * inner]);
  const T row_max = block_reduce(local_max, shared, true);

  T local_sum = 0;
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
    const T e = exp(x[k * inner] - row_max);
    y[k * inner] = e;
    local_sum += e;
  }
  const T row_sum = block_reduce(local_sum, shared, false);
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) y[k * inner] /= row_sum;
}

// Row-major dense (an empty tensor has nothing to lay out).
bool contiguous(const DevxTensor& t) {
  for (int d = 0; d < t.ndim; ++d) {
    if (t.sizes[d] == 0) return true;
  }
  int64_t expected = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    if (t.sizes[d] != 1 && t.strides[d] != expected) return false;
    expected *= t.sizes[d];
  }
  return true;
}

}  // namespace

DevxStatus softmax_forward(DevxKernelContext* ctx, const DevxTensor* in, int64_t dim, int half_to_float,
                           DevxTensor* out) {
  if (in == nullptr || out == nullptr || in->ndim != out->ndim) {
    set_last_error("cuda vendor softmax: bad descriptors");
    return DEVX_ERROR_INVALID;
  }
  if (dim < 0) dim += in->ndim;
  if (dim < 0 || dim >= in->ndim) {
    set_last_error("cuda vendor softmax: dim out of range");
    return DEVX_ERROR_INVALID;
  }
  if (half_to_float || in->dtype != out->dtype || (in->dtype != DEVX_FLOAT32 && in->dtype != DEVX_FLOAT64) ||
      !contiguous(*in) || !contiguous(*out)) {
    set_last_error("cuda vendor softmax: only contiguous float32/float64 tensors");
    return DEVX_DECLINED;
  }
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= in->sizes[d];
  for (int d = dim + 1; d < in->ndim; ++d) inner *= in->sizes[d];
  const int64_t n = in->sizes[dim];
  const int64_t rows = outer * inner;
  if (rows == 0 || n == 0) return DEVX_OK;
  if (rows > 0x7fffffff) {
    set_last_error("cuda vendor softmax: more than 2^31-1 rows");
    return DEVX_ERROR_INVALID;
  }
  cudaStream_t s = to_cuda(ctx->stream);
  if (in->dtype == DEVX_FLOAT32) {
    softmax_kernel<float><<<static_cast<unsigned>(rows), kThreads, 0, s>>>(
        static_cast<const float*>(in->data), static_cast<float*>(out->data), n, inner);
  } else {
    softmax_kernel<double><<<static_cast<unsigned>(rows), kThreads, 0, s>>>(
        static_cast<const double*>(in->data), static_cast<double*>(out->data), n, inner);
  }
  DEVX_CUDA_CHECK(cudaGetLastError(), "softmax kernel launch (%lld rows of %lld)", static_cast<long long>(rows),
                  static_cast<long long>(n));
  return DEVX_OK;
}

}  // namespace devx::cuda_vendor
