// cpu_sim's kernel table: each kernel file registers its kernels at load time.
#pragma once

#include "devx_kernels.h"
#include "faults.h"

namespace devx::cpu_sim::kern {

// The overload names of devx_kernels.h, by identifier: kKernelName[KernelId::add_out] == "add.out".
enum class KernelId {
#define DEVX_SIM_KERNEL_ID(ident, name) ident,
  DEVX_KERNEL_LIST(DEVX_SIM_KERNEL_ID)
#undef DEVX_SIM_KERNEL_ID
};

// `faulty` is the same kernel made wrong on purpose (DEVX_SIM_FAULTY_KERNELS), for rehearsing
// what autocompare, vendor-test and the divergence finder say about a wrong vendor kernel;
// `failing` the same kernel failing when DEVX_SIM_FAULTS says so ("kernel:0.01").
void register_kernel(KernelId id, void* fn, void* faulty, void* failing);

// The table offered to the core, terminated by {NULL, NULL}: every kernel, those whose names
// match `faulty` (a predicate on "add.out") in their faulty form, the others in their failing
// form where `failing` (injected kernel faults: the plain form never pays for asking).
const DevxVendorKernel* kernel_table(bool (*faulty)(const char* name), bool failing);

// After the kernel ran, adds 1 to the last element of its first tensor output (true becomes
// false): a wrong result in one place, as a kernel that gets an edge case wrong gives.
void corrupt_last_element(DevxKernelContext* ctx, DevxTensor* out);

template <typename Fn, Fn F>
struct Failing;

template <typename... A, DevxStatus (*F)(DevxKernelContext*, A...)>
struct Failing<DevxStatus (*)(DevxKernelContext*, A...), F> {
  static DevxStatus call(DevxKernelContext* ctx, A... args) {
    if (DevxStatus status = injected_fault(FaultCall::kKernel)) return status;
    return F(ctx, args...);
  }
};

template <typename Fn, Fn F>
struct Faulty;

template <typename... A, DevxStatus (*F)(DevxKernelContext*, A...)>
struct Faulty<DevxStatus (*)(DevxKernelContext*, A...), F> {
  static DevxStatus call(DevxKernelContext* ctx, A... args) {
    const DevxStatus status = F(ctx, args...);
    if (status != DEVX_OK) return status;
    DevxTensor* out = nullptr;
    ((out = out ? out : first_output(args)), ...);
    if (out) corrupt_last_element(ctx, out);
    return status;
  }

 private:
  static DevxTensor* first_output(DevxTensor* t) { return t; }
  template <typename T>
  static DevxTensor* first_output(const T&) { return nullptr; }
};

}  // namespace devx::cpu_sim::kern

// Registers `fn` as the kernel `ident` of devx_kernels.h; its type is checked against the ABI.
#define DEVX_SIM_REGISTER_KERNEL(ident, fn)                                                               \
  static const bool devx_sim_registered_##ident = [] {                                                    \
    constexpr DevxKernel_##ident devx_sim_fn = fn;                                                        \
    ::devx::cpu_sim::kern::register_kernel(                                                               \
        ::devx::cpu_sim::kern::KernelId::ident, reinterpret_cast<void*>(devx_sim_fn),                     \
        reinterpret_cast<void*>(&::devx::cpu_sim::kern::Faulty<DevxKernel_##ident, devx_sim_fn>::call),   \
        reinterpret_cast<void*>(&::devx::cpu_sim::kern::Failing<DevxKernel_##ident, devx_sim_fn>::call)); \
    return true;                                                                                          \
  }()
