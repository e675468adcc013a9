#include "runtime/sanitizer.h"

#include <c10/util/Exception.h>
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
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
  bool protect;        // its pages are PROT_NONE outside device work
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

// ---- Host-access detection: page protection and the SIGSEGV handler -------------------------
//
// The handler may run on any thread at any instruction, so what it reads is lock-free and what
// it writes is atomics in fixed arrays: it never takes g_mutex and never allocates.

// Threads inside DeviceAccess scopes plus DeviceWorkHolds. Process-wide: a kernel's helper
// threads (ATen's OpenMP pool, a stream's worker, gloo's threads) carry no scope of their own.
std::atomic<int> g_busy{0};
// Page protection is in force: the vendor's memory is host memory and the handler is installed.
std::atomic<bool> g_protecting{false};
size_t g_page = 0;
bool g_handler_installed = false;
bool g_gave_up = false;  // protection was switched off for good (a warning said why)
struct sigaction g_previous;
// Protected ranges cost the kernel up to two memory mappings each; past this many new
// allocations stay unprotected rather than hitting vm.max_map_count.
size_t g_max_protected = 0;
int (*g_notify)() = nullptr;
std::atomic<bool> g_notify_scheduled{false};

// A guarded allocation's pages, as the handler sees them. Found through a page table (a radix
// tree of atomics: no rebuild per allocation, a lookup is three loads); a Range is deleted only
// when no handler can still be reading it.
struct Range {
  uintptr_t begin, end;  // page aligned
  uintptr_t user;
  size_t size;
  std::atomic<bool> freed{false};
};
std::map<uintptr_t, Range*> g_ranges;  // by begin, under g_mutex
std::vector<Range*> g_retired;         // dropped from the page table, a handler may still read them
std::atomic<int> g_in_handler{0};

// Page number bits: 47-bit user addresses with 4 KiB pages; larger pages leave the top unused,
// addresses beyond (5-level paging) are not protected.
constexpr int kLeafBits = 11, kMidBits = 12, kTopBits = 12;
struct Leaf {
  std::atomic<Range*> pages[1 << kLeafBits];
};
struct Mid {
  std::atomic<Leaf*> leaves[1 << kMidBits];
};
std::atomic<Mid*> g_top[1 << kTopBits];
int g_page_shift = 12;

bool page_indices(uintptr_t addr, size_t* top, size_t* mid, size_t* leaf) {
  const uintptr_t page = addr >> g_page_shift;
  if (page >> (kLeafBits + kMidBits + kTopBits)) return false;
  *leaf = page & ((1u << kLeafBits) - 1);
  *mid = (page >> kLeafBits) & ((1u << kMidBits) - 1);
  *top = page >> (kLeafBits + kMidBits);
  return true;
}

// Under g_mutex: the page-table slot of `addr`, made if missing (never freed: the handler may
// be walking it).
std::atomic<Range*>* page_slot_locked(uintptr_t addr) {
  size_t t, m, l;
  if (!page_indices(addr, &t, &m, &l)) return nullptr;
  Mid* mid = g_top[t].load();
  if (mid == nullptr) {
    mid = new Mid;
    for (auto& leaf : mid->leaves) leaf.store(nullptr);
    g_top[t].store(mid);
  }
  Leaf* leaf = mid->leaves[m].load();
  if (leaf == nullptr) {
    leaf = new Leaf;
    for (auto& page : leaf->pages) page.store(nullptr);
    mid->leaves[m].store(leaf);
  }
  return &leaf->pages[l];
}

// Lock-free, for the handler.
const Range* find_range(uintptr_t addr) {
  size_t t, m, l;
  if (!page_indices(addr, &t, &m, &l)) return nullptr;
  const Mid* mid = g_top[t].load();
  const Leaf* leaf = mid ? mid->leaves[m].load() : nullptr;
  return leaf ? leaf->pages[l].load() : nullptr;
}

bool can_map(uintptr_t begin, uintptr_t end) {
  size_t t, m, l;
  return page_indices(begin, &t, &m, &l) && page_indices(end - 1, &t, &m, &l);
}

