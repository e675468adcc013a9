#include "fake_vendor.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "runtime/vendor.h"

namespace devx::test {
namespace {

std::mutex g_mutex;
std::unordered_map<void*, size_t> g_live;
VendorCounts g_counts{};
size_t g_capacity = SIZE_MAX;

DevxStatus fake_malloc(int, size_t size, void** ptr) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (size > g_capacity || g_counts.live_bytes > g_capacity - size) return DEVX_ERROR_OOM;
  *ptr = std::aligned_alloc(512, (size + 511) / 512 * 512 + 512);
  if (!*ptr) return DEVX_ERROR_OOM;
  g_live[*ptr] = size;
  ++g_counts.mallocs;
  g_counts.live_bytes += size;
  return DEVX_OK;
}

DevxStatus fake_free(int, void* ptr) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_live.find(ptr);
  if (it == g_live.end()) return DEVX_ERROR_INVALID;
  g_counts.live_bytes -= it->second;
  ++g_counts.frees;
  g_live.erase(it);
  std::free(ptr);
  return DEVX_OK;
}

// The fake device's memory is host memory.
DevxStatus memcpy_sync(void* dst, const void* src, size_t size, DevxMemcpyKind) {
  std::memcpy(dst, src, size);
  return DEVX_OK;
}
DevxStatus memset_sync(void* dst, int value, size_t size) {
  std::memset(dst, value, size);
  return DEVX_OK;
}

DevxStatus ok() { return DEVX_OK; }
const char* last_error() { return "fake vendor error"; }
DevxStatus device_count(int* n) { *n = 1; return DEVX_OK; }
DevxStatus get_device(int* d) { *d = 0; return DEVX_OK; }
DevxStatus set_device(int) { return DEVX_OK; }
DevxStatus event_create(int, int, DevxEventHandle* e) { *e = reinterpret_cast<DevxEventHandle>(new int(0)); return DEVX_OK; }
DevxStatus event_destroy(DevxEventHandle e) { delete reinterpret_cast<int*>(e); return DEVX_OK; }
DevxStatus event_record(DevxEventHandle, DevxStreamHandle) { return DEVX_OK; }
DevxStatus event_query(DevxEventHandle) { return DEVX_OK; }

DevxVendorApi make_table() {
  DevxVendorApi t{};
  t.api_version = DEVX_VENDOR_API_VERSION;
  t.name = "fake";
  t.compute_device_type = -1;
  t.init = &ok;
  t.last_error = &last_error;
  t.device_count = &device_count;
  t.get_device = &get_device;
  t.set_device = &set_device;
  t.malloc = &fake_malloc;
  t.free = &fake_free;
  t.memcpy_sync = &memcpy_sync;
  t.memset_sync = &memset_sync;
  t.event_create = &event_create;
  t.event_destroy = &event_destroy;
  t.event_record = &event_record;
  t.event_query = &event_query;
  return t;
}

const DevxVendorApi g_table = make_table();

class FakeVendorEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { g_vendor.set(&g_table); }
};

const auto* g_environment = ::testing::AddGlobalTestEnvironment(new FakeVendorEnvironment);

}  // namespace

VendorCounts vendor_counts() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_counts;
}

void set_vendor_capacity(size_t bytes) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_capacity = bytes;
}

const DevxVendorApi* fake_vendor() {
  return &g_table;
}

}  // namespace devx::test
