#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>

#include "api.h"
#include "error.h"
#include "runtime.h"

namespace devx::cpu_sim {
namespace {

// Pinned memory is plain page-aligned host memory here; it is tracked only so that freeing a
// pointer host_malloc never returned is reported rather than corrupting the heap.
class HostAllocations {
 public:
  bool add(void* ptr) {
    std::lock_guard lock(mu_);
    return live_.insert(ptr).second;
  }
  bool remove(void* ptr) {
    std::lock_guard lock(mu_);
    return live_.erase(ptr) != 0;
  }

 private:
  std::mutex mu_;
  std::unordered_set<void*> live_;
};

HostAllocations& host_allocations() {
  // Never destroyed, like the Runtime: pinned memory may be freed by late static destructors.
  static HostAllocations* const allocations = new HostAllocations;
  return *allocations;
}

DevxStatus null_argument(const char* function, const char* argument) {
  return fail(DEVX_ERROR_INVALID,
              std::string("cpu_sim ") + function + ": `" + argument + "` is NULL");
}

}  // namespace

DevxStatus init() {
  DevxStatus status = Runtime::get().init();
  if (status == DEVX_OK) offer_own_kernels(Runtime::get().settings().kernels != Settings::Kernels::kAten);
  return status;
}

DevxStatus device_count(int* count) {
  if (count == nullptr) return null_argument("device_count", "count");
  if (DevxStatus status = Runtime::get().check_initialised()) return status;
  *count = Runtime::get().device_count();
  return DEVX_OK;
}

DevxStatus get_device(int* device) {
  if (device == nullptr) return null_argument("get_device", "device");
  *device = current_device();
  return DEVX_OK;
}

DevxStatus set_device(int device) {
  if (DevxStatus status = Runtime::get().check_device(device)) return status;
  set_current_device(device);
  return DEVX_OK;
}

DevxStatus device_properties(int device, DevxDeviceProperties* props) {
  if (props == nullptr) return null_argument("device_properties", "props");
  if (DevxStatus status = Runtime::get().check_device(device)) return status;
  *props = DevxDeviceProperties{};
  snprintf(props->name, sizeof props->name, "devx cpu_sim device %d", device);
  props->total_memory = Runtime::get().device(device).arena.capacity();
  props->major = 1;
  props->minor = 0;
  // Kernels are ATen's CPU kernels, which use every hardware thread.
  props->multi_processor_count =
      static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Its memory is host memory, as on an integrated GPU.
  props->is_integrated = 1;
  return DEVX_OK;
}

DevxStatus device_synchronize(int device) {
  if (DevxStatus status = Runtime::get().check_device(device)) return status;
  DevxStatus result = DEVX_OK;
  for (const auto& stream : Runtime::get().device_streams(device)) {
    // Every stream is waited for even after one fails; the first failure is the one reported.
    const DevxStatus status = stream->synchronize();
    if (result == DEVX_OK) result = status;
  }
  return result;
}

DevxStatus device_malloc(int device, size_t size, void** ptr) {
  if (ptr == nullptr) return null_argument("malloc", "ptr");
  if (DevxStatus status = Runtime::get().check_device(device)) return status;
  if (DevxStatus status = injected_fault(FaultCall::kMalloc)) return status;
  return Runtime::get().device(device).arena.allocate(size, ptr);
}

DevxStatus device_free(int device, void* ptr) {
  Runtime& runtime = Runtime::get();
  if (DevxStatus status = runtime.check_device(device)) return status;
  const DevxStatus status = runtime.device(device).arena.release(ptr);
  if (status == DEVX_OK) return DEVX_OK;
  // The likeliest cause of a bad free in a multi-device program is the wrong device index.
  const int owner = runtime.device_of(ptr, 1);
  if (owner < 0 || owner == device) return status;
  return fail(status, std::string(last_error()) + "; the pointer is in device " +
                          std::to_string(owner) + "'s memory");
}

DevxStatus mem_get_info(int device, size_t* free_bytes, size_t* total_bytes) {
  if (free_bytes == nullptr) return null_argument("mem_get_info", "free_bytes");
  if (total_bytes == nullptr) return null_argument("mem_get_info", "total_bytes");
  if (DevxStatus status = Runtime::get().check_device(device)) return status;
  Arena& arena = Runtime::get().device(device).arena;
  *total_bytes = arena.capacity();
  *free_bytes = arena.capacity() - arena.bytes_in_use();
  return DEVX_OK;
}

DevxStatus host_malloc(size_t size, void** ptr) {
  if (ptr == nullptr) return null_argument("host_malloc", "ptr");
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* allocated = nullptr;
  // At least one byte, so that every success is a distinct pointer to hand back to host_free.
  if (posix_memalign(&allocated, page, std::max<size_t>(size, 1)) != 0) {
    return fail(DEVX_ERROR_OOM, "cpu_sim could not allocate " + format_bytes(size) +
                                    " of pinned host memory");
  }
  host_allocations().add(allocated);
  *ptr = allocated;
  return DEVX_OK;
}

DevxStatus host_free(void* ptr) {
  if (!host_allocations().remove(ptr)) {
    return fail(DEVX_ERROR_INVALID, "cpu_sim host_free: " + format_pointer(ptr) +
                                        " was not allocated by host_malloc, or is already freed");
  }
  std::free(ptr);
  return DEVX_OK;
}

}  // namespace devx::cpu_sim
