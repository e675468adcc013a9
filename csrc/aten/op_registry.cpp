#include "aten/op_registry.h"

#include <map>

#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "aten/compute_scope.h"
#include "aten/vendor_call.h"
#include "aten/cpu_fallback.h"
#include "runtime/log.h"
#include "runtime/vendor.h"

namespace devx {

void* g_compute_kernels[gen::kNumOps] = {};
void* g_kernels[gen::kNumOps] = {};

namespace {

KernelSource g_sources[gen::kNumOps];
std::vector<c10::OperatorHandle> g_handles;
std::unordered_map<c10::OperatorName, int> g_index;
std::once_flag g_handles_once;

void resolve_handles() {
  std::call_once(g_handles_once, [] {
    g_handles.reserve(gen::kNumOps);
    for (int i = 0; i < gen::kNumOps; ++i) {
      g_handles.push_back(c10::Dispatcher::singleton().findSchemaOrThrow(kOpNames[i].name, kOpNames[i].overload));
      g_index.emplace(g_handles.back().operator_name(), i);
    }
  });
}

}  // namespace

bool vendor_supports(const std::string& op) {
  return !g_vendor->op_supported || g_vendor->op_supported(op.c_str()) != 0;
}

void init_kernel_table() {
  resolve_handles();
  const DevxVendorApi& v = vendor();
  for (const std::string& op : bind_vendor_kernels(v.kernels)) {
    log::warn(log::Module::OPS, std::string("vendor ") + v.name + " brings a kernel for '" + op +
                                    "', which is not a kernel of this build's ABI; it is not used");
  }
  std::optional<c10::DispatchKey> compute_key;
  if (v.compute_device_type >= 0) {
    compute_key = c10::computeDispatchKey(std::nullopt, std::nullopt,
                                          static_cast<c10::DeviceType>(v.compute_device_type));
  }
  int native = 0;
  for (int i = 0; i < gen::kNumOps; ++i) {
    const bool computes = compute_key && g_handles[i].hasComputedKernelForDispatchKey(*compute_key) &&
                          vendor_supports(op_overload_name(i));
    void* otherwise = computes ? g_compute_kernels[i] : nullptr;
    g_declined_kernels[i] = otherwise;
    const int k = kOpKernel[i];
    // An adapter learns the results' shapes from the op's meta function.
    const bool adaptable = g_vendor_adapters[i] &&
                           (!kOpAdapterNeedsMeta[i] || g_handles[i].hasComputedKernelForDispatchKey(c10::DispatchKey::Meta));
    if (k >= 0 && g_vendor_kernels[k] && adaptable) {
      g_kernels[i] = g_vendor_adapters[i];
      g_sources[i] = KernelSource::kVendor;
      ++native;
      continue;
    }
    g_kernels[i] = otherwise;
    g_sources[i] = computes ? KernelSource::kCompute : KernelSource::kFallback;
    if (computes) ++native;
  }
  log::info(log::Module::OPS, std::to_string(native) + " of " + std::to_string(gen::kNumOps) +
                                  " generated ops are native on vendor " + v.name);
}

KernelSource kernel_source(int op) {
  return g_sources[op];
}

const c10::OperatorHandle& op_handle(int op) {
  resolve_handles();
  return g_handles[op];
}

std::string op_overload_name(int op) {
  std::string name = kOpNames[op].name + std::strlen("aten::");
  if (kOpNames[op].overload[0] != '\0') name += std::string(".") + kOpNames[op].overload;
  return name;
}

int op_index(const c10::OperatorName& name) {
  resolve_handles();
  auto it = g_index.find(name);
  return it == g_index.end() ? -1 : it->second;
}

const c10::BoxedKernel& fallback_kernel() {
  static const c10::BoxedKernel kernel = c10::BoxedKernel::makeFromFunction<&cpu_fallback>();
  return kernel;
}

}  // namespace devx
