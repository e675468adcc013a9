#include "arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <system_error>

#include "error.h"

namespace devx::cpu_sim {
namespace {

// Free memory is handed back to the OS only in runs at least this long (the CUDA caching
// allocator's segment size). Releasing less would make every small free a syscall and the next
// allocation a page fault, and the pages would come back soon anyway.
constexpr size_t kReleaseBytes = size_t{2} << 20;

uintptr_t round_up(uintptr_t value, uintptr_t to) { return (value + to - 1) / to * to; }
uintptr_t round_down(uintptr_t value, uintptr_t to) { return value / to * to; }

uintptr_t page_size() {
  static const uintptr_t size = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  return size;
}

std::string device_name(int device) { return "cpu_sim device " + std::to_string(device); }

}  // namespace

Arena::Arena(int device, size_t capacity)
    : device_(device), capacity_(round_up(capacity, kAlignment)) {}

DevxStatus Arena::reserve() {
  // MAP_NORESERVE: the whole capacity is address space only; pages become memory when touched.
  void* base = mmap(nullptr, capacity_, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) {
    return fail(DEVX_ERROR_OOM, device_name(device_) + " could not reserve " +
                                    format_bytes(capacity_) + " of address space (" +
                                    std::system_category().message(errno) +
                                    "); lower DEVX_SIM_MEMORY or DEVX_SIM_DEVICES");
  }
  // Never unmapped: a stream worker abandoned at exit may still be writing into it.
  const auto addr = reinterpret_cast<uintptr_t>(base);
  blocks_.emplace(addr, Block{capacity_, true, 0, 0});
  free_sizes_.emplace(capacity_, addr);
  base_.store(addr, std::memory_order_release);
  return DEVX_OK;
}

DevxStatus Arena::out_of_memory(size_t requested) {
  const size_t largest = free_sizes_.empty() ? 0 : free_sizes_.rbegin()->first;
  return fail(DEVX_ERROR_OOM, device_name(device_) + " out of memory: tried to allocate " +
                                  format_bytes(requested) + "; " + format_bytes(in_use_) +
                                  " in use of " + format_bytes(capacity_) +
                                  " capacity (largest free block " + format_bytes(largest) +
                                  "); DEVX_SIM_MEMORY sets the capacity");
}

DevxStatus Arena::allocate(size_t size, void** ptr) {
  // Saturating, so a request beyond the capacity cannot wrap around to a small one.
  const size_t need = size > capacity_ ? SIZE_MAX : round_up(std::max<size_t>(size, 1), kAlignment);
  std::lock_guard lock(mu_);
  if (base_.load(std::memory_order_relaxed) == 0) {
    if (DevxStatus status = reserve()) return status;
  }
  auto fit = free_sizes_.lower_bound({need, 0});
  if (fit == free_sizes_.end()) return out_of_memory(size);

  // The remainder keeps the found block's size-index node, and sorts just before the found
  // block's successor unless another free block lies between the two sizes: a good hint.
  const auto after = std::next(fit);
  auto node = free_sizes_.extract(fit);
  const auto [found_size, addr] = node.value();
  auto block = blocks_.find(addr);
  if (found_size > need) {
    const uintptr_t rest = addr + need;
    const Block& found = block->second;
    const Block remainder{found_size - need, true, std::max(found.dirty_begin, rest),
                          std::max(found.dirty_end, rest)};
    if (spare_block_) {
      spare_block_.key() = rest;
      spare_block_.mapped() = remainder;
      blocks_.insert(std::next(block), std::move(spare_block_));
    } else {
      blocks_.emplace_hint(std::next(block), rest, remainder);
    }
    node.value() = {found_size - need, rest};
    free_sizes_.insert(after, std::move(node));
  }
  block->second.size = need;
  block->second.free = false;
  in_use_ += need;
  *ptr = reinterpret_cast<void*>(addr);
  return DEVX_OK;
}

DevxStatus Arena::release(void* ptr) {
  const auto addr = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard lock(mu_);
  auto block = blocks_.find(addr);
  if (block == blocks_.end() || block->second.free) {
    return fail(DEVX_ERROR_INVALID,
                device_name(device_) + ": cannot free " + format_pointer(ptr) +
                    ": it is not a live allocation on this device" +
                    (contains(ptr, 1) ? " (it points into the device's memory: already freed, or "
                                        "not the start of an allocation)"
                                      : ""));
  }
  in_use_ -= block->second.size;
  block->second.dirty_begin = addr;
  block->second.dirty_end = addr + block->second.size;
  mark_free(block);
  return DEVX_OK;
}

void Arena::mark_free(std::map<uintptr_t, Block>::iterator block) {
  // Grows `into` by its free right-hand neighbour `from`; the caller unlinks `from`.
  auto merge = [](Block& into, const Block& from) {
    into.size += from.size;
    if (from.dirty_begin >= from.dirty_end) return;
    const bool clean = into.dirty_begin >= into.dirty_end;
    into.dirty_begin = clean ? from.dirty_begin : std::min(into.dirty_begin, from.dirty_begin);
    into.dirty_end = clean ? from.dirty_end : std::max(into.dirty_end, from.dirty_end);
  };
  // Nodes of merged-away entries are reused rather than freed: the next split needs a block
  // node and this free needs a size node, and the allocator's round trips are what make the
  // steady state of alloc/free pairs slow.
  decltype(free_sizes_)::node_type size_node;
  // The merged block is at least as large as a neighbour, so it sorts after that neighbour's entry.
  auto size_hint = free_sizes_.end();
  auto unlink = [&](std::map<uintptr_t, Block>::iterator neighbour) {
    auto entry = free_sizes_.find({neighbour->second.size, neighbour->first});
    size_hint = std::next(entry);
    if (size_node) {
      free_sizes_.erase(entry);
    } else {
      size_node = free_sizes_.extract(entry);
    }
  };
  auto drop = [&](std::map<uintptr_t, Block>::iterator merged_away) {
    if (spare_block_) {
      blocks_.erase(merged_away);
    } else {
      spare_block_ = blocks_.extract(merged_away);
    }
  };
  if (auto next = std::next(block); next != blocks_.end() && next->second.free) {
    unlink(next);
    merge(block->second, next->second);
    drop(next);
  }
  if (block != blocks_.begin()) {
    if (auto prev = std::prev(block); prev->second.free) {
      unlink(prev);
      merge(prev->second, block->second);
      drop(block);
      block = prev;
    }
  }
  Block& merged = block->second;
  merged.free = true;

  if (merged.size >= kReleaseBytes && merged.dirty_end > merged.dirty_begin &&
      merged.dirty_end - merged.dirty_begin >= kReleaseBytes) {
    // Only whole pages inside the free block: its edge pages are shared with live neighbours.
    const uintptr_t page = page_size();
    const uintptr_t begin = std::max(round_up(block->first, page),
                                     round_down(merged.dirty_begin, page));
    const uintptr_t end = std::min(round_down(block->first + merged.size, page),
                                   round_up(merged.dirty_end, page));
    // Under the lock on purpose: once unlocked the range may be reallocated, and a late
    // MADV_DONTNEED would zero the new owner's data.
    if (begin < end) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
    merged.dirty_begin = merged.dirty_end = 0;
  }
  if (size_node) {
    size_node.value() = {merged.size, block->first};
    free_sizes_.insert(size_hint, std::move(size_node));
  } else {
    free_sizes_.emplace(merged.size, block->first);
  }
}

size_t Arena::bytes_in_use() {
  std::lock_guard lock(mu_);
  return in_use_;
}

bool Arena::contains(const void* ptr, size_t size) const {
  const uintptr_t base = base_.load(std::memory_order_acquire);
  const auto addr = reinterpret_cast<uintptr_t>(ptr);
  return base != 0 && addr >= base && size <= capacity_ && addr - base <= capacity_ - size;
}

}  // namespace devx::cpu_sim
