#include "host_access.h"

#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "error.h"

namespace devx::cpu_sim {
namespace {

// The handler may run on any thread at any instruction, so what it reads is lock-free and what
// it writes is atomics in fixed arrays: it never takes g_mutex and never allocates.

std::mutex g_mutex;
// Device work in progress (enter_device_work minus leave_device_work). Process-wide: a kernel's
// helper threads (ATen's OpenMP pool, a stream's worker, gloo's threads) carry no mark of their own.
std::atomic<int> g_busy{0};
// Watched ranges are closed to host code: started, and the handler is installed.
std::atomic<bool> g_protecting{false};
size_t g_page = 0;
bool g_handler_installed = false;
std::string g_gave_up;  // why watching stopped for good; empty while it may go on
struct sigaction g_previous;
// Protected ranges cost the kernel up to two memory mappings each; past this many, watch()
// refuses rather than hitting vm.max_map_count.
size_t g_max_watched = 0;
std::atomic<int (*)()> g_notify{nullptr};
std::atomic<bool> g_notify_scheduled{false};

// A watched range, as the handler sees it. Found through a page table (a radix tree of atomics:
// no rebuild per range, a lookup is three loads); a Range is deleted only when no handler can
// still be reading it.
struct Range {
  uintptr_t begin, end;  // page aligned
  std::atomic<uint64_t> tag{0};
};
std::map<uintptr_t, Range*> g_ranges;  // by begin, under g_mutex
std::vector<Range*> g_retired;         // dropped from the page table, a handler may still read them
std::atomic<int> g_in_handler{0};

// Page number bits: 47-bit user addresses with 4 KiB pages; larger pages leave the top unused,
// addresses beyond (5-level paging) cannot be watched.
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

Range* known_locked(void* range) {
  auto it = g_ranges.find(reinterpret_cast<uintptr_t>(range));
  return it == g_ranges.end() ? nullptr : it->second;
}

// Ranges opened (by begin), for the last device work to close again. Lost entries are
// impossible: a slot is claimed after its pages were opened and the high-water mark raised after
// the claim, so a closer that misses one leaves it for the next.
constexpr uint32_t kOpenSlots = 1024;
std::atomic<uintptr_t> g_open[kOpenSlots];
std::atomic<uint32_t> g_open_high{0};
std::atomic<bool> g_open_overflow{false};  // some opened ranges were not recorded

// Ranges opened and dropped from the table lately: a fault taken just before that is retried,
// not passed on as someone else's.
constexpr uint32_t kRecentSlots = 64;
std::atomic<uint64_t> g_recent_begin[kRecentSlots];
std::atomic<uint64_t> g_recent_end[kRecentSlots];
uint32_t g_recent_next = 0;  // under g_mutex

// Host accesses not taken yet. state: 0 free, 1 being written, 2 ready.
struct Slot {
  std::atomic<int> state{0};
  uint64_t seq;
  DevxHostAccess access;
};
constexpr uint32_t kAccessSlots = 32;
Slot g_accesses[kAccessSlots];
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
  return (static_cast<ucontext_t*>(context)->uc_mcontext.gregs[REG_ERR] & 2) ? DEVX_ACCESS_WRITE : DEVX_ACCESS_READ;
#else
  (void)context;
  return DEVX_ACCESS_UNKNOWN;
#endif
}

void record_host_access(uintptr_t addr, const Range& r, int kind) {
  for (Slot& slot : g_accesses) {
    int expected = 0;
    if (!slot.state.compare_exchange_strong(expected, 1)) continue;
    slot.seq = g_access_seq.fetch_add(1);
    slot.access.address = addr;
    slot.access.range = reinterpret_cast<void*>(r.begin);
    slot.access.tag = r.tag.load();
    slot.access.kind = kind;
    slot.state.store(2, std::memory_order_release);
    return;
  }
  g_accesses_dropped.fetch_add(1);
}

void say(const char* text) {
  ssize_t ignored = write(STDERR_FILENO, text, std::char_traits<char>::length(text));
  (void)ignored;
}

bool protect_range(uintptr_t begin, uintptr_t end, int prot) {
  return mprotect(reinterpret_cast<void*>(begin), end - begin, prot) == 0;
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
  if (!g_protecting.load()) return true;  // being stopped: everything is being opened
  if (!protect_range(r->begin, r->end, PROT_READ | PROT_WRITE)) {
    say("cpu_sim: cannot open a watched range of device memory (mprotect failed); the fault is passed on\n");
    return false;
  }
  note_opened(r->begin);
  if (g_busy.load() > 0) return true;
  record_host_access(addr, *r, access_kind(context));
  int (*notify)() = g_notify.load();
  if (notify != nullptr && !g_notify_scheduled.exchange(true) && notify() != 0) g_notify_scheduled.store(false);
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

// Closes again what faults and open() opened, once no device work runs.
void close_opened_locked() {
  if (!g_protecting.load() || g_busy.load() != 0) return;
  const bool overflow = g_open_overflow.exchange(false);
  const uint32_t high = std::min(g_open_high.exchange(0), kOpenSlots);
  for (uint32_t i = 0; i < high; ++i) {
    if (g_open[i].load(std::memory_order_relaxed) == 0) continue;
    const uintptr_t begin = g_open[i].exchange(0);
    auto it = g_ranges.find(begin);  // a range unwatched meanwhile is not closed again
    if (it != g_ranges.end()) protect_range(it->second->begin, it->second->end, PROT_NONE);
  }
  if (overflow) {
    for (const auto& [begin, r] : g_ranges) protect_range(r->begin, r->end, PROT_NONE);
  }
}

// Every range opened: the handler stays installed (it may be running) and lets faults in known
// ranges retry.
void stop_locked() {
  if (!g_protecting.exchange(false)) return;
  for (const auto& [begin, r] : g_ranges) protect_range(r->begin, r->end, PROT_READ | PROT_WRITE);
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

// Our handler must be the one installed: one installed after it would take device work's faults
// for crashes. Checked as device work starts. The default disposition put back (as
// faulthandler.disable() does) is replaced by ours again; another handler cannot be chained
// safely (it may pass faults back to ours), so watching stops for good.
DevxStatus verify_handler() {
  struct sigaction current {};
  if (sigaction(SIGSEGV, nullptr, &current) != 0) return DEVX_OK;
  if ((current.sa_flags & SA_SIGINFO) && current.sa_sigaction == &on_segv) return DEVX_OK;
  std::lock_guard<std::mutex> lock(g_mutex);
  const bool by_default = !(current.sa_flags & SA_SIGINFO) && (current.sa_handler == SIG_DFL || current.sa_handler == SIG_IGN);
  if (by_default && install_handler_locked()) return DEVX_OK;
  stop_locked();
  g_gave_up = "another SIGSEGV handler replaced cpu_sim's host-access handler (enable faulthandler before "
              "watching starts, e.g. PYTHONFAULTHANDLER=1, to keep both)";
  return fail(DEVX_ERROR, g_gave_up);
}

DevxStatus start(size_t* page_size) {
  if (page_size == nullptr) return fail(DEVX_ERROR_INVALID, "host_access.start: page_size is NULL");
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_gave_up.empty()) return fail(DEVX_ERROR, g_gave_up);
  if (!g_handler_installed) {
    g_page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    while ((size_t{1} << g_page_shift) < g_page) ++g_page_shift;
    g_max_watched = max_map_count() / 4;
    if (!install_handler_locked()) {
      g_gave_up = std::string("cannot install a SIGSEGV handler: ") + std::strerror(errno);
      return fail(DEVX_ERROR, g_gave_up);
    }
    g_handler_installed = true;
  }
  *page_size = g_page;
  // Ranges still watched from an earlier period are closed again.
  g_protecting.store(true);
  if (g_busy.load() == 0) {
    for (const auto& [begin, r] : g_ranges) protect_range(r->begin, r->end, PROT_NONE);
  }
  return DEVX_OK;
}

void stop() {
  std::lock_guard<std::mutex> lock(g_mutex);
  stop_locked();
}

DevxStatus watch(void* range, size_t size, uint64_t tag) {
  const auto begin = reinterpret_cast<uintptr_t>(range);
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_protecting.load()) return fail(DEVX_ERROR, "host_access.watch: not watching (start() first)");
  if (size == 0 || begin % g_page != 0 || size % g_page != 0 || !can_map(begin, begin + size)) {
    return fail(DEVX_ERROR_INVALID, "host_access.watch: " + format_pointer(range) + " + " + std::to_string(size) +
                                        " is not whole pages of user memory");
  }
  if (g_ranges.count(begin)) return fail(DEVX_ERROR_INVALID, "host_access.watch: " + format_pointer(range) + " is watched already");
  if (g_ranges.size() >= g_max_watched) {
    return fail(DEVX_ERROR_OOM, "host_access.watch: " + std::to_string(g_max_watched) +
                                    " ranges watched already (a quarter of vm.max_map_count)");
  }
  auto* r = new Range;
  r->begin = begin;
  r->end = begin + size;
  r->tag.store(tag);
  add_range_locked(r);
  // Made by device work (a kernel's output): open until that work ends, saving it a fault.
  if (g_busy.load() > 0) {
    note_opened(begin);
  } else if (!protect_range(begin, begin + size, PROT_NONE)) {
    const int err = errno;
    remove_range_locked(begin);
    return fail(DEVX_ERROR, std::string("host_access.watch: mprotect failed: ") + std::strerror(err));
  }
  return DEVX_OK;
}

void unwatch(void* range) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const Range* r = known_locked(range);
  if (r == nullptr) return;
  protect_range(r->begin, r->end, PROT_READ | PROT_WRITE);
  const uint32_t slot = g_recent_next++ % kRecentSlots;
  g_recent_end[slot].store(0);
  g_recent_begin[slot].store(r->begin);
  g_recent_end[slot].store(r->end);
  remove_range_locked(r->begin);
}

