// The caching policy of the devx allocator, one DeviceBlocks per device (CUDA's design, shrunk):
// memory comes from the vendor in segments (2 MiB for requests up to 1 MiB — the small pool —,
// else the request rounded up to 2 MiB); a request takes a free block of its pool and splits off
// the rest — in the small pool the first that fits, oldest segment first and lowest address
// within it, in the large pool the best-fitting one —; a freed block merges with free neighbours
// of its segment; a pool short of a 2 MiB segment takes a whole free one from the other pool
// before asking the vendor; only whole free segments go back to the vendor (empty_cache, or before
// an out-of-memory retry). Not thread-safe: the allocator serialises calls.
//
// Streams (CUDA's rule): a segment belongs to the stream that allocated it, and its blocks serve
// only that stream, so a block freed while its stream still has work queued is reused by work
// queued after it. A block also used on other streams (record_stream) is freed only once an
// event recorded on each of them at free time has completed; pending blocks are looked at on
// each allocation, and waited for (by the allocator) before an out-of-memory retry and by
// empty_cache.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "runtime/memory_history.h"
#include "runtime/vendor_api.h"

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
  int64_t stream;  // id of the stream (of this device) whose segment the block is part of
  size_t requested = 0;
  bool allocated = false;
  bool small;
  uint64_t segment = 0;   // sequence number of its segment: older segments have smaller ones
  Block* prev = nullptr;  // neighbours in the same segment
  Block* next = nullptr;
  uint32_t stream_uses = 0;  // bit i: stream id i may use the block (record_stream)
  bool recent = false;       // free, and kept whole in its size's recent list, not in a pool
};

class DeviceBlocks {
 public:
  DeviceBlocks(int device, const AllocatorSettings* settings)
      : device_(device), settings_(settings), small_(PoolOrder{true}), large_(PoolOrder{false}) {}

  // A block of at least `size` (already rounded) bytes for stream id `stream`, or nullptr if
  // neither the pools nor the vendor have one. Throws on other vendor errors.
  Block* allocate(size_t size, size_t requested, int64_t stream);
  void free(Block* block);
  // Stream id `stream` may use `block` (an allocated block) from now on.
  void record_stream(Block* block, int64_t stream);
  // Giving the wholly free segments back to the vendor takes two steps: they leave the pools
  // (nothing can take them any more), then, once the caller has waited for the device's queued
  // work (some of it may still use them: a block is free as soon as its last work is queued),
  // they are freed. The wait is the caller's because it must not hold the allocator's lock.
  std::vector<Block*> detach_free_segments();
  void free_segments(const std::vector<Block*>& segments);
  // The events the blocks freed while other streams might use them wait for. The caller waits for
  // them without the allocator's lock (a stream's work may allocate), then calls end_wait(); until
  // then the events stay valid.
  std::vector<DevxEventHandle> begin_wait();
  void end_wait();

  c10::CachingDeviceAllocator::DeviceStats& stats() { return stats_; }
  // The most this device's segments may reserve (set_per_process_memory_fraction); a request that
  // would pass it is out of memory, as one the vendor refuses.
  void set_reserve_limit(size_t bytes) { reserve_limit_ = bytes; }
  size_t reserve_limit() const { return reserve_limit_; }
  // The three below merge the recent blocks into their pools first: they describe the cache as
  // the pools alone would have it.
  // Current count and bytes of free blocks that are pieces of a split segment.
  std::pair<int64_t, int64_t> inactive_split();
  // Allocated and reserved bytes now, and the largest cached free block.
  history::Totals totals();
  // The first block of every segment, by address, given the blocks that are allocated now (the
  // pools hold only the free ones).
  std::vector<const Block*> segment_heads(const std::vector<const Block*>& allocated);

