// DEVX_TRACE_RUNTIME=malloc=1,free=1,memcpy=1,sync=1,event=1,stream=1,set_device=1 (or all=1):
// logs each vendor call of the switched-on kinds with its arguments, status and duration; 2
// instead of 1 adds its Python stack and C++ backtrace. Host waits (sync) are also summed per
// Python source line: "where does the host block on the device". When every kind is off the
// core calls the vendor's own table, so tracing costs nothing; switching it on swaps in a table
// of tracing shims.
#pragma once

#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/vendor_api.h"

namespace devx::trace {

// Re-reads DEVX_TRACE_RUNTIME (a bad value is a ValueError naming it) and installs or removes
// the shims. Called at import and whenever the environment changes.
void reload();

// Makes `table` the vendor table the process calls (through the tracing shims when they are on):
// what a forked child does (runtime/fork.h).
void use_vendor_table(const DevxVendorApi* table);

// Callbacks on vendor calls of the given kinds ("malloc", "sync", ...): (kind, call, arguments,
// status, microseconds). Installing or removing one re-installs the shims as needed.
using RuntimeHook = std::function<void(const std::string& kind, const std::string& call, const std::string& args,
                                       int status, double us)>;
void set_runtime_hook(RuntimeHook hook, const std::vector<std::string>& kinds);

// (Python line, waits, total milliseconds), longest first.
std::vector<std::tuple<std::string, int64_t, double>> sync_summary();
void reset_sync_summary();

}  // namespace devx::trace
