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

}  // namespace devx
