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

#define DEVX_VENDOR_API_VERSION 5
// The oldest table this build still loads. A table states its version and holds the entries of
// that version only: the entries added since (marked "since version N") are taken as NULL, and
// the core never reads past the end of an older table.
#define DEVX_VENDOR_API_OLDEST_VERSION 4

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

// A host access (see DevxHostAccessApi): host code, not device work, touched a watched range.
typedef enum DevxAccessKind {
  DEVX_ACCESS_UNKNOWN = -1,  // the vendor cannot tell a read from a write on this machine
  DEVX_ACCESS_READ = 0,
  DEVX_ACCESS_WRITE = 1,
} DevxAccessKind;

typedef struct DevxHostAccess {
  uintptr_t address;  // the byte touched
  void* range;        // the watched range it lies in, as given to watch()
  uint64_t tag;       // that range's tag when it was touched (watch, set_tag)
  int kind;           // DevxAccessKind
} DevxHostAccess;

// Detection of host code touching device memory directly (ctypes on a data pointer, a C
// extension dereferencing one), which a real device does not allow, for a vendor whose device
// memory is host memory (cpu_sim: the access would silently work). The caller watches ranges of
// whole pages that hold nothing else; the vendor keeps them inaccessible to host code while no
// device work runs and records each host access to them, letting it through. Device work (the
// caller's kernels, copies, collectives, whatever their threads) is marked process-wide with
// enter/leave_device_work; an access while any is marked opens its range until the last one ends.
// Every entry may be called from any thread. The DEVX_SIM_SANITIZE sanitizer is the core's user.
typedef struct DevxHostAccessApi {
  // Begins (or resumes) watching: ranges still watched from an earlier period are closed again.
  // Sets the page size that ranges are made of. Fails, with last_error() saying why, if the
  // vendor cannot watch in this process (e.g. it cannot install its fault handler).
  DevxStatus (*start)(size_t* page_size);
  // Stops watching: every range becomes ordinary memory; ranges stay known until unwatched.
  void (*stop)(void);
  // Watches [range, range + size): both page aligned, the pages holding nothing that host code
  // may touch. `tag` is the caller's own value, copied into each record. DEVX_ERROR_OOM: the
  // vendor watches as many ranges as it can already (the range is then not watched).
  DevxStatus (*watch)(void* range, size_t size, uint64_t tag);
  // Forgets a watched range, which becomes ordinary memory, before the caller frees it.
  void (*unwatch)(void* range);
  void (*set_tag)(void* range, uint64_t tag);
  // Opens a watched range until no device work runs, for device work that reaches it without
  // faulting (the kernel's system calls: a transport's readv/writev see closed pages as EFAULT).
  void (*open)(void* range);
  // Device work begins / ends. enter_device_work fails (last_error() says why) when the vendor
  // has just stopped watching for good (another fault handler replaced its own); the work is
  // counted either way, and ends with leave_device_work.
  DevxStatus (*enter_device_work)(void);
  void (*leave_device_work)(void);
  // Moves up to `capacity` recorded host accesses, oldest first, into `out` and returns how many;
  // `*dropped` is set to the number not recorded since the last call (the vendor's record is
  // bounded). Closes again what host accesses opened, if no device work runs.
  size_t (*take)(DevxHostAccess* out, size_t capacity, uint64_t* dropped);
  // Called from the vendor's fault handler after it recorded a host access, so it must be
  // async-signal-safe; nonzero means it could not act, and a later access calls it again.
  void (*set_notifier)(int (*notify)(void));
} DevxHostAccessApi;

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

  // Since version 5. Detection of host code touching device memory (above); NULL where the
  // vendor's memory is not host memory (host code faults on it anyway) or it cannot watch it.
  const DevxHostAccessApi* host_access;
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
