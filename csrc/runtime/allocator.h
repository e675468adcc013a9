// The devx device allocator, registered for PrivateUse1 so that torch.accelerator.memory_* and
// everything that calls c10::GetAllocator(PrivateUse1) see it. It keeps CUDA's statistics
// (c10::CachingDeviceAllocator::DeviceStats, small pool <= 1 MiB, large pool above).
#pragma once

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/StorageImpl.h>

#include <optional>
#include <vector>

namespace devx {

class DevxAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  bool initialized() override;
  void emptyCache(c10::MempoolId_t mempool_id = {0, 0}) override;
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override;
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;

  // Memory on `device` whose DataPtr says `reported_device`: the op path hands device memory to
  // ATen's kernels of the vendor's compute device, which must believe it is theirs.
  c10::DataPtr allocate_on(c10::DeviceIndex device, size_t nbytes, c10::Device reported_device);
};

DevxAllocator* devx_allocator();

// torch.devx.set_per_process_memory_fraction: the caching allocator reserves at most `fraction`
// of `device`'s total memory (1.0: no limit but the device's).
void set_memory_fraction(c10::DeviceIndex device, double fraction);
double memory_fraction(c10::DeviceIndex device);

// Grows or shrinks a devx storage to `nbytes`, keeping its leading bytes (what resize_ needs).
void resize_storage_bytes(c10::StorageImpl* storage, size_t nbytes);

// True when `ptr` was allocated by the devx allocator (whatever device the DataPtr reports).
bool is_devx_allocation(const c10::DataPtr& ptr);
// Reads DEVX_ALLOC_CONF now, so a bad setting fails at import rather than at the first allocation.
void check_allocator_settings();
// Installs devx's parser of runtime allocator settings as c10's device config hook (which a torch
// without CUDA leaves empty; a CUDA build's own hook is kept and runs first).
void install_allocator_settings_hook();

// Frees `ptr` if the devx allocator owns it; false (and nothing done) otherwise.
bool free_if_devx_allocation(void* ptr);
// The device of the live devx allocation that starts at `ptr`, or nullopt if there is none.
std::optional<c10::DeviceIndex> live_allocation_device(const void* ptr);

// A read-only picture of the cache, for memory snapshots.
struct BlockView {
  const void* ptr;
  size_t size;
  size_t requested;
  bool allocated;
};
struct SegmentView {
  c10::DeviceIndex device;
  const void* ptr;
  size_t size;
  bool small;  // the small pool (blocks up to 1 MiB)
  std::vector<BlockView> blocks;  // by address, covering the segment
};
// Every device's segments, by device then address. Marks the moment in the memory history.
std::vector<SegmentView> allocator_segments();

}  // namespace devx
