#include "runtime/memory_history.h"

#include <chrono>
#include <mutex>
#include <unordered_map>

#include "runtime/native_stack.h"

namespace devx::history {

std::atomic<bool> g_recording{false};

namespace {

constexpr int kMaxCppFrames = 48;

struct Ring {
  std::vector<Entry> entries;
  size_t next = 0;  // where the next entry goes once the ring is full
};

std::mutex g_mutex;
Settings g_settings;
std::vector<Ring> g_rings;  // by device
std::unordered_map<uintptr_t, StackPtr> g_block_stacks;
std::unordered_map<uintptr_t, StackPtr> g_segment_stacks;

thread_local const StackPtr* t_stack = nullptr;

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool wants_stack(Action action, Context context) {
  switch (action) {
    case Action::kFreeRequested:
    case Action::kFreeCompleted:
      return context == Context::kAll;
    default:
      return context == Context::kAlloc || context == Context::kAll;
  }
}

}  // namespace

void configure(const Settings* settings, bool clear) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (clear) g_rings.clear();
  if (settings) {
    g_settings = *settings;
    if (g_settings.max_entries == 0) g_settings.max_entries = 1;
  } else {
    g_block_stacks.clear();
    g_segment_stacks.clear();
  }
  g_recording.store(settings != nullptr, std::memory_order_relaxed);
}

CallScope::CallScope(bool is_free) : previous_(t_stack) {
  Settings s;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    s = g_settings;
  }
  // Frees want a stack only for the history (context="all"); allocations also for the state.
  const bool capture = is_free ? s.context == Context::kAll : s.context != Context::kNone;
  if (!capture) return;
  auto stack = std::make_shared<Stack>();
  stack->python = python_frames();
  if (s.cpp_frames) {
    // From the caller of this constructor: the first frame worth reading is the allocator's.
    stack->cpp = capture_native_stack(0, kMaxCppFrames);
  }
  stack_ = std::move(stack);
  t_stack = &stack_;
}

CallScope::~CallScope() {
  t_stack = previous_;
}

const char* action_name(Action a) {
  switch (a) {
    case Action::kAlloc: return "alloc";
    case Action::kFreeRequested: return "free_requested";
    case Action::kFreeCompleted: return "free_completed";
    case Action::kSegmentAlloc: return "segment_alloc";
    case Action::kSegmentFree: return "segment_free";
    case Action::kOom: return "oom";
    case Action::kSnapshot: return "snapshot";
  }
  return "unknown";
}

void record(int device, Action action, const void* addr, size_t size, const Totals& totals, size_t device_free) {
  const auto key = reinterpret_cast<uintptr_t>(addr);
  StackPtr stack = t_stack ? *t_stack : nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_recording.load(std::memory_order_relaxed)) return;
  switch (action) {
    case Action::kAlloc:
      if (stack) g_block_stacks[key] = stack;
      break;
    case Action::kFreeCompleted: g_block_stacks.erase(key); break;
    case Action::kSegmentAlloc:
      if (stack) g_segment_stacks[key] = stack;
      break;
    case Action::kSegmentFree: g_segment_stacks.erase(key); break;
    default: break;
  }
  if (!g_settings.trace) return;
  if (g_rings.size() <= static_cast<size_t>(device)) g_rings.resize(device + 1);
  Ring& ring = g_rings[device];
  Entry e{action, key, size, now_us(), totals, device_free,
          wants_stack(action, g_settings.context) ? stack : nullptr};
  if (ring.entries.size() < g_settings.max_entries) {
    ring.entries.push_back(std::move(e));
  } else {
    ring.entries[ring.next] = std::move(e);
    ring.next = (ring.next + 1) % ring.entries.size();
  }
}

std::vector<Entry> entries(int device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_rings.size() <= static_cast<size_t>(device)) return {};
  const Ring& ring = g_rings[device];
  std::vector<Entry> out(ring.entries.begin() + ring.next, ring.entries.end());
  out.insert(out.end(), ring.entries.begin(), ring.entries.begin() + ring.next);
  return out;
}

StackPtr block_stack(const void* addr) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_block_stacks.find(reinterpret_cast<uintptr_t>(addr));
  return it == g_block_stacks.end() ? nullptr : it->second;
}

StackPtr segment_stack(const void* addr) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_segment_stacks.find(reinterpret_cast<uintptr_t>(addr));
  return it == g_segment_stacks.end() ? nullptr : it->second;
}

std::vector<PythonFrame> frames(const Stack& stack) {
  std::vector<PythonFrame> out;
  out.reserve(stack.cpp.size() + stack.python.size());
  for (void* pc : stack.cpp) {
    std::string object;
    std::string name = native_symbol(pc, &object);
    // The interpreter's own frames say nothing the Python frames do not say better.
    if (name.rfind("_PyEval", 0) == 0 || name.rfind("PyEval", 0) == 0) break;
    out.push_back({object, 0, name.empty() ? "??" : name});
  }
  out.insert(out.end(), stack.python.begin(), stack.python.end());
  return out;
}

}  // namespace devx::history
