#include "runtime/trace.h"

#include <c10/util/Backtrace.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <sstream>

#include "common/text_parse.h"
#include "runtime/settings.h"
#include "runtime/log.h"
#include "runtime/python_hooks.h"
#include "runtime/vendor.h"

namespace devx::trace {

namespace {

enum Kind { kMalloc, kFree, kMemcpy, kSync, kEvent, kStream, kSetDevice, kKinds };
constexpr std::array<const char*, kKinds> kKindNames = {"malloc", "free", "memcpy", "sync", "event", "stream",
                                                       "set_device"};

std::array<std::atomic<int>, kKinds> g_levels{};
std::array<std::atomic<bool>, kKinds> g_hooked{};
std::mutex g_hook_mutex;
RuntimeHook g_hook;
const DevxVendorApi* g_real = nullptr;
DevxVendorApi g_shim;

std::mutex g_summary_mutex;
std::map<std::string, std::pair<int64_t, double>> g_sync;

template <typename... A>
std::string describe(const A&... args) {
  std::ostringstream os;
  const char* sep = "";
  ((os << sep << args, sep = ", "), ...);
  return os.str();
}

template <typename F, typename... A>
DevxStatus traced(Kind kind, const char* name, F fn, A... args) {
  int level = g_levels[kind].load(std::memory_order_relaxed);
  bool hooked = g_hooked[kind].load(std::memory_order_relaxed);
  if (level == 0 && !hooked) return fn(args...);
  auto start = std::chrono::steady_clock::now();
  DevxStatus status = fn(args...);
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  if (hooked) {
    RuntimeHook hook;
    {
      std::lock_guard<std::mutex> lock(g_hook_mutex);
      hook = g_hook;
    }
    // The vendor call has happened: a hook that throws must not undo what the caller learns of it
    // (an allocation whose pointer never reaches the allocator is lost for good), and no exception
    // may leave this C function.
    try {
      if (hook) hook(kKindNames[kind], name, describe(args...), static_cast<int>(status), us);
    } catch (const std::exception& e) {
      log::write(log::Module::TRACE, log::Level::ERROR,
                 std::string("the runtime hook failed on ") + name + ": " + e.what());
    }
  }
  if (level == 0) return status;
  std::ostringstream os;
  os << name << "(" << describe(args...) << ") -> " << static_cast<int>(status) << " in " << us << " us";
  if (kind == kSync) {
    // A line inside a layer is shared by every layer of its kind: the module path says which.
    const std::string line = python_line();
    const std::string module = python_module_path();
    const std::string where = (line.empty() ? "(no Python frame)" : line) + (module.empty() ? "" : " in " + module);
    os << " at " << where;
    std::lock_guard<std::mutex> lock(g_summary_mutex);
    auto& entry = g_sync[where];
    entry.first++;
    entry.second += us / 1000.0;
  }
  if (level >= 2) {
    os << "\n  Python stack:\n" << python_stack() << "  C++ backtrace:\n" << c10::get_backtrace(2, 24);
  }
  log::write(log::Module::TRACE, log::Level::INFO, os.str());
  return status;
}

// One shim per traced vendor function: same C signature, forwards to the real table.
#define DEVX_SHIM(field, kind, params, args) \
  DevxStatus shim_##field params { return traced(kind, #field, g_real->field, args); }
#define ARGS(...) __VA_ARGS__

DEVX_SHIM(set_device, kSetDevice, (int d), ARGS(d))
DEVX_SHIM(device_synchronize, kSync, (int d), ARGS(d))
DEVX_SHIM(malloc, kMalloc, (int d, size_t n, void** p), ARGS(d, n, p))
DEVX_SHIM(free, kFree, (int d, void* p), ARGS(d, p))
DEVX_SHIM(host_malloc, kMalloc, (size_t n, void** p), ARGS(n, p))
DEVX_SHIM(host_free, kFree, (void* p), ARGS(p))
DEVX_SHIM(memcpy_sync, kMemcpy, (void* d, const void* s, size_t n, DevxMemcpyKind k), ARGS(d, s, n, k))
DEVX_SHIM(memcpy_async, kMemcpy, (void* d, const void* s, size_t n, DevxMemcpyKind k, DevxStreamHandle h),
          ARGS(d, s, n, k, h))
DEVX_SHIM(memset_sync, kMemcpy, (void* d, int v, size_t n), ARGS(d, v, n))
DEVX_SHIM(memset_async, kMemcpy, (void* d, int v, size_t n, DevxStreamHandle h), ARGS(d, v, n, h))
DEVX_SHIM(stream_create, kStream, (int d, int prio, DevxStreamHandle* h), ARGS(d, prio, h))
DEVX_SHIM(stream_destroy, kStream, (DevxStreamHandle h), ARGS(h))
DEVX_SHIM(stream_synchronize, kSync, (DevxStreamHandle h), ARGS(h))
DEVX_SHIM(stream_wait_event, kEvent, (DevxStreamHandle h, DevxEventHandle e), ARGS(h, e))
DEVX_SHIM(event_create, kEvent, (int d, int timing, DevxEventHandle* e), ARGS(d, timing, e))
DEVX_SHIM(event_destroy, kEvent, (DevxEventHandle e), ARGS(e))
DEVX_SHIM(event_record, kEvent, (DevxEventHandle e, DevxStreamHandle h), ARGS(e, h))
DEVX_SHIM(event_synchronize, kSync, (DevxEventHandle e), ARGS(e))

#undef ARGS
#undef DEVX_SHIM

// The tracing table: the real one with the traced calls replaced by shims that forward to it.
void build_shims() {
  g_shim = *g_real;
  g_shim.set_device = shim_set_device;
  g_shim.device_synchronize = shim_device_synchronize;
  g_shim.malloc = shim_malloc;
  g_shim.free = shim_free;
  g_shim.host_malloc = shim_host_malloc;
  g_shim.host_free = shim_host_free;
  g_shim.memcpy_sync = shim_memcpy_sync;
  g_shim.memcpy_async = shim_memcpy_async;
  g_shim.memset_sync = shim_memset_sync;
  g_shim.memset_async = shim_memset_async;
  g_shim.stream_create = shim_stream_create;
  g_shim.stream_destroy = shim_stream_destroy;
  g_shim.stream_synchronize = shim_stream_synchronize;
  g_shim.stream_wait_event = shim_stream_wait_event;
  g_shim.event_create = shim_event_create;
  g_shim.event_destroy = shim_event_destroy;
  g_shim.event_record = shim_event_record;
  g_shim.event_synchronize = shim_event_synchronize;
}

}  // namespace

void reload() {
  std::string spec = settings::get_text(settings::Id::DEVX_TRACE_RUNTIME);
  if (spec == "0") spec.clear();  // 0, like empty, means off
  std::array<int, kKinds> levels{};
  for (std::string item : text::split_list(spec)) {
    item.erase(std::remove(item.begin(), item.end(), ' '), item.end());
    size_t eq = item.find('=');
    std::string key = item.substr(0, eq);
    std::string value = eq == std::string::npos ? "1" : item.substr(eq + 1);
    TORCH_CHECK_VALUE(value == "0" || value == "1" || value == "2", "DEVX_TRACE_RUNTIME='", spec, "': ", key,
                      "=", value, " is not 0, 1 (log calls) or 2 (with backtraces)");
    int level = value[0] - '0';
    if (key == "all") {
      levels.fill(level);
      continue;
    }
    auto it = std::find_if(kKindNames.begin(), kKindNames.end(), [&](const char* n) { return key == n; });
    TORCH_CHECK_VALUE(it != kKindNames.end(), "DEVX_TRACE_RUNTIME='", spec, "': unknown kind '", key,
                      "'; kinds are malloc, free, memcpy, sync, event, stream, set_device, all");
    levels[it - kKindNames.begin()] = level;
  }
  if (!vendor_loaded()) return;
  if (!g_real) {
    g_real = g_vendor.get();
    build_shims();
  }
  bool any = false;
  for (int k = 0; k < kKinds; ++k) {
    g_levels[k].store(levels[k], std::memory_order_relaxed);
    any = any || levels[k] > 0 || g_hooked[k].load(std::memory_order_relaxed);
  }
  // Published with a release store: a thread calling through the table sees the shims built.
  g_vendor.set(any ? &g_shim : g_real);
}

void use_vendor_table(const DevxVendorApi* table) {
  const bool shimmed = g_real != nullptr && g_vendor.get() == &g_shim;
  if (g_real) {
    g_real = table;
    build_shims();
  }
  g_vendor.set(shimmed ? &g_shim : table);
}

void set_runtime_hook(RuntimeHook hook, const std::vector<std::string>& kinds) {
  std::array<bool, kKinds> wanted{};
  for (const std::string& k : kinds) {
    auto it = std::find_if(kKindNames.begin(), kKindNames.end(), [&](const char* n) { return k == n; });
    TORCH_CHECK_VALUE(it != kKindNames.end(), "unknown runtime event kind '", k,
                      "'; kinds are malloc, free, memcpy, sync, event, stream, set_device");
    wanted[it - kKindNames.begin()] = true;
  }
  {
    std::lock_guard<std::mutex> lock(g_hook_mutex);
    g_hook = std::move(hook);
  }
  for (int k = 0; k < kKinds; ++k) g_hooked[k].store(g_hook != nullptr && wanted[k], std::memory_order_relaxed);
  reload();
}

std::vector<std::tuple<std::string, int64_t, double>> sync_summary() {
  std::lock_guard<std::mutex> lock(g_summary_mutex);
  std::vector<std::tuple<std::string, int64_t, double>> out;
  for (const auto& [line, entry] : g_sync) out.emplace_back(line, entry.first, entry.second);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return std::get<2>(a) > std::get<2>(b); });
  return out;
}

void reset_sync_summary() {
  std::lock_guard<std::mutex> lock(g_summary_mutex);
  g_sync.clear();
}

namespace {
settings::Watch g_watch({settings::Id::DEVX_TRACE_RUNTIME}, &reload);
}  // namespace

}  // namespace devx::trace
