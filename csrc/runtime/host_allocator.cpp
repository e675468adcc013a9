#include "runtime/host_allocator.h"

#include <map>
#include <mutex>

#include "runtime/exception.h"
#include "runtime/vendor.h"

namespace devx {

namespace {

std::mutex g_mutex;
// Every pinned block (live or cached) by address, with its size; the cached ones by size.
std::map<const char*, size_t> g_blocks;
std::multimap<size_t, void*> g_cached;

size_t round_size(size_t n) {
  size_t p = 512;
  while (p < n) p <<= 1;
  return p;
}

void free_pinned(void* ptr) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_blocks.find(static_cast<const char*>(ptr));
  TORCH_INTERNAL_ASSERT(it != g_blocks.end(), "devx: freeing ", ptr, ", which is not pinned devx memory");
  g_cached.emplace(it->second, ptr);
}

class PinnedAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    if (n == 0) return {nullptr, nullptr, &free_pinned, c10::Device(c10::kCPU)};
    size_t size = round_size(n);
    std::lock_guard<std::mutex> lock(g_mutex);
    void* ptr = nullptr;
    auto cached = g_cached.find(size);
    if (cached != g_cached.end()) {
      ptr = cached->second;
      g_cached.erase(cached);
    } else {
      DEVX_VENDOR_CHECK(vendor().host_malloc(size, &ptr));
      g_blocks.emplace(static_cast<const char*>(ptr), size);
    }
    return {ptr, ptr, &free_pinned, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    DEVX_VENDOR_CHECK(vendor().memcpy_sync(dest, src, count, DEVX_MEMCPY_H2H));
  }
};

}  // namespace

c10::Allocator* pinned_allocator() {
  static PinnedAllocator allocator;
  return &allocator;
}

bool is_pinned_ptr(const void* ptr) {
  // Any address inside a pinned block counts (a tensor may start at an offset into its storage).
  auto p = static_cast<const char*>(ptr);
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_blocks.upper_bound(p);
  if (it == g_blocks.begin()) return false;
  --it;
  return p < it->first + it->second;
}

void empty_pinned_cache() {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (auto& [size, ptr] : g_cached) {
    DEVX_VENDOR_CHECK(vendor().host_free(ptr));
    g_blocks.erase(static_cast<const char*>(ptr));
  }
  g_cached.clear();
}

}  // namespace devx
