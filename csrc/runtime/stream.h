// devx streams, named after CUDAStream: a default stream plus a pool per device and priority,
// and a per-thread current stream per device. A c10::Stream's id encodes its slot:
// 0 is the default stream, 1 + level * kStreamsPerPool + i is pool stream i of priority level.
#pragma once

#include <c10/core/Stream.h>

#include <memory>
#include <type_traits>
#include <utility>

#include "runtime/device.h"
#include "runtime/vendor_api.h"

namespace devx {

constexpr int kStreamsPerPool = 8;
constexpr int kPriorityLevels = 3;  // 0 (normal), -1 (high), -2 (highest)

class DevxStream {
 public:
  explicit DevxStream(c10::Stream stream);

  c10::Stream unwrap() const { return stream_; }
  c10::DeviceIndex device_index() const { return stream_.device_index(); }
  c10::StreamId id() const { return stream_.id(); }
  int priority() const;
  DevxStreamHandle handle() const;

  bool query() const;
  void synchronize() const;

  operator c10::Stream() const { return stream_; }
  bool operator==(const DevxStream& other) const { return stream_ == other.stream_; }

 private:
  c10::Stream stream_;
};

DevxStream getDefaultDevxStream(c10::DeviceIndex device = -1);
DevxStream getCurrentDevxStream(c10::DeviceIndex device = -1);
// The id of getCurrentDevxStream(device), for a valid `device` (the allocator's hot path).
c10::StreamId current_stream_id(c10::DeviceIndex device);
// Round-robin over the pool of the priority level nearest `priority` (clamped to the range).
DevxStream getStreamFromPool(int priority = 0, c10::DeviceIndex device = -1);
void setCurrentDevxStream(DevxStream stream);
void stream_priority_range(int* least, int* greatest);

namespace detail {
// Marks the calling thread as running stream work (on_stream_work) for its scope.
class StreamWorkScope {
 public:
  StreamWorkScope();
  ~StreamWorkScope();
  StreamWorkScope(const StreamWorkScope&) = delete;
  StreamWorkScope& operator=(const StreamWorkScope&) = delete;

 private:
  bool before_;
};
void launch_host_call(const DevxStream& stream, void (*call)(void*), void* arg);
template <typename W>
void run_owned_work(void* work) {
  std::unique_ptr<W> owned(static_cast<W*>(work));
  StreamWorkScope scope;
  (*owned)();
}
}  // namespace detail

// Runs `work` on the host in `stream`'s order (the vendor's launch_host_func). What it captures is
// released after it ran, on whatever thread ran it. An exception it throws is the vendor's to
// report (see async_host_streams). The work is moved into one heap object: every asynchronously
// issued op launches one, and each allocation the host makes is freed by the stream's thread.
template <typename F>
void launch_host_work(const DevxStream& stream, F&& work) {
  using W = std::decay_t<F>;
  auto owned = std::make_unique<W>(std::forward<F>(work));
  detail::launch_host_call(stream, &detail::run_owned_work<W>, owned.get());
  owned.release();
}
// Whether this thread is running work given to launch_host_work (which may not wait for its own
// stream, nor for the device).
bool on_stream_work();

}  // namespace devx
