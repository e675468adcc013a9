// Memory history (torch.devx.memory._record_memory_history): what the caching allocator did, in
// the shape of PyTorch's memory snapshots. While recording, every allocator action (alloc, free,
// segment alloc/free, OOM) is kept per device in a ring buffer, with the Python stack (and, with
// stacks="all", the C++ return addresses) that caused it, and with the allocator's totals after
// it, which is the memory timeline: live, peak, reserved bytes and the largest free block.
// Live allocations keep their stacks so that a snapshot can say who holds each block.
//
// Off, the allocator pays one relaxed load per call (`recording()`).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/python_hooks.h"

namespace devx::history {

extern std::atomic<bool> g_recording;
inline bool recording() {
  return g_recording.load(std::memory_order_relaxed);
}

enum class Context { kNone, kState, kAlloc, kAll };  // PyTorch's `context` argument

struct Settings {
  bool trace = true;  // enabled="all": keep the action history; "state": live stacks only
  Context context = Context::kAll;
  bool cpp_frames = true;  // stacks="all"
  size_t max_entries = SIZE_MAX;
};

// Starts (or, with nullptr, stops) recording. Stopping keeps the recorded history for _snapshot
// and forgets the stacks of live blocks (their frees are no longer seen, so an address reused
// later would be blamed on the wrong line). clear drops the history.
void configure(const Settings* settings, bool clear);

// Where an allocator call came from: Python frames innermost first, C++ return addresses.
struct Stack {
  std::vector<PythonFrame> python;
  std::vector<void*> cpp;
};
using StackPtr = std::shared_ptr<const Stack>;

// Captures the calling stack for the allocator call about to be made on this thread, outside the
// allocator's lock (it takes the GIL). Events recorded on this thread while it lives use it.
class CallScope {
 public:
  explicit CallScope(bool is_free);
  ~CallScope();
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;

 private:
  StackPtr stack_;
  const StackPtr* previous_;
};

enum class Action { kAlloc, kFreeRequested, kFreeCompleted, kSegmentAlloc, kSegmentFree, kOom, kSnapshot };
const char* action_name(Action a);

// The device's allocator totals right after an action.
struct Totals {
  int64_t allocated = 0;
  int64_t peak_allocated = 0;
  int64_t reserved = 0;
  int64_t largest_free = 0;  // largest cached free block: the biggest request served without the vendor
};

struct Entry {
  Action action;
  uintptr_t addr;
  size_t size;
  int64_t time_us;  // microseconds since the epoch
  Totals totals;
  size_t device_free;  // OOM only: what the vendor still had
  StackPtr stack;
};

// Called by the allocator (under its lock) when recording() is true.
void record(int device, Action action, const void* addr, size_t size, const Totals& totals, size_t device_free = 0);

// The recorded actions of `device`, oldest first.
std::vector<Entry> entries(int device);
// The stack that allocated the live block (or the segment) at `addr`; null if unknown.
StackPtr block_stack(const void* addr);
StackPtr segment_stack(const void* addr);

// `stack` as frames innermost first: C++ frames (symbolised now) then Python frames.
std::vector<PythonFrame> frames(const Stack& stack);

}  // namespace devx::history
