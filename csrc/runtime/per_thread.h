// Per-thread objects read on every op, reached through one initial-exec load: a plain
// `thread_local` object with a constructor or destructor costs an initialisation check and, in a
// shared library, a __tls_get_addr call per access.
#pragma once

#include <c10/macros/Macros.h>

#include "runtime/device.h"

namespace devx {

template <typename T>
DEVX_HOT_TLS thread_local T* t_per_thread = nullptr;
template <typename T>
DEVX_HOT_TLS thread_local bool t_per_thread_gone = false;

template <typename T>
C10_NOINLINE T* make_per_thread() {
  if (t_per_thread_gone<T>) return nullptr;
  struct Owner {
    T value;
    ~Owner() {
      t_per_thread<T> = nullptr;
      t_per_thread_gone<T> = true;
    }
  };
  thread_local Owner owner;
  t_per_thread<T> = &owner.value;
  return t_per_thread<T>;
}

// This thread's T, made on first use; nullptr once it is destroyed (for what destructors run at
// thread exit).
template <typename T>
inline T* per_thread() {
  T* value = t_per_thread<T>;
  return C10_LIKELY(value != nullptr) ? value : make_per_thread<T>();
}

// This thread's T if it has one, without making it.
template <typename T>
inline const T* existing_per_thread() {
  return t_per_thread<T>;
}

}  // namespace devx
