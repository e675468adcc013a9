// The sanitizer's side of host-access detection (runtime/sanitizer.h) against a vendor table
// whose host_access is a fake: which ranges it watches with which tags, how device work is
// counted, and the reports it makes of the vendor's records.
#include <gtest/gtest.h>

#include <c10/util/Exception.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fake_vendor.h"
#include "runtime/sanitizer.h"
#include "runtime/settings.h"
#include "runtime/vendor.h"

namespace devx::sanitizer {
namespace {

constexpr size_t kPage = 4096;
constexpr size_t kGuard = 512;  // the sanitizer's front guard zone

struct Watched {
  size_t size;
  uint64_t tag;
};

// What the sanitizer asked of the fake. The sanitizer calls it from this thread only here.
struct FakeHostAccess {
  std::map<void*, Watched> watched;
  std::vector<DevxHostAccess> records;
  uint64_t dropped = 0;
  int starts = 0, stops = 0, opens = 0, depth = 0;
  DevxStatus enter_status = DEVX_OK;
} g_fake;

DevxStatus fake_start(size_t* page_size) {
  ++g_fake.starts;
  *page_size = kPage;
  return DEVX_OK;
}
void fake_stop() { ++g_fake.stops; }
DevxStatus fake_watch(void* range, size_t size, uint64_t tag) {
  g_fake.watched[range] = {size, tag};
  return DEVX_OK;
}
void fake_unwatch(void* range) { g_fake.watched.erase(range); }
void fake_set_tag(void* range, uint64_t tag) { g_fake.watched.at(range).tag = tag; }
void fake_open(void*) { ++g_fake.opens; }
DevxStatus fake_enter() {
  ++g_fake.depth;
  return g_fake.enter_status;
}
void fake_leave() { --g_fake.depth; }
size_t fake_take(DevxHostAccess* out, size_t capacity, uint64_t* dropped) {
  const size_t n = std::min(capacity, g_fake.records.size());
  std::copy(g_fake.records.begin(), g_fake.records.begin() + n, out);
  g_fake.records.erase(g_fake.records.begin(), g_fake.records.begin() + n);
  *dropped = g_fake.dropped;
  g_fake.dropped = 0;
  return n;
}
void fake_set_notifier(int (*)()) {}

const DevxHostAccessApi kFakeHostAccess = {
    .start = fake_start,
    .stop = fake_stop,
    .watch = fake_watch,
    .unwatch = fake_unwatch,
    .set_tag = fake_set_tag,
    .open = fake_open,
    .enter_device_work = fake_enter,
    .leave_device_work = fake_leave,
    .take = fake_take,
    .set_notifier = fake_set_notifier,
};

DevxVendorApi with_host_access() {
  DevxVendorApi t = *test::fake_vendor();
  t.host_access = &kFakeHostAccess;
  return t;
}
const DevxVendorApi g_table = with_host_access();

// The sanitizer finds the vendor's host_access once per process: every test here installs the
// same table, with the sanitizer on.
class SanitizerHostAccess : public ::testing::Test {
 protected:
  void SetUp() override {
    g_vendor.set(&g_table);
    settings::set("DEVX_SIM_SANITIZE", "1");
  }
  void TearDown() override {
    settings::set("DEVX_SIM_SANITIZE", std::nullopt);
    g_vendor.set(test::fake_vendor());
    g_fake.records.clear();
    g_fake.dropped = 0;
  }
};

void expect_has(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "missing: " << part << "\nin: " << text;
}

void* range_of(void* p) {
  return static_cast<char*>(p) - kGuard;
}

TEST_F(SanitizerHostAccess, WatchesEachGuardedSpanAsWholePagesTaggedWithSizeAndFreed) {
  void* p = allocate(0, 100);
  ASSERT_NE(p, nullptr);
  auto it = g_fake.watched.find(range_of(p));
  ASSERT_NE(it, g_fake.watched.end());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(it->first) % kPage, 0u);
  EXPECT_EQ(it->second.size % kPage, 0u);
  EXPECT_GE(it->second.size, kGuard + 100 + kGuard);
  EXPECT_EQ(it->second.tag, uint64_t{100} << 1);
  const int opens = g_fake.opens;
  release(p);
  // Quarantined: still watched, now as freed; opened for the poisoning.
  ASSERT_EQ(g_fake.watched.count(range_of(p)), 1u);
  EXPECT_EQ(g_fake.watched[range_of(p)].tag, (uint64_t{100} << 1) | 1);
  EXPECT_EQ(g_fake.opens, opens + 1);
  EXPECT_EQ(counts(), std::make_pair(size_t{0}, size_t{1}));
}

TEST_F(SanitizerHostAccess, RecordsBecomeReportsNamingTheAllocation) {
  char* p = static_cast<char*>(allocate(0, 64));
  ASSERT_NE(p, nullptr);
  const auto addr = [&](std::ptrdiff_t offset) { return reinterpret_cast<uintptr_t>(p + offset); };
  g_fake.records.push_back({addr(8), range_of(p), uint64_t{64} << 1, DEVX_ACCESS_READ});
  g_fake.records.push_back({addr(-16), range_of(p), uint64_t{64} << 1, DEVX_ACCESS_WRITE});
  std::string reports = take_host_access_reports();
  expect_has(reports, "devx sanitizer: host code read device memory directly at ");
  expect_has(reports, "offset 8 of allocation ");
  expect_has(reports, "(64 bytes on devx:0, allocated at (no Python frame))");
  expect_has(reports, "host code wrote device memory directly");
  expect_has(reports, "16 bytes before the start of allocation");
  EXPECT_LT(reports.find("offset 8"), reports.find("16 bytes before")) << "oldest first";
  EXPECT_EQ(take_host_access_reports(), "");

  release(p);
  g_fake.records.push_back({addr(70), range_of(p), (uint64_t{64} << 1) | 1, DEVX_ACCESS_UNKNOWN});
  reports = take_host_access_reports();
  expect_has(reports, "host code touched freed device memory directly");
  expect_has(reports, "6 bytes past the end of freed allocation");
  expect_has(reports, "freed at (no Python frame))");

  // A record of an allocation the sanitizer no longer knows still says what it was.
  alignas(4096) static char gone[kPage];
  g_fake.records.push_back({reinterpret_cast<uintptr_t>(gone) + kGuard + 3, gone, uint64_t{10} << 1, DEVX_ACCESS_READ});
  reports = take_host_access_reports();
  expect_has(reports, "offset 3 of allocation ");
  expect_has(reports, "(10 bytes, released since)");

  g_fake.dropped = 3;
  expect_has(take_host_access_reports(), "devx sanitizer: 3 more host access(es) to device memory not recorded");
}

TEST_F(SanitizerHostAccess, MoreRecordsThanOneBatchAllArriveInOrder) {
  char* p = static_cast<char*>(allocate(0, 256));
  ASSERT_NE(p, nullptr);
  for (int i = 0; i < 70; ++i) {
    g_fake.records.push_back({reinterpret_cast<uintptr_t>(p + i), range_of(p), uint64_t{256} << 1, DEVX_ACCESS_READ});
  }
  const std::string reports = take_host_access_reports();
  size_t at = 0;
  for (int i = 0; i < 70; ++i) {
    const size_t found = reports.find("offset " + std::to_string(i) + " of allocation", at);
    ASSERT_NE(found, std::string::npos) << "record " << i;
    at = found;
  }
  release(p);
}

TEST_F(SanitizerHostAccess, ARecordIsRaisedAtTheNextCheckPoint) {
  char* p = static_cast<char*>(allocate(0, 32));
  ASSERT_NE(p, nullptr);
  g_fake.records.push_back({reinterpret_cast<uintptr_t>(p), range_of(p), uint64_t{32} << 1, DEVX_ACCESS_WRITE});
  try {
    check_all("at a unit test");
    ADD_FAILURE() << "check_all raised nothing";
  } catch (const c10::Error& e) {
    expect_has(e.what_without_backtrace(), "host code wrote device memory directly");
  }
  EXPECT_NO_THROW(check_all("at a unit test"));
  release(p);
}

TEST_F(SanitizerHostAccess, DeviceWorkIsCountedByTheVendor) {
  const int depth = g_fake.depth;
  {
    DeviceAccess outer;
    DeviceAccess inner;
    EXPECT_EQ(g_fake.depth, depth + 2);
  }
  EXPECT_EQ(g_fake.depth, depth);
  DeviceWorkHold hold;
  EXPECT_EQ(g_fake.depth, depth + 1);
  hold.release();
  hold.release();
  EXPECT_EQ(g_fake.depth, depth);
}

TEST_F(SanitizerHostAccess, SwitchedOffItStopsWatchingAndUnwatchesWhatItFrees) {
  void* live = allocate(0, 40);
  void* freed = allocate(0, 40);
  ASSERT_TRUE(live && freed);
  release(freed);
  const int stops = g_fake.stops;
  settings::set("DEVX_SIM_SANITIZE", "0");
  EXPECT_EQ(g_fake.stops, stops + 1);
  EXPECT_EQ(g_fake.watched.count(range_of(freed)), 0u) << "the quarantine is emptied";
  EXPECT_EQ(g_fake.watched.count(range_of(live)), 1u);
  release(live);
  EXPECT_EQ(g_fake.watched.count(range_of(live)), 0u);
  // On again: the vendor is started again.
  const int starts = g_fake.starts;
  settings::set("DEVX_SIM_SANITIZE", "1");
  void* again = allocate(0, 8);
  EXPECT_EQ(g_fake.starts, starts + 1);
  EXPECT_EQ(g_fake.watched.count(range_of(again)), 1u);
  release(again);
}

// Last: giving up is for the rest of the process.
TEST_F(SanitizerHostAccess, AVendorThatStopsWatchingIsNotAskedToWatchAgain) {
  g_fake.enter_status = DEVX_ERROR;
  { DeviceAccess work; }
  g_fake.enter_status = DEVX_OK;
  const size_t watched = g_fake.watched.size();
  void* p = allocate(0, 16);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(g_fake.watched.size(), watched);
  release(p);
}

}  // namespace
}  // namespace devx::sanitizer
