// Holding a stream at a point of its work, for tests of asynchronous execution: work issued after
// hold_stream waits until release_stream, so "the op returned before its kernel ran" and "the
// other stream did not wait" are observable deterministically, without timing.
#pragma once

#include <cstdint>

#include "runtime/stream.h"

namespace devx {

// Throws unless the vendor's streams run on their own threads (g_async_host_streams): on a
// synchronous stream the hold would block the caller for good.
int64_t hold_stream(const DevxStream& stream);
// Lets the held stream go on; an unknown or already released token is an error.
void release_stream(int64_t token);

}  // namespace devx
