#include "runtime/fork.h"

#include <pthread.h>

#include <c10/util/Exception.h>

#include "runtime/trace.h"
#include "runtime/vendor.h"

namespace devx {

namespace detail {
bool g_in_bad_fork = false;
}  // namespace detail

namespace {

constexpr const char* kMessage =
    "Cannot re-initialize devx in forked subprocess. To use devx with multiprocessing, you must use the "
    "'spawn' start method";

DevxVendorApi g_forked;

DevxStatus refused() {
  return DEVX_ERROR_INVALID;
}

// Runs in the child, which has one thread: no locks, no allocation.
void on_fork_child() {
  if (!g_vendor) return;
  g_forked = *g_vendor;
  g_forked.last_error = [] { return kMessage; };
  g_forked.set_device = [](int) { return refused(); };
  g_forked.device_properties = [](int, DevxDeviceProperties*) { return refused(); };
  g_forked.device_synchronize = [](int) { return refused(); };
  g_forked.malloc = [](int, size_t, void**) { return refused(); };
  g_forked.mem_get_info = [](int, size_t*, size_t*) { return refused(); };
  g_forked.host_malloc = [](size_t, void**) { return refused(); };
  g_forked.memcpy_sync = [](void*, const void*, size_t, DevxMemcpyKind) { return refused(); };
  g_forked.memcpy_async = [](void*, const void*, size_t, DevxMemcpyKind, DevxStreamHandle) { return refused(); };
  g_forked.memset_sync = [](void*, int, size_t) { return refused(); };
  g_forked.memset_async = [](void*, int, size_t, DevxStreamHandle) { return refused(); };
  g_forked.stream_create = [](int, int, DevxStreamHandle*) { return refused(); };
  g_forked.stream_synchronize = [](DevxStreamHandle) { return refused(); };
  g_forked.stream_query = [](DevxStreamHandle) { return refused(); };
  g_forked.stream_wait_event = [](DevxStreamHandle, DevxEventHandle) { return refused(); };
  g_forked.launch_host_func = [](DevxStreamHandle, DevxHostFn, void*) { return refused(); };
  g_forked.event_create = [](int, int, DevxEventHandle*) { return refused(); };
  g_forked.event_record = [](DevxEventHandle, DevxStreamHandle) { return refused(); };
  g_forked.event_synchronize = [](DevxEventHandle) { return refused(); };
  g_forked.event_query = [](DevxEventHandle) { return refused(); };
  g_forked.event_elapsed_ms = [](DevxEventHandle, DevxEventHandle, float*) { return refused(); };
  g_forked.free = [](int, void*) { return DEVX_OK; };
  g_forked.host_free = [](void*) { return DEVX_OK; };
  g_forked.stream_destroy = [](DevxStreamHandle) { return DEVX_OK; };
  g_forked.event_destroy = [](DevxEventHandle) { return DEVX_OK; };
  detail::g_in_bad_fork = true;
  trace::use_vendor_table(&g_forked);
}

struct RegisterForkHandler {
  RegisterForkHandler() { pthread_atfork(nullptr, nullptr, &on_fork_child); }
};
RegisterForkHandler g_register_fork_handler;

}  // namespace

void throw_bad_fork() {
  TORCH_CHECK(false, kMessage);
}

}  // namespace devx
