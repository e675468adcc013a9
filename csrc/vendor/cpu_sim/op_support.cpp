// How the simulated hardware runs ops: which of ATen's CPU kernels it lets run on its memory (all,
// minus DEVX_SIM_UNSUPPORTED_OPS; none with DEVX_SIM_KERNELS=own-only), and whether they run on the streams' own threads (DEVX_SIM_ASYNC).
#include <regex>
#include <string>

#include "api.h"
#include "runtime.h"

namespace devx::cpu_sim {

int op_supported(const char* op) {
  if (Runtime::get().settings().kernels == Settings::Kernels::kOwnOnly) return 0;
  const std::string overload(op);
  const std::string base = overload.substr(0, overload.find('.'));
  for (const std::regex& re : Runtime::get().settings().unsupported_ops) {
    if (std::regex_match(overload, re) || std::regex_match(base, re)) return 0;
  }
  return 1;
}

// Every entry of this table is thread-safe and a stream's worker never holds a lock another
// stream's work needs, so host functions may call back into it (the contract of the flag).
int async_host_streams() {
  return Runtime::get().async() ? 1 : 0;
}

}  // namespace devx::cpu_sim
