#include "runtime/device.h"

#include "runtime/exception.h"
#include "runtime/sanitizer.h"
#include "runtime/vendor.h"
#include "runtime/python_hooks.h"

namespace devx {

namespace {
// -1: not known yet for this thread (the vendor's own per-thread default applies).
DEVX_HOT_TLS thread_local c10::DeviceIndex t_current = -1;
}  // namespace

namespace detail {
std::atomic<c10::DeviceIndex> g_known_device_count{0};
}  // namespace detail

c10::DeviceIndex device_count() {
  static const c10::DeviceIndex count = [] {
    int n = 0;
    DEVX_VENDOR_CHECK(vendor().device_count(&n));
    detail::g_known_device_count.store(static_cast<c10::DeviceIndex>(n), std::memory_order_relaxed);
    return static_cast<c10::DeviceIndex>(n);
  }();
  return count;
}

void detail::check_device_index_slow(int64_t index) {
  c10::DeviceIndex n = device_count();
  TORCH_CHECK(index >= 0 && index < n, "devx: invalid device index ", index, ": ",
              vendor().name, " has ", static_cast<int>(n), " device", n == 1 ? "" : "s",
              " (valid: 0..", static_cast<int>(n) - 1, ")");
}

c10::DeviceIndex device_index_arg(int64_t index) {
  detail::check_device_index_slow(index);
  return static_cast<c10::DeviceIndex>(index);
}

c10::DeviceIndex current_device() {
  if (C10_UNLIKELY(t_current < 0)) {
    int d = 0;
    DEVX_VENDOR_CHECK(vendor().get_device(&d));
    t_current = static_cast<c10::DeviceIndex>(d);
  }
  return t_current;
}

void set_device(c10::DeviceIndex index) {
  if (index == t_current) return;
  check_device_index(index);
  DEVX_VENDOR_CHECK(g_vendor->set_device(index));
  t_current = index;
}

void synchronize_device(c10::DeviceIndex index) {
  check_device_index(index);
  {
    WithoutGil without_gil;
    DEVX_VENDOR_CHECK(g_vendor->device_synchronize(index));
  }
  if (C10_UNLIKELY(sanitizer::enabled())) sanitizer::check_all("at synchronize");
}

}  // namespace devx
