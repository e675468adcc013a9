#include "runtime/sanitizer.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <sstream>

#include "runtime/exception.h"
#include "runtime/log.h"
#include "runtime/python_hooks.h"
#include "runtime/settings.h"
#include "runtime/vendor.h"

namespace devx::sanitizer {

std::atomic<bool> g_enabled{false};

namespace {

// Guard zones are at least this long; the front one keeps the caller's bytes 512-aligned like
// the caching allocator's blocks.
constexpr size_t kGuard = 512;
constexpr unsigned char kCanary = 0xCA;
constexpr unsigned char kPoison = 0xFF;
// Freed allocations stay poisoned and unused until the quarantine holds more than this.
constexpr size_t kQuarantineBytes = size_t{256} << 20;

struct Allocation {
  c10::DeviceIndex device;
  char* base;    // the guarded span: front guard, the caller's bytes, rear guard
  size_t total;
  char* user;    // base + kGuard
  size_t size;
  std::string made_at;
  std::string freed_at;
  char* vendor_ptr;    // what the vendor returned (base, or below it when page aligned)
  size_t vendor_size;  // what was asked of the vendor
  bool watched;        // by the vendor's host_access, from base for total bytes
};

std::mutex g_mutex;
std::map<uintptr_t, Allocation> g_live;        // by user address
std::map<uintptr_t, Allocation> g_quarantine;  // by user address
std::deque<uintptr_t> g_quarantine_order;      // oldest first
size_t g_quarantine_bytes = 0;
std::vector<std::string> g_pending;  // reports found where nothing could be thrown

std::string pointer(const void* p) {
  std::ostringstream os;
  os << p;
  return os.str();
}

std::string describe(const Allocation& a) {
  std::ostringstream os;
  os << "allocation " << static_cast<const void*>(a.user) << " (" << a.size << " bytes on devx:"
     << static_cast<int>(a.device) << ", allocated at " << (a.made_at.empty() ? "(no Python frame)" : a.made_at);
  if (!a.freed_at.empty()) os << ", freed at " << a.freed_at;
  os << ")";
  return os.str();
}

// ---- Host-access detection, through the vendor's host_access (vendor_api.h) ----------------
//
// The vendor watches the whole (page-aligned) guarded span of an allocation; the tag it copies
// into each record is the allocation's size and whether it was freed at the time, so that a
// record still names the allocation after it has left the quarantine. User bytes start kGuard
// past the span's start, watched or not.

std::atomic<bool> g_host_resolved{false};
std::atomic<const DevxHostAccessApi*> g_host{nullptr};
std::once_flag g_host_once;
int (*g_notify)() = nullptr;
// Under g_mutex: the vendor watches (start() succeeded, no stop() since).
bool g_started = false;
size_t g_page = 0;
// Detection is over for this process (a warning said why).
std::atomic<bool> g_gave_up{false};

void resolve_host_access() {
  const DevxHostAccessApi* table = g_vendor->host_access;
  if (table == nullptr) {
    log::warn(log::Module::ALLOC, std::string("devx sanitizer: vendor '") + g_vendor->name +
                                      "' cannot watch its memory (no host_access in its table; its memory is not host "
                                      "memory); host accesses to device memory are not detected");
  } else if (g_notify != nullptr) {
    table->set_notifier(g_notify);
  }
  g_host.store(table);
  g_host_resolved.store(true, std::memory_order_release);
}

// The vendor's host-access detection, or nullptr where it has none (said once, when the
// sanitizer first needs it).
const DevxHostAccessApi* host_access() {
  if (C10_LIKELY(g_host_resolved.load(std::memory_order_acquire))) return g_host.load(std::memory_order_relaxed);
  if (!g_vendor) return nullptr;
  std::call_once(g_host_once, &resolve_host_access);
  return g_host.load();
}

uint64_t tag_of(size_t size, bool freed) {
  return (static_cast<uint64_t>(size) << 1) | (freed ? 1 : 0);
}

// Whether new allocations are watched: the first call starts the vendor's watching.
bool watching_ready_locked() {
  if (g_gave_up.load() || !enabled()) return false;
  if (g_started) return true;
  const DevxHostAccessApi* host = host_access();
  if (host == nullptr) return false;
  if (host->start(&g_page) != DEVX_OK) {
    g_gave_up.store(true);
    log::warn(log::Module::ALLOC, std::string("devx sanitizer: ") + g_vendor->last_error() +
                                      "; host accesses to device memory are not detected");
    return false;
  }
  g_started = true;
  return true;
}

void stop_watching_locked() {
  if (!g_started) return;
  g_started = false;
  host_access()->stop();
}

// Before the vendor gets `a` back: its pages become ordinary memory again.
void unwatch_locked(const Allocation& a) {
  if (a.watched) host_access()->unwatch(a.base);
}

std::string where_in(uintptr_t addr, uintptr_t user, size_t size) {
  std::ostringstream os;
  if (addr < user) {
    os << user - addr << " bytes before the start of";
  } else if (addr >= user + size) {
    os << addr - user - size << " bytes past the end of";
  } else {
    os << "offset " << addr - user << " of";
  }
  return os.str();
}

std::string describe_access(const DevxHostAccess& h) {
  const uintptr_t user = reinterpret_cast<uintptr_t>(h.range) + kGuard;
  const size_t size = static_cast<size_t>(h.tag >> 1);
  const bool freed = (h.tag & 1) != 0;
  const char* verb = h.kind == DEVX_ACCESS_WRITE ? "wrote" : h.kind == DEVX_ACCESS_READ ? "read" : "touched";
  std::ostringstream os;
  os << "devx sanitizer: host code " << verb << " " << (freed ? "freed " : "") << "device memory directly at "
     << reinterpret_cast<const void*>(h.address) << ", " << where_in(h.address, user, size) << " "
     << (freed ? "freed " : "");
  const std::map<uintptr_t, Allocation>& in = freed ? g_quarantine : g_live;
  auto it = in.find(user);
  if (it != in.end()) {
    os << describe(it->second);
  } else {
    os << "allocation " << reinterpret_cast<const void*>(user) << " (" << size << " bytes, released since)";
  }
  os << ". Device memory is reached through ops and copies (.cpu(), .item(), copy_); a real device "
        "faults or returns garbage here.";
  return os.str();
}

// The host accesses the vendor recorded so far, oldest first, as reports.
std::vector<std::string> take_accesses_locked() {
  std::vector<std::string> out;
  // Nothing was watched before the vendor's table was looked at.
  const DevxHostAccessApi* host = g_host_resolved.load(std::memory_order_acquire) ? g_host.load() : nullptr;
  if (host == nullptr) return out;
  constexpr size_t kBatch = 32;
  DevxHostAccess batch[kBatch];
  uint64_t dropped = 0;
  for (;;) {
    uint64_t more = 0;
    const size_t n = host->take(batch, kBatch, &more);
    dropped += more;
    for (size_t i = 0; i < n; ++i) out.push_back(describe_access(batch[i]));
    if (n < kBatch) break;
  }
  if (dropped) {
    out.push_back("devx sanitizer: " + std::to_string(dropped) + " more host access(es) to device memory not recorded");
  }
  return out;
}

// What is waiting to be raised: reports found where nothing could be thrown, host accesses.
std::vector<std::string> take_reports_locked() {
  std::vector<std::string> reports = std::move(g_pending);
  g_pending.clear();
  for (std::string& r : take_accesses_locked()) reports.push_back(std::move(r));
  return reports;
}

std::vector<unsigned char> read(const char* p, size_t n) {
  std::vector<unsigned char> out(n);
  if (n) DEVX_VENDOR_CHECK(g_vendor->memcpy_sync(out.data(), p, n, DEVX_MEMCPY_D2H));
  return out;
}

// First and last offsets in [p, p+n) whose bytes are not `expected`, and how many; count 0: intact.
struct Damage {
  size_t first = 0, last = 0, count = 0;
};
Damage damage(const char* p, size_t n, unsigned char expected) {
  Damage d;
  std::vector<unsigned char> bytes = read(p, n);
  for (size_t i = 0; i < n; ++i) {
    if (bytes[i] == expected) continue;
    if (d.count++ == 0) d.first = i;
    d.last = i;
  }
  return d;
}

// Reports for broken guard zones of `a`, empty if both are intact. Broken zones are restored so
// that each damage is reported once.
std::string check_guards(const Allocation& a, const std::string& when) {
  std::ostringstream os;
  Damage front = damage(a.base, kGuard, kCanary);
  if (front.count) {
    os << "devx sanitizer: out-of-bounds write " << when << ": " << front.count << " byte(s) changed from "
       << kGuard - front.first << " to " << kGuard - front.last << " bytes before the start of " << describe(a);
    g_vendor->memset_sync(a.base, kCanary, kGuard);
  }
  const char* rear = a.user + a.size;
  Damage back = damage(rear, a.base + a.total - rear, kCanary);
  if (back.count) {
    if (front.count) os << "\n";
    os << "devx sanitizer: out-of-bounds write " << when << ": " << back.count << " byte(s) changed from "
       << back.first << " to " << back.last + 1 << " bytes past the end of " << describe(a);
    g_vendor->memset_sync(const_cast<char*>(rear), kCanary, a.base + a.total - rear);
  }
  return os.str();
}

std::string check_poison(const Allocation& a, const std::string& when) {
  Damage d = damage(a.user, a.size, kPoison);
  if (!d.count) return "";
  std::ostringstream os;
  os << "devx sanitizer: use after free " << when << ": " << d.count << " byte(s) at offsets " << d.first << ".."
     << d.last << " of freed " << describe(a) << " were written after the free";
  g_vendor->memset_sync(a.user, kPoison, a.size);
  return os.str();
}

[[noreturn]] void raise(std::vector<std::string> reports) {
  std::ostringstream os;
  for (size_t i = 0; i < reports.size(); ++i) os << (i ? "\n" : "") << reports[i];
  TORCH_CHECK(false, os.str());
}

// The allocation (live or quarantined) whose guarded span holds `p`, or nullptr.
const Allocation* find(const std::map<uintptr_t, Allocation>& in, const void* p) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  auto it = in.upper_bound(addr + kGuard);
  if (it == in.begin()) return nullptr;
  const Allocation& a = std::prev(it)->second;
  const auto base = reinterpret_cast<uintptr_t>(a.base);
  return addr >= base && addr < base + a.total ? &a : nullptr;
}

void evict_oldest_locked() {
  uintptr_t key = g_quarantine_order.front();
  g_quarantine_order.pop_front();
  auto it = g_quarantine.find(key);
  Allocation a = std::move(it->second);
  g_quarantine.erase(it);
  g_quarantine_bytes -= a.vendor_size;
  std::string report = check_poison(a, "(found when it left quarantine)");
  if (!report.empty()) g_pending.push_back(std::move(report));
  unwatch_locked(a);
  g_vendor->free(a.device, a.vendor_ptr);
}

std::string range_error(const char* side, const void* p, size_t n, const std::string& what) {
  std::ostringstream os;
  os << "devx sanitizer: " << side << " of a copy of " << n << " bytes at " << p << " " << what;
  return os.str();
}

// A device-side range of a copy: inside one live allocation, or an error report.
std::string check_range_locked(const char* side, const void* p, size_t n) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  if (const Allocation* a = find(g_live, p)) {
    const auto user = reinterpret_cast<uintptr_t>(a->user);
    if (addr < user) return range_error(side, p, n, "starts " + std::to_string(user - addr) + " bytes before " + describe(*a));
    if (addr + n > user + a->size) {
      return range_error(side, p, n, "runs " + std::to_string(addr + n - user - a->size) + " bytes past the end of " + describe(*a));
    }
    return "";
  }
  if (const Allocation* a = find(g_quarantine, p)) return range_error(side, p, n, "touches freed " + describe(*a));
  return "";  // not guarded memory: made before the sanitizer was on
}

