// Device activities for the profiler: the span of each kernel, copy and fill on its devx stream,
// measured with the vendor's timed events (so the span is the work's own execution on the stream,
// whether the vendor runs it inline or asynchronously), tagged with the correlation id of the aten
// op that launched it. Vendor-independent: both the kineto plugin and the legacy profiler stubs
// read from here.
//
// Off costs one relaxed atomic load at each launch site (recording()).
//
// While a profiler observes the thread (torch.profiler, CPU-only too, and the legacy
// torch.autograd.profiler: RecordFunction callbacks of the thread) or runs a session of the devx
// plugin, HiddenOps scopes hide the simulator's own aten calls from it: a kernel computing with
// ATen's kernels on aliases, or the meta kernels that shape issued work, are not ops of the
// user's program, and a CUDA user sees only the op. Off, a scope costs a relaxed atomic load and
// a look at the thread's (empty) callback list.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include <c10/macros/Macros.h>

#include "runtime/stream.h"

namespace devx::profiler {

enum class ActivityKind : uint8_t { kKernel, kMemcpy, kMemset };

struct Activity {
  ActivityKind kind;
  std::string name;
  c10::DeviceIndex device;
  c10::StreamId stream;
  uint64_t correlation;     // of the op that launched it; 0 when no profiled op was running
  uint32_t id;              // this launch's own id within the recording (> 0), for the launch->work link
  int64_t start_ns;         // Unix-epoch nanoseconds, the clock kineto and torch.profiler use
  int64_t end_ns;
  int64_t launch_start_ns;  // the host's launch call: from before the span's start event was
  int64_t launch_end_ns;    // recorded until after, so it stays inside the launching op
  size_t bytes;             // copies and fills
  int32_t thread;           // system thread id of the launching host thread
};

extern std::atomic<bool> g_recording;
extern std::atomic<bool> g_session_active;

inline bool recording() {
  return g_recording.load(std::memory_order_relaxed);
}

inline bool session_active() {
  return g_session_active.load(std::memory_order_relaxed);
}

// Whether RecordFunction callbacks observe this thread (a profiler started on it, or handed to
// it with the thread-local state, as autograd's threads are).
bool thread_observed();

// Turns record functions off on this thread for its lifetime while a profiler session runs (see
// above); the devx op's own row, its device spans and memory events are recorded outside it or
// do not depend on it.
class HiddenOps {
 public:
  HiddenOps() {
    if (C10_UNLIKELY(session_active() || thread_observed())) hide();
  }
  ~HiddenOps() {
    if (C10_UNLIKELY(hidden_)) restore();
  }
  HiddenOps(const HiddenOps&) = delete;
  HiddenOps& operator=(const HiddenOps&) = delete;

 private:
  void hide();
  void restore();
  bool hidden_ = false;
};

// The correlation ids of the ops being profiled on this thread (innermost last).
void push_correlation(uint64_t id);
void pop_correlation();

// Records a timed event on `stream` now and another at finish(); inert when not recording.
class DeviceSpan {
 public:
  DeviceSpan(ActivityKind kind, const char* name, const DevxStream& stream, size_t bytes = 0);
  DeviceSpan(ActivityKind kind, std::string name, const DevxStream& stream, size_t bytes = 0);
  ~DeviceSpan();
  void finish();
  DeviceSpan(const DeviceSpan&) = delete;
  DeviceSpan& operator=(const DeviceSpan&) = delete;

 private:
  void begin(ActivityKind kind, std::string name, const DevxStream& stream, size_t bytes);
  int64_t slot_ = -1;
  uint64_t generation_ = 0;
};

// A span the host times itself, for device work that no stream event can bracket: a collective
// that the engine runs on its own threads (gloo), from its issue to the completion of its work.
// Returned by begin_host_span (inert when not recording); end_host_span may run on any thread.
struct HostSpan {
  int64_t slot = -1;
  uint64_t generation = 0;
};
HostSpan begin_host_span(ActivityKind kind, std::string name, const DevxStream& stream, size_t bytes = 0);
void end_host_span(const HostSpan& span);

// Called (under no lock) after every start or stop of a recording: the op path's diagnostics gate
// listens, so profiled ops take the path that records their spans.
void add_recording_listener(void (*listener)());

// A session of the devx plugin starts or stops (whatever activities it records).
void set_session_active(bool active);

// Starts a recording: anchors every device's event clock to the host's Unix clock.
void start_recording();
// Stops launching spans; activities already launched stay pending until collect().
void stop_recording();
// Waits for the pending spans' events and returns their activities, oldest first.
std::vector<Activity> collect();

// Whether torch.profiler can show devx's device activities: the installed torch has kineto's
// PrivateUse1 profiler registry (kineto_plugin.cpp). Without it only the legacy autograd
// profiler's device times remain.
bool kineto_plugin_available();

}  // namespace devx::profiler
