#include "cuda_device_guard.h"
#include "cuda_error.h"
#include "cuda_vendor.h"

namespace devx::cuda_vendor {

DevxStatus event_create(int device, int enable_timing, DevxEventHandle* event) {
  DeviceGuard guard;
  if (DevxStatus status = guard.set(device)) return status;
  cudaEvent_t created = nullptr;
  // Timing costs a timestamp write per record, and most events only order streams.
  unsigned flags = enable_timing ? cudaEventDefault : cudaEventDisableTiming;
  DEVX_CUDA_CHECK(cudaEventCreateWithFlags(&created, flags),
                  "cudaEventCreateWithFlags(device=%d, enable_timing=%d)", device, enable_timing);
  *event = reinterpret_cast<DevxEventHandle>(created);
  return DEVX_OK;
}

DevxStatus event_destroy(DevxEventHandle event) {
  DEVX_CUDA_CHECK(cudaEventDestroy(to_cuda(event)), "cudaEventDestroy(event=%p)",
                  static_cast<void*>(event));
  return DEVX_OK;
}

DevxStatus event_record(DevxEventHandle event, DevxStreamHandle stream) {
  DEVX_CUDA_CHECK(cudaEventRecord(to_cuda(event), to_cuda(stream)),
                  "cudaEventRecord(event=%p, stream=%p)", static_cast<void*>(event),
                  static_cast<void*>(stream));
  return DEVX_OK;
}

DevxStatus event_synchronize(DevxEventHandle event) {
  DEVX_CUDA_CHECK(cudaEventSynchronize(to_cuda(event)), "cudaEventSynchronize(event=%p)",
                  static_cast<void*>(event));
  return DEVX_OK;
}

DevxStatus event_query(DevxEventHandle event) {
  DEVX_CUDA_CHECK(cudaEventQuery(to_cuda(event)), "cudaEventQuery(event=%p)",
                  static_cast<void*>(event));
  return DEVX_OK;
}

DevxStatus event_elapsed_ms(DevxEventHandle start, DevxEventHandle end, float* ms) {
  DEVX_CUDA_CHECK(cudaEventElapsedTime(ms, to_cuda(start), to_cuda(end)),
                  "cudaEventElapsedTime(start=%p, end=%p)", static_cast<void*>(start),
                  static_cast<void*>(end));
  return DEVX_OK;
}

}  // namespace devx::cuda_vendor
