// The one exported symbol: the table the core's loader finds with dlsym.
#include "cuda_error.h"
#include "cuda_vendor.h"

namespace devx::cuda_vendor {
namespace {

// ATen's CUDA kernels run on this vendor's memory (it is cudaMalloc'd); the vendor's own kernels
// (cuda_softmax.cu) keep the path of a vendor with its own kernel library in use.
const DevxVendorKernel kKernels[] = {
    {"_softmax.out", reinterpret_cast<void*>(static_cast<DevxKernel__softmax_out>(&softmax_forward))},
    {nullptr, nullptr},
};

// Filled by name, not position: a reordered or inserted field in vendor_api.h cannot silently
// land in the wrong slot.
DevxVendorApi make_api() {
  DevxVendorApi api{};
  api.api_version = DEVX_VENDOR_API_VERSION;
  api.name = "cuda";
  api.compute_device_type = 1;  // c10::DeviceType::CUDA
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
  api.kernels = kKernels;
  api.collective_engine = "nccl";
  api.auto_priority = 100;
  // No host_access: cudaMalloc'ed memory is not host memory, host code touching it faults anyway.
  api.host_access = nullptr;
  return api;
}

}  // namespace
}  // namespace devx::cuda_vendor

extern "C" __attribute__((visibility("default"))) const DevxVendorApi* devx_vendor_get_api(void) {
  static const DevxVendorApi api = devx::cuda_vendor::make_api();
  return &api;
}