void reload() {
  if (settings::get_bool(settings::Id::DEVX_SIM_SANITIZE)) {
    g_enabled.store(true, std::memory_order_relaxed);
    return;
  }
  // Switched off: nothing will be freed into the quarantine any more, so it is emptied now, and
  // what is still unreported can only go to the log. The pages are opened before the switch
  // reads off, so that code which sees it off (and opens no DeviceAccess scope) cannot fault.
  DeviceAccess access;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!enabled()) return;
  stop_watching_locked();
  g_enabled.store(false, std::memory_order_relaxed);
  while (!g_quarantine_order.empty()) evict_oldest_locked();
  for (const std::string& report : take_reports_locked()) log::warn(log::Module::ALLOC, report);
}

settings::Watch g_watch({settings::Id::DEVX_SIM_SANITIZE}, &reload);

}  // namespace

void* allocate(c10::DeviceIndex device, size_t nbytes) {
  bool watch = false;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    watch = watching_ready_locked();
  }
  // Watched, the guarded span is whole pages that hold nothing else: the vendor is asked for a
  // page more, and the span starts on the first page boundary inside what it returns.
  const size_t rear_min = kGuard + (kGuard - nbytes % kGuard) % kGuard;
  const size_t total = watch ? (kGuard + nbytes + rear_min + g_page - 1) / g_page * g_page : kGuard + nbytes + rear_min;
  const size_t vendor_size = watch ? total + g_page : total;
  void* vendor_ptr = nullptr;
  DevxStatus status = g_vendor->malloc(device, vendor_size, &vendor_ptr);
  if (status == DEVX_ERROR_OOM) {
    // Quarantined memory is the first thing to give back.
    DeviceAccess access;
    std::lock_guard<std::mutex> lock(g_mutex);
    while (status == DEVX_ERROR_OOM && !g_quarantine_order.empty()) {
      evict_oldest_locked();
      status = g_vendor->malloc(device, vendor_size, &vendor_ptr);
    }
  }
  if (status == DEVX_ERROR_OOM) return nullptr;
  DEVX_VENDOR_CHECK(status);
  auto* v = static_cast<char*>(vendor_ptr);
  char* b = watch ? v + (g_page - reinterpret_cast<uintptr_t>(v) % g_page) % g_page : v;
  DEVX_VENDOR_CHECK(g_vendor->memset_sync(b, kCanary, kGuard));
  DEVX_VENDOR_CHECK(g_vendor->memset_sync(b + kGuard + nbytes, kCanary, total - kGuard - nbytes));
  Allocation a{device, b, total, b + kGuard, nbytes, python_line(), "", v, vendor_size, watch};
  std::lock_guard<std::mutex> lock(g_mutex);
  // Refused (the vendor watches all it can, or watching stopped meanwhile): a plain allocation.
  if (a.watched && (!g_started || host_access()->watch(b, total, tag_of(nbytes, false)) != DEVX_OK)) a.watched = false;
  g_live.emplace(reinterpret_cast<uintptr_t>(a.user), std::move(a));
  return b + kGuard;
}

