#include "kernels/registry.h"

#include <vector>

#include "kernels/common.h"

namespace devx::cpu_sim::kern {
namespace {

const char* const kNames[] = {
#define DEVX_SIM_KERNEL_NAME(ident, name) name,
    DEVX_KERNEL_LIST(DEVX_SIM_KERNEL_NAME)
#undef DEVX_SIM_KERNEL_NAME
};

struct Registered {
  const char* name;
  void* fn;
  void* faulty;
  void* failing;
};

std::vector<Registered>& registry() {
  static std::vector<Registered> r;
  return r;
}

}  // namespace

void register_kernel(KernelId id, void* fn, void* faulty, void* failing) {
  registry().push_back({kNames[static_cast<int>(id)], fn, faulty, failing});
}

const DevxVendorKernel* kernel_table(bool (*faulty)(const char* name), bool failing) {
  static std::vector<DevxVendorKernel> table;
  table.clear();
  for (const Registered& r : registry()) {
    table.push_back({r.name, faulty(r.name) ? r.faulty : failing ? r.failing : r.fn});
  }
  table.push_back({nullptr, nullptr});
  return table.data();
}

void corrupt_last_element(DevxKernelContext* ctx, DevxTensor* out) {
  Tensor t = take(out);
  if (t.numel() == 0) return;
  int64_t last = 0;
  for (int d = 0; d < t.ndim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  char* p = t.data + last * static_cast<int64_t>(t.itemsize());
  const DevxDType dtype = t.dtype;
  launch(ctx, [p, dtype] {
    if (dtype == DEVX_BOOL) {
      *reinterpret_cast<bool*>(p) = !*reinterpret_cast<bool*>(p);
    } else {
      store_as(p, dtype, load_as<double>(p, dtype) + 1.0);
    }
  });
}

}  // namespace devx::cpu_sim::kern
