#include "runtime/allocator.h"

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <c10/core/AllocatorConfig.h>
#include <c10/util/flat_hash_map.h>

#include "runtime/block_pool.h"
#include "runtime/device.h"
#include "runtime/exception.h"
#include "runtime/fork.h"
#include "runtime/memcpy.h"
#include "runtime/mem_check.h"
#include "runtime/memory_history.h"
#include "runtime/sanitizer.h"
#include "runtime/stream.h"
#include "runtime/vendor.h"
#include "runtime/python_hooks.h"

namespace devx {

namespace {

using c10::CachingDeviceAllocator::DeviceStats;

constexpr size_t kRoundSize = 512;

// One mutex guards every device's blocks and statistics, and the map of live blocks. A DataPtr's
// context is its own data pointer (Allocator::raw_allocate requires that of every allocator, the
// routing CPU allocator included), so frees find their block here.
std::mutex g_mutex;
ska::flat_hash_map<void*, std::pair<c10::DeviceIndex, Block*>> g_live;
// The fractions set by set_memory_fraction, by device (those not set are 1.0).
std::map<c10::DeviceIndex, double> g_fractions;

// Changed after start only by apply_allocator_settings, under g_mutex.
AllocatorSettings& settings() {
  static AllocatorSettings s = read_allocator_settings();
  return s;
}

// torch._C._accelerator_setAllocatorSettings (torch.cuda.memory._set_allocator_settings under
// mocking): c10 parses the keys every accelerator shares, and refuses unknown ones once a device
// hook is installed (it ignores them otherwise); devx's hook applies max_split_size_mb to its cache.
void apply_allocator_settings(const std::string& env) {
  if (env.find("max_split_size_mb") == std::string::npos) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  settings().max_split_size = c10::CachingAllocator::AcceleratorAllocatorConfig::max_split_size();
}

// Inlined: every allocation and free reaches its device's blocks through here.
C10_ALWAYS_INLINE std::vector<std::unique_ptr<DeviceBlocks>>& all_devices() {
  static std::vector<std::unique_ptr<DeviceBlocks>> d = [] {
    std::vector<std::unique_ptr<DeviceBlocks>> v;
    for (int i = 0; i < device_count(); ++i) v.push_back(std::make_unique<DeviceBlocks>(i, &settings()));
    return v;
  }();
  return d;
}

DeviceBlocks& blocks_of(c10::DeviceIndex device) {
  check_device_index(device);
  return *all_devices()[device];
}

size_t round_size(size_t n) {
  return n == 0 ? kRoundSize : (n + kRoundSize - 1) / kRoundSize * kRoundSize;
}

// torch.profiler(profile_memory=True) shows devx allocations and frees, with the totals after each.
// Called under g_mutex; costs a thread-local lookup when no profiler is listening.
void report_to_profiler(void* ptr, int64_t delta, DeviceBlocks& blocks, c10::DeviceIndex device) {
  if (C10_LIKELY(!c10::memoryProfilingEnabled())) return;
  const DeviceStats& st = blocks.stats();
  c10::reportMemoryUsageToProfiler(ptr, delta, st.allocated_bytes[0].current, st.reserved_bytes[0].current,
                                   devx_device(device));
}

void free_allocation(void* ptr) {
  // A zero-byte allocation (null); only raw_deallocate calls a deleter with it.
  if (ptr == nullptr) return;
  // The memory is the parent's, and a parent thread may have held the allocator's lock at the fork.
  if (C10_UNLIKELY(in_bad_fork())) return;
  if (C10_UNLIKELY(memcheck::g_enabled.load(std::memory_order_relaxed))) memcheck::on_free(ptr);
  std::optional<history::CallScope> history_scope;
  if (C10_UNLIKELY(history::recording())) history_scope.emplace(/*is_free=*/true);
  std::unique_lock<std::mutex> lock(g_mutex);
  auto it = g_live.find(ptr);
  TORCH_INTERNAL_ASSERT(it != g_live.end(), "devx: freeing ", ptr, ", which is not a live devx allocation");
  auto [device, block] = it->second;
  g_live.erase(it);
  if (C10_UNLIKELY(block == nullptr)) {
    lock.unlock();
    sanitizer::release(ptr);
    return;
  }
  DeviceBlocks& blocks = *all_devices()[device];
  if (C10_UNLIKELY(history::recording())) {
    history::record(device, history::Action::kFreeRequested, ptr, block->requested, blocks.totals());
  }
  const size_t size = block->size;
  blocks.free(block);
  report_to_profiler(ptr, -static_cast<int64_t>(size), blocks, device);
}

// Waits for the events of pending blocks, without the lock (see DeviceBlocks::begin_wait).
void wait_for(const std::vector<DevxEventHandle>& events) {
  WithoutGil without_gil;
  for (DevxEventHandle event : events) g_vendor->event_synchronize(event);
}

// Waits for the events of `blocks`' pending blocks; called and returns with `lock` held.
void wait_for_pending(DeviceBlocks& blocks, std::unique_lock<std::mutex>& lock) {
  std::vector<DevxEventHandle> events = blocks.begin_wait();
  if (events.empty()) return;
  lock.unlock();
  wait_for(events);
  lock.lock();
  blocks.end_wait();
}

// Gives `device`'s wholly free segments back to the vendor; called and returns with `lock` held.
// A block is free once its last work is queued, so the device's queued work may still use a free
// segment: the device is waited for first, as cudaFree does, without the lock (a stream's work
// may allocate). A stream's own work (a kernel allocating a temporary) cannot wait for the device,
// which includes itself: it gives nothing back.
void release_free_segments(DeviceBlocks& blocks, c10::DeviceIndex device, std::unique_lock<std::mutex>& lock) {
  if (on_stream_work()) return;
  std::vector<Block*> segments = blocks.detach_free_segments();
  if (segments.empty()) return;
  lock.unlock();
  DevxStatus status;
  {
    WithoutGil without_gil;
    status = g_vendor->device_synchronize(device);
  }
  lock.lock();
  // A failed kernel still ended: its error is reported, after the memory is back.
  blocks.free_segments(segments);
  DEVX_VENDOR_CHECK(status);
}

// Out of memory: waits for the blocks other streams were still using, then gives back the free
// segments, then tries again (CUDA's retry). Called and returns with `lock` held.
Block* allocate_after_release(DeviceBlocks& blocks, c10::DeviceIndex device, size_t nbytes, int64_t stream,
                              std::unique_lock<std::mutex>& lock) {
  wait_for_pending(blocks, lock);
  if (Block* block = blocks.allocate(round_size(nbytes), nbytes, stream)) return block;
  blocks.stats().num_alloc_retries++;
  release_free_segments(blocks, device, lock);
  return blocks.allocate(round_size(nbytes), nbytes, stream);
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

// DEVX_SIM_SANITIZE: the cache steps aside, so that every allocation has its own guard zones.
// Its live map entry has no block.
c10::DataPtr allocate_guarded(c10::DeviceIndex device, size_t nbytes, c10::Device reported) {
  check_device_index(device);
  void* ptr = sanitizer::allocate(device, nbytes);
  if (!ptr) {
    size_t free_b = 0, total_b = 0;
    g_vendor->mem_get_info(device, &free_b, &total_b);
    TORCH_CHECK_WITH(OutOfMemoryError, false, "devx out of memory on device ", static_cast<int>(device),
                     ": tried to allocate ", format_bytes(nbytes), " (DEVX_SIM_SANITIZE: uncached, with guard zones); ",
                     format_bytes(free_b), " of ", format_bytes(total_b), " free. (", g_vendor->last_error(), ")");
  }
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_live.emplace(ptr, std::make_pair(device, nullptr));
  }
  if (C10_UNLIKELY(memcheck::g_enabled.load(std::memory_order_relaxed))) memcheck::on_alloc(ptr, nbytes, device);
  return {ptr, ptr, &free_allocation, reported};
}

}  // namespace

c10::DataPtr DevxAllocator::allocate_on(c10::DeviceIndex device, size_t nbytes, c10::Device reported) {
  check_not_forked();
  // As CUDA's allocator: no bytes, no block (memory_allocated() does not count empty tensors), and
  // a null pointer that no deleter is ever called for.
  if (nbytes == 0) {
    check_device_index(device);
    return {nullptr, nullptr, &free_allocation, reported};
  }
  if (C10_UNLIKELY(sanitizer::enabled())) return allocate_guarded(device, nbytes, reported);
  DeviceBlocks& blocks = blocks_of(device);
  std::optional<history::CallScope> history_scope;
  if (C10_UNLIKELY(history::recording())) history_scope.emplace(/*is_free=*/false);
  std::unique_lock<std::mutex> lock(g_mutex);
  const int64_t stream = current_stream_id(device);
  Block* block = blocks.allocate(round_size(nbytes), nbytes, stream);
  if (C10_UNLIKELY(!block)) block = allocate_after_release(blocks, device, nbytes, stream, lock);
  if (C10_UNLIKELY(!block)) {
    DeviceStats& st = blocks.stats();
    st.num_ooms++;
    size_t allocated = st.allocated_bytes[0].current;
    size_t reserved = st.reserved_bytes[0].current;
    const history::Totals totals = blocks.totals();
    lock.unlock();
    size_t free_b = 0, total_b = 0;
    g_vendor->mem_get_info(device, &free_b, &total_b);
    if (C10_UNLIKELY(history::recording())) {
      history::record(device, history::Action::kOom, nullptr, nbytes, totals, free_b);
    }
    const size_t limit = blocks.reserve_limit();
    const std::string limited = limit == SIZE_MAX ? std::string()
                                                  : "; this process may reserve " + format_bytes(limit) +
                                                        " (set_per_process_memory_fraction)";
    TORCH_CHECK_WITH(OutOfMemoryError, false, "devx out of memory on device ", static_cast<int>(device),
                     ": tried to allocate ", format_bytes(nbytes), "; ", format_bytes(allocated),
                     " allocated by PyTorch, ", format_bytes(reserved), " reserved, ", format_bytes(total_b),
                     " total capacity, ", format_bytes(free_b), " free", limited, ". (", g_vendor->last_error(), ")");
  }
  g_live.emplace(block->ptr, std::make_pair(device, block));
  report_to_profiler(block->ptr, static_cast<int64_t>(block->size), blocks, device);
  lock.unlock();
  if (C10_UNLIKELY(memcheck::g_enabled.load(std::memory_order_relaxed))) memcheck::on_alloc(block->ptr, nbytes, device);
  return {block->ptr, block->ptr, &free_allocation, reported};
}

c10::DataPtr DevxAllocator::allocate(size_t nbytes) {
  c10::DeviceIndex device = current_device();
  return allocate_on(device, nbytes, devx_device(device));
}

c10::DeleterFnPtr DevxAllocator::raw_deleter() const {
  return &free_allocation;
}

void set_memory_fraction(c10::DeviceIndex device, double fraction) {
  TORCH_CHECK_VALUE(fraction >= 0 && fraction <= 1, "devx: invalid memory fraction ", fraction,
                    ", it must be between 0 and 1");
  DeviceBlocks& blocks = blocks_of(device);
  size_t free_b = 0, total_b = 0;
  DEVX_VENDOR_CHECK(g_vendor->mem_get_info(device, &free_b, &total_b));
  std::lock_guard<std::mutex> lock(g_mutex);
  blocks.set_reserve_limit(fraction >= 1 ? SIZE_MAX : static_cast<size_t>(fraction * static_cast<double>(total_b)));
  g_fractions[device] = fraction;
}

double memory_fraction(c10::DeviceIndex device) {
  check_device_index(device);
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_fractions.find(device);
  return it == g_fractions.end() ? 1.0 : it->second;
}

void DevxAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  copy_device_bytes(dest, src, count, current_device());
}

