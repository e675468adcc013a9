#include "profiler/device_activity.h"

#include <ATen/record_function.h>
#include <c10/util/Exception.h>

#include <chrono>
#include <mutex>

#include <sys/syscall.h>
#include <unistd.h>

#include "runtime/device.h"
#include "runtime/exception.h"
#include "runtime/vendor.h"
#include "runtime/python_hooks.h"

namespace devx::profiler {

std::atomic<bool> g_recording{false};
std::atomic<bool> g_session_active{false};

namespace {

struct Pending {
  ActivityKind kind;
  std::string name;
  c10::DeviceIndex device;
  c10::StreamId stream;
  uint64_t correlation;
  uint32_t id;
  int64_t launch_start_ns;
  int64_t launch_end_ns;
  size_t bytes;
  int32_t thread;
  DevxStreamHandle handle;
  DevxEventHandle start = nullptr;
  DevxEventHandle end = nullptr;
  // A host-timed span (begin_host_span): its times, end_ns 0 until it ends; no events.
  bool host_timed = false;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
};

// Per device: an event recorded when the recording started, and the Unix time it stands for.
struct Anchor {
  DevxEventHandle event = nullptr;
  int64_t unix_ns = 0;
};

std::mutex g_mutex;
std::vector<Pending> g_pending;
std::vector<Anchor> g_anchors;
// Bumped whenever g_pending is emptied, so a span that outlives its recording drops its events.
uint64_t g_generation = 0;
uint32_t g_last_id = 0;
thread_local std::vector<uint64_t> t_correlation;
std::vector<void (*)()> g_listeners;

void notify_listeners() {
  for (auto* listener : g_listeners) listener();
}

int64_t unix_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int32_t system_thread_id() {
  thread_local const int32_t tid = static_cast<int32_t>(::syscall(SYS_gettid));
  return tid;
}

DevxEventHandle timed_event_on(c10::DeviceIndex device, DevxStreamHandle stream) {
  DevxEventHandle event = nullptr;
  DEVX_VENDOR_CHECK(g_vendor->event_create(device, 1, &event));
  DEVX_VENDOR_CHECK(g_vendor->event_record(event, stream));
  return event;
}

void destroy_pending_locked() {
  for (auto& p : g_pending) {
    if (p.start) g_vendor->event_destroy(p.start);
    if (p.end) g_vendor->event_destroy(p.end);
  }
  g_pending.clear();
  ++g_generation;
}

void destroy_anchors_locked() {
  for (auto& anchor : g_anchors) {
    if (anchor.event) g_vendor->event_destroy(anchor.event);
  }
  g_anchors.clear();
}

int64_t to_unix_ns(const Anchor& anchor, DevxEventHandle event) {
  {
    WithoutGil without_gil;
    DEVX_VENDOR_CHECK(g_vendor->event_synchronize(event));
  }
  float ms = 0;
  DEVX_VENDOR_CHECK(g_vendor->event_elapsed_ms(anchor.event, event, &ms));
  return anchor.unix_ns + static_cast<int64_t>(static_cast<double>(ms) * 1e6);
}

}  // namespace

void add_recording_listener(void (*listener)()) {
  g_listeners.push_back(listener);
}

void push_correlation(uint64_t id) {
  t_correlation.push_back(id);
}

void pop_correlation() {
  if (!t_correlation.empty()) t_correlation.pop_back();
}

DeviceSpan::DeviceSpan(ActivityKind kind, const char* name, const DevxStream& stream, size_t bytes) {
  if (recording()) begin(kind, name, stream, bytes);
}

DeviceSpan::DeviceSpan(ActivityKind kind, std::string name, const DevxStream& stream, size_t bytes) {
  if (recording()) begin(kind, std::move(name), stream, bytes);
}

namespace {

// An activity on `stream`, launched by this thread inside its current correlation.
Pending pending_on(ActivityKind kind, std::string name, const DevxStream& stream, size_t bytes) {
  Pending p{};
  p.kind = kind;
  p.name = std::move(name);
  p.device = stream.device_index();
  p.stream = stream.id();
  p.correlation = t_correlation.empty() ? 0 : t_correlation.back();
  p.bytes = bytes;
  p.thread = system_thread_id();
  p.handle = stream.handle();
  return p;
}

}  // namespace

void DeviceSpan::begin(ActivityKind kind, std::string name, const DevxStream& stream, size_t bytes) {
  Pending p = pending_on(kind, std::move(name), stream, bytes);
  p.launch_start_ns = unix_now_ns();
  p.start = timed_event_on(p.device, p.handle);
  p.launch_end_ns = unix_now_ns();
  std::lock_guard<std::mutex> lock(g_mutex);
  p.id = ++g_last_id;
  slot_ = static_cast<int64_t>(g_pending.size());
  generation_ = g_generation;
  g_pending.push_back(std::move(p));
}

void DeviceSpan::finish() {
  if (slot_ < 0) return;
  const int64_t slot = slot_;
  slot_ = -1;
  std::unique_lock<std::mutex> lock(g_mutex);
  if (generation_ != g_generation) return;  // the recording was collected or restarted meanwhile
  const c10::DeviceIndex device = g_pending[slot].device;
  const DevxStreamHandle stream = g_pending[slot].handle;
  lock.unlock();
  DevxEventHandle end = timed_event_on(device, stream);
  lock.lock();
  if (generation_ == g_generation) {
    g_pending[slot].end = end;
  } else {
    g_vendor->event_destroy(end);
  }
}

HostSpan begin_host_span(ActivityKind kind, std::string name, const DevxStream& stream, size_t bytes) {
  HostSpan span;
  if (!recording()) return span;
  Pending p = pending_on(kind, std::move(name), stream, bytes);
  p.host_timed = true;
  p.start_ns = p.launch_start_ns = p.launch_end_ns = unix_now_ns();
  std::lock_guard<std::mutex> lock(g_mutex);
  p.id = ++g_last_id;
  span.slot = static_cast<int64_t>(g_pending.size());
  span.generation = g_generation;
  g_pending.push_back(std::move(p));
  return span;
}

void end_host_span(const HostSpan& span) {
  if (span.slot < 0) return;
  const int64_t now = unix_now_ns();
  std::lock_guard<std::mutex> lock(g_mutex);
  if (span.generation == g_generation) g_pending[span.slot].end_ns = now;
}

DeviceSpan::~DeviceSpan() {
  // An exception inside the work leaves the span open; close it so its events are released.
  if (slot_ >= 0) {
    try {
      finish();
    } catch (...) {
    }
  }
}

bool thread_observed() {
  return at::hasThreadLocalCallbacks();
}

void HiddenOps::hide() {
  if (!at::isRecordFunctionEnabled()) return;  // an enclosing scope hid them already
  at::enableRecordFunction(false);
  hidden_ = true;
}

void HiddenOps::restore() {
  at::enableRecordFunction(true);
}

void set_session_active(bool active) {
  g_session_active.store(active, std::memory_order_relaxed);
}

void start_recording() {
  std::unique_lock<std::mutex> lock(g_mutex);
  destroy_anchors_locked();
  destroy_pending_locked();
  g_last_id = 0;
  for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
    synchronize_device(d);
    Anchor anchor;
    anchor.event = timed_event_on(d, getDefaultDevxStream(d).handle());
    anchor.unix_ns = unix_now_ns();
    WithoutGil without_gil;
    DEVX_VENDOR_CHECK(g_vendor->event_synchronize(anchor.event));
    g_anchors.push_back(anchor);
  }
  g_recording.store(true, std::memory_order_relaxed);
  lock.unlock();
  notify_listeners();
}

