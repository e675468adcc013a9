// The one exported symbol: the table the core's loader finds with dlsym.
#include "api.h"
#include "error.h"
#include "host_access.h"

namespace devx::cpu_sim {
namespace {

// Filled by name, not position: a reordered or inserted field in vendor_api.h cannot silently
// land in the wrong slot.
DevxVendorApi make_api() {
  DevxVendorApi api{};
  api.api_version = DEVX_VENDOR_API_VERSION;
  api.name = "cpu_sim";
  api.compute_device_type = 0;  // c10::DeviceType::CPU
  api.init = init;
  api.last_error = last_error;
  api.device_count = device_count;
  api.get_device = get_device;
  api.set_device = set_device;
  api.device_properties = device_properties;
  api.device_synchronize = device_synchronize;
  api.malloc = device_malloc;
  api.free = device_free;
  api.mem_get_info = mem_get_info;
  api.host_malloc = host_malloc;
  api.host_free = host_free;
  api.memcpy_sync = memcpy_sync;
  api.memcpy_async = memcpy_async;
  api.memset_sync = memset_sync;
  api.memset_async = memset_async;
  api.stream_priority_range = stream_priority_range;
  api.stream_create = stream_create;
  api.stream_destroy = stream_destroy;
  api.stream_synchronize = stream_synchronize;
  api.stream_query = stream_query;
  api.stream_wait_event = stream_wait_event;
  api.launch_host_func = launch_host_func;
  api.event_create = event_create;
  api.event_destroy = event_destroy;
  api.event_record = event_record;
  api.event_synchronize = event_synchronize;
  api.event_query = event_query;
  api.event_elapsed_ms = event_elapsed_ms;
  api.kernel_abi_version = DEVX_KERNEL_ABI_VERSION;
  api.kernels = own_kernels();
  api.collective_engine = "gloo";
  api.auto_priority = 0;
  api.op_supported = op_supported;
  api.async_host_streams = async_host_streams;
  api.host_access = host_access_api();
  return api;
}

}  // namespace
}  // namespace devx::cpu_sim

extern "C" __attribute__((visibility("default"))) const DevxVendorApi* devx_vendor_get_api(void) {
  static const DevxVendorApi api = devx::cpu_sim::make_api();
  return &api;
}
