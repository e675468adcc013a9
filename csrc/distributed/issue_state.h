// Issuing engine work without the calling thread's Python objects.
//
// A collective engine with threads of its own (gloo) captures the issuing thread's
// at::ThreadLocalState in each work and drops it on one of its threads once the work is done.
// Inside torch.autograd.backward that state holds a Python object (the "context" the backward
// stashes for compiled autograd), whose release takes the GIL. When a rank leaves right after its
// last collective, the engine's thread may drop the finished work after the interpreter began
// finalising: Python ends that thread inside a noexcept destructor and the process aborts
// ("terminate called without an active exception"). The engines need none of those objects, so
// they are set aside while work is issued and put back after; no Python reference changes hands.
#pragma once

#include <ATen/ThreadLocalPythonObjects.h>

#include <utility>

namespace devx::dist {

class WithoutThreadPythonObjects {
 public:
  WithoutThreadPythonObjects() : saved_(at::impl::ThreadLocalPythonObjects::get_state()) {
    at::impl::ThreadLocalPythonObjects::set_state({});
  }
  ~WithoutThreadPythonObjects() { at::impl::ThreadLocalPythonObjects::set_state(std::move(saved_)); }
  WithoutThreadPythonObjects(const WithoutThreadPythonObjects&) = delete;
  WithoutThreadPythonObjects& operator=(const WithoutThreadPythonObjects&) = delete;

 private:
  at::impl::ThreadLocalPythonObjects saved_;
};

}  // namespace devx::dist
