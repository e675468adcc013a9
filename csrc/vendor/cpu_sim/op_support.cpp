// Which ops the simulated hardware has kernels for: all of the CPU's, minus DEVX_SIM_UNSUPPORTED_OPS.
#include <regex>
#include <string>

#include "api.h"
#include "runtime.h"

namespace devx::cpu_sim {

int op_supported(const char* op) {
  const std::string overload(op);
  const std::string base = overload.substr(0, overload.find('.'));
  for (const std::regex& re : Runtime::get().settings().unsupported_ops) {
    if (std::regex_match(overload, re) || std::regex_match(base, re)) return 0;
  }
  return 1;
}

}  // namespace devx::cpu_sim
