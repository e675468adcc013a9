// Copies between host and devx memory, ordered on a devx stream. Host reads wait for the stream
// (that is where the host blocks on the device); host writes are ordered like any other work.
#pragma once

#include <cstddef>

#include "runtime/stream.h"

namespace devx {

// The name of a copy's device activity, as torch.profiler names CUDA's copies ("Memcpy HtoD ...").
const char* memcpy_activity_name(DevxMemcpyKind kind);

void memcpy_on_stream(void* dst, const void* src, size_t n, DevxMemcpyKind kind, const DevxStream& stream);
void memcpy_and_wait(void* dst, const void* src, size_t n, DevxMemcpyKind kind, const DevxStream& stream);

// A copy between devx buffers for code with no stream of its own (an allocator's copy_data, a
// kernel result copied into devx memory). On a vendor whose compute device has streams (cuda) it
// is ordered on `device`'s current stream, after the kernels issued there: a synchronous copy goes
// to the legacy default stream, which does not wait for devx streams (they are non-blocking). On
// a host-computing vendor (cpu_sim) it happens at once.
void copy_device_bytes(void* dst, const void* src, size_t n, c10::DeviceIndex device);

}  // namespace devx
