// The vendor seam: everything the core runtime asks of a device, and nothing else.
//
// A vendor is a shared library (libdevx_vendor_<name>.so) exporting one C symbol,
// `devx_vendor_get_api`, which returns a filled DevxVendorApi. It is a plain C table so that a
// vendor needs neither torch nor C++ ABI compatibility with the core: cpu_sim and cuda link no
// torch at all. Every function returns a DevxStatus; on failure the vendor's `last_error()`
// (thread-local) says why, and the core turns that into a Python exception naming the call.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DEVX_VENDOR_API_VERSION 3

typedef enum DevxStatus {
  DEVX_OK = 0,
  DEVX_ERROR = 1,            // generic failure, see last_error()
  DEVX_ERROR_OOM = 2,        // device or host memory exhausted
  DEVX_ERROR_INVALID = 3,    // bad argument: device index, null handle, size
  DEVX_ERROR_NOT_READY = 4,  // query functions: work still pending (not a failure)
  DEVX_ERROR_NO_DEVICE = 5,  // the vendor's hardware/driver is absent or unusable
} DevxStatus;

typedef enum DevxMemcpyKind {
  DEVX_MEMCPY_H2D = 0,
  DEVX_MEMCPY_D2H = 1,
  DEVX_MEMCPY_D2D = 2,  // same or different devices
  DEVX_MEMCPY_H2H = 3,
} DevxMemcpyKind;

// Opaque handles owned by the vendor.
typedef struct DevxStream_* DevxStreamHandle;
typedef struct DevxEvent_* DevxEventHandle;

typedef struct DevxDeviceProperties {
  char name[256];
  size_t total_memory;
  int major;
  int minor;
  int multi_processor_count;
  int is_integrated;
} DevxDeviceProperties;

// Tensors as a vendor's own kernels see them (in the style of DIOPI): device memory, element type,
// and shape and strides in elements. Nothing of torch crosses the seam.
typedef enum DevxDType {
  DEVX_FLOAT32 = 0,
  DEVX_FLOAT64 = 1,
  DEVX_FLOAT16 = 2,
  DEVX_BFLOAT16 = 3,
} DevxDType;

typedef struct DevxTensorDesc {
  void* data;
  DevxDType dtype;
  int ndim;
  const int64_t* sizes;
  const int64_t* strides;
} DevxTensorDesc;

// A kernel the vendor implements itself, for an aten overload the core has an adapter for
// (csrc/aten/vendor_kernels.cpp turns the aten call into descriptors, allocates the outputs and
// keeps the inputs alive until the stream has run the kernel). `fn` has that op's C signature
// below. The kernel is issued on `stream` and may return before it has run. It returns
// DEVX_ERROR_INVALID for a case it does not handle (a dtype, a layout): the core then runs the op
// as if the vendor had no kernel for it.
typedef struct DevxVendorKernel {
  const char* op;  // overload name as in native_functions.yaml: "_softmax"
  void* fn;
} DevxVendorKernel;

// "_softmax": out = softmax(in) along `dim` (0 <= dim < ndim); in and out contiguous, same shape
// and dtype.
typedef DevxStatus (*DevxSoftmaxKernel)(const DevxTensorDesc* in, int dim, const DevxTensorDesc* out,
                                        DevxStreamHandle stream);

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

  // Kernels the vendor implements itself (may be empty). Terminated by {NULL, NULL}.
  const DevxVendorKernel* kernels;

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

typedef const DevxVendorApi* (*DevxVendorGetApiFn)(void);

#define DEVX_VENDOR_ENTRY_SYMBOL "devx_vendor_get_api"

#ifdef __cplusplus
}  // extern "C"
#endif