void add_range_locked(Range* r) {
  g_ranges[r->begin] = r;
  for (uintptr_t page = r->begin; page < r->end; page += uintptr_t{1} << g_page_shift) page_slot_locked(page)->store(r);
}

void remove_range_locked(uintptr_t begin) {
  auto it = g_ranges.find(begin);
  if (it == g_ranges.end()) return;
  Range* r = it->second;
  g_ranges.erase(it);
  for (uintptr_t page = r->begin; page < r->end; page += uintptr_t{1} << g_page_shift) page_slot_locked(page)->store(nullptr);
  g_retired.push_back(r);
  // A handler that starts after this load finds the slots empty, so the retired are free.
  if (g_in_handler.load() == 0) {
    for (Range* old : g_retired) delete old;
    g_retired.clear();
  }
}

// Allocations the handler opened (by begin), for the last scope to close again. Lost entries are
// impossible: a slot is claimed after its pages were opened and the high-water mark raised after
// the claim, so a closer that misses one leaves it for the next.
constexpr uint32_t kOpenSlots = 1024;
std::atomic<uintptr_t> g_open[kOpenSlots];
std::atomic<uint32_t> g_open_high{0};
std::atomic<bool> g_open_overflow{false};  // some opened allocations were not recorded

// Ranges unprotected and dropped from the table lately: a fault taken just before that is
// retried, not passed on as someone else's.
constexpr uint32_t kRecentSlots = 64;
std::atomic<uint64_t> g_recent_begin[kRecentSlots];
std::atomic<uint64_t> g_recent_end[kRecentSlots];
uint32_t g_recent_next = 0;  // under g_mutex

// Host accesses not reported yet. state: 0 free, 1 being written, 2 ready.
struct HostAccess {
  std::atomic<int> state{0};
  uint64_t seq;
  uintptr_t addr, user;
  size_t size;
  bool freed;
  int kind;  // 0 read, 1 write, -1 unknown
};
constexpr uint32_t kAccessSlots = 32;
HostAccess g_accesses[kAccessSlots];
std::atomic<uint64_t> g_access_seq{0};
std::atomic<uint64_t> g_accesses_dropped{0};

void note_opened(uintptr_t begin) {
  for (uint32_t i = 0; i < kOpenSlots; ++i) {
    uintptr_t expected = 0;
    if (g_open[i].load(std::memory_order_relaxed) == 0 && g_open[i].compare_exchange_strong(expected, begin)) {
      uint32_t high = g_open_high.load();
      while (high < i + 1 && !g_open_high.compare_exchange_weak(high, i + 1)) {
      }
      return;
    }
  }
  g_open_overflow.store(true);
}

int access_kind(void* context) {
#if defined(__x86_64__)
  // Bit 1 of the page-fault error code: the access was a write.
  return (static_cast<ucontext_t*>(context)->uc_mcontext.gregs[REG_ERR] & 2) ? 1 : 0;
#else
  (void)context;
  return -1;
#endif
}

void record_host_access(uintptr_t addr, const Range& r, int kind) {
  for (HostAccess& slot : g_accesses) {
    int expected = 0;
    if (!slot.state.compare_exchange_strong(expected, 1)) continue;
    slot.seq = g_access_seq.fetch_add(1);
    slot.addr = addr;
    slot.user = r.user;
    slot.size = r.size;
    slot.freed = r.freed.load();
    slot.kind = kind;
    slot.state.store(2, std::memory_order_release);
    return;
  }
  g_accesses_dropped.fetch_add(1);
}

void say(const char* text) {
  ssize_t ignored = write(STDERR_FILENO, text, std::char_traits<char>::length(text));
  (void)ignored;
}

