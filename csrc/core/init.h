// libdevx_core's entry point: the order in which the runtime, the vendor and the op layer are set
// up. Its host (the Python bindings, the C++ unit tests) calls it once, before any op runs, and
// passes what only the host can provide: where the user's program is and how to run Python
// overrides. The core itself knows no Python.
#pragma once

#include <string>
#include <vector>

#include "aten/diagnostics.h"
#include "runtime/python_hooks.h"

namespace devx {

// Each may be empty: the diagnostics that would use it then report no place, and overriding a
// kernel is refused.
struct HostHooks {
  std::function<std::string()> line;
  std::function<std::string()> stack;
  std::function<std::vector<PythonFrame>()> frames;
  PythonSite (*site)() = nullptr;
  std::string (*module_path)() = nullptr;
  diag::OverrideRunner override_runner;
  // Called from a signal handler when the sanitizer finds host code touching device memory:
  // must be async-signal-safe (runtime/sanitizer.h).
  int (*notify_host_access)() = nullptr;
  // Release and take back Python's GIL around waits for device work (runtime/python_hooks.h).
  void* (*release_gil)() = nullptr;
  void (*restore_gil)(void*) = nullptr;
};

// Loads a vendor library (one of `vendor_paths`; `requested`: the user named it, so failing to
// load it is an error rather than a reason to try the next), fills the op table and installs the
// hooks.
void init_core(const std::vector<std::string>& vendor_paths, bool requested, const HostHooks& hooks);

}  // namespace devx
