// How every cpu_sim function reports failure: a DevxStatus plus a thread-local message that the
// core reads right after the failing call and puts into the Python exception.
#pragma once

#include <cstddef>
#include <string>

#include "runtime/vendor_api.h"

namespace devx::cpu_sim {

// Records `message` as this thread's last error and returns `status`.
DevxStatus fail(DevxStatus status, std::string message);
const char* last_error();

// For a stream or event handle that is not (or no longer) one of ours.
DevxStatus unknown_handle(const char* kind, const void* handle);

// "1.50 GiB (1610612736 bytes)": exact for comparing, readable for people hunting a leak.
std::string format_bytes(size_t bytes);
std::string format_pointer(const void* ptr);

}  // namespace devx::cpu_sim
