// DEVX_SIM_SANITIZE=1: a memory sanitizer for the simulated device, after compute-sanitizer's
// memcheck. While it is on, the caching allocator steps aside: every allocation is its own vendor
// allocation with guard zones (canary bytes) before and after the bytes asked for, and a freed
// allocation is filled with poison (0xFF: NaN as floats, -1 as integers) and kept out of reuse
// for a while (quarantine). Checks:
//   - a copy whose device range leaves the live allocation it starts in, or touches a freed one,
//     is refused before it runs;
//   - after each op, the guard zones of its tensors' allocations must be intact (a kernel wrote
//     out of bounds otherwise), and so after each copy;
//   - at synchronize, at sanitize_check() and when a block leaves quarantine, every live guard
//     zone and every quarantined block's poison (a write after free) is checked.
// A report names the allocation (address, size, device, the Python line that made it and, after
// a free, the line that freed it) and is a Python RuntimeError at the next check point; frees run
// in destructors, so what they find waits for the next op, copy or synchronize.
//
// What it cannot see: host code reading device memory directly (the cpu_sim arena is ordinary
// host memory; a read leaves no trace — reads of freed memory do return poison), and writes that
// jump over the guard zones into another allocation. Allocations made before it was switched on
// have no guard zones and are not checked.
#pragma once

#include <c10/core/Device.h>

#include <atomic>
#include <string>
#include <vector>

#include "runtime/vendor_api.h"

namespace devx::sanitizer {

extern std::atomic<bool> g_enabled;
inline bool enabled() {
  return g_enabled.load(std::memory_order_relaxed);
}

// A guarded allocation of `nbytes` on `device`; nullptr if the vendor is out of memory.
void* allocate(c10::DeviceIndex device, size_t nbytes);
// Frees an allocation made by allocate(): checks its guard zones, poisons it, quarantines it.
// Never throws; what it finds is raised at the next check point.
void release(void* ptr);

// Before a copy of `n` bytes of kind `kind` between dst and src.
void check_copy(void* dst, const void* src, size_t n, DevxMemcpyKind kind);
// After an op or copy: the guard zones of the allocations holding these pointers.
void check_pointers(const std::vector<const void*>& ptrs, const std::string& after);
// Every live allocation's guard zones and every quarantined allocation's poison.
void check_all(const std::string& when);

// Number of allocations with guard zones now live, and in quarantine.
std::pair<size_t, size_t> counts();

}  // namespace devx::sanitizer
