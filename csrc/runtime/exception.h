// One way to fail: every vendor call goes through DEVX_VENDOR_CHECK, every other check is a
// TORCH_CHECK. Both become Python exceptions through torch's own translation (OutOfMemoryError
// for DEVX_ERROR_OOM, RuntimeError otherwise).
#pragma once

#include <c10/util/Exception.h>

#include "runtime/vendor_api.h"

namespace devx {

[[noreturn]] void throw_vendor_error(DevxStatus status, const char* call, const char* file, int line);

}  // namespace devx

#define DEVX_VENDOR_CHECK(expr)                                                \
  do {                                                                         \
    DevxStatus devx_status_ = (expr);                                          \
    if (C10_UNLIKELY(devx_status_ != DEVX_OK)) {                               \
      ::devx::throw_vendor_error(devx_status_, #expr, __FILE__, __LINE__);     \
    }                                                                          \
  } while (0)
