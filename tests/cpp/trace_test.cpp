// The runtime-call tracing shims (runtime/trace.h): swapped in only while some kind is traced or
// hooked, forwarding every call to the vendor's table, and swapped under running calls without
// losing one.
#include <gtest/gtest.h>

#include <c10/util/Exception.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "fake_vendor.h"
#include "runtime/settings.h"
#include "runtime/trace.h"
#include "runtime/vendor.h"

namespace devx {
namespace {

struct HookCall {
  std::string kind, call;
  int status;
};

class TraceTest : public ::testing::Test {
 protected:
  void TearDown() override {
    trace::set_runtime_hook(nullptr, {});
    settings::set("DEVX_TRACE_RUNTIME", std::nullopt);
    test::set_vendor_capacity(SIZE_MAX);
  }
};

TEST_F(TraceTest, UntracedCallsGoStraightToTheVendorTable) {
  trace::reload();
  EXPECT_EQ(g_vendor.get(), test::fake_vendor());
}

TEST_F(TraceTest, AHookSeesEachCallOfItsKindsWithItsStatus) {
  std::vector<HookCall> calls;
  trace::set_runtime_hook(
      [&](const std::string& kind, const std::string& call, const std::string&, int status, double) {
        calls.push_back({kind, call, status});
      },
      {"malloc"});
  ASSERT_NE(g_vendor.get(), test::fake_vendor());
  const int before = test::vendor_counts().mallocs;
  void* p = nullptr;
  ASSERT_EQ(g_vendor->malloc(0, 4096, &p), DEVX_OK);
  EXPECT_EQ(test::vendor_counts().mallocs, before + 1);
  test::set_vendor_capacity(0);
  void* q = nullptr;
  EXPECT_EQ(g_vendor->malloc(0, 4096, &q), DEVX_ERROR_OOM);
  ASSERT_EQ(g_vendor->free(0, p), DEVX_OK);  // free is not hooked
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].kind, "malloc");
  EXPECT_EQ(calls[0].call, "malloc");
  EXPECT_EQ(calls[0].status, DEVX_OK);
  EXPECT_EQ(calls[1].status, DEVX_ERROR_OOM);
  trace::set_runtime_hook(nullptr, {});
  EXPECT_EQ(g_vendor.get(), test::fake_vendor());
}

TEST_F(TraceTest, TheSettingSwapsTheShimsInAndOut) {
  settings::set("DEVX_TRACE_RUNTIME", "free=1");
  EXPECT_NE(g_vendor.get(), test::fake_vendor());
  settings::set("DEVX_TRACE_RUNTIME", "0");
  EXPECT_EQ(g_vendor.get(), test::fake_vendor());
}

TEST_F(TraceTest, ABadKindIsAValueErrorAndChangesNothing) {
  try {
    settings::set("DEVX_TRACE_RUNTIME", "mallocs=1");
    ADD_FAILURE() << "no error for an unknown kind";
  } catch (const c10::ValueError& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find("unknown kind 'mallocs'"), std::string::npos);
  }
  EXPECT_EQ(g_vendor.get(), test::fake_vendor());
}

TEST_F(TraceTest, SwappingTheShimsUnderRunningCallsLosesNone) {
  constexpr int kThreads = 4, kCalls = 2000;
  std::atomic<int> hooked{0};
  const int before = test::vendor_counts().mallocs;
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < kCalls; ++i) {
        void* p = nullptr;
        ASSERT_EQ(g_vendor->malloc(0, 64, &p), DEVX_OK);
        ASSERT_EQ(g_vendor->free(0, p), DEVX_OK);
      }
    });
  }
  go.store(true);
  for (int i = 0; i < 200; ++i) {
    trace::set_runtime_hook([&](const std::string&, const std::string&, const std::string&, int, double) { ++hooked; },
                            {"malloc"});
    trace::set_runtime_hook(nullptr, {});
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(test::vendor_counts().mallocs, before + kThreads * kCalls);
  EXPECT_LE(hooked.load(), kThreads * kCalls);
  EXPECT_EQ(g_vendor.get(), test::fake_vendor());
}

}  // namespace
}  // namespace devx
