#include "runtime/memcpy.h"

#include "profiler/device_activity.h"
#include "runtime/exception.h"
#include "runtime/sanitizer.h"
#include "runtime/vendor.h"
#include "runtime/sync_debug.h"

namespace devx {

// Named as CUDA's copies are in torch.profiler tables, so the rows read the same.
const char* memcpy_activity_name(DevxMemcpyKind kind) {
  switch (kind) {
    case DEVX_MEMCPY_H2D:
      return "Memcpy HtoD (host -> devx)";
    case DEVX_MEMCPY_D2H:
      return "Memcpy DtoH (devx -> host)";
    default:
      return "Memcpy DtoD (devx -> devx)";
  }
}

namespace {

// Issues the copy on `stream`.
void issue_copy(void* dst, const void* src, size_t n, DevxMemcpyKind kind, const DevxStream& stream) {
  if (C10_UNLIKELY(profiler::recording())) {
    profiler::DeviceSpan span(profiler::ActivityKind::kMemcpy, memcpy_activity_name(kind), stream, n);
    DEVX_VENDOR_CHECK(g_vendor->memcpy_async(dst, src, n, kind, stream.handle()));
    span.finish();
    return;
  }
  DEVX_VENDOR_CHECK(g_vendor->memcpy_async(dst, src, n, kind, stream.handle()));
}

}  // namespace

void memcpy_on_stream(void* dst, const void* src, size_t n, DevxMemcpyKind kind, const DevxStream& stream) {
  if (n == 0) return;
  if (C10_UNLIKELY(sanitizer::enabled())) {
    sanitizer::check_copy(dst, src, n, kind);
    // The copy is device work until it has run: an async stream's worker runs it later, after
    // this returns, so the sanitizer waits for it here.
    sanitizer::DeviceAccess access;
    issue_copy(dst, src, n, kind, stream);
    stream.synchronize();
    return;
  }
  issue_copy(dst, src, n, kind, stream);
}

void memcpy_and_wait(void* dst, const void* src, size_t n, DevxMemcpyKind kind, const DevxStream& stream) {
  if (n == 0) return;
  // As CUDA's blocking copies between host and device; copies between devices are device work.
  if (kind == DEVX_MEMCPY_D2H || kind == DEVX_MEMCPY_H2D) {
    sync_debug::on_host_wait(kind == DEVX_MEMCPY_D2H ? "a copy to the host" : "a copy from pageable host memory");
  }
  memcpy_on_stream(dst, src, n, kind, stream);
  stream.synchronize();
}

void copy_device_bytes(void* dst, const void* src, size_t n, c10::DeviceIndex device) {
  if (n == 0) return;
  if (g_vendor->compute_device_type != static_cast<int>(c10::kCPU)) {
    memcpy_on_stream(dst, src, n, DEVX_MEMCPY_D2D, getCurrentDevxStream(device));
    return;
  }
  if (C10_UNLIKELY(sanitizer::enabled())) sanitizer::check_copy(dst, src, n, DEVX_MEMCPY_D2D);
  sanitizer::DeviceAccess access;
  DEVX_VENDOR_CHECK(g_vendor->memcpy_sync(dst, src, n, DEVX_MEMCPY_D2D));
}

}  // namespace devx