void release(void* ptr) {
  std::string freed_at = python_line();
  DeviceAccess access;  // the guard check and the poisoning are device work
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_live.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == g_live.end()) {
    g_pending.push_back("devx sanitizer: free of " + pointer(ptr) + ", which is not a live guarded allocation");
    return;
  }
  Allocation a = std::move(it->second);
  g_live.erase(it);
  a.freed_at = freed_at.empty() ? "(no Python frame)" : freed_at;
  // Opened by hand rather than by a fault per page touched; closed again as device work ends.
  if (a.watched) host_access()->open(a.base);
  std::string report = check_guards(a, "(found when it was freed)");
  if (!enabled()) {
    // Made while the sanitizer was on, freed after: no quarantine, and no check point to raise at.
    if (!report.empty()) log::warn(log::Module::ALLOC, report);
    unwatch_locked(a);
    g_vendor->free(a.device, a.vendor_ptr);
    return;
  }
  if (!report.empty()) g_pending.push_back(std::move(report));
  if (g_vendor->memset_sync(a.user, kPoison, a.size) != DEVX_OK) {
    unwatch_locked(a);
    g_vendor->free(a.device, a.vendor_ptr);
    return;
  }
  // Quarantined: host reads of it are reads of freed memory.
  if (a.watched) host_access()->set_tag(a.base, tag_of(a.size, true));
  const auto key = reinterpret_cast<uintptr_t>(a.user);
  g_quarantine_bytes += a.vendor_size;
  g_quarantine.emplace(key, std::move(a));
  g_quarantine_order.push_back(key);
  while (g_quarantine_bytes > kQuarantineBytes && g_quarantine_order.size() > 1) evict_oldest_locked();
}

