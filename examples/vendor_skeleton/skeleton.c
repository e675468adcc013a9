/* A complete minimal devx vendor, in C: one "device" whose memory is host memory, synchronous
 * streams, timed events, and a handful of float32 kernels of its own. It runs no ATen kernels
 * (compute_device_type -1): every op it lacks goes to the core's CPU fallback, and
 * `python -m torch_devx coverage` and `torch_devx.diagnostics.kernel_stats()` show which.
 * Start a real vendor from here: replace the memory, stream and event functions by the device
 * runtime's, and add kernels (one entry in `kernels` each, of the type devx_kernels.h declares). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c11 */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "devx_kernels.h"
#include "vendor_api.h"

#define MEMORY_CAPACITY ((size_t)1 << 30)

static _Thread_local char last_error_message[256];
static _Thread_local int current_device;
static size_t allocated;

static DevxStatus fail(DevxStatus status, const char* message) {
  snprintf(last_error_message, sizeof last_error_message, "skeleton: %s", message);
  return status;
}

static const char* last_error(void) { return last_error_message; }
static DevxStatus init(void) { return DEVX_OK; }

static DevxStatus check_device(int device) {
  return device == 0 ? DEVX_OK : fail(DEVX_ERROR_INVALID, "there is one device, 0");
}

static DevxStatus device_count(int* count) {
  *count = 1;
  return DEVX_OK;
}

static DevxStatus get_device(int* device) {
  *device = current_device;
  return DEVX_OK;
}

static DevxStatus set_device(int device) {
  DevxStatus status = check_device(device);
  if (status == DEVX_OK) current_device = device;
  return status;
}

static DevxStatus device_properties(int device, DevxDeviceProperties* props) {
  DevxStatus status = check_device(device);
  if (status != DEVX_OK) return status;
  memset(props, 0, sizeof *props);
  snprintf(props->name, sizeof props->name, "devx skeleton device");
  props->total_memory = MEMORY_CAPACITY;
  props->multi_processor_count = 1;
  return DEVX_OK;
}

/* Streams run their work as it is submitted, so the device is always idle. */
static DevxStatus device_synchronize(int device) { return check_device(device); }

/* A size header in front of every block, so that free knows what it gives back. */
static DevxStatus device_malloc(int device, size_t size, void** ptr) {
  if (check_device(device) != DEVX_OK) return DEVX_ERROR_INVALID;
  if (size > MEMORY_CAPACITY - allocated) return fail(DEVX_ERROR_OOM, "out of device memory");
  char* block = aligned_alloc(64, 64 + ((size + 63) / 64) * 64);
  if (!block) return fail(DEVX_ERROR_OOM, "host allocation failed");
  *(size_t*)block = size;
  allocated += size;
  *ptr = block + 64;
  return DEVX_OK;
}

static DevxStatus device_free(int device, void* ptr) {
  if (check_device(device) != DEVX_OK) return DEVX_ERROR_INVALID;
  char* block = (char*)ptr - 64;
  allocated -= *(size_t*)block;
  free(block);
  return DEVX_OK;
}

static DevxStatus mem_get_info(int device, size_t* free_bytes, size_t* total_bytes) {
  if (check_device(device) != DEVX_OK) return DEVX_ERROR_INVALID;
  *free_bytes = MEMORY_CAPACITY - allocated;
  *total_bytes = MEMORY_CAPACITY;
  return DEVX_OK;
}

static DevxStatus host_malloc(size_t size, void** ptr) {
  *ptr = malloc(size ? size : 1);
  return *ptr ? DEVX_OK : fail(DEVX_ERROR_OOM, "host allocation failed");
}

static DevxStatus host_free(void* ptr) {
  free(ptr);
  return DEVX_OK;
}

static DevxStatus memcpy_sync(void* dst, const void* src, size_t size, DevxMemcpyKind kind) {
  (void)kind;
  memmove(dst, src, size);
  return DEVX_OK;
}

static DevxStatus memcpy_async(void* dst, const void* src, size_t size, DevxMemcpyKind kind, DevxStreamHandle s) {
  (void)s;
  return memcpy_sync(dst, src, size, kind);
}

static DevxStatus memset_sync(void* dst, int value, size_t size) {
  memset(dst, value, size);
  return DEVX_OK;
}

