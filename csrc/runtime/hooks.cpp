// PrivateUse1 hooks: the autograd engine, generators and pinned memory reach the backend through
// these, so they are registered when the extension loads (before any backward pass).
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CPUAllocator.h>

#include "runtime/allocator.h"
#include "runtime/device.h"
#include "runtime/generator.h"
#include "runtime/host_allocator.h"
#include "runtime/vendor.h"

namespace devx {

namespace {

struct DevxHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return vendor_loaded() && device_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex device_index) const override { return vendor_loaded(); }
  void init() const override {}

  c10::DeviceIndex deviceCount() const override { return vendor_loaded() ? device_count() : 0; }
  void setCurrentDevice(c10::DeviceIndex device) const override { set_device(device); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    c10::DeviceIndex old = current_device();
    set_device(device);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return exchangeDevice(device);
  }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override {
    return default_generator(device_index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device_index) const override {
    return make_generator(device_index);
  }

  at::Device getDeviceFromPtr(void* data) const override { return devx_device(current_device()); }

  bool isPinnedPtr(const void* data) const override { return vendor_loaded() && is_pinned_ptr(data); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return pinned_allocator(); }

  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    resize_storage_bytes(storage.unsafeGetStorageImpl(), newsize);
  }
};

struct RegisterHooks {
  RegisterHooks() {
    static DevxHooks hooks;
    at::RegisterPrivateUse1HooksInterface(&hooks);
  }
};
RegisterHooks g_register_hooks;

}  // namespace

}  // namespace devx
