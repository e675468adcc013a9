// DEVX_SIM_FAULTS: vendor calls that fail on purpose, to rehearse a device whose runtime calls
// fail (an allocation refused, a copy or a kernel that errs) and check that the core reports each
// failure and stays consistent. "malloc:0.01,memcpy:#40": each malloc fails with probability 0.01, the 40th
// memcpy fails. Which calls fail depends only on the setting and the call's number, so a run can
// be repeated.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "runtime/vendor_api.h"

namespace devx::cpu_sim {

enum class FaultCall { kMalloc, kMemcpy, kKernel, kCount };

struct FaultRule {
  double rate = 0;   // probability that a call fails
  uint64_t nth = 0;  // the one call (1-based) that fails; 0: none
  bool active() const { return rate > 0 || nth > 0; }
};

using FaultRules = std::array<FaultRule, static_cast<size_t>(FaultCall::kCount)>;

// Parses DEVX_SIM_FAULTS; on a bad value returns false with `why` saying what is accepted.
bool parse_faults(const std::string& spec, FaultRules* out, std::string* why);

// DEVX_OK, or the injected failure (DEVX_ERROR with a last_error naming the call) of this call.
DevxStatus injected_fault(FaultCall call);

// Whether calls of this kind may fail (kernels are offered in a form that asks only then).
bool faults_injected(FaultCall call);

}  // namespace devx::cpu_sim