static DevxStatus memset_async(void* dst, int value, size_t size, DevxStreamHandle s) {
  (void)s;
  return memset_sync(dst, value, size);
}

static DevxStatus stream_priority_range(int* least, int* greatest) {
  *least = 0;
  *greatest = 0;
  return DEVX_OK;
}

static DevxStatus stream_create(int device, int priority, DevxStreamHandle* stream) {
  (void)priority;
  if (check_device(device) != DEVX_OK) return DEVX_ERROR_INVALID;
  *stream = malloc(1);
  return *stream ? DEVX_OK : fail(DEVX_ERROR_OOM, "host allocation failed");
}

static DevxStatus stream_destroy(DevxStreamHandle stream) {
  free(stream);
  return DEVX_OK;
}

static DevxStatus stream_idle(DevxStreamHandle stream) {
  (void)stream;
  return DEVX_OK;
}

static DevxStatus stream_wait_event(DevxStreamHandle stream, DevxEventHandle event) {
  (void)stream;
  (void)event;
  return DEVX_OK;
}

static DevxStatus launch_host_func(DevxStreamHandle stream, DevxHostFn fn, void* user_data) {
  (void)stream;
  fn(user_data);
  return DEVX_OK;
}

/* An event is the time it was recorded at. */
static DevxStatus event_create(int device, int enable_timing, DevxEventHandle* event) {
  (void)enable_timing;
  if (check_device(device) != DEVX_OK) return DEVX_ERROR_INVALID;
  *event = calloc(1, sizeof(struct timespec));
  return *event ? DEVX_OK : fail(DEVX_ERROR_OOM, "host allocation failed");
}

static DevxStatus event_destroy(DevxEventHandle event) {
  free(event);
  return DEVX_OK;
}

static DevxStatus event_record(DevxEventHandle event, DevxStreamHandle stream) {
  (void)stream;
  clock_gettime(CLOCK_MONOTONIC, (struct timespec*)event);
  return DEVX_OK;
}

static DevxStatus event_idle(DevxEventHandle event) {
  (void)event;
  return DEVX_OK;
}

static DevxStatus event_elapsed_ms(DevxEventHandle start, DevxEventHandle end, float* ms) {
  const struct timespec* a = (const struct timespec*)start;
  const struct timespec* b = (const struct timespec*)end;
  *ms = (float)((double)(b->tv_sec - a->tv_sec) * 1e3 + (double)(b->tv_nsec - a->tv_nsec) / 1e6);
  return DEVX_OK;
}

/* ---- kernels: float32, any strides, inputs broadcast to the output's shape */

#define MAX_DIMS 16

/* Element offset of input `t` at output index `index` (t's dims align with out's last dims). */
static int64_t offset_of(const DevxTensor* t, const int64_t* index, int32_t out_ndim) {
  int64_t offset = 0;
  for (int32_t d = 0; d < t->ndim; ++d) {
    const int32_t od = d + out_ndim - t->ndim;
    if (t->sizes[d] != 1) offset += index[od] * t->strides[d];
  }
  return offset;
}

enum Op { OP_ADD, OP_MUL, OP_RELU, OP_COPY, OP_FILL };

static DevxStatus pointwise(enum Op op, const DevxTensor* a, const DevxTensor* b, float alpha, DevxTensor* out) {
  if (out->dtype != DEVX_FLOAT32 || (a && a->dtype != DEVX_FLOAT32) || (b && b->dtype != DEVX_FLOAT32)) {
    return fail(DEVX_DECLINED, "float32 only");
  }
  if (out->ndim > MAX_DIMS) return fail(DEVX_DECLINED, "too many dimensions");
  int64_t numel = 1;
  for (int32_t d = 0; d < out->ndim; ++d) numel *= out->sizes[d];
  int64_t index[MAX_DIMS] = {0};
  float* o = (float*)out->data;
  for (int64_t i = 0; i < numel; ++i) {
    const float x = a ? ((const float*)a->data)[offset_of(a, index, out->ndim)] : 0.0f;
    const float y = b ? ((const float*)b->data)[offset_of(b, index, out->ndim)] : 0.0f;
    float r;
    switch (op) {
      case OP_ADD: r = x + alpha * y; break;
      case OP_MUL: r = x * y; break;
      case OP_RELU: r = x > 0.0f || x != x ? x : 0.0f; break;
      case OP_FILL: r = alpha; break;
      default: r = x; break;
    }
    o[offset_of(out, index, out->ndim)] = r;
    for (int32_t d = out->ndim - 1; d >= 0; --d) {
      if (++index[d] < out->sizes[d]) break;
      index[d] = 0;
    }
  }
  return DEVX_OK;
}

