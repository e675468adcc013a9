// Which of cpu_sim's own kernels (kernels/) are offered to the core: all of them unless
// DEVX_SIM_KERNELS=aten, where ATen's CPU kernels run on aliases of the arena instead; those
// DEVX_SIM_FAULTY_KERNELS names in their deliberately wrong form.
#include <regex>
#include <string>
#include <vector>

#include "api.h"
#include "kernels/registry.h"
#include "runtime.h"

namespace devx::cpu_sim {
namespace {

// Its address is handed out before init() decides what it holds: capacity for every kernel is
// reserved up front, so the address never changes.
bool never(const char*) {
  return false;
}

bool faulty(const char* name) {
  for (const std::regex& re : Runtime::get().settings().faulty_kernels) {
    if (std::regex_match(name, re)) return true;
  }
  return false;
}

std::vector<DevxVendorKernel>& offered() {
  static std::vector<DevxVendorKernel> table = [] {
    std::vector<DevxVendorKernel> t;
    size_t n = 1;
    for (const DevxVendorKernel* k = kern::kernel_table(&never, false); k->op; ++k) ++n;
    t.reserve(n);
    t.push_back({nullptr, nullptr});
    return t;
  }();
  return table;
}

}  // namespace

const DevxVendorKernel* own_kernels() {
  return offered().data();
}

void offer_own_kernels(bool on) {
  std::vector<DevxVendorKernel>& table = offered();
  table.clear();
  if (on) {
    const bool failing = faults_injected(FaultCall::kKernel);
    for (const DevxVendorKernel* k = kern::kernel_table(&faulty, failing); k->op; ++k) table.push_back(*k);
  }
  table.push_back({nullptr, nullptr});
}

}  // namespace devx::cpu_sim
