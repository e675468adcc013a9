// When a thread may take the GIL. A thread that asks for it while the interpreter is being torn
// down is ended by Python (pthread_exit), and that unwinding through a noexcept frame (a tensor's
// destructor freeing its memory, a future's callback) is std::terminate. Threads Python does not
// know — the collective engine's, the streams' workers, the threads that settle collectives — free
// devx memory too, and have no Python frames to read.
#pragma once

#include <Python.h>

namespace devx::python {

inline bool interpreter_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

// Whether a Python callback may run on this thread now: the interpreter is up and, while it is
// being torn down, this thread already holds the GIL (the finalizing thread does).
inline bool may_call_python() {
  return Py_IsInitialized() && (!interpreter_finalizing() || PyGILState_Check());
}

// Whether this thread has Python frames to read and may take the GIL to read them.
inline bool may_read_python_frames() {
  return may_call_python() && PyGILState_GetThisThreadState() != nullptr;
}

}  // namespace devx::python
