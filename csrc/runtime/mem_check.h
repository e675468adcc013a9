// DIPU_MEM_CHECK=1: every live device allocation is tracked (from the caching allocator, so it
// works with the default configuration) with its size, device, the user's Python line and the op
// that made it. An allocation made in the backward pass names the autograd node and the forward
// line of the op it differentiates (RecordFunction's sequence numbers, as the profiler pairs them).
// DIPU_MEM_CHECK_ENABLE_BACKTRACE=1 adds the whole Python stack and the C++ backtrace;
// DIPU_MEM_CHECK_LOG_INTERVAL=N logs a summary by origin every N allocations. The report proper
// (grouped, with what Python still holds told apart) is made by torch_devx.diagnostics from
// records(). Off costs one relaxed load per allocation and free.
#pragma once

#include <c10/core/Device.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/python_hooks.h"

namespace devx::memcheck {

extern std::atomic<bool> g_enabled;

void on_alloc(void* ptr, size_t size, c10::DeviceIndex device);
void on_free(void* ptr);

struct LiveRecord {
  uintptr_t ptr;
  size_t size;
  int device;
  uint64_t serial;        // allocation order
  std::string line;       // the user's line that issued the op ("" when none: a backward thread)
  std::string op;         // the outermost op running ("aten::linear"), or the autograd node ("MmBackward0")
  bool backward;          // made while an autograd node ran
  std::string forward;    // for backward: the user's line of the forward op that made the node
  std::vector<PythonFrame> python_stack;  // with DIPU_MEM_CHECK_ENABLE_BACKTRACE
};

// The allocations live now that were made while the checker was on, oldest first.
std::vector<LiveRecord> records();
// The C++ backtrace of the live allocation at `ptr`, formatted ("" without backtraces).
std::string backtrace(uintptr_t ptr);
size_t live_count();

}  // namespace devx::memcheck
