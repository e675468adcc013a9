// The simulator's process-wide state: settings, devices, and the streams and events the core
// holds handles to.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "arena.h"
#include "event.h"
#include "runtime/vendor_api.h"
#include "settings.h"
#include "stream.h"

namespace devx::cpu_sim {

struct Device {
  Device(int index, size_t capacity) : arena(index, capacity) {}

  Arena arena;
  std::mutex default_stream_mu;
  std::shared_ptr<Stream> default_stream;  // created on first use, never destroyed
};

// Handles given to the core are the objects' addresses. Looking them up here first turns a stale
// or foreign handle into DEVX_ERROR_INVALID instead of a crash, and the shared_ptr keeps an
// object alive while queued work still uses it after the core destroyed its handle.
template <class T>
class Registry {
 public:
  void add(std::shared_ptr<T> item) {
    std::lock_guard lock(mu_);
    const void* key = item.get();
    items_.emplace(key, std::move(item));
  }
  std::shared_ptr<T> find(const void* handle) {
    std::lock_guard lock(mu_);
    auto it = items_.find(handle);
    return it == items_.end() ? nullptr : it->second;
  }
  std::shared_ptr<T> remove(const void* handle) {
    std::lock_guard lock(mu_);
    auto node = items_.extract(handle);
    return node ? std::move(node.mapped()) : nullptr;
  }
  std::vector<std::shared_ptr<T>> all() {
    std::lock_guard lock(mu_);
    std::vector<std::shared_ptr<T>> out;
    for (const auto& entry : items_) out.push_back(entry.second);
    return out;
  }

 private:
  std::mutex mu_;
  std::unordered_map<const void*, std::shared_ptr<T>> items_;
};

class Runtime {
 public:
  static Runtime& get();

  // Reads the settings and creates the devices; later calls return DEVX_OK. A failed call
  // leaves nothing behind, so it can be retried with a corrected environment.
  DevxStatus init();
  // DEVX_OK when initialised; otherwise an error saying init() was skipped.
  DevxStatus check_initialised() const;
  // DEVX_OK if `device` names a simulated device; otherwise DEVX_ERROR_INVALID saying why.
  DevxStatus check_device(int device) const;

  // Valid after init().
  bool async() const { return settings_.async; }
  const Settings& settings() const { return settings_; }
  int device_count() const { return static_cast<int>(devices_.size()); }
  Device& device(int index) { return *devices_[index]; }
  // The device whose memory holds [ptr, ptr + size), or -1.
  int device_of(const void* ptr, size_t size) const;

  // NULL is the current device's default stream.
  DevxStatus find_stream(DevxStreamHandle handle, std::shared_ptr<Stream>* out);
  DevxStatus find_event(DevxEventHandle handle, std::shared_ptr<Event>* out);
  std::shared_ptr<Stream> new_stream(int device);
  // The live streams of `device`, its default stream included once created.
  std::vector<std::shared_ptr<Stream>> device_streams(int device);

  Registry<Stream>& streams() { return streams_; }
  Registry<Event>& events() { return events_; }

  // At exit: drops queued work and joins the stream workers, waiting a bounded time for work
  // that is already running. Streams accept no work afterwards.
  void stop_workers();

 private:
  Runtime() = default;
  bool initialised() const { return initialised_.load(std::memory_order_acquire); }
  std::shared_ptr<Stream> default_stream(int device);

  std::mutex init_mu_;
  std::atomic<bool> initialised_{false};
  Settings settings_;
  std::vector<std::unique_ptr<Device>> devices_;
  Registry<Stream> streams_;
  Registry<Event> events_;
};

// The current device of the calling thread (0 until set_current_device).
int current_device();
void set_current_device(int device);

}  // namespace devx::cpu_sim