bool DevxAllocator::initialized() {
  return vendor_loaded();
}

void DevxAllocator::emptyCache(c10::MempoolId_t) {
  if (!vendor_loaded()) return;
  std::optional<history::CallScope> history_scope;
  if (C10_UNLIKELY(history::recording())) history_scope.emplace(/*is_free=*/false);
  std::unique_lock<std::mutex> lock(g_mutex);
  for (auto& blocks : all_devices()) wait_for_pending(*blocks, lock);
  for (c10::DeviceIndex d = 0; d < static_cast<c10::DeviceIndex>(all_devices().size()); ++d) {
    release_free_segments(*all_devices()[d], d, lock);
  }
}

void DevxAllocator::recordStream(const c10::DataPtr& ptr, c10::Stream stream) {
  DevxStream s(stream);
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_live.find(ptr.get());
  // Not ours (a storage of another allocator, or none): nothing to hold back.
  if (it == g_live.end()) return;
  auto [device, block] = it->second;
  TORCH_CHECK(s.device_index() == device, "devx: record_stream: the tensor is on devx:", static_cast<int>(device),
              " but the stream on devx:", static_cast<int>(s.device_index()));
  all_devices()[device]->record_stream(block, s.id());
}

DeviceStats DevxAllocator::getDeviceStats(c10::DeviceIndex device) {
  DeviceBlocks& blocks = blocks_of(device);
  std::lock_guard<std::mutex> lock(g_mutex);
  DeviceStats st = blocks.stats();
  // Split pieces are counted when asked for (current values only): they change on every
  // allocation and nobody reads them on the hot path.
  auto [count, bytes] = blocks.inactive_split();
  st.inactive_split[0].current = count;
  st.inactive_split_bytes[0].current = bytes;
  return st;
}

void DevxAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  DeviceStats& st = blocks_of(device).stats();
  std::lock_guard<std::mutex> lock(g_mutex);
  for_each_stat(st, [](c10::CachingAllocator::Stat& s) { s.reset_accumulated(); });
  st.num_alloc_retries = 0;
  st.num_ooms = 0;
  st.num_sync_all_streams = 0;
  st.num_device_alloc = 0;
  st.num_device_free = 0;
}

void DevxAllocator::resetPeakStats(c10::DeviceIndex device) {
  DeviceStats& st = blocks_of(device).stats();
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
  void* target = fresh.get();
  c10::DataPtr old = storage->set_data_ptr(std::move(fresh));
  storage->set_nbytes(nbytes);
  if (keep == 0 || old.get() == nullptr) return;
  if (g_async_host_streams) {
    // Work issued before the resize still writes the old bytes: the copy takes its place in the
    // stream after it, and the old block is released only once the copy has run.
    auto source = std::make_shared<c10::DataPtr>(std::move(old));
    launch_host_work(getCurrentDevxStream(device),
                     [source, target, keep] { std::memmove(target, source->get(), keep); });
    return;
  }
  devx_allocator()->copy_data(target, old.get(), keep);
}

std::optional<c10::DeviceIndex> live_allocation_device(const void* ptr) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_live.find(const_cast<void*>(ptr));
  if (it == g_live.end()) return std::nullopt;
  return it->second.first;
}

