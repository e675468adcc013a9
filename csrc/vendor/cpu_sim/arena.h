// One simulated device's memory: a single address-space reservation carved up by a best-fit
// allocator, so capacity, OOM and fragmentation behave like a real device's and not like malloc's.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include "runtime/vendor_api.h"

namespace devx::cpu_sim {

class Arena {
 public:
  // Every block is a multiple of this and starts on it (the reservation is page aligned).
  static constexpr size_t kAlignment = 512;

  // `capacity` is rounded up to kAlignment. Nothing is mapped until the first allocation, so an
  // unused 16 GiB device costs nothing.
  Arena(int device, size_t capacity);
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // A request of 0 bytes takes one kAlignment block, so every successful allocation is a unique,
  // non-null pointer that must be passed to release() like any other.
  DevxStatus allocate(size_t size, void** ptr);
  DevxStatus release(void* ptr);

  size_t capacity() const { return capacity_; }
  size_t bytes_in_use();
  // Whether [ptr, ptr + size) lies inside this device's reservation (live or not).
  bool contains(const void* ptr, size_t size) const;

 private:
  struct Block {
    size_t size;
    bool free;
    // For free blocks: the span that may still hold resident pages. Kept so that small frees
    // next to a large free block (the steady state of alloc/free pairs) do not cost a madvise
    // each, while what they dirty is still given back once it adds up.
    uintptr_t dirty_begin;
    uintptr_t dirty_end;
  };

  DevxStatus reserve();
  DevxStatus out_of_memory(size_t requested);
  void mark_free(std::map<uintptr_t, Block>::iterator block);

  const int device_;
  const size_t capacity_;
  std::atomic<uintptr_t> base_{0};  // read without the lock by contains()

  // Guards everything below. One lock per device: devices do not contend with each other.
  std::mutex mu_;
  std::map<uintptr_t, Block> blocks_;                   // every block by address, for coalescing
  std::set<std::pair<size_t, uintptr_t>> free_sizes_;  // free blocks by (size, address): best fit
  size_t in_use_ = 0;
  std::map<uintptr_t, Block>::node_type spare_block_;  // see mark_free
};

}  // namespace devx::cpu_sim