// Whether the fault was ours (handled: the instruction is retried).
bool handle_fault(siginfo_t* info, void* context) {
  if (info->si_code <= 0) return false;  // sent by kill/raise, not a fault
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  const Range* r = find_range(addr);  // after g_in_handler went up: see remove_range_locked
  if (r == nullptr) {
    for (uint32_t i = 0; i < kRecentSlots; ++i) {
      if (addr >= g_recent_begin[i].load() && addr < g_recent_end[i].load()) return true;
    }
    return false;
  }
  if (!g_protecting.load()) return true;  // being switched off: everything is being opened
  if (mprotect(reinterpret_cast<void*>(r->begin), r->end - r->begin, PROT_READ | PROT_WRITE) != 0) {
    say("devx sanitizer: cannot unprotect a guarded allocation (mprotect failed); the fault is passed on\n");
    return false;
  }
  note_opened(r->begin);
  if (g_busy.load() > 0) return true;
  record_host_access(addr, *r, access_kind(context));
  if (g_notify != nullptr && !g_notify_scheduled.exchange(true) && g_notify() != 0) g_notify_scheduled.store(false);
  return true;
}

void on_segv(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  g_in_handler.fetch_add(1);
  const bool handled = handle_fault(info, context);
  g_in_handler.fetch_sub(1);
  errno = saved_errno;
  if (handled) return;
  // Not ours: whoever had SIGSEGV before us handles it.
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction != nullptr) g_previous.sa_sigaction(sig, info, context);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
    return;
  }
  // The default action: a fault retried after this returns kills the process as it would have;
  // a sent signal is sent again.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  if (info->si_code <= 0) ::raise(sig);
}

bool protect_range(uintptr_t begin, uintptr_t end, int prot) {
  return mprotect(reinterpret_cast<void*>(begin), end - begin, prot) == 0;
}

// Re-protects what faults opened, once no device work runs.
void close_opened_locked() {
  if (!g_protecting.load() || g_busy.load() != 0) return;
  const bool overflow = g_open_overflow.exchange(false);
  const uint32_t high = std::min(g_open_high.exchange(0), kOpenSlots);
  for (uint32_t i = 0; i < high; ++i) {
    if (g_open[i].load(std::memory_order_relaxed) == 0) continue;
    const uintptr_t begin = g_open[i].exchange(0);
    auto it = g_ranges.find(begin);  // an allocation released meanwhile is not protected again
    if (it != g_ranges.end()) protect_range(it->second->begin, it->second->end, PROT_NONE);
  }
  if (overflow) {
    for (const auto& [begin, r] : g_ranges) protect_range(r->begin, r->end, PROT_NONE);
  }
}

// Before the vendor gets `a` back: its pages become ordinary memory again.
void unprotect_locked(const Allocation& a) {
  if (!a.protect) return;
  const auto begin = reinterpret_cast<uintptr_t>(a.base);
  protect_range(begin, begin + a.total, PROT_READ | PROT_WRITE);
  const uint32_t slot = g_recent_next++ % kRecentSlots;
  g_recent_end[slot].store(0);
  g_recent_begin[slot].store(begin);
  g_recent_end[slot].store(begin + a.total);
  remove_range_locked(begin);
}

// Protection everywhere off: the handler stays installed (it may be running) and lets faults
// in known ranges retry.
void stop_protecting_locked(const std::string& why) {
  if (!g_protecting.exchange(false)) return;
  for (const auto& [begin, r] : g_ranges) protect_range(r->begin, r->end, PROT_READ | PROT_WRITE);
  if (!why.empty()) {
    g_gave_up = true;
    log::warn(log::Module::ALLOC, "devx sanitizer: host accesses to device memory are no longer detected: " + why);
  }
}

bool install_handler_locked() {
  struct sigaction action {};
  action.sa_sigaction = &on_segv;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&action.sa_mask);
  return sigaction(SIGSEGV, &action, &g_previous) == 0;
}

size_t max_map_count() {
  std::ifstream in("/proc/sys/vm/max_map_count");
  size_t n = 0;
  return in >> n ? n : 65530;
}

