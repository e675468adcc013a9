#include "runtime.h"

#include <pthread.h>

#include <chrono>

#include "error.h"

namespace devx::cpu_sim {
namespace {

// How long exit waits for host functions that are running when the process ends.
constexpr auto kExitGrace = std::chrono::seconds(2);

thread_local int t_current_device = 0;

// Stops the workers at exit, or when the library is unloaded, so that no worker runs while the
// process tears down around it. Constructed at load, so it is destroyed after anything the core
// created later and before the core's own load-time statics.
struct WorkerReaper {
  ~WorkerReaper() { Runtime::get().stop_workers(); }
} g_reaper;

// A process forked from one that ran stream workers has copies of their state but not the
// threads, and a lock one of them held stays locked: it must neither stop nor join them.
bool g_forked_child = false;
struct ForkWatch {
  ForkWatch() {
    pthread_atfork(nullptr, nullptr, [] { g_forked_child = true; });
  }
} g_fork_watch;

}  // namespace

int current_device() { return t_current_device; }
void set_current_device(int device) { t_current_device = device; }

Runtime& Runtime::get() {
  // Never destroyed: the core's static destructors may still free memory or destroy streams
  // after this library's have run.
  static Runtime* const runtime = new Runtime;
  return *runtime;
}

DevxStatus Runtime::init() {
  std::lock_guard lock(init_mu_);
  if (initialised_.load(std::memory_order_relaxed)) return DEVX_OK;
  Settings settings;
  if (DevxStatus status = read_settings(&settings)) return status;
  settings_ = settings;
  for (int i = 0; i < settings.devices; ++i) {
    devices_.push_back(std::make_unique<Device>(i, settings.memory));
  }
  initialised_.store(true, std::memory_order_release);
  return DEVX_OK;
}

DevxStatus Runtime::check_initialised() const {
  if (initialised()) return DEVX_OK;
  return fail(DEVX_ERROR, "cpu_sim is not initialised: init() must be called first");
}

DevxStatus Runtime::check_device(int device) const {
  if (DevxStatus status = check_initialised()) return status;
  if (device >= 0 && device < device_count()) return DEVX_OK;
  return fail(DEVX_ERROR_INVALID, "invalid device index " + std::to_string(device) +
                                      ": cpu_sim has " + std::to_string(device_count()) +
                                      " devices");
}

int Runtime::device_of(const void* ptr, size_t size) const {
  if (!initialised()) return -1;
  for (int i = 0; i < device_count(); ++i) {
    if (devices_[i]->arena.contains(ptr, size)) return i;
  }
  return -1;
}

std::shared_ptr<Stream> Runtime::default_stream(int device) {
  Device& d = *devices_[device];
  std::lock_guard lock(d.default_stream_mu);
  if (d.default_stream == nullptr) {
    d.default_stream = std::make_shared<Stream>(device);
    if (settings_.async) d.default_stream->start_worker();
  }
  return d.default_stream;
}

DevxStatus Runtime::find_stream(DevxStreamHandle handle, std::shared_ptr<Stream>* out) {
  if (handle == nullptr) {
    const int device = current_device();
    if (DevxStatus status = check_device(device)) return status;
    *out = default_stream(device);
    return DEVX_OK;
  }
  *out = streams_.find(handle);
  if (*out != nullptr) return DEVX_OK;
  return unknown_handle("stream", handle);
}

DevxStatus Runtime::find_event(DevxEventHandle handle, std::shared_ptr<Event>* out) {
  *out = events_.find(handle);
  if (*out != nullptr) return DEVX_OK;
  return unknown_handle("event", handle);
}

std::shared_ptr<Stream> Runtime::new_stream(int device) {
  auto stream = std::make_shared<Stream>(device);
  if (settings_.async) stream->start_worker();
  streams_.add(stream);
  return stream;
}

std::vector<std::shared_ptr<Stream>> Runtime::device_streams(int device) {
  std::vector<std::shared_ptr<Stream>> out;
  {
    Device& d = *devices_[device];
    std::lock_guard lock(d.default_stream_mu);
    if (d.default_stream != nullptr) out.push_back(d.default_stream);
  }
  for (auto& stream : streams_.all()) {
    if (stream->device() == device) out.push_back(std::move(stream));
  }
  return out;
}

void Runtime::stop_workers() {
  if (!initialised() || g_forked_child) return;
  std::vector<std::shared_ptr<Stream>> all = streams_.all();
  for (int device = 0; device < device_count(); ++device) {
    Device& d = *devices_[device];
    std::lock_guard lock(d.default_stream_mu);
    if (d.default_stream != nullptr) all.push_back(d.default_stream);
  }
  // All stop before any is joined, so that the grace period runs for all of them at once.
  for (auto& stream : all) stream->stop_worker();
  const Clock::time_point deadline = Clock::now() + kExitGrace;
  for (auto& stream : all) stream->join_worker_until(deadline);
}

}  // namespace devx::cpu_sim
