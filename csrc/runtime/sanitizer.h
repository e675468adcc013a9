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
//     zone and every quarantined block's poison (a write after free) is checked;
//   - host code touching device memory directly (ctypes on data_ptr(), a C extension
//     dereferencing it), which a real device would not allow, where the vendor can watch its
//     memory for it (vendor_api.h, host_access; cpu_sim, whose memory is host memory): the
//     guarded span of each allocation is whole pages that hold only it, and the vendor keeps them
//     closed to host code while no device work runs. Device work (kernels, copies, the
//     sanitizer's own checks, collectives in flight) is marked by DeviceAccess scopes and
//     DeviceWorkHolds, which the vendor counts. A host access is let through (as on cpu_sim) and
//     recorded by the vendor, which notifies: the report is raised through a Python pending call
//     (in the main thread at its next bytecode boundary) or, failing that, at the next check
//     point. The runtime turns the vendor's records into reports naming the allocation. A vendor
//     without host_access (cuda: host code faults on its memory anyway) gets a warning saying
//     host accesses are not detected.
// A report names the allocation (address, size, device, the Python line that made it and, after
// a free, the line that freed it) and is a Python RuntimeError at the next check point; frees run
// in destructors, so what they find waits for the next op, copy or synchronize.
//
// What it cannot see: writes that jump over the guard zones into another allocation; host
// accesses made while device work runs on another thread (the scopes are process-wide, because
// a kernel's own worker threads — OpenMP, gloo — cannot be told from other threads), and after an
// allocation has been opened, further accesses to it until the op in progress ends; host accesses
// on vendors without host_access, or once the vendor stopped watching (cpu_sim: another SIGSEGV
// handler replaced its own; a warning says so). Allocations made before it was switched on have
// no guard zones and are not checked.
#pragma once

#include <c10/core/Device.h>
#include <c10/macros/Macros.h>

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

// Device work in progress on this thread (or, for a DeviceWorkHold, on threads it does not own):
// faults in guarded allocations are its own, not host code's. Returns the vendor's host-access
// table that counts it (leave it there), or nullptr where the vendor has none.
const DevxHostAccessApi* enter_device_work();

class DeviceAccess {
 public:
  DeviceAccess() : host_(C10_UNLIKELY(enabled()) ? enter_device_work() : nullptr) {}
  ~DeviceAccess() {
    if (C10_UNLIKELY(host_ != nullptr)) host_->leave_device_work();
  }
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;

 private:
  const DevxHostAccessApi* const host_;
};

// Device work that outlives the call that issued it (a collective that an engine's threads run):
// taken before the work is issued, released once, when it is known to be over.
class DeviceWorkHold {
 public:
  DeviceWorkHold() : host_(enabled() ? enter_device_work() : nullptr) {}
  ~DeviceWorkHold() { release(); }
  DeviceWorkHold(const DeviceWorkHold&) = delete;
  DeviceWorkHold& operator=(const DeviceWorkHold&) = delete;
  void release() {
    if (const DevxHostAccessApi* host = host_.exchange(nullptr)) host->leave_device_work();
  }

 private:
  std::atomic<const DevxHostAccessApi*> host_;
};

// Device work about to reach the allocation holding `p` through system calls (a transport's
// readv/writev), which see protected pages as EFAULT rather than faulting: opened now, protected
// again once no device work runs. Call it while device work is marked.
void open_for_system_calls(const void* p);

// Called (from the vendor's signal handler: it must be async-signal-safe) when host code touched
// device memory; the Python bindings schedule a pending call that raises the report. Returns
// nonzero if it could not schedule one.
void set_host_access_notifier(int (*notify)());
// Reports of host accesses not raised yet, joined; "" if none. Re-protects what they opened.
std::string take_host_access_reports();

}  // namespace devx::sanitizer
