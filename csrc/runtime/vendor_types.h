// The types both vendor tables share: the device table (vendor_api.h) and the kernel ABI
// (devx_kernel_abi.h). Plain C, installed with torch_devx for vendors built out of tree.
// Include guards, not #pragma once: the installed copies may meet these.
#ifndef DEVX_VENDOR_TYPES_H
#define DEVX_VENDOR_TYPES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum DevxStatus {
  DEVX_OK = 0,
  DEVX_ERROR = 1,            // generic failure, see last_error()
  DEVX_ERROR_OOM = 2,        // device or host memory exhausted
  DEVX_ERROR_INVALID = 3,    // bad argument: device index, null handle, size
  DEVX_ERROR_NOT_READY = 4,  // query functions: work still pending (not a failure)
  DEVX_ERROR_NO_DEVICE = 5,  // the vendor's hardware/driver is absent or unusable
  DEVX_DECLINED = 6,         // kernels only: this case (dtype, layout, argument) is not handled
} DevxStatus;

// Opaque handles owned by the vendor.
typedef struct DevxStream_* DevxStreamHandle;
typedef struct DevxEvent_* DevxEventHandle;

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // DEVX_VENDOR_TYPES_H
