// Run-time diagnostics of the op path: forced CPU fallback (DIPU_FORCE_FALLBACK_OPS_LIST), op
// argument dumps (DIPU_DUMP_OP_ARGS), autocompare against the CPU (DIPU_AUTOCOMPARE,
// DIPU_AUTOCOMPARE_OPS_LIST, DIPU_AUTOCOMPARE_RAISE) and Python kernel overrides.
//
// The generated wrappers pay one relaxed atomic load for all of them together (gate_open); only
// when that word is non-zero do they ask intercepts(), which re-reads the settings if the
// environment changed and says whether this op takes the boxed slow path. The long-tail boxed
// kernel asks the same question by operator.
#pragma once

#include <ATen/core/boxing/BoxedKernel.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace devx::diag {

// "add.Tensor" for aten::add.Tensor: the name the switches' op patterns match.
std::string overload_name(const c10::OperatorName& n);

// Bit 0: the settings may be stale (the environment changed). Other bits: a diagnostic is on.
extern std::atomic<uint32_t> g_gate;

inline bool gate_open() {
  return g_gate.load(std::memory_order_relaxed) != 0;
}

// For a generated op: whether it must take the slow path now.
bool intercepts(int op);
// The boxed slow path of the generated ops (runs diagnostics around the native kernel).
const c10::BoxedKernel& slow_path();

using NativeRunner = std::function<void(torch::jit::Stack*)>;
// kSpan: while the profiler records, the kernel's span is a device row named after the op;
// kOwn: the kernel reports its own device activity (copies: a memcpy or a copy kernel).
enum class DeviceActivity { kSpan, kOwn };
// For boxed kernels: runs `native` with whatever diagnostics apply to `op` around it (or instead
// of it: forced fallback, Python override). Cheap when the gate is closed.
void run(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack, const NativeRunner& native,
         DeviceActivity activity = DeviceActivity::kSpan);

// For copy_ (hand-written: csrc/aten/copy.cpp), once the gate is open: whether this copy takes the
// slow path. Profiling alone does not send copies there (they report their own activity), nor do
// the copies the diagnostics make themselves.
bool intercepts_copy();
// While one lives on a thread, the device work of that thread is the diagnostics' own (reading
// values to dump, moving arguments to the CPU) and copies are not diagnosed as the user's ops.
struct QuietScope {
  QuietScope();
  ~QuietScope();
  QuietScope(const QuietScope&) = delete;
  QuietScope& operator=(const QuietScope&) = delete;
};

// Whether this thread is in a QuietScope: the diagnostics' own device work, which boxed kernels
// must not diagnose again (autocompare's copy of a sparse argument reads its members through ops).
bool quiet();

// The force-fallback patterns in effect (from DIPU_FORCE_FALLBACK_OPS_LIST).
std::vector<std::string> force_fallback_patterns();
// Throws ValueError naming the pattern if `pattern` is not a valid regular expression.
void validate_pattern(const std::string& pattern);
// Re-reads the settings now (errors surface here instead of at the next op).
void refresh();

// Autocompare results per op: {"add.Tensor": {allclose, not_close}}.
std::map<std::string, std::pair<int64_t, int64_t>> autocompare_stats();
void reset_autocompare_stats();

// Op hooks: after each op matching one of `patterns` (regexes on "add.Tensor" / "add"), `hook`
// gets its name, its arguments and its results. nullptr removes the hook.
using OpHook = std::function<void(const std::string& op, const std::vector<c10::IValue>& args,
                                  const std::vector<c10::IValue>& results)>;
void set_op_hook(OpHook hook, const std::vector<std::string>& patterns);

// Python kernel overrides: the bindings install the runner; `set_override(op, true)` routes
// that op ("add.Tensor") to it instead of its kernel.
using OverrideRunner = std::function<void(const std::string& op, const c10::OperatorHandle&, torch::jit::Stack*)>;
void set_override_runner(OverrideRunner runner);
void set_override(const std::string& op, bool on);

}  // namespace devx::diag