static float scalar_value(const DevxScalar* s) {
  return s->kind == DEVX_SCALAR_FLOAT || s->kind == DEVX_SCALAR_COMPLEX ? (float)s->f : (float)s->i;
}

static DevxStatus add_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* other,
                          const DevxScalar* alpha, DevxTensor* out) {
  (void)ctx;
  return pointwise(OP_ADD, self, other, scalar_value(alpha), out);
}

static DevxStatus mul_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* other, DevxTensor* out) {
  (void)ctx;
  return pointwise(OP_MUL, self, other, 1.0f, out);
}

static DevxStatus relu_out(DevxKernelContext* ctx, const DevxTensor* self, DevxTensor* out) {
  (void)ctx;
  return pointwise(OP_RELU, self, NULL, 1.0f, out);
}

static DevxStatus copy_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxTensor* src, int non_blocking,
                           DevxTensor* out) {
  (void)ctx;
  (void)self;
  (void)non_blocking;
  return pointwise(OP_COPY, src, NULL, 1.0f, out);
}

static DevxStatus fill_out(DevxKernelContext* ctx, const DevxTensor* self, const DevxScalar* value, DevxTensor* out) {
  (void)ctx;
  (void)self;
  return pointwise(OP_FILL, NULL, NULL, scalar_value(value), out);
}

static const DevxVendorKernel kernels[] = {
    {"add.out", (void*)(DevxKernel_add_out)add_out},
    {"mul.out", (void*)(DevxKernel_mul_out)mul_out},
    {"relu.out", (void*)(DevxKernel_relu_out)relu_out},
    {"copy.out", (void*)(DevxKernel_copy_out)copy_out},
    {"fill.Scalar_out", (void*)(DevxKernel_fill_Scalar_out)fill_out},
    {NULL, NULL},
};

__attribute__((visibility("default"))) const DevxVendorApi* devx_vendor_get_api(void) {
  static DevxVendorApi api;
  if (api.api_version == 0) {
    api.name = "skeleton";
    api.compute_device_type = -1;
    api.init = init;
    api.last_error = last_error;
    api.device_count = device_count;
    api.get_device = get_device;
    api.set_device = set_device;
    api.device_properties = device_properties;
    api.device_synchronize = device_synchronize;
    api.malloc = device_malloc;
    api.free = device_free;
    api.mem_get_info = mem_get_info;
    api.host_malloc = host_malloc;
    api.host_free = host_free;
    api.memcpy_sync = memcpy_sync;
    api.memcpy_async = memcpy_async;
    api.memset_sync = memset_sync;
    api.memset_async = memset_async;
    api.stream_priority_range = stream_priority_range;
    api.stream_create = stream_create;
    api.stream_destroy = stream_destroy;
    api.stream_synchronize = stream_idle;
    api.stream_query = stream_idle;
    api.stream_wait_event = stream_wait_event;
    api.launch_host_func = launch_host_func;
    api.event_create = event_create;
    api.event_destroy = event_destroy;
    api.event_record = event_record;
    api.event_synchronize = event_idle;
    api.event_query = event_idle;
    api.event_elapsed_ms = event_elapsed_ms;
    api.kernel_abi_version = DEVX_KERNEL_ABI_VERSION;
    api.kernels = kernels;
    api.auto_priority = -1; /* never chosen over another vendor unless asked for */
    /* Optional entries stay NULL: op_supported, async_host_streams, and host_access (watching
     * device memory for host code touching it, for DEVX_SIM_SANITIZE; cpu_sim's host_access.cpp
     * shows one over host memory). Without it the sanitizer says host accesses go undetected. */
    api.api_version = DEVX_VENDOR_API_VERSION;
  }
  return &api;
}
