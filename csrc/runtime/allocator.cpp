#include "runtime/allocator.h"

#include <memory>
#include <mutex>
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
  void* ptr;
  size_t size;       // rounded
  size_t requested;  // as asked
  c10::DeviceIndex device;
};

struct DeviceState {
  std::mutex mutex;
  DeviceStats stats;
};

std::vector<std::unique_ptr<DeviceState>>& states() {
  static std::vector<std::unique_ptr<DeviceState>> s = [] {
    std::vector<std::unique_ptr<DeviceState>> v;
    for (int i = 0; i < device_count(); ++i) v.push_back(std::make_unique<DeviceState>());
    return v;
  }();
  return s;
}

DeviceState& state_of(c10::DeviceIndex device) {
  check_device_index(device);
  return *states()[device];
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

void free_allocation(void* ctx) {
  auto* a = static_cast<Allocation*>(ctx);
  DevxStatus status = g_vendor->free(a->device, a->ptr);
  {
    DeviceState& s = *states()[a->device];
    std::lock_guard<std::mutex> lock(s.mutex);
    record_free(s.stats, *a);
  }
  delete a;
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
  DeviceState& s = state_of(device);
  size_t size = round_size(nbytes);
  void* ptr = nullptr;
  DevxStatus status = g_vendor->malloc(device, size, &ptr);
  if (C10_UNLIKELY(status != DEVX_OK)) {
    size_t allocated = 0, reserved = 0;
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      if (status == DEVX_ERROR_OOM) s.stats.num_ooms++;
      allocated = s.stats.allocated_bytes[0].current;
      reserved = s.stats.reserved_bytes[0].current;
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
  auto* a = new Allocation{ptr, size, nbytes, device};
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    record_alloc(s.stats, *a);
  }
  return {ptr, a, &free_allocation, reported};
}

c10::DataPtr DevxAllocator::allocate(size_t nbytes) {
  c10::DeviceIndex device = current_device();
  return allocate_on(device, nbytes, devx_device(device));
}

c10::DeleterFnPtr DevxAllocator::raw_deleter() const {
  // Frees need the allocation record (size and device for the statistics), so there is no raw
  // pointer-only deleter.
  return nullptr;
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
  DeviceState& s = state_of(device);
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.stats;
}

void DevxAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  DeviceState& s = state_of(device);
  std::lock_guard<std::mutex> lock(s.mutex);
  for_each_stat(s.stats, [](c10::CachingAllocator::Stat& st) { st.reset_accumulated(); });
  s.stats.num_alloc_retries = 0;
  s.stats.num_ooms = 0;
  s.stats.num_sync_all_streams = 0;
  s.stats.num_device_alloc = 0;
  s.stats.num_device_free = 0;
}

void DevxAllocator::resetPeakStats(c10::DeviceIndex device) {
  DeviceState& s = state_of(device);
  std::lock_guard<std::mutex> lock(s.mutex);
  for_each_stat(s.stats, [](c10::CachingAllocator::Stat& st) { st.reset_peak(); });
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
  return static_cast<const Allocation*>(ptr.get_context())->device;
}

namespace {
struct Register {
  Register() { c10::SetAllocator(kDevx, devx_allocator()); }
};
Register g_register;
}  // namespace

}  // namespace devx
