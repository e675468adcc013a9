#include "cuda_error.h"

#include <cstdarg>
#include <cstdio>

namespace devx::cuda_vendor {
namespace {

// Thread-local because the core reads it right after the failing call, possibly while other
// threads fail concurrently.
thread_local std::string t_last_error;

DevxStatus status_of(cudaError_t err) {
  switch (err) {
    case cudaErrorMemoryAllocation:
      return DEVX_ERROR_OOM;
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidValue:
    case cudaErrorInvalidResourceHandle:  // a null or destroyed stream/event handle
      return DEVX_ERROR_INVALID;
    case cudaErrorNotReady:
      return DEVX_ERROR_NOT_READY;
    default:
      return DEVX_ERROR;
  }
}

}  // namespace

DevxStatus fail(cudaError_t err, const char* call_fmt, ...) {
  // cudart keeps a non-sticky error for the next cudaGetLastError(); torch's CUDA code checks
  // that too, and would blame its own next kernel launch for our already-reported failure.
  cudaGetLastError();
  // Queries are polled (the allocator asks whether events have completed); "not ready" is an
  // answer rather than a failure, so it skips the message formatting.
  if (err == cudaErrorNotReady) return DEVX_ERROR_NOT_READY;

  char call[512];
  va_list args;
  va_start(args, call_fmt);
  vsnprintf(call, sizeof call, call_fmt, args);
  va_end(args);
  t_last_error = std::string("cuda vendor: ") + call + " failed: " + cudaGetErrorString(err) +
                 " (" + cudaGetErrorName(err) + ")";
  return status_of(err);
}

void set_last_error(std::string message) { t_last_error = std::move(message); }

const char* last_error() { return t_last_error.c_str(); }

}  // namespace devx::cuda_vendor
