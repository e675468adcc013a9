// c10's device-guard interface for devx: what makes torch.Stream, torch.Event,
// torch.accelerator.* and the autograd engine's device switching work.
#include <c10/core/impl/DeviceGuardImplInterface.h>
#if __has_include(<c10/core/DeviceCapability.h>)
#include <c10/core/DeviceCapability.h>
#endif

#include "runtime/allocator.h"
#include "runtime/device.h"
#include "runtime/exception.h"
#include "runtime/stream.h"
#include "runtime/vendor.h"
#include "runtime/sync_debug.h"
#include "runtime/python_hooks.h"

namespace devx {

namespace {

struct DevxGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kDevx; }

  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old = getDevice();
    if (old.index() != d.index()) set_device(d.index());
    return old;
  }
  c10::Device getDevice() const override { return devx_device(current_device()); }
  void setDevice(c10::Device d) const override { set_device(d.index()); }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    try {
      set_device(d.index());
    } catch (...) {
      // The contract forbids throwing here (it runs in guard destructors).
    }
  }

  c10::Stream getStream(c10::Device d) const override { return getCurrentDevxStream(d.index()).unwrap(); }
  c10::Stream getDefaultStream(c10::Device d) const override { return getDefaultDevxStream(d.index()).unwrap(); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool high_priority) const override {
    int least = 0, greatest = 0;
    stream_priority_range(&least, &greatest);
    return getStreamFromPool(high_priority ? greatest : least, d.index()).unwrap();
  }
  c10::Stream getNewStream(c10::Device d, int priority) const override {
    return getStreamFromPool(priority, d.index()).unwrap();
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    DevxStream previous = getCurrentDevxStream(s.device_index());
    setCurrentDevxStream(DevxStream(s));
    return previous.unwrap();
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    try {
      return vendor_loaded() ? device_count() : 0;
    } catch (...) {
      return 0;
    }
  }

#if __has_include(<c10/core/DeviceCapability.h>)
  // What torch.accelerator.get_device_capability reports: every dtype but the quantized ones,
  // which have no devx layout.
  c10::DeviceCapability getDeviceCapability(c10::Device d) const override {
    if (d.index() >= 0) check_device_index(d.index());
    c10::DeviceCapability capability;
    auto& types = capability.capability_data.supported_scalar_types;
    types.has_QInt8 = types.has_QUInt8 = types.has_QInt32 = types.has_QUInt4x2 = types.has_QUInt2x4 = 0;
    return capability;
  }
#endif

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(), "devx: event on device ",
                static_cast<int>(device_index), " cannot be recorded on a stream of device ",
                static_cast<int>(stream.device_index()));
    DevxStream devx_stream(stream);
    if (!*event) {
      DevxEventHandle created = nullptr;
      DEVX_VENDOR_CHECK(g_vendor->event_create(stream.device_index(),
                                               flag == c10::EventFlag::BACKEND_DEFAULT, &created));
      *event = created;
    }
    DEVX_VENDOR_CHECK(g_vendor->event_record(static_cast<DevxEventHandle>(*event), devx_stream.handle()));
  }
  void block(void* event, const c10::Stream& stream) const override {
    if (!event) return;
    DEVX_VENDOR_CHECK(g_vendor->stream_wait_event(DevxStream(stream).handle(), static_cast<DevxEventHandle>(event)));
  }
  bool queryEvent(void* event) const override {
    if (!event) return true;
    DevxStatus st = g_vendor->event_query(static_cast<DevxEventHandle>(event));
    if (st == DEVX_ERROR_NOT_READY) return false;
    DEVX_VENDOR_CHECK(st);
    return true;
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    if (event) g_vendor->event_destroy(static_cast<DevxEventHandle>(event));
  }
  void synchronizeEvent(void* event) const override {
    if (!event) return;
    WithoutGil without_gil;
    DEVX_VENDOR_CHECK(g_vendor->event_synchronize(static_cast<DevxEventHandle>(event)));
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start && end, "devx: both events must be recorded before elapsed_time");
    float ms = 0;
    DEVX_VENDOR_CHECK(g_vendor->event_elapsed_ms(static_cast<DevxEventHandle>(start),
                                                 static_cast<DevxEventHandle>(end), &ms));
    return ms;
  }

  bool queryStream(const c10::Stream& stream) const override { return DevxStream(stream).query(); }
  void synchronizeStream(const c10::Stream& stream) const override {
    sync_debug::on_host_wait("stream synchronize");
    DevxStream(stream).synchronize();
  }
  void synchronizeDevice(const c10::DeviceIndex device_index) const override { synchronize_device(device_index); }
  void recordDataPtrOnStream(const c10::DataPtr& data_ptr, const c10::Stream& stream) const override {
    devx_allocator()->recordStream(data_ptr, stream);
  }
};

}  // namespace

C10_REGISTER_GUARD_IMPL(PrivateUse1, DevxGuardImpl);

}  // namespace devx
