#include "runtime/memcpy.h"

#include "runtime/exception.h"
#include "runtime/vendor.h"

namespace devx {

void memcpy_on_stream(void* dst, const void* src, size_t n, DevxMemcpyKind kind, const DevxStream& stream) {
  if (n == 0) return;
  DEVX_VENDOR_CHECK(g_vendor->memcpy_async(dst, src, n, kind, stream.handle()));
}

void memcpy_and_wait(void* dst, const void* src, size_t n, DevxMemcpyKind kind, const DevxStream& stream) {
  if (n == 0) return;
  memcpy_on_stream(dst, src, n, kind, stream);
  stream.synchronize();
}

}  // namespace devx
