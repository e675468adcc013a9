// The vendor seam: everything the core runtime asks of a device, and nothing else.
//
// A vendor is a shared library (libdevx_vendor_<name>.so, found as torch_devx/_vendors.py says) exporting one C symbol,
// `devx_vendor_get_api`, which returns a filled DevxVendorApi. It is a plain C table so that a
// vendor needs neither torch nor C++ ABI compatibility with the core: cpu_sim and cuda link no
// torch at all. Every function returns a DevxStatus; on failure the vendor's `last_error()`
// (thread-local) says why, and the core turns that into a Python exception naming the call.
// Include guards, not #pragma once: the installed copies may meet these.
#ifndef DEVX_VENDOR_API_H
#define DEVX_VENDOR_API_H

#include <stddef.h>
#include <stdint.h>

#include "devx_kernel_abi.h"
#include "vendor_types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DEVX_VENDOR_API_VERSION 4

typedef enum DevxMemcpyKind {
  DEVX_MEMCPY_H2D = 0,
  DEVX_MEMCPY_D2H = 1,
  DEVX_MEMCPY_D2D = 2,  // same or different devices
  DEVX_MEMCPY_H2H = 3,
} DevxMemcpyKind;

typedef struct DevxDeviceProperties {
  char name[256];
  size_t total_memory;
  int major;
  int minor;
  int multi_processor_count;
  int is_integrated;
} DevxDeviceProperties;

typedef void (*DevxHostFn)(void* user_data);

