// The one way the backend reads its environment switches.
//
// Reading getenv() on every op is too slow, so parsed settings are cached by their owners and
// re-read when `generation()` changes. The Python package bumps the generation whenever
// os.environ is written (and the diagnostics API bumps it too), which is what makes every switch
// a run-time switch: a change takes effect at the next op.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace devx::env {

std::string get_string(const char* name, const std::string& fallback);
// Accepts 0/1/true/false/on/off/yes/no (any case); anything else is a ValueError naming `name`.
bool get_bool(const char* name, bool fallback);
// Integer in [lo, hi]; out of range or not a number is a ValueError naming `name`.
int64_t get_int(const char* name, int64_t fallback, int64_t lo, int64_t hi);

// Counter bumped on every write to os.environ made through Python.
uint64_t generation();
void bump_generation();

// Called after a bump, so caches that watch the environment can mark themselves stale without
// polling. Owners register once at static-initialisation time.
using Listener = void (*)();
void add_listener(Listener listener);

// A setting read now and again after every change: `env::Watch g_watch(&reload);`.
struct Watch {
  explicit Watch(Listener reload) {
    reload();
    add_listener(reload);
  }
};

}  // namespace devx::env
