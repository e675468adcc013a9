#include <cstdio>
#include <string>

#include "cuda_device_guard.h"
#include "cuda_error.h"
#include "cuda_vendor.h"

namespace devx::cuda_vendor {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

DevxStatus device_malloc(int device, size_t size, void** ptr) {
  DeviceGuard guard;
  if (DevxStatus status = guard.set(device)) return status;
  cudaError_t err = cudaMalloc(ptr, size);
  if (err == cudaSuccess) return DEVX_OK;
  DevxStatus status = fail(err, "cudaMalloc(device=%d, size=%zu bytes)", device, size);
  if (status == DEVX_ERROR_OOM) {
    // What the user needs next is how far off the request was.
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
      char detail[160];
      snprintf(detail, sizeof detail,
               "; tried to allocate %.2f GiB, device %d has %.2f GiB free of %.2f GiB",
               size / kGiB, device, free_bytes / kGiB, total_bytes / kGiB);
      set_last_error(std::string(last_error()) + detail);
    } else {
      cudaGetLastError();  // the allocation failure is what gets reported, not this one
    }
  }
  return status;
}

DevxStatus device_free(int device, void* ptr) {
  DeviceGuard guard;
  if (DevxStatus status = guard.set(device)) return status;
  DEVX_CUDA_CHECK(cudaFree(ptr), "cudaFree(device=%d, ptr=%p)", device, ptr);
  return DEVX_OK;
}

DevxStatus mem_get_info(int device, size_t* free_bytes, size_t* total_bytes) {
  DeviceGuard guard;
  if (DevxStatus status = guard.set(device)) return status;
  DEVX_CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes), "cudaMemGetInfo(device=%d)", device);
  return DEVX_OK;
}

DevxStatus host_malloc(size_t size, void** ptr) {
  DEVX_CUDA_CHECK(cudaHostAlloc(ptr, size, cudaHostAllocDefault), "cudaHostAlloc(size=%zu bytes)",
                  size);
  return DEVX_OK;
}

DevxStatus host_free(void* ptr) {
  DEVX_CUDA_CHECK(cudaFreeHost(ptr), "cudaFreeHost(ptr=%p)", ptr);
  return DEVX_OK;
}

// The copy kind is not passed on: with unified addressing cudaMemcpyDefault finds the direction,
// and the devices, from the pointers themselves, which also covers copies between two devices.

DevxStatus memcpy_sync(void* dst, const void* src, size_t size, DevxMemcpyKind /*kind*/) {
  DEVX_CUDA_CHECK(cudaMemcpy(dst, src, size, cudaMemcpyDefault),
                  "cudaMemcpy(dst=%p, src=%p, size=%zu bytes)", dst, src, size);
  return DEVX_OK;
}

DevxStatus memcpy_async(void* dst, const void* src, size_t size, DevxMemcpyKind /*kind*/,
                        DevxStreamHandle stream) {
  DEVX_CUDA_CHECK(cudaMemcpyAsync(dst, src, size, cudaMemcpyDefault, to_cuda(stream)),
                  "cudaMemcpyAsync(dst=%p, src=%p, size=%zu bytes, stream=%p)", dst, src, size,
                  static_cast<void*>(stream));
  return DEVX_OK;
}

DevxStatus memset_sync(void* dst, int value, size_t size) {
  DEVX_CUDA_CHECK(cudaMemset(dst, value, size), "cudaMemset(dst=%p, value=%d, size=%zu bytes)",
                  dst, value, size);
  return DEVX_OK;
}

DevxStatus memset_async(void* dst, int value, size_t size, DevxStreamHandle stream) {
  DEVX_CUDA_CHECK(cudaMemsetAsync(dst, value, size, to_cuda(stream)),
                  "cudaMemsetAsync(dst=%p, value=%d, size=%zu bytes, stream=%p)", dst, value, size,
                  static_cast<void*>(stream));
  return DEVX_OK;
}

}  // namespace devx::cuda_vendor
