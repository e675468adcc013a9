// The cuda vendor's implementations of the DevxVendorApi entries, gathered into the table by
// cuda_api.cpp. Names follow the table's, except device_malloc/device_free (not to shadow ::malloc).
#pragma once

#include <cuda_runtime_api.h>

#include "devx_kernels.h"
#include "runtime/vendor_api.h"

namespace devx::cuda_vendor {

// The opaque handles are cudart's own handles, cast; NULL is stream 0, the legacy default stream.
inline cudaStream_t to_cuda(DevxStreamHandle stream) {
  return reinterpret_cast<cudaStream_t>(stream);
}
inline cudaEvent_t to_cuda(DevxEventHandle event) { return reinterpret_cast<cudaEvent_t>(event); }

// cuda_device.cpp
DevxStatus init();
DevxStatus device_count(int* count);
DevxStatus get_device(int* device);
DevxStatus set_device(int device);
DevxStatus device_properties(int device, DevxDeviceProperties* props);
DevxStatus device_synchronize(int device);

// cuda_memory.cpp
DevxStatus device_malloc(int device, size_t size, void** ptr);
DevxStatus device_free(int device, void* ptr);
DevxStatus mem_get_info(int device, size_t* free_bytes, size_t* total_bytes);
DevxStatus host_malloc(size_t size, void** ptr);
DevxStatus host_free(void* ptr);
DevxStatus memcpy_sync(void* dst, const void* src, size_t size, DevxMemcpyKind kind);
DevxStatus memcpy_async(void* dst, const void* src, size_t size, DevxMemcpyKind kind,
                        DevxStreamHandle stream);
DevxStatus memset_sync(void* dst, int value, size_t size);
DevxStatus memset_async(void* dst, int value, size_t size, DevxStreamHandle stream);

// cuda_stream.cpp
DevxStatus stream_priority_range(int* least, int* greatest);
DevxStatus stream_create(int device, int priority, DevxStreamHandle* stream);
DevxStatus stream_destroy(DevxStreamHandle stream);
DevxStatus stream_synchronize(DevxStreamHandle stream);
DevxStatus stream_query(DevxStreamHandle stream);
DevxStatus stream_wait_event(DevxStreamHandle stream, DevxEventHandle event);
DevxStatus launch_host_func(DevxStreamHandle stream, DevxHostFn fn, void* user_data);

// cuda_event.cpp
DevxStatus event_create(int device, int enable_timing, DevxEventHandle* event);
DevxStatus event_destroy(DevxEventHandle event);
DevxStatus event_record(DevxEventHandle event, DevxStreamHandle stream);
DevxStatus event_synchronize(DevxEventHandle event);
DevxStatus event_query(DevxEventHandle event);
DevxStatus event_elapsed_ms(DevxEventHandle start, DevxEventHandle end, float* ms);

// cuda_softmax.cu: the vendor's own kernels (devx_kernels.h signatures)
DevxStatus softmax_forward(DevxKernelContext* ctx, const DevxTensor* in, int64_t dim, int half_to_float,
                           DevxTensor* out);

}  // namespace devx::cuda_vendor
