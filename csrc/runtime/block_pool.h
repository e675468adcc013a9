// The caching policy of the devx allocator, one DeviceBlocks per device (CUDA's design, shrunk):
// memory comes from the vendor in segments (2 MiB for requests up to 1 MiB — the small pool —,
// else the request rounded up to 2 MiB); a request takes the
// best-fitting free block of its pool and splits off the rest; a freed block merges with free
// neighbours of its segment; only whole free segments go back to the vendor (empty_cache, or
// before an out-of-memory retry). Not thread-safe: the allocator serialises calls.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>

#include <cstddef>
#include <set>
#include <vector>

#include "runtime/memory_history.h"

namespace devx {

struct AllocatorSettings {
  // DEVX_ALLOC_CONF max_split_size_mb: blocks this large or larger are never split, and requests
  // below it never take them (so huge cached blocks are not carved up by small requests).
  size_t max_split_size = SIZE_MAX;
};

// Parses DEVX_ALLOC_CONF ("max_split_size_mb:128"); a bad setting is a ValueError naming it.
AllocatorSettings read_allocator_settings();

struct Block {
  void* ptr;
  size_t size;
  size_t requested = 0;
  bool allocated = false;
  bool small;
  Block* prev = nullptr;  // neighbours in the same segment
  Block* next = nullptr;
};

class DeviceBlocks {
 public:
  DeviceBlocks(int device, const AllocatorSettings* settings) : device_(device), settings_(settings) {}

  // A block of at least `size` (already rounded) bytes, or nullptr if the vendor is out of
  // memory even after giving back every free segment. Throws on other vendor errors.
  Block* allocate(size_t size, size_t requested);
  void free(Block* block);
  // Gives every wholly free segment back to the vendor.
  void release_free_segments();

  c10::CachingDeviceAllocator::DeviceStats& stats() { return stats_; }
  // Current count and bytes of free blocks that are pieces of a split segment.
  std::pair<int64_t, int64_t> inactive_split() const;
  // Allocated and reserved bytes now, and the largest cached free block.
  history::Totals totals() const;
  // The first block of every segment, by address, given the blocks that are allocated now (the
  // pools hold only the free ones).
  std::vector<const Block*> segment_heads(const std::vector<const Block*>& allocated) const;

 private:
  struct BySize {
    bool operator()(const Block* a, const Block* b) const {
      return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
    }
  };
  using Pool = std::set<Block*, BySize>;

  Pool& pool(bool small) { return small ? small_ : large_; }
  Block* take_free(size_t size, bool small);
  Block* new_segment(size_t size, bool small);
  void split(Block* block, size_t size);
  void record(history::Action action, const void* ptr, size_t size) {
    if (C10_UNLIKELY(history::recording())) history::record(device_, action, ptr, size, totals());
  }

  int device_;
  const AllocatorSettings* settings_;
  Pool small_, large_;
  c10::CachingDeviceAllocator::DeviceStats stats_;
};

}  // namespace devx