// Whether new allocations are protected: the first call installs the handler.
bool protection_ready_locked() {
  if (g_gave_up || !enabled()) return false;
  if (g_protecting.load()) return true;
  // Only memory the host can address is host memory to protect (cpu_sim's arena); a device's own
  // memory cannot be read by host code at all.
  if (g_vendor->compute_device_type != static_cast<int>(c10::kCPU)) return false;
  if (!g_handler_installed) {
    g_page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    while ((size_t{1} << g_page_shift) < g_page) ++g_page_shift;
    g_max_protected = max_map_count() / 4;
    if (!install_handler_locked()) {
      g_gave_up = true;
      log::warn(log::Module::ALLOC, "devx sanitizer: cannot install a SIGSEGV handler; host accesses to device memory are not detected");
      return false;
    }
    g_handler_installed = true;
  }
  // Allocations still guarded from an earlier period are protected again.
  g_protecting.store(true);
  if (g_busy.load() == 0) {
    for (const auto& [begin, r] : g_ranges) protect_range(r->begin, r->end, PROT_NONE);
  }
  return true;
}

// Our handler must be the one installed: one installed after it would take device work's faults
// for crashes. Checked before device work starts. The default disposition put back (as
// faulthandler.disable() does) is replaced by ours again; another handler cannot be chained
// safely (it may pass faults back to ours), so protection stops.
void verify_handler() {
  struct sigaction current {};
  if (sigaction(SIGSEGV, nullptr, &current) != 0) return;
  if ((current.sa_flags & SA_SIGINFO) && current.sa_sigaction == &on_segv) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  const bool by_default = !(current.sa_flags & SA_SIGINFO) && (current.sa_handler == SIG_DFL || current.sa_handler == SIG_IGN);
  if (by_default && install_handler_locked()) return;
  stop_protecting_locked("another SIGSEGV handler replaced the sanitizer's (enable faulthandler before the "
                         "sanitizer, e.g. PYTHONFAULTHANDLER=1, to keep both)");
}

std::string where_in(const HostAccess& h) {
  std::ostringstream os;
  if (h.addr < h.user) {
    os << h.user - h.addr << " bytes before the start of";
  } else if (h.addr >= h.user + h.size) {
    os << h.addr - h.user - h.size << " bytes past the end of";
  } else {
    os << "offset " << h.addr - h.user << " of";
  }
  return os.str();
}

std::string describe_access(const HostAccess& h) {
  const char* verb = h.kind == 1 ? "wrote" : h.kind == 0 ? "read" : "touched";
  std::ostringstream os;
  os << "devx sanitizer: host code " << verb << " " << (h.freed ? "freed " : "")
     << "device memory directly at " << reinterpret_cast<const void*>(h.addr) << ", " << where_in(h) << " "
     << (h.freed ? "freed " : "");
  const std::map<uintptr_t, Allocation>& in = h.freed ? g_quarantine : g_live;
  auto it = in.find(h.user);
  if (it != in.end()) {
    os << describe(it->second);
  } else {
    os << "allocation " << reinterpret_cast<const void*>(h.user) << " (" << h.size << " bytes, released since)";
  }
  os << ". Device memory is reached through ops and copies (.cpu(), .item(), copy_); a real device "
        "faults or returns garbage here.";
  return os.str();
}

// The host accesses recorded so far, oldest first, as reports.
std::vector<std::string> take_accesses_locked() {
  std::vector<std::pair<uint64_t, std::string>> found;
  for (HostAccess& slot : g_accesses) {
    if (slot.state.load(std::memory_order_acquire) != 2) continue;
    found.emplace_back(slot.seq, describe_access(slot));
    slot.state.store(0, std::memory_order_release);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& [seq, text] : found) out.push_back(std::move(text));
  if (uint64_t dropped = g_accesses_dropped.exchange(0)) {
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
  unprotect_locked(a);
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
  stop_protecting_locked("");
  g_enabled.store(false, std::memory_order_relaxed);
  while (!g_quarantine_order.empty()) evict_oldest_locked();
  for (const std::string& report : take_reports_locked()) log::warn(log::Module::ALLOC, report);
}

settings::Watch g_watch({settings::Id::DEVX_SIM_SANITIZE}, &reload);

}  // namespace