 private:
  // Free blocks of one pool, grouped by stream. The small pool is in address order, oldest segment
  // first, and a request takes the first block that fits: small blocks pile up at the low end of
  // the oldest segments, which hold the longest-lived tensors (parameters, optimizer state), and the
  // free space of those segments stays in few large holes instead of many too small for the next
  // request, so younger segments empty out and can serve a 2 MiB large request as a whole. Best fit
  // there (the smallest hole that fits) scatters a step's short-lived small tensors over the
  // holes of every segment and pins segments that are otherwise free. The large pool is in size
  // order, for best fit, which keeps big blocks whole for big requests (as CUDA's).
  struct PoolOrder {
    bool by_segment;
    bool operator()(const Block* a, const Block* b) const {
      if (a->stream != b->stream) return a->stream < b->stream;
      if (by_segment) {
        if (a->segment != b->segment) return a->segment < b->segment;
      } else if (a->size != b->size) {
        return a->size < b->size;
      }
      return a->ptr < b->ptr;
    }
  };
  using Pool = std::set<Block*, PoolOrder>;
  // A freed block and the events (one per other stream that used it) it waits for.
  using Pending = std::pair<Block*, std::vector<DevxEventHandle>>;

  Pool& pool(bool small) { return small ? small_ : large_; }
  Block* take_free(size_t size, bool small, int64_t stream);
  Block* take_first_fit(size_t size, int64_t stream);
  Block* take_best_fit(size_t size, int64_t stream);
  // A whole free 2 MiB segment of the other pool (same stream), moved into this one: the size a
  // small segment has and a large request of 1-2 MiB gets. A step whose small and large tensors
  // peak at different times then reuses one set of segments instead of caching both.
  Block* adopt_free_segment(size_t size, bool small, int64_t stream);
  Block* new_segment(size_t size, bool small, int64_t stream);
  void split(Block* block, size_t size);
  // A split and a merge (every cached allocate/free pair) would otherwise allocate and free a
  // Block and two pool nodes on the heap: both are kept for reuse instead.
  Block* make_block(const Block& value);
  void drop_block(Block* block);
  Block* pool_take(Pool& p, Pool::iterator it);
  void pool_erase(Pool& p, Block* block);
  void pool_insert(Pool& p, Block* block);
  void record(history::Action action, const void* ptr, size_t size) {
    if (C10_UNLIKELY(history::recording())) history::record(device_, action, ptr, size, totals());
  }
  void release(Block* block);
  void release_small(Block* block);
  void release_large(Block* block);
  // Frees the pending blocks whose events have completed.
  void process_pending();
  // Small ops free a block and ask for one of the same size at once, op after op. A freed small
  // block of up to kRecentMax bytes is kept whole in the recent list of its size (kRecentDepth per
  // size, on any stream), and a request of that size on its stream takes it back: no pool search,
  // split or merge (they were half the cost of a cached allocate/free pair). A recent block is free
  // but in no pool, and its neighbours do not merge with it; all of them go back to their pools
  // (merging) before a pool would need another segment, before segments are given back, and
  // before the cache is described (statistics, snapshots, memory history).
  static constexpr size_t kRecentUnit = 512;  // the allocator's rounding: sizes are multiples
  static constexpr size_t kRecentMax = 64 << 10;
  static constexpr size_t kRecentDepth = 4;
  struct RecentList {
    std::array<Block*, kRecentDepth> blocks{};
    size_t count = 0;
  };
  static size_t recent_index(size_t size) { return size / kRecentUnit - 1; }
  Block* take_recent(size_t size, int64_t stream);
  bool keep_recent(Block* block);
  void flush_recent();
  static bool pool_free(const Block* b) { return !b->allocated && !b->recent; }

  int device_;
  const AllocatorSettings* settings_;
  Pool small_, large_;
  uint64_t segments_made_ = 0;
  std::vector<std::unique_ptr<Block>> spare_blocks_;
  std::vector<Pool::node_type> spare_nodes_;
  std::vector<Pending> pending_;
  std::array<RecentList, kRecentMax / kRecentUnit> recent_{};
  size_t recent_count_ = 0;
  int waiters_ = 0;
  std::vector<DevxEventHandle> retired_;  // completed events, destroyed when nobody waits
  c10::CachingDeviceAllocator::DeviceStats stats_;
  size_t reserve_limit_ = SIZE_MAX;
};

}  // namespace devx
