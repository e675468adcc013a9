// The legacy profiler path (torch.autograd.profiler.profile(use_device="devx", use_kineto=False),
// PyTorch's KINETO_PRIVATEUSE1_FALLBACK state): PyTorch records a devx event at the start and end
// of every op through these stubs and reports the elapsed device time per op.
#include <torch/csrc/profiler/stubs/base.h>

#include <c10/util/ApproximateClock.h>

#include "runtime/device.h"
#include "runtime/exception.h"
#include "runtime/stream.h"
#include "runtime/vendor.h"
#include "runtime/python_hooks.h"

namespace devx::profiler {
namespace {

using torch::profiler::impl::ProfilerVoidEventStub;

class DevxProfilerStubs final : public torch::profiler::impl::ProfilerStubs {
 public:
  void record(c10::DeviceIndex* device, ProfilerVoidEventStub* event, int64_t* cpu_ns) const override {
    const c10::DeviceIndex index = current_device();
    if (device) *device = index;
    DevxEventHandle handle = nullptr;
    DEVX_VENDOR_CHECK(g_vendor->event_create(index, 1, &handle));
    *event = std::shared_ptr<void>(handle, [](void* h) { g_vendor->event_destroy(static_cast<DevxEventHandle>(h)); });
    if (cpu_ns) *cpu_ns = c10::getTime();
    DEVX_VENDOR_CHECK(g_vendor->event_record(handle, getCurrentDevxStream(index).handle()));
  }

  // Microseconds, as PyTorch's CUDA stubs return.
  float elapsed(const ProfilerVoidEventStub* event, const ProfilerVoidEventStub* event2) const override {
    auto first = static_cast<DevxEventHandle>(event->get());
    auto second = static_cast<DevxEventHandle>(event2->get());
    {
      WithoutGil without_gil;
      DEVX_VENDOR_CHECK(g_vendor->event_synchronize(first));
      DEVX_VENDOR_CHECK(g_vendor->event_synchronize(second));
    }
    float ms = 0;
    DEVX_VENDOR_CHECK(g_vendor->event_elapsed_ms(first, second, &ms));
    return ms * 1000.0f;
  }

  // Markers have no device-side counterpart on devx vendors.
  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}

  bool enabled() const override { return vendor_loaded(); }

  void onEachDevice(std::function<void(int)> op) const override {
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      DevxGuard guard(d);
      op(d);
    }
  }

  void synchronize() const override {
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) synchronize_device(d);
  }
};

struct RegisterProfilerStubs {
  RegisterProfilerStubs() {
    static DevxProfilerStubs stubs;
    torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  }
};
RegisterProfilerStubs g_register_profiler_stubs;

}  // namespace
}  // namespace devx::profiler
