// How every cuda vendor function reports failure: a DevxStatus plus a thread-local message that
// names the CUDA call, so the core's exception says which call failed and why.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "runtime/vendor_api.h"

namespace devx::cuda_vendor {

// Records "cuda vendor: <call> failed: <string> (<name>)" as the thread's last error and returns
// the status matching `err`. `call_fmt` describes the call and its arguments, printf-style.
DevxStatus fail(cudaError_t err, const char* call_fmt, ...) __attribute__((format(printf, 2, 3)));

void set_last_error(std::string message);
const char* last_error();

}  // namespace devx::cuda_vendor

#define DEVX_CUDA_CHECK(expr, ...)                                    \
  do {                                                                \
    cudaError_t devx_cuda_err_ = (expr);                              \
    if (devx_cuda_err_ != cudaSuccess) {                              \
      return ::devx::cuda_vendor::fail(devx_cuda_err_, __VA_ARGS__); \
    }                                                                 \
  } while (0)
