#include "core/init.h"

#include "aten/boxed_compute.h"
#include "aten/compute_scope.h"
#include "aten/op_registry.h"
#include "runtime/allocator.h"
#include "runtime/log.h"
#include "runtime/sanitizer.h"
#include "runtime/trace.h"
#include "runtime/vendor.h"

namespace devx {

void init_core(const std::vector<std::string>& vendor_paths, bool requested, const HostHooks& hooks) {
  // Logging first: loading the vendor logs. Compute routing needs the vendor's compute device,
  // and the kernel table, then the long tail, need the vendor and the routing.
  log::reload();
  load_vendor(vendor_paths, requested);
  check_allocator_settings();
  install_allocator_settings_hook();
  install_compute_routing(vendor().compute_device_type);
  init_kernel_table();
  register_long_tail();
  // The hooks before the first reload of tracing and diagnostics, whose reports name the place.
  set_python_hooks(hooks.line, hooks.stack);
  set_python_frames_hook(hooks.frames);
  set_python_site_hook(hooks.site);
  set_python_module_hook(hooks.module_path);
  set_gil_hooks(hooks.release_gil, hooks.restore_gil);
  trace::reload();
  diag::set_override_runner(hooks.override_runner);
  sanitizer::set_host_access_notifier(hooks.notify_host_access);
  diag::refresh();
}

}  // namespace devx