typedef struct DevxVendorApi {
  int api_version;  // DEVX_VENDOR_API_VERSION
  const char* name;
  // How op kernels run on this vendor's memory. A vendor either supplies its own kernels (the
  // `kernels` table) or declares that ATen's kernels for this device type run correctly on
  // aliases of its memory (cpu_sim: a host-addressable arena, so CPU kernels; cuda: CUDA
  // kernels, and then its stream and event handles are cudaStream_t / cudaEvent_t). On a compute
  // device with streams, a stream handle is what c10 takes as an external stream id of that
  // device (NULL, the default stream, is id 0): the op path makes the devx current stream the
  // compute device's current stream while its kernels are issued. Values match c10::DeviceType;
  // -1 means "no generic ATen kernels, only the vendor's own".
  int compute_device_type;

  // Initialise the vendor (read its own settings, probe hardware). Called before anything else;
  // DEVX_ERROR_NO_DEVICE if the hardware is unusable. Idempotent once it has succeeded.
  DevxStatus (*init)(void);
  const char* (*last_error)(void);

  // Devices. The current device is per host thread.
  DevxStatus (*device_count)(int* count);
  DevxStatus (*get_device)(int* device);
  DevxStatus (*set_device)(int device);
  DevxStatus (*device_properties)(int device, DevxDeviceProperties* props);
  DevxStatus (*device_synchronize)(int device);

  // Device memory. Pointers from malloc are usable by the vendor's kernels and memcpy only.
  // malloc(size 0) returns a unique non-null pointer that must be freed; free(NULL) is never called.
  DevxStatus (*malloc)(int device, size_t size, void** ptr);
  DevxStatus (*free)(int device, void* ptr);
  DevxStatus (*mem_get_info)(int device, size_t* free_bytes, size_t* total_bytes);

  // Page-locked host memory, usable for asynchronous copies.
  DevxStatus (*host_malloc)(size_t size, void** ptr);
  DevxStatus (*host_free)(void* ptr);

  // Copies and fills. The synchronous forms return when the bytes have landed; the async forms
  // are ordered on `stream` (NULL = the device's default stream).
  DevxStatus (*memcpy_sync)(void* dst, const void* src, size_t size, DevxMemcpyKind kind);
  DevxStatus (*memcpy_async)(void* dst, const void* src, size_t size, DevxMemcpyKind kind,
                             DevxStreamHandle stream);
  DevxStatus (*memset_sync)(void* dst, int value, size_t size);
  DevxStatus (*memset_async)(void* dst, int value, size_t size, DevxStreamHandle stream);

  // Streams. Lower priority numbers run first, as in CUDA; the range is [greatest, least]. A NULL
  // stream handle means the default stream of the calling thread's current device.
  DevxStatus (*stream_priority_range)(int* least, int* greatest);
  DevxStatus (*stream_create)(int device, int priority, DevxStreamHandle* stream);
  DevxStatus (*stream_destroy)(DevxStreamHandle stream);
  DevxStatus (*stream_synchronize)(DevxStreamHandle stream);
  DevxStatus (*stream_query)(DevxStreamHandle stream);  // DEVX_OK when idle, NOT_READY otherwise
  DevxStatus (*stream_wait_event)(DevxStreamHandle stream, DevxEventHandle event);
  // Run `fn(user_data)` in stream order (after all earlier work on the stream). This is how
  // kernels are issued on a vendor whose compute device is the host. As with
  // cudaLaunchHostFunc, `fn` must not call back into this API, unless the vendor declares
  // async_host_streams (below).
  DevxStatus (*launch_host_func)(DevxStreamHandle stream, DevxHostFn fn, void* user_data);

  // Events. With enable_timing, elapsed_time between two recorded events is the device time
  // between the points they mark in their streams.
  DevxStatus (*event_create)(int device, int enable_timing, DevxEventHandle* event);
  DevxStatus (*event_destroy)(DevxEventHandle event);
  DevxStatus (*event_record)(DevxEventHandle event, DevxStreamHandle stream);
  DevxStatus (*event_synchronize)(DevxEventHandle event);
  DevxStatus (*event_query)(DevxEventHandle event);  // DEVX_OK when reached, NOT_READY otherwise
  DevxStatus (*event_elapsed_ms)(DevxEventHandle start, DevxEventHandle end, float* ms);

  // Kernels the vendor implements itself (may be empty), in the ABI of devx_kernel_abi.h, whose
  // version `kernel_abi_version` names (DEVX_KERNEL_ABI_VERSION). Terminated by {NULL, NULL}.
  // Read after init().
  int kernel_abi_version;
  const DevxVendorKernel* kernels;

  // The c10d backend that moves the bytes of devx collectives ("gloo", "nccl", or one the vendor
  // registers with torch.distributed), handed aliases of devx memory on the compute device.
  const char* collective_engine;

  // With DEVX_VENDOR unset, the usable vendor of highest priority is chosen: real hardware 100, a
  // simulator 0.
  int auto_priority;

  // Whether ATen's kernel of compute_device_type may run op `op` ("add.out") on this vendor's
  // memory; 0 sends the op to the CPU fallback. NULL: every op the compute device implements.
  // Asked once per op, after init().
  int (*op_supported)(const char* op);

  // 1 when this vendor's streams run their work on host threads of their own (cpu_sim with
  // DEVX_SIM_ASYNC=1) while ATen's kernels of the compute device are host code: the op path then
  // issues those kernels as host functions on the current stream (launch_host_func) instead of
  // running them on the calling thread, so that ops return before they finish, as on a GPU.
  // Such host functions may call this API (allocate, record events, copy), except to synchronise
  // the stream they run on; an exception a host function throws must be caught by the vendor and
  // reported by the next synchronisation of that stream. NULL or 0: kernels run on the calling
  // thread (a synchronous simulator) or are asynchronous by themselves (cuda). Asked after init().
  int (*async_host_streams)(void);
} DevxVendorApi;

// The entries every vendor fills (the others may be NULL), for the loader's check.
#define DEVX_VENDOR_REQUIRED_FUNCTIONS(X)                                                         \
  X(init) X(last_error) X(device_count) X(get_device) X(set_device) X(device_properties)          \
  X(device_synchronize) X(malloc) X(free) X(mem_get_info) X(host_malloc) X(host_free)            \
  X(memcpy_sync) X(memcpy_async) X(memset_sync) X(memset_async) X(stream_priority_range)         \
  X(stream_create) X(stream_destroy) X(stream_synchronize) X(stream_query) X(stream_wait_event)  \
  X(launch_host_func) X(event_create) X(event_destroy) X(event_record) X(event_synchronize)       \
  X(event_query) X(event_elapsed_ms)

typedef const DevxVendorApi* (*DevxVendorGetApiFn)(void);

#define DEVX_VENDOR_ENTRY_SYMBOL "devx_vendor_get_api"

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // DEVX_VENDOR_API_H
