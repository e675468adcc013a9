#include "error.h"

#include <cstdio>

namespace devx::cpu_sim {
namespace {

// Thread-local because the core reads it after the failing call while other threads may be
// failing concurrently.
thread_local std::string t_last_error;

}  // namespace

DevxStatus fail(DevxStatus status, std::string message) {
  t_last_error = std::move(message);
  return status;
}

const char* last_error() { return t_last_error.c_str(); }

DevxStatus unknown_handle(const char* kind, const void* handle) {
  return fail(DEVX_ERROR_INVALID, std::string("unknown cpu_sim ") + kind + " " +
                                      format_pointer(handle) +
                                      ": never created, or already destroyed");
}

std::string format_bytes(size_t bytes) {
  static const char* const kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 5) {
    value /= 1024.0;
    ++unit;
  }
  if (unit == 0) return std::to_string(bytes) + " bytes";
  char text[64];
  snprintf(text, sizeof text, "%.2f %s (%zu bytes)", value, kUnits[unit], bytes);
  return text;
}

std::string format_pointer(const void* ptr) {
  char text[32];
  snprintf(text, sizeof text, "%p", ptr);
  return text;
}

}  // namespace devx::cpu_sim
