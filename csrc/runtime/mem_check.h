// DIPU_MEM_CHECK=1: every live device allocation is tracked (from the caching allocator, so it
// works with the default configuration) with its size, device and the Python line that made it;
// DIPU_MEM_CHECK_ENABLE_BACKTRACE=1 adds the whole Python stack and the C++ backtrace. report()
// lists what is still live: at exit, those are the leaks. Off costs one relaxed load per
// allocation and free.
#pragma once

#include <c10/core/Device.h>

#include <atomic>
#include <string>

namespace devx::memcheck {

extern std::atomic<bool> g_enabled;

void on_alloc(void* ptr, size_t size, c10::DeviceIndex device);
void on_free(void* ptr);

// The allocations live now that were made while the checker was on.
std::string report();
size_t live_count();

}  // namespace devx::memcheck
