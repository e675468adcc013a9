#include "aten/boxed_compute.h"

#include <torch/library.h>

#include <cstring>
#include <memory>
#include <unordered_set>

#include "aten/async_ops.h"
#include "aten/compute_scope.h"
#include "aten/cpu_fallback.h"
#include "aten/diagnostics.h"
#include "aten/layout_compute.h"
#include "aten/op_registry.h"
#include "aten/stack_util.h"
#include "runtime/device.h"
#include "runtime/vendor.h"

namespace devx {

namespace gen {
extern const char* const kInheritedStructured[];  // generated: fallback_ops.cpp
extern const int kNumInheritedStructured;
}  // namespace gen

namespace {

std::vector<std::string> g_long_tail;
std::unordered_set<c10::OperatorName> g_long_tail_names;
std::vector<std::string> g_refused;
std::unique_ptr<torch::Library> g_library;

// Ops a compute device's kernel must not run on devx memory: they produce other layouts or
// devices, or are the backend's own business (already hand-written where devx needs them).
bool excluded(const std::string& name) {
  static const char* const kPrefixes[] = {
      "aten::mkldnn", "aten::_mkldnn", "aten::to_mkldnn", "aten::quantize", "aten::_quantize", "aten::dequantize",
      "aten::q_", "aten::_make_per", "aten::_nested", "aten::nested", "aten::_sparse", "aten::sparse",
      "aten::_to_sparse", "aten::to_sparse", "aten::_fbgemm", "aten::fbgemm", "aten::_cudnn", "aten::cudnn",
      "aten::miopen", "aten::_cslt", "aten::_weight_int", "aten::_dyn_quant", "aten::_pin_memory",
      "aten::is_pinned", "aten::_local_scalar_dense", "aten::_copy_from", "aten::_fused_moving_avg",
      "aten::_use_cudnn", "aten::_validate", "aten::_compute_linear_combination", "aten::_convert_weight"};
  for (const char* p : kPrefixes) {
    if (name.rfind(p, 0) == 0) return true;
  }
  return false;
}

// The long-tail kernel proper: issued to the current stream when kernels are host functions on
// streams (async_ops.h), else boxed compute now.
void long_tail_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  if (C10_UNLIKELY(g_async_host_streams) && async::issuing()) {
    const size_t nargs = op.schema().arguments().size();
    DevxGuard guard(device_of_args(op.schema(), *stack, stack->size() - nargs));
    async::issue(op, stack);
    return;
  }
  boxed_compute(op, ks, stack);
}

// What the long-tail ops are registered to: the long-tail kernel, inside the diagnostics.
void diagnosed_boxed_compute(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  // Issued work and ops run inline after issuing went through the diagnostics when issued.
  if (C10_LIKELY(!diag::gate_open()) || async::t_inline_depth > 0) {
    long_tail_kernel(op, ks, stack);
    return;
  }
  diag::run(op, ks, stack, [&](torch::jit::Stack* s) { long_tail_kernel(op, ks, s); });
}

}  // namespace

