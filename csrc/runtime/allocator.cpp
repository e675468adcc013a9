#include "runtime/allocator.h"

#include <map>
#include <mutex>
#include <vector>

#include <c10/util/flat_hash_map.h>

#include "runtime/device.h"
#include "runtime/exception.h"
#include "runtime/vendor.h"

namespace devx {

namespace {

using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

constexpr size_t kRoundSize = 512;
constexpr size_t kSmallSize = 1 << 20;

// A block is one vendor allocation. Freed blocks stay cached (reserved) for reuse by a later
// request of the same size class; only empty_cache() or an out-of-memory retry gives them back.
// Large requests are rounded to an eighth of their power of two, so a cached block serves every
// request of its class and no block wastes more than 12.5%.
struct Block {
  size_t size;       // rounded
  size_t requested;  // as last asked
  c10::DeviceIndex device;
  bool allocated;
};

// All blocks keyed by pointer: a DataPtr's context is its own data pointer (which
// Allocator::raw_allocate requires of every allocator, the routing CPU allocator included), so
// frees find their block here. One mutex guards the blocks, the caches and the statistics.
std::mutex g_mutex;
ska::flat_hash_map<void*, Block> g_blocks;

struct DeviceCache {
  std::multimap<size_t, void*> free_blocks;  // size class -> cached block
  DeviceStats stats;
};

std::vector<DeviceCache>& caches() {
  static std::vector<DeviceCache> c(device_count());
  return c;
}

DeviceCache& cache_of(c10::DeviceIndex device) {
  check_device_index(device);
  return caches()[device];
}

size_t round_size(size_t n) {
  if (n <= kSmallSize) return n == 0 ? kRoundSize : (n + kRoundSize - 1) / kRoundSize * kRoundSize;
  size_t step = (size_t{1} << (63 - __builtin_clzll(n))) / 8;
  return (n + step - 1) / step * step;
}

template <typename F>
void for_pool(size_t size, F f) {
  f(static_cast<size_t>(StatType::AGGREGATE));
  f(static_cast<size_t>(size <= kSmallSize ? StatType::SMALL_POOL : StatType::LARGE_POOL));
}

void record_use(DeviceStats& st, const Block& b, bool start) {
  for_pool(b.size, [&](size_t i) {
    if (start) {
      st.allocation[i].increase(1);
      st.active[i].increase(1);
      st.allocated_bytes[i].increase(b.size);
      st.active_bytes[i].increase(b.size);
      st.requested_bytes[i].increase(b.requested);
    } else {
      st.allocation[i].decrease(1);
      st.active[i].decrease(1);
      st.allocated_bytes[i].decrease(b.size);
      st.active_bytes[i].decrease(b.size);
      st.requested_bytes[i].decrease(b.requested);
    }
  });
}

void record_segment(DeviceStats& st, size_t size, bool created) {
  for_pool(size, [&](size_t i) {
    if (created) {
      st.segment[i].increase(1);
      st.reserved_bytes[i].increase(size);
    } else {
      st.segment[i].decrease(1);
      st.reserved_bytes[i].decrease(size);
    }
  });
  if (created) {
    st.num_device_alloc++;
  } else {
    st.num_device_free++;
  }
}

// Gives every cached block of `device` back to the vendor. Caller holds g_mutex.
void release_cached(c10::DeviceIndex device) {
  DeviceCache& c = caches()[device];
  for (auto& [size, ptr] : c.free_blocks) {
    DevxStatus status = g_vendor->free(device, ptr);
    TORCH_INTERNAL_ASSERT(status == DEVX_OK, "devx: vendor free failed: ", g_vendor->last_error());
    g_blocks.erase(ptr);
    record_segment(c.stats, size, false);
  }
  c.free_blocks.clear();
}

void free_allocation(void* ptr) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_blocks.find(ptr);
  TORCH_INTERNAL_ASSERT(it != g_blocks.end() && it->second.allocated, "devx: freeing ", ptr,
                        ", which is not a live devx allocation");
  Block& b = it->second;
  b.allocated = false;
  DeviceCache& c = caches()[b.device];
  record_use(c.stats, b, false);
  c.free_blocks.emplace(b.size, ptr);
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
  DeviceCache& c = cache_of(device);
  const size_t size = round_size(nbytes);
  std::unique_lock<std::mutex> lock(g_mutex);
  void* ptr = nullptr;
  auto cached = c.free_blocks.find(size);
  if (cached != c.free_blocks.end()) {
    ptr = cached->second;
    c.free_blocks.erase(cached);
  } else {
    DevxStatus status = g_vendor->malloc(device, size, &ptr);
    if (status == DEVX_ERROR_OOM && !c.free_blocks.empty()) {
      // Cached blocks of other sizes may be what stands in the way: give them back and retry.
      c.stats.num_alloc_retries++;
      release_cached(device);
      status = g_vendor->malloc(device, size, &ptr);
    }
    if (C10_UNLIKELY(status != DEVX_OK)) {
      if (status == DEVX_ERROR_OOM) c.stats.num_ooms++;
      size_t allocated = c.stats.allocated_bytes[0].current;
      size_t reserved = c.stats.reserved_bytes[0].current;
      lock.unlock();
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
    g_blocks[ptr] = Block{size, nbytes, device, false};
    record_segment(c.stats, size, true);
  }
  Block& b = g_blocks.find(ptr)->second;
  b.allocated = true;
  b.requested = nbytes;
  record_use(c.stats, b, true);
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
  if (!vendor_loaded()) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  for (c10::DeviceIndex d = 0; d < device_count(); ++d) release_cached(d);
}

void DevxAllocator::recordStream(const c10::DataPtr&, c10::Stream) {
  // Kernels and copies complete before the op that issued them returns (no vendor runs the op
  // path asynchronously yet), so a freed block is idle on every stream and safe to reuse.
}

DeviceStats DevxAllocator::getDeviceStats(c10::DeviceIndex device) {
  DeviceStats& st = cache_of(device).stats;
  std::lock_guard<std::mutex> lock(g_mutex);
  return st;
}

void DevxAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  DeviceStats& st = cache_of(device).stats;
  std::lock_guard<std::mutex> lock(g_mutex);
  for_each_stat(st, [](c10::CachingAllocator::Stat& s) { s.reset_accumulated(); });
  st.num_alloc_retries = 0;
  st.num_ooms = 0;
  st.num_sync_all_streams = 0;
  st.num_device_alloc = 0;
  st.num_device_free = 0;
}

void DevxAllocator::resetPeakStats(c10::DeviceIndex device) {
  DeviceStats& st = cache_of(device).stats;
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
  auto it = g_blocks.find(ptr.get());
  TORCH_INTERNAL_ASSERT(it != g_blocks.end(), "devx: ", ptr.get(), " is not a devx allocation");
  return it->second.device;
}

bool free_if_devx_allocation(void* ptr) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_blocks.find(ptr);
    if (it == g_blocks.end() || !it->second.allocated) return false;
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
