// cpu_sim's kernel table: each kernel file registers its kernels at load time.
#pragma once

#include "devx_kernels.h"

namespace devx::cpu_sim::kern {

// The overload names of devx_kernels.h, by identifier: kKernelName[KernelId::add_out] == "add.out".
enum class KernelId {
#define DEVX_SIM_KERNEL_ID(ident, name) ident,
  DEVX_KERNEL_LIST(DEVX_SIM_KERNEL_ID)
#undef DEVX_SIM_KERNEL_ID
};

void register_kernel(KernelId id, void* fn);

// The table offered to the core, terminated by {NULL, NULL}.
const DevxVendorKernel* kernel_table();

}  // namespace devx::cpu_sim::kern

// Registers `fn` as the kernel `ident` of devx_kernels.h; its type is checked against the ABI.
#define DEVX_SIM_REGISTER_KERNEL(ident, fn)                                                            \
  static const bool devx_sim_registered_##ident = [] {                                                 \
    ::devx::cpu_sim::kern::register_kernel(::devx::cpu_sim::kern::KernelId::ident,                     \
                                           reinterpret_cast<void*>(static_cast<DevxKernel_##ident>(fn))); \
    return true;                                                                                       \
  }()
