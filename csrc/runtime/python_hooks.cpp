#include "runtime/python_hooks.h"

#include <atomic>
#include <mutex>

namespace devx {

namespace {
std::mutex g_hooks_mutex;
std::function<std::string()> g_line;
std::function<std::string()> g_stack;
std::function<std::vector<PythonFrame>()> g_frames;
std::atomic<PythonSite (*)()> g_site{nullptr};
}  // namespace

void set_python_site_hook(PythonSite (*site)()) {
  g_site.store(site, std::memory_order_release);
}

PythonSite python_site() {
  PythonSite (*site)() = g_site.load(std::memory_order_acquire);
  return site ? site() : PythonSite{};
}

namespace {
std::atomic<std::string (*)()> g_module_path{nullptr};
}  // namespace

void set_python_module_hook(std::string (*module_path)()) {
  g_module_path.store(module_path, std::memory_order_release);
}

std::string python_module_path() {
  std::string (*module_path)() = g_module_path.load(std::memory_order_acquire);
  return module_path ? module_path() : std::string();
}

namespace {
std::atomic<void* (*)()> g_release_gil{nullptr};
std::atomic<void (*)(void*)> g_restore_gil{nullptr};
}  // namespace

void set_gil_hooks(void* (*release)(), void (*restore)(void*)) {
  g_restore_gil.store(restore, std::memory_order_release);
  g_release_gil.store(release, std::memory_order_release);
}

WithoutGil::WithoutGil() {
  void* (*release)() = g_release_gil.load(std::memory_order_acquire);
  saved_ = release ? release() : nullptr;
}

WithoutGil::~WithoutGil() {
  if (saved_) g_restore_gil.load(std::memory_order_acquire)(saved_);
}

void set_python_hooks(std::function<std::string()> line, std::function<std::string()> stack) {
  std::lock_guard<std::mutex> lock(g_hooks_mutex);
  g_line = std::move(line);
  g_stack = std::move(stack);
}

std::string python_line() {
  std::function<std::string()> f;
  {
    std::lock_guard<std::mutex> lock(g_hooks_mutex);
    f = g_line;
  }
  return f ? f() : std::string();
}

std::string python_stack() {
  std::function<std::string()> f;
  {
    std::lock_guard<std::mutex> lock(g_hooks_mutex);
    f = g_stack;
  }
  return f ? f() : std::string();
}

void set_python_frames_hook(std::function<std::vector<PythonFrame>()> frames) {
  std::lock_guard<std::mutex> lock(g_hooks_mutex);
  g_frames = std::move(frames);
}

std::vector<PythonFrame> python_frames() {
  std::function<std::vector<PythonFrame>()> f;
  {
    std::lock_guard<std::mutex> lock(g_hooks_mutex);
    f = g_frames;
  }
  return f ? f() : std::vector<PythonFrame>();
}

}  // namespace devx
