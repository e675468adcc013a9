#include "cuda_device_guard.h"
#include "cuda_error.h"
#include "cuda_vendor.h"

namespace devx::cuda_vendor {

DevxStatus stream_priority_range(int* least, int* greatest) {
  DEVX_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(least, greatest),
                  "cudaDeviceGetStreamPriorityRange()");
  return DEVX_OK;
}

DevxStatus stream_create(int device, int priority, DevxStreamHandle* stream) {
  DeviceGuard guard;
  if (DevxStatus status = guard.set(device)) return status;
  cudaStream_t created = nullptr;
  // Non-blocking, as torch's CUDA stream pool: work on devx streams must not serialise with
  // whatever else in the process uses the legacy default stream.
  DEVX_CUDA_CHECK(cudaStreamCreateWithPriority(&created, cudaStreamNonBlocking, priority),
                  "cudaStreamCreateWithPriority(device=%d, priority=%d)", device, priority);
  *stream = reinterpret_cast<DevxStreamHandle>(created);
  return DEVX_OK;
}

DevxStatus stream_destroy(DevxStreamHandle stream) {
  DEVX_CUDA_CHECK(cudaStreamDestroy(to_cuda(stream)), "cudaStreamDestroy(stream=%p)",
                  static_cast<void*>(stream));
  return DEVX_OK;
}

DevxStatus stream_synchronize(DevxStreamHandle stream) {
  DEVX_CUDA_CHECK(cudaStreamSynchronize(to_cuda(stream)), "cudaStreamSynchronize(stream=%p)",
                  static_cast<void*>(stream));
  return DEVX_OK;
}

DevxStatus stream_query(DevxStreamHandle stream) {
  DEVX_CUDA_CHECK(cudaStreamQuery(to_cuda(stream)), "cudaStreamQuery(stream=%p)",
                  static_cast<void*>(stream));
  return DEVX_OK;
}

DevxStatus stream_wait_event(DevxStreamHandle stream, DevxEventHandle event) {
  DEVX_CUDA_CHECK(cudaStreamWaitEvent(to_cuda(stream), to_cuda(event), 0),
                  "cudaStreamWaitEvent(stream=%p, event=%p)", static_cast<void*>(stream),
                  static_cast<void*>(event));
  return DEVX_OK;
}

// `fn` runs on a cudart thread and must not call CUDA itself (cudaLaunchHostFunc's rule).
DevxStatus launch_host_func(DevxStreamHandle stream, DevxHostFn fn, void* user_data) {
  DEVX_CUDA_CHECK(cudaLaunchHostFunc(to_cuda(stream), fn, user_data),
                  "cudaLaunchHostFunc(stream=%p)", static_cast<void*>(stream));
  return DEVX_OK;
}

}  // namespace devx::cuda_vendor
