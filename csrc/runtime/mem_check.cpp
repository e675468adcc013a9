#include "runtime/mem_check.h"

#include <algorithm>
#include <iomanip>
#include <map>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "runtime/log.h"
#include "runtime/native_stack.h"
#include "runtime/op_origin.h"
#include "runtime/settings.h"

namespace devx::memcheck {

std::atomic<bool> g_enabled{false};

namespace {

struct Record {
  size_t size;
  c10::DeviceIndex device;
  uint64_t serial;
  PythonSite site;
  std::string op;
  bool backward;
  PythonSite forward;
  // With DIPU_MEM_CHECK_ENABLE_BACKTRACE: captured raw at each allocation, named when reported.
  std::vector<PythonFrame> python_stack;
  std::vector<void*> cpp_stack;
};

std::mutex g_mutex;
std::map<void*, Record> g_live;
uint64_t g_serial = 0;
std::atomic<bool> g_backtrace{false};
std::atomic<int64_t> g_interval{0};

void reload() {
  using settings::Id;
  const bool on = settings::get_bool(Id::DIPU_MEM_CHECK);
  const bool backtrace = settings::get_bool(Id::DIPU_MEM_CHECK_ENABLE_BACKTRACE);
  const int64_t interval = settings::get_int(Id::DIPU_MEM_CHECK_LOG_INTERVAL);
  g_backtrace.store(backtrace, std::memory_order_relaxed);
  g_interval.store(interval, std::memory_order_relaxed);
  op_origin::observe(op_origin::Client::kMemCheck, on);
  g_enabled.store(on, std::memory_order_relaxed);
}

settings::Watch g_watch({settings::Id::DIPU_MEM_CHECK, settings::Id::DIPU_MEM_CHECK_ENABLE_BACKTRACE,
                         settings::Id::DIPU_MEM_CHECK_LOG_INTERVAL},
                        &reload);

std::string origin(const Record& r) {
  std::string where = r.site.str();
  if (r.backward) {
    const std::string fwd = r.forward.str();
    return (fwd.empty() ? std::string("?") : fwd) + "  " + r.op + " (backward)";
  }
  return (where.empty() ? std::string("?") : where) + "  " + (r.op.empty() ? std::string("-") : r.op);
}

// As the Python report prints sizes: "512 B", "16.0 KiB", "1.25 MiB".
std::string human(size_t bytes) {
  std::ostringstream os;
  if (bytes < (1u << 10)) {
    os << bytes << " B";
  } else if (bytes < (1u << 20)) {
    os << std::fixed << std::setprecision(1) << static_cast<double>(bytes) / (1 << 10) << " KiB";
  } else {
    os << std::fixed << std::setprecision(2) << static_cast<double>(bytes) / (1 << 20) << " MiB";
  }
  return os.str();
}

// DIPU_MEM_CHECK_LOG_INTERVAL's summary: what is live, and its five largest origins.
std::string summary_locked() {
  std::unordered_map<std::string, std::pair<size_t, size_t>> groups;  // origin -> (count, bytes)
  size_t total = 0;
  for (const auto& [ptr, r] : g_live) {
    auto& g = groups[origin(r)];
    ++g.first;
    g.second += r.size;
    total += r.size;
  }
  std::vector<std::pair<std::string, std::pair<size_t, size_t>>> sorted(groups.begin(), groups.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
  std::ostringstream os;
  os << "memory check after " << g_serial << " allocations: " << g_live.size() << " live (" << human(total)
     << "); largest origins:";
  for (size_t i = 0; i < sorted.size() && i < 5; ++i) {
    os << "\n    " << std::setw(10) << human(sorted[i].second.second) << " " << std::setw(4) << sorted[i].second.first
       << "x  " << sorted[i].first;
  }
  return os.str();
}

}  // namespace

void on_alloc(void* ptr, size_t size, c10::DeviceIndex device) {
  const op_origin::Current op = op_origin::current();
  Record r{size, device, 0, python_site(), *op.op, op.backward, op.forward, {}, {}};
  if (g_backtrace.load(std::memory_order_relaxed)) {
    r.python_stack = python_frames();
    r.cpp_stack = capture_native_stack(/*skip=*/1, /*max_frames=*/32);
  }
  const int64_t interval = g_interval.load(std::memory_order_relaxed);
  std::string summary;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    r.serial = ++g_serial;
    g_live[ptr] = std::move(r);
    if (interval > 0 && g_serial % static_cast<uint64_t>(interval) == 0) summary = summary_locked();
  }
  if (!summary.empty()) log::write(log::Module::ALLOC, log::Level::INFO, summary);
}

void on_free(void* ptr) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_live.erase(ptr);
}

size_t live_count() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_live.size();
}

std::vector<LiveRecord> records() {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<LiveRecord> out;
  out.reserve(g_live.size());
  for (const auto& [ptr, r] : g_live) {
    out.push_back(LiveRecord{reinterpret_cast<uintptr_t>(ptr), r.size, static_cast<int>(r.device), r.serial,
                             r.site.str(), r.op, r.backward, r.forward.str(), r.python_stack});
  }
  std::sort(out.begin(), out.end(), [](const LiveRecord& a, const LiveRecord& b) { return a.serial < b.serial; });
  return out;
}

std::string backtrace(uintptr_t ptr) {
  std::vector<void*> stack;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_live.find(reinterpret_cast<void*>(ptr));
    if (it == g_live.end()) return "";
    stack = it->second.cpp_stack;
  }
  return stack.empty() ? std::string() : format_native_stack(stack);
}

}  // namespace devx::memcheck