void stop_recording() {
  g_recording.store(false, std::memory_order_relaxed);
  notify_listeners();
}

std::vector<Activity> collect() {
  std::vector<Pending> pending;
  std::vector<Anchor> anchors;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    pending.swap(g_pending);
    anchors.swap(g_anchors);
    ++g_generation;
  }
  std::vector<Activity> out;
  out.reserve(pending.size());
  for (auto& p : pending) {
    if (p.host_timed) {
      // One still running when the recording is collected is left out, as an unfinished span.
      if (p.end_ns != 0) {
        out.push_back(Activity{p.kind, std::move(p.name), p.device, p.stream, p.correlation, p.id, p.start_ns,
                               p.end_ns, p.launch_start_ns, p.launch_end_ns, p.bytes, p.thread});
      }
      continue;
    }
    if (p.end != nullptr && p.device < static_cast<c10::DeviceIndex>(anchors.size())) {
      const Anchor& anchor = anchors[p.device];
      out.push_back(Activity{p.kind, std::move(p.name), p.device, p.stream, p.correlation, p.id,
                             to_unix_ns(anchor, p.start), to_unix_ns(anchor, p.end), p.launch_start_ns,
                             p.launch_end_ns, p.bytes, p.thread});
    }
    g_vendor->event_destroy(p.start);
    if (p.end) g_vendor->event_destroy(p.end);
  }
  for (auto& anchor : anchors) g_vendor->event_destroy(anchor.event);
  return out;
}

}  // namespace devx::profiler
