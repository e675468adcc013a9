#include "runtime/mem_check.h"

#include <map>
#include <mutex>
#include <sstream>

#include "runtime/env.h"
#include "runtime/native_stack.h"
#include "runtime/python_hooks.h"

namespace devx::memcheck {

std::atomic<bool> g_enabled{false};

namespace {

struct Record {
  size_t size;
  c10::DeviceIndex device;
  uint64_t serial;
  std::string line;
  // With DIPU_MEM_CHECK_ENABLE_BACKTRACE: captured raw at each allocation, named in report().
  std::vector<PythonFrame> python_stack;
  std::vector<void*> cpp_stack;
};

std::mutex g_mutex;
std::map<void*, Record> g_live;
uint64_t g_serial = 0;
std::atomic<bool> g_backtrace{false};

void reload() {
  try {
    g_enabled.store(env::get_bool("DIPU_MEM_CHECK", false), std::memory_order_relaxed);
    g_backtrace.store(env::get_bool("DIPU_MEM_CHECK_ENABLE_BACKTRACE", false), std::memory_order_relaxed);
  } catch (const std::exception&) {
    // A bad value is reported by the Python layer, which validates it at the assignment.
  }
}

env::Watch g_watch(&reload);

}  // namespace

void on_alloc(void* ptr, size_t size, c10::DeviceIndex device) {
  Record r{size, device, 0, python_line(), {}, {}};
  if (g_backtrace.load(std::memory_order_relaxed)) {
    r.python_stack = python_frames();
    r.cpp_stack = capture_native_stack(/*skip=*/1, /*max_frames=*/32);
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  r.serial = ++g_serial;
  g_live[ptr] = std::move(r);
}

void on_free(void* ptr) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_live.erase(ptr);
}

size_t live_count() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_live.size();
}

std::string report() {
  std::lock_guard<std::mutex> lock(g_mutex);
  size_t total = 0;
  for (const auto& [ptr, r] : g_live) total += r.size;
  std::ostringstream os;
  os << "devx memory check: " << g_live.size() << " allocation" << (g_live.size() == 1 ? "" : "s") << " ("
     << total << " bytes) not released";
  // Oldest first: the allocation that has lived longest is the likeliest leak.
  std::multimap<uint64_t, std::pair<void*, const Record*>> ordered;
  for (const auto& [ptr, r] : g_live) ordered.emplace(r.serial, std::make_pair(ptr, &r));
  for (const auto& [serial, entry] : ordered) {
    const Record& r = *entry.second;
    os << "\n  " << r.size << " bytes on devx:" << static_cast<int>(r.device) << " at " << entry.first;
    if (!r.line.empty()) os << ", allocated at " << r.line;
    if (!r.python_stack.empty()) {
      os << "\n    Python stack:";  // most recent call last, as in a traceback
      for (auto it = r.python_stack.rbegin(); it != r.python_stack.rend(); ++it) {
        os << "\n      " << it->filename << ":" << it->line << " in " << it->name;
      }
    }
    if (!r.cpp_stack.empty()) os << "\n    C++ backtrace:\n" << format_native_stack(r.cpp_stack);
  }
  return os.str();
}

}  // namespace devx::memcheck