void set_tag(void* range, uint64_t tag) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (Range* r = known_locked(range)) r->tag.store(tag);
}

void open_range(void* range) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const Range* r = known_locked(range);
  if (r == nullptr || !g_protecting.load()) return;
  if (protect_range(r->begin, r->end, PROT_READ | PROT_WRITE)) note_opened(r->begin);
}

DevxStatus enter_device_work() {
  // The first device work after a pause checks that faults still come to us.
  if (g_busy.fetch_add(1) == 0 && g_protecting.load(std::memory_order_relaxed)) return verify_handler();
  return DEVX_OK;
}

void leave_device_work() {
  if (g_busy.fetch_sub(1) != 1) return;
  if (g_open_high.load() == 0 && !g_open_overflow.load()) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  close_opened_locked();
}

size_t take_accesses(DevxHostAccess* out, size_t capacity, uint64_t* dropped) {
  g_notify_scheduled.store(false);
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<std::pair<uint64_t, Slot*>> ready;
  for (Slot& slot : g_accesses) {
    if (slot.state.load(std::memory_order_acquire) == 2) ready.emplace_back(slot.seq, &slot);
  }
  std::sort(ready.begin(), ready.end());
  const size_t n = out == nullptr ? 0 : std::min(capacity, ready.size());
  for (size_t i = 0; i < n; ++i) {
    out[i] = ready[i].second->access;
    ready[i].second->state.store(0, std::memory_order_release);
  }
  if (dropped != nullptr) *dropped = g_accesses_dropped.exchange(0);
  close_opened_locked();
  return n;
}

void set_notifier(int (*notify)()) {
  g_notify.store(notify);
}

const DevxHostAccessApi kApi = {
    .start = start,
    .stop = stop,
    .watch = watch,
    .unwatch = unwatch,
    .set_tag = set_tag,
    .open = open_range,
    .enter_device_work = enter_device_work,
    .leave_device_work = leave_device_work,
    .take = take_accesses,
    .set_notifier = set_notifier,
};

}  // namespace

const DevxHostAccessApi* host_access_api() {
  return &kApi;
}

}  // namespace devx::cpu_sim
