#include "runtime/stream.h"

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "runtime/exception.h"
#include "runtime/per_thread.h"
#include "runtime/vendor.h"
#include "runtime/python_hooks.h"

namespace devx {

namespace {

constexpr int kSlots = 1 + kStreamsPerPool * kPriorityLevels;

// Vendor streams are created on first use of their slot: in cpu_sim's async mode each one is a
// worker thread, and most programs touch two or three.
struct DeviceStreams {
  std::mutex create_mutex;
  std::array<std::atomic<DevxStreamHandle>, kSlots> handles{};
  std::array<std::atomic<uint32_t>, kPriorityLevels> next{};
};

std::vector<std::unique_ptr<DeviceStreams>>& all_streams() {
  static std::vector<std::unique_ptr<DeviceStreams>> streams = [] {
    std::vector<std::unique_ptr<DeviceStreams>> v;
    for (int i = 0; i < device_count(); ++i) v.push_back(std::make_unique<DeviceStreams>());
    return v;
  }();
  return streams;
}

int level_priority(int level) {
  int least = 0, greatest = 0;
  stream_priority_range(&least, &greatest);
  return std::max(greatest, least - level);
}

DeviceStreams& streams_of(c10::DeviceIndex device) {
  check_device_index(device);
  return *all_streams()[device];
}

DevxStreamHandle slot_handle(c10::DeviceIndex device, c10::StreamId id) {
  DeviceStreams& ds = streams_of(device);
  DevxStreamHandle h = ds.handles[id].load(std::memory_order_acquire);
  if (C10_LIKELY(h)) return h;
  std::lock_guard<std::mutex> lock(ds.create_mutex);
  h = ds.handles[id].load(std::memory_order_relaxed);
  if (!h) {
    int priority = id == 0 ? 0 : level_priority(static_cast<int>((id - 1) / kStreamsPerPool));
    DEVX_VENDOR_CHECK(g_vendor->stream_create(device, priority, &h));
    ds.handles[id].store(h, std::memory_order_release);
  }
  return h;
}

c10::DeviceIndex resolve(c10::DeviceIndex device) {
  return device < 0 ? current_device() : device;
}

// This thread's current stream ids, by device (those past the end: the default stream, id 0).
using CurrentStreamIds = std::vector<c10::StreamId>;

thread_local bool t_on_stream_work = false;

}  // namespace

DevxStream::DevxStream(c10::Stream stream) : stream_(stream) {
  TORCH_CHECK(stream.device_type() == kDevx, "devx: expected a devx stream, got a ", stream.device_type(),
              " stream");
  TORCH_CHECK(stream.id() >= 0 && stream.id() < kSlots, "devx: invalid stream id ", stream.id());
}

int DevxStream::priority() const {
  if (id() == 0) return 0;
  return level_priority(static_cast<int>((id() - 1) / kStreamsPerPool));
}

DevxStreamHandle DevxStream::handle() const {
  return slot_handle(device_index(), id());
}

bool DevxStream::query() const {
  DevxStatus st = g_vendor->stream_query(handle());
  if (st == DEVX_ERROR_NOT_READY) return false;
  DEVX_VENDOR_CHECK(st);
  return true;
}

void DevxStream::synchronize() const {
  WithoutGil without_gil;
  DEVX_VENDOR_CHECK(g_vendor->stream_synchronize(handle()));
}

void stream_priority_range(int* least, int* greatest) {
  static const std::pair<int, int> range = [] {
    int l = 0, g = 0;
    DEVX_VENDOR_CHECK(vendor().stream_priority_range(&l, &g));
    // Only kPriorityLevels levels are pooled; the range reported is the one we can honour.
    return std::make_pair(l, std::max(g, l - (kPriorityLevels - 1)));
  }();
  *least = range.first;
  *greatest = range.second;
}

DevxStream getDefaultDevxStream(c10::DeviceIndex device) {
  device = resolve(device);
  check_device_index(device);
  return DevxStream(c10::Stream(c10::Stream::UNSAFE, devx_device(device), 0));
}

DevxStream getCurrentDevxStream(c10::DeviceIndex device) {
  device = resolve(device);
  check_device_index(device);
  return DevxStream(c10::Stream(c10::Stream::UNSAFE, devx_device(device), current_stream_id(device)));
}

c10::StreamId current_stream_id(c10::DeviceIndex device) {
  const CurrentStreamIds* ids = existing_per_thread<CurrentStreamIds>();
  return ids != nullptr && static_cast<size_t>(device) < ids->size() ? (*ids)[device] : 0;
}

DevxStream getStreamFromPool(int priority, c10::DeviceIndex device) {
  device = resolve(device);
  DeviceStreams& ds = streams_of(device);
  int least = 0, greatest = 0;
  stream_priority_range(&least, &greatest);
  priority = std::min(least, std::max(greatest, priority));
  int level = least - priority;
  uint32_t i = ds.next[level].fetch_add(1, std::memory_order_relaxed) % kStreamsPerPool;
  return DevxStream(c10::Stream(c10::Stream::UNSAFE, devx_device(device), 1 + level * kStreamsPerPool + i));
}

void setCurrentDevxStream(DevxStream stream) {
  check_device_index(stream.device_index());
  CurrentStreamIds* ids = per_thread<CurrentStreamIds>();
  if (ids == nullptr) return;  // the thread is ending: it issues nothing more
  if (ids->size() < static_cast<size_t>(device_count())) ids->resize(device_count(), 0);
  (*ids)[stream.device_index()] = stream.id();
}

bool on_stream_work() {
  return t_on_stream_work;
}

namespace detail {

// Restored however the work ends: the vendor reports a throw, and the thread runs more work.
StreamWorkScope::StreamWorkScope() : before_(std::exchange(t_on_stream_work, true)) {}
StreamWorkScope::~StreamWorkScope() {
  t_on_stream_work = before_;
}

void launch_host_call(const DevxStream& stream, void (*call)(void*), void* arg) {
  DEVX_VENDOR_CHECK(g_vendor->launch_host_func(stream.handle(), call, arg));
}

}  // namespace detail

}  // namespace devx
