#include "runtime/allocator.h"

#include <mutex>
#include <unordered_map>
#include <vector>

#include "runtime/device.h"
#include "runtime/exception.h"
#include "runtime/vendor.h"

namespace devx {

namespace {

using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

constexpr size_t kRoundSize = 512;
constexpr size_t kSmallSize = 1 << 20;

struct Allocation {
  size_t size;       // rounded
  size_t requested;  // as asked
  c10::DeviceIndex device;
};

// All live allocations, keyed by pointer: a DataPtr's context is its own data pointer (which
// Allocator::raw_allocate requires of every allocator, the routing CPU allocator included), so
// frees find their record here. One mutex guards this map and every device's statistics.
std::mutex g_mutex;
std::unordered_map<void*, Allocation> g_live;
std::vector<DeviceStats>& all_stats() {
  static std::vector<DeviceStats> s(device_count());
  return s;
}

DeviceStats& stats_of(c10::DeviceIndex device) {
  check_device_index(device);
  return all_stats()[device];
}

size_t round_size(size_t n) {
  return n == 0 ? kRoundSize : (n + kRoundSize - 1) / kRoundSize * kRoundSize;
}

template <typename F>
void for_pool(size_t size, F f) {
  f(static_cast<size_t>(StatType::AGGREGATE));
  f(static_cast<size_t>(size <= kSmallSize ? StatType::SMALL_POOL : StatType::LARGE_POOL));
}

void record_alloc(DeviceStats& st, const Allocation& a) {
  for_pool(a.size, [&](size_t i) {
    st.allocation[i].increase(1);
    st.segment[i].increase(1);
    st.active[i].increase(1);
    st.allocated_bytes[i].increase(a.size);
    st.reserved_bytes[i].increase(a.size);
    st.active_bytes[i].increase(a.size);
    st.requested_bytes[i].increase(a.requested);
  });
  st.num_device_alloc++;
}

void record_free(DeviceStats& st, const Allocation& a) {
  for_pool(a.size, [&](size_t i) {
    st.allocation[i].decrease(1);
    st.segment[i].decrease(1);
    st.active[i].decrease(1);
    st.allocated_bytes[i].decrease(a.size);
    st.reserved_bytes[i].decrease(a.size);
    st.active_bytes[i].decrease(a.size);
    st.requested_bytes[i].decrease(a.requested);
  });
  st.num_device_free++;
}

void free_allocation(void* ptr) {
  Allocation a;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_live.find(ptr);
    TORCH_INTERNAL_ASSERT(it != g_live.end(), "devx: freeing ", ptr, ", which the devx allocator does not own");
    a = it->second;
    g_live.erase(it);
    record_free(all_stats()[a.device], a);
  }
  DevxStatus status = g_vendor->free(a.device, ptr);
  // A deleter cannot throw; a failed free means the vendor's bookkeeping is corrupt.
  TORCH_INTERNAL_ASSERT(status == DEVX_OK, "devx: vendor free failed: ", g_vendor->last_error());
}

template <typename F>
void for_each_stat(DeviceStats& st, F f) {
  for (auto* arr : {&st.allocation, &st.segment, &st.active, &st.inactive_split, &st.allocated_bytes,
                    &st.reserved_bytes, &st.active_bytes, &st.inactive_split_bytes, &st.requested_bytes}) {
    for (auto& stat : *arr) f(stat);
  }
  f(st.oversize_allocations);
  f(st.oversize_segments);
}

std::string format_bytes(size_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

}  // namespace

c10::DataPtr DevxAllocator::allocate_on(c10::DeviceIndex device, size_t nbytes, c10::Device reported) {
  DeviceStats& st = stats_of(device);
  size_t size = round_size(nbytes);
  void* ptr = nullptr;
  DevxStatus status = g_vendor->malloc(device, size, &ptr);
  if (C10_UNLIKELY(status != DEVX_OK)) {
    size_t allocated = 0, reserved = 0;
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      if (status == DEVX_ERROR_OOM) st.num_ooms++;
      allocated = st.allocated_bytes[0].current;
      reserved = st.reserved_bytes[0].current;
    }
    if (status == DEVX_ERROR_OOM) {
      size_t free_b = 0, total_b = 0;
      g_vendor->mem_get_info(device, &free_b, &total_b);
      TORCH_CHECK_WITH(OutOfMemoryError, false, "devx out of memory on device ", static_cast<int>(device),
                       ": tried to allocate ", format_bytes(nbytes), "; ", format_bytes(allocated),
                       " allocated by PyTorch, ", format_bytes(reserved), " reserved, ", format_bytes(total_b),
                       " total capacity, ", format_bytes(free_b), " free. (", g_vendor->last_error(), ")");
    }
    DEVX_VENDOR_CHECK(status);
  }
  Allocation a{size, nbytes, device};
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_live.emplace(ptr, a);
    record_alloc(st, a);
  }
  return {ptr, ptr, &free_allocation, reported};
}

