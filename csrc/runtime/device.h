// Devices as the core sees them: counts and the per-thread current device, with the vendor
// asked only when the cached answer can be stale.
#pragma once

#include <c10/core/Device.h>
#include <c10/macros/Macros.h>

#include <atomic>
#include <cstdint>

namespace devx {

constexpr c10::DeviceType kDevx = c10::DeviceType::PrivateUse1;

// For the thread-locals every op reads. _C is dlopen'ed, so a plain thread_local costs a call
// to __tls_get_addr per access (a dozen per small op); initial-exec makes it one load, from the
// few bytes of static TLS the loader keeps for dlopen'ed libraries.
#define DEVX_HOT_TLS __attribute__((tls_model("initial-exec")))

c10::DeviceIndex device_count();
c10::DeviceIndex current_device();
void set_device(c10::DeviceIndex index);
namespace detail {
// device_count() once it has been asked (0 before): every op checks an index against it.
extern std::atomic<c10::DeviceIndex> g_known_device_count;
void check_device_index_slow(int64_t index);
}  // namespace detail

// Throws (RuntimeError naming the index and the count) unless 0 <= index < device_count().
inline void check_device_index(c10::DeviceIndex index) {
  if (C10_LIKELY(index >= 0 && index < detail::g_known_device_count.load(std::memory_order_relaxed))) return;
  detail::check_device_index_slow(index);
}
// The device an index from Python names, checked before it is narrowed to c10::DeviceIndex (an
// 8-bit type, in which 256 would name device 0 and -129 device 127).
c10::DeviceIndex device_index_arg(int64_t index);
void synchronize_device(c10::DeviceIndex index);

inline c10::Device devx_device(c10::DeviceIndex index) {
  return c10::Device(kDevx, index);
}

// A devx device guard without the virtual calls of c10::DeviceGuard: the generated op wrappers
// use it on every op. No-op when the tensor is already on the current device.
class DevxGuard {
 public:
  explicit DevxGuard(c10::DeviceIndex index) {
    if (index >= 0) {
      c10::DeviceIndex cur = current_device();
      if (cur != index) {
        set_device(index);
        previous_ = cur;
      }
    }
  }
  explicit DevxGuard(std::optional<c10::Device> device)
      : DevxGuard(device && device->type() == kDevx ? device->index() : c10::DeviceIndex(-1)) {}
  ~DevxGuard() {
    if (previous_ >= 0) set_device(previous_);
  }
  DevxGuard(const DevxGuard&) = delete;
  DevxGuard& operator=(const DevxGuard&) = delete;

 private:
  c10::DeviceIndex previous_ = -1;
};

}  // namespace devx
