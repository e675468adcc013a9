#include "runtime/sanitizer.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <sstream>

#include "runtime/env.h"
#include "runtime/exception.h"
#include "runtime/log.h"
#include "runtime/python_hooks.h"
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
  char* base;    // what the vendor returned
  size_t total;  // what was asked of the vendor
  char* user;    // base + kGuard
  size_t size;
  std::string made_at;
  std::string freed_at;
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

void raise_pending_locked() {
  if (g_pending.empty()) return;
  std::vector<std::string> reports = std::move(g_pending);
  g_pending.clear();
  raise(std::move(reports));
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
  g_quarantine_bytes -= a.total;
  std::string report = check_poison(a, "(found when it left quarantine)");
  if (!report.empty()) g_pending.push_back(std::move(report));
  g_vendor->free(a.device, a.base);
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
  bool on = false;
  try {
    on = env::get_bool("DEVX_SIM_SANITIZE", false);
  } catch (const std::exception&) {
    return;  // the Python layer validates the value at the assignment and reports it
  }
  if (!g_enabled.exchange(on, std::memory_order_relaxed) || on) return;
  // Switched off: nothing will be freed into the quarantine any more, so it is emptied now, and
  // what is still unreported can only go to the log.
  std::lock_guard<std::mutex> lock(g_mutex);
  while (!g_quarantine_order.empty()) evict_oldest_locked();
  for (const std::string& report : g_pending) log::warn(log::Module::ALLOC, report);
  g_pending.clear();
}

env::Watch g_watch(&reload);

}  // namespace

void* allocate(c10::DeviceIndex device, size_t nbytes) {
  const size_t rear = kGuard + (kGuard - nbytes % kGuard) % kGuard;
  const size_t total = kGuard + nbytes + rear;
  void* base = nullptr;
  DevxStatus status = g_vendor->malloc(device, total, &base);
  if (status == DEVX_ERROR_OOM) {
    // Quarantined memory is the first thing to give back.
    std::lock_guard<std::mutex> lock(g_mutex);
    while (status == DEVX_ERROR_OOM && !g_quarantine_order.empty()) {
      evict_oldest_locked();
      status = g_vendor->malloc(device, total, &base);
    }
  }
  if (status == DEVX_ERROR_OOM) return nullptr;
  DEVX_VENDOR_CHECK(status);
  auto* b = static_cast<char*>(base);
  DEVX_VENDOR_CHECK(g_vendor->memset_sync(b, kCanary, kGuard));
  DEVX_VENDOR_CHECK(g_vendor->memset_sync(b + kGuard + nbytes, kCanary, rear));
  Allocation a{device, b, total, b + kGuard, nbytes, python_line(), ""};
  std::lock_guard<std::mutex> lock(g_mutex);
  g_live.emplace(reinterpret_cast<uintptr_t>(a.user), std::move(a));
  return b + kGuard;
}

void release(void* ptr) {
  std::string freed_at = python_line();
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_live.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == g_live.end()) {
    g_pending.push_back("devx sanitizer: free of " + pointer(ptr) + ", which is not a live guarded allocation");
    return;
  }
  Allocation a = std::move(it->second);
  g_live.erase(it);
  a.freed_at = freed_at.empty() ? "(no Python frame)" : freed_at;
  std::string report = check_guards(a, "(found when it was freed)");
  if (!enabled()) {
    // Made while the sanitizer was on, freed after: no quarantine, and no check point to raise at.
    if (!report.empty()) log::warn(log::Module::ALLOC, report);
    g_vendor->free(a.device, a.base);
    return;
  }
  if (!report.empty()) g_pending.push_back(std::move(report));
  if (g_vendor->memset_sync(a.user, kPoison, a.size) != DEVX_OK) {
    g_vendor->free(a.device, a.base);
    return;
  }
  const auto key = reinterpret_cast<uintptr_t>(a.user);
  g_quarantine_bytes += a.total;
  g_quarantine.emplace(key, std::move(a));
  g_quarantine_order.push_back(key);
  while (g_quarantine_bytes > kQuarantineBytes && g_quarantine_order.size() > 1) evict_oldest_locked();
}

void check_copy(void* dst, const void* src, size_t n, DevxMemcpyKind kind) {
  std::lock_guard<std::mutex> lock(g_mutex);
  raise_pending_locked();
  std::vector<std::string> reports;
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
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<std::string> reports = std::move(g_pending);
  g_pending.clear();
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
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<std::string> reports = std::move(g_pending);
  g_pending.clear();
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

}  // namespace devx::sanitizer