c10::DataPtr DevxAllocator::allocate(size_t nbytes) {
  c10::DeviceIndex device = current_device();
  return allocate_on(device, nbytes, devx_device(device));
}

c10::DeleterFnPtr DevxAllocator::raw_deleter() const {
  return &free_allocation;
}

void DevxAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  DEVX_VENDOR_CHECK(g_vendor->memcpy_sync(dest, src, count, DEVX_MEMCPY_D2D));
}

bool DevxAllocator::initialized() {
  return vendor_loaded();
}

void DevxAllocator::emptyCache(c10::MempoolId_t) {
  // Nothing is cached: every free goes straight back to the vendor.
}

void DevxAllocator::recordStream(const c10::DataPtr&, c10::Stream) {
  // Frees are immediate and every stream is synchronous with the host in this allocator, so a
  // block cannot be reused while another stream still reads it.
}

DeviceStats DevxAllocator::getDeviceStats(c10::DeviceIndex device) {
  DeviceStats& st = stats_of(device);
  std::lock_guard<std::mutex> lock(g_mutex);
  return st;
}

void DevxAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  DeviceStats& st = stats_of(device);
  std::lock_guard<std::mutex> lock(g_mutex);
  for_each_stat(st, [](c10::CachingAllocator::Stat& s) { s.reset_accumulated(); });
  st.num_alloc_retries = 0;
  st.num_ooms = 0;
  st.num_sync_all_streams = 0;
  st.num_device_alloc = 0;
  st.num_device_free = 0;
}

void DevxAllocator::resetPeakStats(c10::DeviceIndex device) {
  DeviceStats& st = stats_of(device);
  std::lock_guard<std::mutex> lock(g_mutex);
  for_each_stat(st, [](c10::CachingAllocator::Stat& s) { s.reset_peak(); });
}

std::pair<size_t, size_t> DevxAllocator::getMemoryInfo(c10::DeviceIndex device) {
  check_device_index(device);
  size_t free_b = 0, total_b = 0;
  DEVX_VENDOR_CHECK(g_vendor->mem_get_info(device, &free_b, &total_b));
  return {free_b, total_b};
}

DevxAllocator* devx_allocator() {
  static DevxAllocator allocator;
  return &allocator;
}

bool is_devx_allocation(const c10::DataPtr& ptr) {
  return ptr.get_deleter() == &free_allocation;
}

void resize_storage_bytes(c10::StorageImpl* storage, size_t nbytes) {
  TORCH_CHECK(storage->resizable(), "devx: trying to resize a storage that is not resizable");
  c10::DeviceIndex device = storage->device().type() == kDevx ? storage->device().index() : current_device();
  c10::DataPtr fresh = devx_allocator()->allocate_on(device, nbytes, devx_device(device));
  size_t keep = std::min(nbytes, storage->nbytes());
  if (keep > 0 && storage->data() != nullptr) devx_allocator()->copy_data(fresh.get(), storage->data(), keep);
  storage->set_data_ptr_noswap(std::move(fresh));
  storage->set_nbytes(nbytes);
}

c10::DeviceIndex allocation_device(const c10::DataPtr& ptr) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_live.find(ptr.get());
  TORCH_INTERNAL_ASSERT(it != g_live.end(), "devx: ", ptr.get(), " is not a live devx allocation");
  return it->second.device;
}

bool free_if_devx_allocation(void* ptr) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_live.find(ptr) == g_live.end()) return false;
  }
  free_allocation(ptr);
  return true;
}

namespace {
struct Register {
  Register() { c10::SetAllocator(kDevx, devx_allocator()); }
};
Register g_register;
}  // namespace

}  // namespace devx