void check_copy(void* dst, const void* src, size_t n, DevxMemcpyKind kind) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<std::string> reports = take_reports_locked();
  if (!reports.empty()) raise(std::move(reports));
  if (kind == DEVX_MEMCPY_H2D || kind == DEVX_MEMCPY_D2D) {
    std::string r = check_range_locked("destination", dst, n);
    if (!r.empty()) reports.push_back(std::move(r));
  }
  if (kind == DEVX_MEMCPY_D2H || kind == DEVX_MEMCPY_D2D) {
    std::string r = check_range_locked("source", src, n);
    if (!r.empty()) reports.push_back(std::move(r));
  }
  if (!reports.empty()) raise(std::move(reports));
}

void check_pointers(const std::vector<const void*>& ptrs, const std::string& after) {
  DeviceAccess access;
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<std::string> reports = take_reports_locked();
  std::vector<const Allocation*> seen;
  for (const void* p : ptrs) {
    if (const Allocation* a = find(g_quarantine, p)) {
      reports.push_back("devx sanitizer: use after free " + after + ": a tensor points into freed " + describe(*a));
      continue;
    }
    const Allocation* a = find(g_live, p);
    if (!a || std::find(seen.begin(), seen.end(), a) != seen.end()) continue;
    seen.push_back(a);
    std::string r = check_guards(*a, after);
    if (!r.empty()) reports.push_back(std::move(r));
  }
  if (!reports.empty()) raise(std::move(reports));
}

