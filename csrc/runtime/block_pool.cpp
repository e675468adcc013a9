#include "runtime/block_pool.h"

#include <algorithm>
#include <cerrno>
#include <limits>

#include "common/text_parse.h"
#include "runtime/settings.h"
#include "runtime/device.h"
#include "runtime/exception.h"
#include "runtime/stream.h"
#include "runtime/vendor.h"

namespace devx {

namespace {

using c10::CachingAllocator::StatType;

constexpr size_t kSmallSize = 1 << 20;      // requests up to this go to the small pool
constexpr size_t kSmallBuffer = 2 << 20;    // segment size of the small pool
// Large requests get segments of their own size rounded to 2 MiB. CUDA packs requests below
// 10 MiB into 20 MiB segments to save cudaMalloc calls; here a vendor allocation is cheap next to
// the memory a half-used 20 MiB segment holds back, and the cache absorbs repeats anyway.
constexpr size_t kRoundLarge = 2 << 20;
constexpr size_t kOversizeSlack = 20 << 20;
constexpr size_t kMinSmallSplit = 512;  // smaller rests of a small block stay with it

static_assert(1 + kStreamsPerPool * kPriorityLevels <= 32, "Block::stream_uses has one bit per stream id");

size_t pool_stat(bool small) {
  return static_cast<size_t>(small ? StatType::SMALL_POOL : StatType::LARGE_POOL);
}

template <typename F>
void for_pool(bool small, F f) {
  f(static_cast<size_t>(StatType::AGGREGATE));
  f(pool_stat(small));
}

}  // namespace

AllocatorSettings read_allocator_settings() {
  AllocatorSettings s;
  const std::string conf = settings::get_text(settings::Id::DEVX_ALLOC_CONF);
  for (const std::string& item : text::split_list(conf)) {
    size_t colon = item.find(':');
    TORCH_CHECK_VALUE(colon != std::string::npos, "DEVX_ALLOC_CONF='", conf, "': '", item,
                      "' is not key:value (known key: max_split_size_mb)");
    std::string key = item.substr(0, colon), value = item.substr(colon + 1);
    TORCH_CHECK_VALUE(key == "max_split_size_mb", "DEVX_ALLOC_CONF='", conf, "': unknown setting '", key,
                      "' (known: max_split_size_mb)");
    char* end = nullptr;
    errno = 0;
    long long mb = std::strtoll(value.c_str(), &end, 10);
    TORCH_CHECK_VALUE(end && *end == '\0' && !value.empty() && errno != ERANGE && mb > 20, "DEVX_ALLOC_CONF='", conf,
                      "': max_split_size_mb must be an integer above 20, got '", value, "'");
    // In bytes it must fit a size_t, or it wraps to a small split limit.
    constexpr long long kMaxMb = static_cast<long long>(std::numeric_limits<size_t>::max() >> 20);
    TORCH_CHECK_VALUE(mb <= kMaxMb, "DEVX_ALLOC_CONF='", conf, "': max_split_size_mb ", value,
                      " is more bytes than a size_t holds (at most ", kMaxMb, ")");
    s.max_split_size = static_cast<size_t>(mb) << 20;
  }
  return s;
}

Block* DeviceBlocks::allocate(size_t size, size_t requested, int64_t stream) {
  const bool small = size <= kSmallSize;
  if (C10_UNLIKELY(!pending_.empty())) process_pending();
  Block* block = size <= kRecentMax ? take_recent(size, stream) : nullptr;  // recent sizes are small
  if (!block) {
    block = take_free(size, small, stream);
    if (!block && recent_count_ > 0) {
      flush_recent();
      block = take_free(size, small, stream);
    }
    if (!block) block = adopt_free_segment(size, small, stream);
    if (!block) block = new_segment(size, small, stream);
    if (!block) return nullptr;
    split(block, size);
  }
  block->allocated = true;
  block->requested = requested;
  for_pool(small, [&](size_t i) {
    stats_.allocation[i].increase(1);
    stats_.active[i].increase(1);
    stats_.allocated_bytes[i].increase(block->size);
    stats_.active_bytes[i].increase(block->size);
    stats_.requested_bytes[i].increase(requested);
  });
  if (block->size >= settings_->max_split_size) stats_.oversize_allocations.increase(1);
  // As CUDA's allocator, actions on blocks carry the size asked for (the snapshot's blocks have both).
  record(history::Action::kAlloc, block->ptr, requested);
  return block;
}

Block* DeviceBlocks::take_free(size_t size, bool small, int64_t stream) {
  return small ? take_first_fit(size, stream) : take_best_fit(size, stream);
}

// Small-pool blocks are at most a segment (2 MiB), far below max_split_size (over 20 MiB): no
// oversize rules here. The walk passes only the free blocks of older segments too small for the
// request: in the train steps of the benchmark's CNN, an MLP, a ResNet and a small transformer,
// under 5 on average and 28 at most.
//
// Small-pool blocks change in place where they can (the front of a free block is handed out, a
// freed block joins its free neighbour): the pool orders a segment's free blocks by address, and
// no other free block lies between a block's old and new start, so its place in the pool stays
// right and the pool's tree is not touched. A cached allocate/free pair then costs no tree work.
Block* DeviceBlocks::take_first_fit(size_t size, int64_t stream) {
  Block key{nullptr, 0, stream, 0, false, true};
  for (auto it = small_.lower_bound(&key); it != small_.end() && (*it)->stream == stream; ++it) {
    Block* b = *it;
    if (b->size < size) continue;
    if (b->size - size < kMinSmallSplit) return pool_take(small_, it);
    Block* front = make_block(Block{b->ptr, size, stream, 0, false, true, b->segment, b->prev, b});
    if (b->prev) b->prev->next = front;
    b->prev = front;
    b->ptr = static_cast<char*>(b->ptr) + size;
    b->size -= size;
    return front;
  }
  return nullptr;
}

Block* DeviceBlocks::take_recent(size_t size, int64_t stream) {
  RecentList& list = recent_[recent_index(size)];
  for (size_t i = list.count; i-- > 0;) {
    Block* b = list.blocks[i];
    if (b->stream != stream) continue;
    list.blocks[i] = list.blocks[--list.count];
    --recent_count_;
    b->recent = false;
    return b;
  }
  return nullptr;
}

// While memory history records, blocks go back to their pools at once: each record carries the
// largest free block, which recent blocks would hide.
bool DeviceBlocks::keep_recent(Block* block) {
  if (block->size > kRecentMax || C10_UNLIKELY(history::recording())) return false;
  RecentList& list = recent_[recent_index(block->size)];
  if (list.count == kRecentDepth) return false;
  block->recent = true;
  list.blocks[list.count++] = block;
  ++recent_count_;
  return true;
}

void DeviceBlocks::flush_recent() {
  for (RecentList& list : recent_) {
    for (size_t i = 0; i < list.count; ++i) {
      list.blocks[i]->recent = false;
      release_small(list.blocks[i]);
    }
    list.count = 0;
  }
  recent_count_ = 0;
}

Block* DeviceBlocks::take_best_fit(size_t size, int64_t stream) {
  Block key{nullptr, size, stream, 0, false, false};
  auto it = large_.lower_bound(&key);
  if (it == large_.end() || (*it)->stream != stream) return nullptr;
  Block* b = *it;
  const size_t max_split = settings_->max_split_size;
  // Small requests leave oversize blocks alone; oversize requests take one only if the excess is
  // at most a large segment's worth (it will not be split).
  if (size < max_split && b->size >= max_split) return nullptr;
  if (size >= max_split && b->size >= size + kOversizeSlack) return nullptr;
  return pool_take(large_, it);
}

Block* DeviceBlocks::adopt_free_segment(size_t size, bool small, int64_t stream) {
  if (!small && size > kSmallBuffer) return nullptr;
  Pool& other = pool(!small);
  // The large pool is in size order: its 2 MiB blocks start at the key. The small pool is in
  // segment order: every block of the stream is looked at (this runs only before a vendor malloc).
  Block key{nullptr, small ? kSmallBuffer : 0, stream, 0, false, !small};
  for (auto it = other.lower_bound(&key); it != other.end(); ++it) {
    Block* b = *it;
    if (b->stream != stream || (small && b->size != kSmallBuffer)) return nullptr;
    if (b->prev || b->next) continue;  // a free piece of a segment
    pool_take(other, it);
    // The segment stays reserved: only the per-pool statistics change.
    stats_.segment[pool_stat(!small)].decrease(1);
    stats_.reserved_bytes[pool_stat(!small)].decrease(b->size);
    b->small = small;
    stats_.segment[pool_stat(small)].increase(1);
    stats_.reserved_bytes[pool_stat(small)].increase(b->size);
    return b;
  }
  return nullptr;
}

Block* DeviceBlocks::new_segment(size_t size, bool small, int64_t stream) {
  size_t segment = small ? kSmallBuffer : (size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
  if (static_cast<size_t>(stats_.reserved_bytes[0].current) + segment > reserve_limit_) return nullptr;
  void* ptr = nullptr;
  DevxStatus status = g_vendor->malloc(device_, segment, &ptr);
  if (status == DEVX_ERROR_OOM) return nullptr;
  DEVX_VENDOR_CHECK(status);
  for_pool(small, [&](size_t i) {
    stats_.segment[i].increase(1);
    stats_.reserved_bytes[i].increase(segment);
  });
  stats_.num_device_alloc++;
  if (segment >= settings_->max_split_size) stats_.oversize_segments.increase(1);
  Block* block = make_block(Block{ptr, segment, stream, 0, false, small, segments_made_++});
  record(history::Action::kSegmentAlloc, ptr, segment);
  return block;
}

void DeviceBlocks::split(Block* block, size_t size) {
  size_t rest = block->size - size;
  bool worth = block->small ? rest >= kMinSmallSplit : rest > kSmallSize;
  if (!worth || block->size >= settings_->max_split_size) return;
  Block* remainder = make_block(Block{static_cast<char*>(block->ptr) + size, rest, block->stream, 0, false,
                                      block->small, block->segment, block, block->next});
  if (block->next) block->next->prev = remainder;
  block->next = remainder;
  block->size = size;
  pool_insert(pool(block->small), remainder);
}

Block* DeviceBlocks::make_block(const Block& value) {
  if (spare_blocks_.empty()) return new Block(value);
  Block* block = spare_blocks_.back().release();
  spare_blocks_.pop_back();
  *block = value;
  return block;
}

void DeviceBlocks::drop_block(Block* block) {
  spare_blocks_.emplace_back(block);
}

Block* DeviceBlocks::pool_take(Pool& p, Pool::iterator it) {
  Block* block = *it;
  spare_nodes_.push_back(p.extract(it));
  return block;
}

void DeviceBlocks::pool_erase(Pool& p, Block* block) {
  Pool::node_type node = p.extract(block);
  TORCH_INTERNAL_ASSERT_DEBUG_ONLY(!node.empty(), "devx: a free block missing from its pool");
  spare_nodes_.push_back(std::move(node));
}

void DeviceBlocks::pool_insert(Pool& p, Block* block) {
  if (spare_nodes_.empty()) {
    p.insert(block);
    return;
  }
  Pool::node_type node = std::move(spare_nodes_.back());
  spare_nodes_.pop_back();
  node.value() = block;
  p.insert(std::move(node));
}

void DeviceBlocks::free(Block* block) {
  for_pool(block->small, [&](size_t i) {
    stats_.allocation[i].decrease(1);
    stats_.allocated_bytes[i].decrease(block->size);
    stats_.requested_bytes[i].decrease(block->requested);
  });
  if (block->size >= settings_->max_split_size) stats_.oversize_allocations.decrease(1);
  if (C10_LIKELY(block->stream_uses == 0)) {
    release(block);
    return;
  }
  // Still active (CUDA's accounting) until every other stream that used it has passed this point.
  std::vector<DevxEventHandle> events;
  for (int64_t id = 0; id < 32; ++id) {
    if (!(block->stream_uses & (1u << id))) continue;
    DevxEventHandle event = nullptr;
    DEVX_VENDOR_CHECK(g_vendor->event_create(device_, /*enable_timing=*/0, &event));
    events.push_back(event);
    DEVX_VENDOR_CHECK(g_vendor->event_record(
        event, DevxStream(c10::Stream(c10::Stream::UNSAFE, devx_device(static_cast<c10::DeviceIndex>(device_)), id))
                   .handle()));
  }
  block->stream_uses = 0;
  pending_.emplace_back(block, std::move(events));
}

void DeviceBlocks::record_stream(Block* block, int64_t stream) {
  if (stream != block->stream) block->stream_uses |= 1u << stream;
}

void DeviceBlocks::process_pending() {
  size_t kept = 0;
  for (size_t i = 0; i < pending_.size(); ++i) {
    auto& [block, events] = pending_[i];
    bool done = true;
    for (DevxEventHandle event : events) {
      DevxStatus status = g_vendor->event_query(event);
      if (status == DEVX_ERROR_NOT_READY) {
        done = false;
        break;
      }
      DEVX_VENDOR_CHECK(status);
    }
    if (!done) {
      pending_[kept++] = std::move(pending_[i]);
      continue;
    }
    for (DevxEventHandle event : events) {
      if (waiters_ > 0) {
        retired_.push_back(event);
      } else {
        g_vendor->event_destroy(event);
      }
    }
    release(block);
  }
  pending_.resize(kept);
}

// A pending block stays `allocated`, so that its free neighbours do not merge it away.
void DeviceBlocks::release(Block* block) {
  void* const freed_ptr = block->ptr;
  const size_t freed_size = block->requested;
  block->allocated = false;
  for_pool(block->small, [&](size_t i) {
    stats_.active[i].decrease(1);
    stats_.active_bytes[i].decrease(block->size);
  });
  if (block->small) {
    if (!keep_recent(block)) release_small(block);
  } else {
    release_large(block);
  }
  record(history::Action::kFreeCompleted, freed_ptr, freed_size);
}

// Merges in place (see take_first_fit): a free previous block grows over this one, else a free
// next block moves its start down to this one's.
void DeviceBlocks::release_small(Block* block) {
  Block* prev = block->prev;
  Block* next = block->next;
  const bool next_free = next && pool_free(next);
  if (prev && pool_free(prev)) {
    prev->size += block->size;
    prev->next = next;
    if (next) next->prev = prev;
    drop_block(block);
    if (next_free) {
      pool_erase(small_, next);
      prev->size += next->size;
      prev->next = next->next;
      if (next->next) next->next->prev = prev;
      drop_block(next);
    }
  } else if (next_free) {
    next->ptr = block->ptr;
    next->size += block->size;
    next->prev = prev;
    if (prev) prev->next = next;
    drop_block(block);
  } else {
    pool_insert(small_, block);
  }
}

// The large pool is in size order: a block whose size changes leaves it and comes back.
void DeviceBlocks::release_large(Block* block) {
  Pool& p = large_;
  if (Block* prev = block->prev; prev && !prev->allocated) {
    pool_erase(p, prev);
    prev->size += block->size;
    prev->next = block->next;
    if (block->next) block->next->prev = prev;
    drop_block(block);
    block = prev;
  }
  if (Block* next = block->next; next && !next->allocated) {
    pool_erase(p, next);
    block->size += next->size;
    block->next = next->next;
    if (next->next) next->next->prev = block;
    drop_block(next);
  }
  pool_insert(p, block);
}

std::vector<DevxEventHandle> DeviceBlocks::begin_wait() {
  std::vector<DevxEventHandle> out;
  for (const auto& [block, events] : pending_) out.insert(out.end(), events.begin(), events.end());
  if (!out.empty()) ++waiters_;
  return out;
}

void DeviceBlocks::end_wait() {
  if (--waiters_ > 0) return;
  for (DevxEventHandle event : retired_) g_vendor->event_destroy(event);
  retired_.clear();
}

std::vector<Block*> DeviceBlocks::detach_free_segments() {
  if (!pending_.empty()) process_pending();
  flush_recent();
  std::vector<Block*> segments;
  for (Pool* p : {&small_, &large_}) {
    for (auto it = p->begin(); it != p->end();) {
      Block* b = *it;
      if (b->prev || b->next) {
        ++it;
        continue;
      }
      segments.push_back(b);
      it = p->erase(it);
    }
  }
  return segments;
}

void DeviceBlocks::free_segments(const std::vector<Block*>& segments) {
  for (Block* b : segments) {
    DevxStatus status = g_vendor->free(device_, b->ptr);
    TORCH_INTERNAL_ASSERT(status == DEVX_OK, "devx: vendor free failed: ", g_vendor->last_error());
    for_pool(b->small, [&](size_t i) {
      stats_.segment[i].decrease(1);
      stats_.reserved_bytes[i].decrease(b->size);
    });
    stats_.num_device_free++;
    if (b->size >= settings_->max_split_size) stats_.oversize_segments.decrease(1);
    record(history::Action::kSegmentFree, b->ptr, b->size);
    drop_block(b);
  }
}

std::pair<int64_t, int64_t> DeviceBlocks::inactive_split() {
  flush_recent();
  int64_t count = 0, bytes = 0;
  for (const Pool* p : {&small_, &large_}) {
    for (const Block* b : *p) {
      if (b->prev || b->next) {
        ++count;
        bytes += static_cast<int64_t>(b->size);
      }
    }
  }
  return {count, bytes};
}

history::Totals DeviceBlocks::totals() {
  flush_recent();
  history::Totals t;
  const auto agg = static_cast<size_t>(StatType::AGGREGATE);
  t.allocated = stats_.allocated_bytes[agg].current;
  t.peak_allocated = stats_.allocated_bytes[agg].peak;
  t.reserved = stats_.reserved_bytes[agg].current;
  // Neither pool is in size order across streams; this runs only for history records and
  // out-of-memory reports.
  for (const Pool* p : {&small_, &large_}) {
    for (const Block* b : *p) t.largest_free = std::max<int64_t>(t.largest_free, static_cast<int64_t>(b->size));
  }
  return t;
}

std::vector<const Block*> DeviceBlocks::segment_heads(const std::vector<const Block*>& allocated) {
  flush_recent();
  std::vector<const Block*> heads;
  for (const Pool* p : {&small_, &large_}) {
    for (const Block* b : *p) {
      if (!b->prev) heads.push_back(b);
    }
  }
  for (const Block* b : allocated) {
    if (!b->prev) heads.push_back(b);
  }
  std::sort(heads.begin(), heads.end(), [](const Block* a, const Block* b) { return a->ptr < b->ptr; });
  return heads;
}

}  // namespace devx
