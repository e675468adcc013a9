#include "kernels/registry.h"

#include <vector>

namespace devx::cpu_sim::kern {
namespace {

const char* const kNames[] = {
#define DEVX_SIM_KERNEL_NAME(ident, name) name,
    DEVX_KERNEL_LIST(DEVX_SIM_KERNEL_NAME)
#undef DEVX_SIM_KERNEL_NAME
};

std::vector<DevxVendorKernel>& table() {
  static std::vector<DevxVendorKernel> t;
  return t;
}

}  // namespace

void register_kernel(KernelId id, void* fn) {
  table().push_back({kNames[static_cast<int>(id)], fn});
}

const DevxVendorKernel* kernel_table() {
  static const std::vector<DevxVendorKernel> terminated = [] {
    std::vector<DevxVendorKernel> t = table();
    t.push_back({nullptr, nullptr});
    return t;
  }();
  return terminated.data();
}

}  // namespace devx::cpu_sim::kern
