// Run-time diagnostics of the op path. The generated wrappers pay one relaxed atomic load for
// all of them together (gate_open); only when that word is non-zero do they ask intercepts(),
// which re-reads the settings if the environment changed and says whether this op takes the
// boxed slow path (forced CPU fallback today; argument dumps and autocompare plug in there too).
#pragma once

#include <ATen/core/boxing/BoxedKernel.h>

#include <atomic>
#include <string>
#include <vector>

namespace devx::diag {

// Bit 0: the settings may be stale (the environment changed). Other bits: a diagnostic is on.
extern std::atomic<uint32_t> g_gate;

inline bool gate_open() {
  return g_gate.load(std::memory_order_relaxed) != 0;
}

bool intercepts(int op);
const c10::BoxedKernel& slow_path();

// The force-fallback patterns in effect (from DIPU_FORCE_FALLBACK_OPS_LIST).
std::vector<std::string> force_fallback_patterns();
// Throws ValueError naming the pattern if `pattern` is not a valid regular expression.
void validate_pattern(const std::string& pattern);
// Re-reads the settings now (errors surface here instead of at the next op).
void refresh();

}  // namespace devx::diag
