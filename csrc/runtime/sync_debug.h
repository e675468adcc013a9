// torch.devx.set_sync_debug_mode (torch.cuda's under mocking): a warning or an error whenever an
// operation makes the host wait for the device, as CUDA's sync debug mode reports its
// synchronizing calls. Explicit device-wide synchronize() is not reported, as on CUDA.
#pragma once

#include <c10/macros/Macros.h>

#include <atomic>

namespace devx::sync_debug {

enum Mode : int { kOff = 0, kWarn = 1, kError = 2 };

extern std::atomic<int> g_mode;

void set_mode(int mode);
inline int mode() {
  return g_mode.load(std::memory_order_relaxed);
}

// Warns or raises (by the mode) that `what` made the host wait for the device.
void report(const char* what);

inline void on_host_wait(const char* what) {
  if (C10_UNLIKELY(mode() != kOff)) report(what);
}

}  // namespace devx::sync_debug
