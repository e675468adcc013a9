// The cpu_sim implementations of the DevxVendorApi entries, gathered into the table by
// entry.cpp. Names follow the table's, except device_malloc/device_free (not to shadow ::malloc).
#pragma once

#include "runtime/vendor_api.h"

namespace devx::cpu_sim {

// device_api.cpp
DevxStatus init();
DevxStatus device_count(int* count);
DevxStatus get_device(int* device);
DevxStatus set_device(int device);
DevxStatus device_properties(int device, DevxDeviceProperties* props);
DevxStatus device_synchronize(int device);
DevxStatus device_malloc(int device, size_t size, void** ptr);
DevxStatus device_free(int device, void* ptr);
DevxStatus mem_get_info(int device, size_t* free_bytes, size_t* total_bytes);
DevxStatus host_malloc(size_t size, void** ptr);
DevxStatus host_free(void* ptr);

// copy_api.cpp
DevxStatus memcpy_sync(void* dst, const void* src, size_t size, DevxMemcpyKind kind);
DevxStatus memcpy_async(void* dst, const void* src, size_t size, DevxMemcpyKind kind,
                        DevxStreamHandle stream);
DevxStatus memset_sync(void* dst, int value, size_t size);
DevxStatus memset_async(void* dst, int value, size_t size, DevxStreamHandle stream);

// stream_api.cpp
DevxStatus stream_priority_range(int* least, int* greatest);
DevxStatus stream_create(int device, int priority, DevxStreamHandle* stream);
DevxStatus stream_destroy(DevxStreamHandle stream);
DevxStatus stream_synchronize(DevxStreamHandle stream);
DevxStatus stream_query(DevxStreamHandle stream);
DevxStatus stream_wait_event(DevxStreamHandle stream, DevxEventHandle event);
DevxStatus launch_host_func(DevxStreamHandle stream, DevxHostFn fn, void* user_data);

// event_api.cpp
DevxStatus event_create(int device, int enable_timing, DevxEventHandle* event);
DevxStatus event_destroy(DevxEventHandle event);
DevxStatus event_record(DevxEventHandle event, DevxStreamHandle stream);
DevxStatus event_synchronize(DevxEventHandle event);
DevxStatus event_query(DevxEventHandle event);
DevxStatus event_elapsed_ms(DevxEventHandle start, DevxEventHandle end, float* ms);

int op_supported(const char* op);
int async_host_streams();

// The vendor's own kernels (kernels.cpp): an empty table unless offer_own_kernels(true) ran.
const DevxVendorKernel* own_kernels();
void offer_own_kernels(bool on);

}  // namespace devx::cpu_sim
