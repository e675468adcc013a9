// A process forked after devx was initialised cannot use the device, as with CUDA.
//
// The child has a copy of the parent's memory but none of its threads: a vendor's worker threads
// (cpu_sim's asynchronous streams, a GPU driver's) are gone, and locks they held stay locked, so
// the first device op would wait forever for a stream that no thread serves. In the child, every
// vendor call fails at once with PyTorch's message for CUDA ("Cannot re-initialize ... in forked
// subprocess"), and so does every allocation; releases succeed without doing anything, so the
// child's copies of the parent's tensors can go (their memory is the parent's). A child that never
// touches devx (a DataLoader worker) is unaffected.
#pragma once

#include <c10/macros/Macros.h>

namespace devx {

namespace detail {
extern bool g_in_bad_fork;
}  // namespace detail

inline bool in_bad_fork() {
  return detail::g_in_bad_fork;
}

[[noreturn]] void throw_bad_fork();

inline void check_not_forked() {
  if (C10_UNLIKELY(detail::g_in_bad_fork)) throw_bad_fork();
}

}  // namespace devx
