#include <cstdio>
#include <string>

#include "cuda_device_guard.h"
#include "cuda_error.h"
#include "cuda_vendor.h"

namespace devx::cuda_vendor {
namespace {

// Empty when CUDA is usable, else the reason.
std::string probe_devices() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return std::string("cuda vendor: no usable CUDA device (cudaGetDeviceCount: ") +
           cudaGetErrorString(err) + " (" + cudaGetErrorName(err) + "))";
  }
  if (count == 0) return "cuda vendor: no usable CUDA device (cudaGetDeviceCount: 0 devices)";
  return {};
}

}  // namespace

DevxStatus init() {
  // Probed once: the answer cannot change within a process (cudart fixes the visible devices
  // when it initialises), and every thread calling init() must get the same message.
  static const std::string failure = probe_devices();
  if (failure.empty()) return DEVX_OK;
  set_last_error(failure);
  return DEVX_ERROR_NO_DEVICE;
}

DevxStatus device_count(int* count) {
  DEVX_CUDA_CHECK(cudaGetDeviceCount(count), "cudaGetDeviceCount()");
  return DEVX_OK;
}

DevxStatus get_device(int* device) {
  DEVX_CUDA_CHECK(cudaGetDevice(device), "cudaGetDevice()");
  return DEVX_OK;
}

DevxStatus set_device(int device) {
  DEVX_CUDA_CHECK(cudaSetDevice(device), "cudaSetDevice(%d)", device);
  return DEVX_OK;
}

DevxStatus device_properties(int device, DevxDeviceProperties* props) {
  cudaDeviceProp prop;
  DEVX_CUDA_CHECK(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties(device=%d)",
                  device);
  *props = DevxDeviceProperties{};
  snprintf(props->name, sizeof props->name, "%s", prop.name);
  props->total_memory = prop.totalGlobalMem;
  props->major = prop.major;
  props->minor = prop.minor;
  props->multi_processor_count = prop.multiProcessorCount;
  props->is_integrated = prop.integrated;
  return DEVX_OK;
}

DevxStatus device_synchronize(int device) {
  DeviceGuard guard;
  if (DevxStatus status = guard.set(device)) return status;
  DEVX_CUDA_CHECK(cudaDeviceSynchronize(), "cudaDeviceSynchronize(device=%d)", device);
  return DEVX_OK;
}

}  // namespace devx::cuda_vendor
