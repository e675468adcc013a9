#include <cstring>
#include <string>

#include "api.h"
#include "error.h"
#include "runtime.h"

namespace devx::cpu_sim {
namespace {

const char* copy_name(DevxMemcpyKind kind) {
  switch (kind) {
    case DEVX_MEMCPY_H2D:
      return "memcpy H2D";
    case DEVX_MEMCPY_D2H:
      return "memcpy D2H";
    case DEVX_MEMCPY_D2D:
      return "memcpy D2D";
    case DEVX_MEMCPY_H2H:
      return "memcpy H2H";
  }
  return nullptr;
}

// Host and device memory share one address space here, so a copy would "work" with a host
// pointer where device memory belongs. A real device would fault, so this refuses it, and the
// core's bug shows up on the simulator too.
DevxStatus check_device_range(const char* call, const char* role, const void* ptr, size_t size) {
  if (Runtime::get().device_of(ptr, size) >= 0) return DEVX_OK;
  return fail(DEVX_ERROR_INVALID, std::string("cpu_sim ") + call + ": " + role + " " +
                                      format_pointer(ptr) + " (" + std::to_string(size) +
                                      " bytes) is not cpu_sim device memory");
}

DevxStatus check_copy(void* dst, const void* src, size_t size, DevxMemcpyKind kind) {
  const char* call = copy_name(kind);
  if (call == nullptr) {
    return fail(DEVX_ERROR_INVALID, "cpu_sim memcpy: unknown kind " + std::to_string(kind));
  }
  if (dst == nullptr || src == nullptr) {
    return fail(DEVX_ERROR_INVALID,
                std::string("cpu_sim ") + call + ": NULL source or destination");
  }
  if (kind == DEVX_MEMCPY_D2H || kind == DEVX_MEMCPY_D2D) {
    if (DevxStatus status = check_device_range(call, "source", src, size)) return status;
  }
  if (kind == DEVX_MEMCPY_H2D || kind == DEVX_MEMCPY_D2D) {
    return check_device_range(call, "destination", dst, size);
  }
  return DEVX_OK;
}

DevxStatus check_fill(void* dst, size_t size) {
  if (dst == nullptr) return fail(DEVX_ERROR_INVALID, "cpu_sim memset: NULL destination");
  return check_device_range("memset", "destination", dst, size);
}

}  // namespace

// memmove throughout: as fast as memcpy, and correct when the core copies between overlapping
// views of one allocation.

DevxStatus memcpy_sync(void* dst, const void* src, size_t size, DevxMemcpyKind kind) {
  if (size == 0) return DEVX_OK;
  if (DevxStatus status = check_copy(dst, src, size, kind)) return status;
  if (DevxStatus status = injected_fault(FaultCall::kMemcpy)) return status;
  std::memmove(dst, src, size);
  return DEVX_OK;
}

DevxStatus memcpy_async(void* dst, const void* src, size_t size, DevxMemcpyKind kind,
                        DevxStreamHandle stream) {
  std::shared_ptr<Stream> target;
  if (DevxStatus status = Runtime::get().find_stream(stream, &target)) return status;
  if (size == 0) return DEVX_OK;
  if (DevxStatus status = check_copy(dst, src, size, kind)) return status;
  if (DevxStatus status = injected_fault(FaultCall::kMemcpy)) return status;
  return target->submit([=] { std::memmove(dst, src, size); });
}

DevxStatus memset_sync(void* dst, int value, size_t size) {
  if (size == 0) return DEVX_OK;
  if (DevxStatus status = check_fill(dst, size)) return status;
  std::memset(dst, value, size);
  return DEVX_OK;
}

DevxStatus memset_async(void* dst, int value, size_t size, DevxStreamHandle stream) {
  std::shared_ptr<Stream> target;
  if (DevxStatus status = Runtime::get().find_stream(stream, &target)) return status;
  if (size == 0) return DEVX_OK;
  if (DevxStatus status = check_fill(dst, size)) return status;
  return target->submit([=] { std::memset(dst, value, size); });
}

}  // namespace devx::cpu_sim