bool free_if_devx_allocation(void* ptr) {
  if (!live_allocation_device(ptr)) return false;
  free_allocation(ptr);
  return true;
}

void check_allocator_settings() {
  settings();
}

void install_allocator_settings_hook() {
  auto& hook = c10::CachingAllocator::AcceleratorAllocatorConfig::getConfigParserHook();
  if (!hook) {
    hook = &apply_allocator_settings;
    return;
  }
  // A torch with CUDA has its own parser of CUDA's keys: devx's runs after it.
  hook = [cuda = std::move(hook)](const std::string& env) {
    cuda(env);
    apply_allocator_settings(env);
  };
}

std::vector<SegmentView> allocator_segments() {
  if (!vendor_loaded()) return {};
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<std::vector<const Block*>> allocated(all_devices().size());
  for (const auto& [ptr, entry] : g_live) {
    if (entry.second) allocated[entry.first].push_back(entry.second);  // guarded ones are not cached
  }
  std::vector<SegmentView> out;
  for (size_t d = 0; d < all_devices().size(); ++d) {
    DeviceBlocks& blocks = *all_devices()[d];
    const std::vector<const Block*> heads = blocks.segment_heads(allocated[d]);
    for (const Block* head : heads) {
      SegmentView seg{static_cast<c10::DeviceIndex>(d), head->ptr, 0, head->small, {}};
      for (const Block* b = head; b; b = b->next) {
        seg.blocks.push_back({b->ptr, b->size, b->allocated ? b->requested : 0, b->allocated});
        seg.size += b->size;
      }
      out.push_back(std::move(seg));
    }
    if (C10_UNLIKELY(history::recording()) && !heads.empty()) {
      history::record(static_cast<int>(d), history::Action::kSnapshot, nullptr, 0, blocks.totals());
    }
  }
  return out;
}

namespace {
struct RegisterAllocator {
  RegisterAllocator() { c10::SetAllocator(kDevx, devx_allocator()); }
};
RegisterAllocator g_register_allocator;
}  // namespace

}  // namespace devx