void boxed_compute(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  const size_t first = stack->size() - nargs;
  DevxGuard guard(device_of_args(schema, *stack, first));
  ComputeScope scope;
  std::vector<std::pair<size_t, c10::IValue>> originals;  // written arguments, as the caller has them
  std::vector<c10::IValue> aliases;
  for (size_t i = 0; i < nargs; ++i) {
    c10::IValue& v = (*stack)[first + i];
    const c10::Argument& arg = schema.arguments()[i];
    if (is_generator_arg(arg)) {
      std::optional<at::Generator> gen;
      if (v.isGenerator()) gen = v.toGenerator();
      v = c10::IValue(*scope.generator(gen));
      continue;
    }
    if (v.isDevice()) {
      v = c10::IValue(scope.device(v.toDevice()));
      continue;
    }
    const bool written = argument_written(schema, i);
    if (written) originals.emplace_back(i, v);
    map_tensors(v, [&](const at::Tensor& t) { return scope.in(t); });
    if (written) aliases.push_back(v);
  }
  redispatch_on_compute(op, scope.keyset(), stack);
  for (size_t k = 0; k < originals.size(); ++k) {
    const c10::IValue& original = originals[k].second;
    if (original.isTensor()) {
      scope.sync_back(original.toTensor(), aliases[k].toTensor());
    } else if (original.isTensorList()) {
      auto devx_list = original.toTensorList();
      auto alias_list = aliases[k].toTensorList();
      for (size_t j = 0; j < devx_list.size(); ++j) scope.sync_back(devx_list[j], alias_list[j]);
    }
  }
  const auto& returns = schema.returns();
  const size_t ret_first = stack->size() - returns.size();
  for (size_t r = 0; r < returns.size(); ++r) {
    c10::IValue& v = (*stack)[ret_first + r];
    if (const c10::IValue* original = written_argument_for(schema, returns[r], originals)) {
      v = *original;
      continue;
    }
    map_tensors(v, [&](const at::Tensor& t) { return scope.out(t); });
  }
}

std::vector<std::string> register_long_tail() {
  const DevxVendorApi& v = vendor();
  g_library = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                               __FILE__, __LINE__);
  std::optional<c10::DispatchKey> compute_key;
  if (v.compute_device_type >= 0) {
    compute_key = c10::computeDispatchKey(std::nullopt, std::nullopt,
                                          static_cast<c10::DeviceType>(v.compute_device_type));
  }
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0 || excluded(name.name)) continue;
    auto handle = dispatcher.findOp(name);
    if (!handle || handle->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) continue;
    if (handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) continue;
    if (!compute_key || !handle->hasKernelForDispatchKey(*compute_key)) continue;
    std::string full = name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
    if (!vendor_supports(full.substr(std::strlen("aten::")))) {
      g_refused.push_back(full.substr(std::strlen("aten::")));
      continue;
    }
    g_library->impl(full.c_str(), torch::CppFunction::makeFromBoxedFunction<&diagnosed_boxed_compute>());
    g_long_tail.push_back(full.substr(std::strlen("aten::")));
    g_long_tail_names.insert(name);
  }
  // Composite kernels that refuse every device but the CPU, CUDA and XPU by name (mode_out): on
  // devx they run as the compute device's kernel, on aliases.
  static const char* const kDeviceCheckingComposites[] = {"mode.values"};
  if (compute_key) {
    for (const char* op_name : kDeviceCheckingComposites) {
      std::string full = std::string("aten::") + op_name;
      auto dot = full.find('.');
      auto found = dispatcher.findOp(c10::OperatorName(full.substr(0, dot), full.substr(dot + 1)));
      if (!found || found->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1) || !vendor_supports(op_name)) continue;
      g_library->impl(full.c_str(), torch::CppFunction::makeFromBoxedFunction<&diagnosed_boxed_compute>());
      g_long_tail.emplace_back(op_name);
      g_long_tail_names.insert(found->operator_name());
    }
  }
  // Inherited structured kernels the compute device cannot run: they must reach the fallback.
  for (int i = 0; i < gen::kNumInheritedStructured; ++i) {
    std::string full = std::string("aten::") + gen::kInheritedStructured[i];
    c10::OperatorName op_name = [&] {
      auto dot = full.find('.');
      return dot == std::string::npos ? c10::OperatorName(full, "")
                                      : c10::OperatorName(full.substr(0, dot), full.substr(dot + 1));
    }();
    auto found = dispatcher.findOp(op_name);
    if (!found || found->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) continue;
    g_library->impl(full.c_str(), torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
  }
  register_layout_kernels();
  return g_long_tail;
}

const std::vector<std::string>& long_tail_ops() {
  return g_long_tail;
}

const std::vector<std::string>& long_tail_refused() {
  return g_refused;
}

bool is_long_tail_op(const c10::OperatorName& name) {
  return g_long_tail_names.count(name) != 0;
}

}  // namespace devx
