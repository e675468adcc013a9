#include "runtime/memory_markers.h"

#include <ATen/record_function.h>

#include <chrono>
#include <deque>
#include <mutex>
#include <optional>

namespace devx::history {
namespace {

std::mutex g_markers_mutex;
std::deque<Marker> g_markers;
size_t g_max = SIZE_MAX;
std::optional<at::CallbackHandle> g_callback;

int64_t wall_clock_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void add(const char* kind, std::string name) {
  Marker marker{wall_clock_us(), kind, std::move(name)};
  std::lock_guard<std::mutex> lock(g_markers_mutex);
  if (g_max == 0) return;
  if (g_markers.size() >= g_max) g_markers.pop_front();
  g_markers.push_back(std::move(marker));
}

std::unique_ptr<at::ObserverContext> on_begin(const at::RecordFunction& fn) {
  add("begin", fn.name());
  return nullptr;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext*) {
  add("end", fn.name());
}

}  // namespace

void set_marking(bool on, size_t max_markers, bool clear) {
  std::lock_guard<std::mutex> lock(g_markers_mutex);
  if (clear) g_markers.clear();
  if (on) {
    g_max = max_markers;
    if (!g_callback) {
      g_callback = at::addGlobalCallback(at::RecordFunctionCallback(&on_begin, &on_end).scopes({at::RecordScope::USER_SCOPE}));
    }
  } else if (g_callback) {
    at::removeCallback(*g_callback);
    g_callback.reset();
  }
}

void mark(const std::string& name) {
  add("mark", name);
}

std::vector<Marker> markers() {
  std::lock_guard<std::mutex> lock(g_markers_mutex);
  return {g_markers.begin(), g_markers.end()};
}

}  // namespace devx::history