void* allocate(c10::DeviceIndex device, size_t nbytes) {
  bool protect = false;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    protect = protection_ready_locked() && g_ranges.size() < g_max_protected;
  }
  // Protected, the guarded span is whole pages that hold nothing else: the vendor is asked for a
  // page more, and the span starts on the first page boundary inside what it returns.
  const size_t rear_min = kGuard + (kGuard - nbytes % kGuard) % kGuard;
  const size_t total = protect ? (kGuard + nbytes + rear_min + g_page - 1) / g_page * g_page : kGuard + nbytes + rear_min;
  const size_t vendor_size = protect ? total + g_page : total;
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
  char* b = protect ? v + (g_page - reinterpret_cast<uintptr_t>(v) % g_page) % g_page : v;
  DEVX_VENDOR_CHECK(g_vendor->memset_sync(b, kCanary, kGuard));
  DEVX_VENDOR_CHECK(g_vendor->memset_sync(b + kGuard + nbytes, kCanary, total - kGuard - nbytes));
  Allocation a{device, b, total, b + kGuard, nbytes, python_line(), "", v, vendor_size, protect};
  std::lock_guard<std::mutex> lock(g_mutex);
  const auto begin = reinterpret_cast<uintptr_t>(b);
  if (a.protect && g_protecting.load() && can_map(begin, begin + total)) {
    auto* r = new Range;
    r->begin = begin;
    r->end = begin + total;
    r->user = reinterpret_cast<uintptr_t>(a.user);
    r->size = nbytes;
    add_range_locked(r);
    // Made by device work (a kernel's output): open until that work ends, saving it a fault.
    if (g_busy.load() > 0) {
      note_opened(begin);
    } else if (!protect_range(begin, begin + total, PROT_NONE)) {
      remove_range_locked(begin);
      a.protect = false;
    }
  } else {
    a.protect = false;
  }
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
  if (a.protect && g_protecting.load()) {
    // Opened by hand rather than by a fault per page touched; protected again as device work ends.
    const auto begin = reinterpret_cast<uintptr_t>(a.base);
    if (protect_range(begin, begin + a.total, PROT_READ | PROT_WRITE)) note_opened(begin);
  }
  std::string report = check_guards(a, "(found when it was freed)");
  if (!enabled()) {
    // Made while the sanitizer was on, freed after: no quarantine, and no check point to raise at.
    if (!report.empty()) log::warn(log::Module::ALLOC, report);
    unprotect_locked(a);
    g_vendor->free(a.device, a.vendor_ptr);
    return;
  }
  if (!report.empty()) g_pending.push_back(std::move(report));
  if (g_vendor->memset_sync(a.user, kPoison, a.size) != DEVX_OK) {
    unprotect_locked(a);
    g_vendor->free(a.device, a.vendor_ptr);
    return;
  }
  if (a.protect) {
    // Quarantined: host reads of it are reads of freed memory. Device work re-protects it as it
    // ends (a.protect holds, so its pages are in the open list or were never opened).
    auto it = g_ranges.find(reinterpret_cast<uintptr_t>(a.base));
    if (it != g_ranges.end()) it->second->freed.store(true);
  }
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

void enter_device_work() {
  // The first device work after a pause checks that faults still come to us.
  if (g_busy.fetch_add(1) == 0 && g_protecting.load(std::memory_order_relaxed)) verify_handler();
}

void leave_device_work() {
  if (g_busy.fetch_sub(1) != 1) return;
  if (g_open_high.load() == 0 && !g_open_overflow.load()) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  close_opened_locked();
}

void open_for_system_calls(const void* p) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const Allocation* a = find(g_live, p);
  if (!a || !a->protect || !g_protecting.load()) return;
  const auto begin = reinterpret_cast<uintptr_t>(a->base);
  if (protect_range(begin, begin + a->total, PROT_READ | PROT_WRITE)) note_opened(begin);
}

void set_host_access_notifier(int (*notify)()) {
  g_notify = notify;
}

std::string take_host_access_reports() {
  g_notify_scheduled.store(false);
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<std::string> reports = take_accesses_locked();
  close_opened_locked();
  std::ostringstream os;
  for (size_t i = 0; i < reports.size(); ++i) os << (i ? "\n" : "") << reports[i];
  return os.str();
}

}  // namespace devx::sanitizer