void check_all(const std::string& when) {
  DeviceAccess access;
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<std::string> reports = take_reports_locked();
  for (const auto& [key, a] : g_live) {
    std::string r = check_guards(a, when);
    if (!r.empty()) reports.push_back(std::move(r));
  }
  for (const auto& [key, a] : g_quarantine) {
    std::string r = check_poison(a, when);
    if (!r.empty()) reports.push_back(std::move(r));
  }
  if (!reports.empty()) raise(std::move(reports));
}

std::pair<size_t, size_t> counts() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return {g_live.size(), g_quarantine.size()};
}

const DevxHostAccessApi* enter_device_work() {
  const DevxHostAccessApi* host = host_access();
  if (host == nullptr) return nullptr;
  if (C10_UNLIKELY(host->enter_device_work() != DEVX_OK) && !g_gave_up.exchange(true)) {
    log::warn(log::Module::ALLOC,
              std::string("devx sanitizer: host accesses to device memory are no longer detected: ") + g_vendor->last_error());
  }
  return host;
}

void open_for_system_calls(const void* p) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const Allocation* a = find(g_live, p);
  if (a != nullptr && a->watched) host_access()->open(a->base);
}

void set_host_access_notifier(int (*notify)()) {
  g_notify = notify;
  if (g_host_resolved.load() && g_host.load() != nullptr) g_host.load()->set_notifier(notify);
}

std::string take_host_access_reports() {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<std::string> reports = take_accesses_locked();
  std::ostringstream os;
  for (size_t i = 0; i < reports.size(); ++i) os << (i ? "\n" : "") << reports[i];
  return os.str();
}

}  // namespace devx::sanitizer
