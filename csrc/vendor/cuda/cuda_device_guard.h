// Devx calls name their device; cudart acts on the calling thread's current device. This guard
// bridges the two for one scope and leaves the thread's current device as the caller had it.
#pragma once

#include "cuda_error.h"

namespace devx::cuda_vendor {

class DeviceGuard {
 public:
  DeviceGuard() = default;
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

  // Switches only when needed: cudaSetDevice may create the device's primary context.
  DevxStatus set(int device) {
    int current = 0;
    DEVX_CUDA_CHECK(cudaGetDevice(&current), "cudaGetDevice()");
    if (current != device) {
      DEVX_CUDA_CHECK(cudaSetDevice(device), "cudaSetDevice(%d)", device);
      previous_ = current;
    }
    return DEVX_OK;
  }

  // Going back to a device that was current a moment ago does not fail in practice, and a
  // destructor has no caller to tell anyway.
  ~DeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }

 private:
  int previous_ = -1;
};

}  // namespace devx::cuda_vendor
