#include "runtime/sync_debug.h"

#include <c10/util/Exception.h>

#include <string>

#include "runtime/python_hooks.h"

namespace devx::sync_debug {

std::atomic<int> g_mode{kOff};

void set_mode(int mode) {
  TORCH_CHECK_VALUE(mode >= kOff && mode <= kError, "devx: invalid sync debug mode ", mode,
                    "; use 0 or \"default\", 1 or \"warn\", 2 or \"error\"");
  g_mode.store(mode, std::memory_order_relaxed);
}

void report(const char* what) {
  const std::string line = python_line();
  const std::string where = line.empty() ? std::string() : " at " + line;
  if (mode() == kError) {
    TORCH_CHECK(false, "devx: called a synchronizing devx operation (", what, ")", where,
                " while the sync debug mode is \"error\"");
  }
  TORCH_WARN("devx: called a synchronizing devx operation (", what, ")", where);
}

}  // namespace devx::sync_debug
