#include "aten/cpu_fallback.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/_copy_from_and_resize.h>
#include <ATen/ops/_to_copy.h>
#include <torch/library.h>

#include <mutex>
#include <optional>
#include <unordered_map>

#include "aten/boxed_compute.h"
#include "aten/diagnostics.h"
#include "aten/stack_util.h"
#include "runtime/device.h"
#include "runtime/generator.h"
#include "runtime/log.h"

namespace devx {

namespace {

std::mutex g_stats_mutex;
std::unordered_map<std::string, int64_t> g_stats;

std::string overload_name(const c10::OperatorHandle& op) {
  const auto& n = op.operator_name();
  std::string name = n.name.substr(n.name.find("::") + 2);
  if (!n.overload_name.empty()) name += "." + n.overload_name;
  return name;
}

void count(const c10::OperatorHandle& op) {
  std::string name = overload_name(op);
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(g_stats_mutex);
    first = g_stats[name]++ == 0;
  }
  if (first) log::warn(log::Module::FALLBACK, "op " + name + " runs on the CPU (no devx kernel, or forced)");
}

bool is_devx(const at::Tensor& t) {
  return t.defined() && t.device().type() == kDevx;
}

at::Tensor to_cpu(const at::Tensor& t) {
  return at::_to_copy(t, t.options().device(c10::kCPU));
}

at::Tensor to_devx(const at::Tensor& t, c10::DeviceIndex device) {
  if (!t.defined() || t.device().type() != c10::kCPU) return t;
  return at::_to_copy(t, t.options().device(devx_device(device)));
}

bool returns_view(const c10::FunctionSchema& schema) {
  for (const auto& r : schema.returns()) {
    if (r.alias_info() && !r.alias_info()->isWrite()) return true;
  }
  return false;
}

// copy_ (forced to the fallback) is the one op whose tensors may lie on different devices, host
// and devx or two devx devices: it runs on the destination's device when that is devx, else on the
// source's.
std::optional<c10::DeviceIndex> copy_device(const c10::OperatorHandle& op, const torch::jit::Stack& stack,
                                            size_t first) {
  if (op.operator_name().name != "aten::copy_") return std::nullopt;
  const at::Tensor& self = stack[first].toTensor();
  const at::Tensor& src = stack[first + 1].toTensor();
  return (is_devx(self) ? self : src).device().index();
}

}  // namespace

const c10::OperatorHandle* cpu_form(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& name = op.operator_name().name;
  if (name == "aten::convolution_overrideable") {
    static const auto conv = c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution", "");
    return &conv;
  }
  if (name == "aten::convolution_backward_overrideable") {
    static const auto conv_bwd = c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution_backward", "");
    // (grad_output, input, weight, stride, padding, dilation, transposed, output_padding, groups,
    //  output_mask): insert bias_sizes after weight.
    const size_t first = stack->size() - 10;
    const at::Tensor& weight = (*stack)[first + 2].toTensor();
    bool transposed = (*stack)[first + 6].toBool();
    int64_t groups = (*stack)[first + 8].toInt();
    std::vector<int64_t> bias_sizes{transposed ? weight.size(1) * groups : weight.size(0)};
    stack->insert(stack->begin() + static_cast<std::ptrdiff_t>(first + 3), c10::IValue(bias_sizes));
    return &conv_bwd;
  }
  return &op;
}

// An op ATen has kernels for only on accelerators (CUDA's SyncBatchNorm and fused-attention
// pieces, int4 matmul): the CPU cannot stand in, and its "Could not run ... 'CPU' backend" would
// name the wrong device.
[[noreturn]] void no_kernel_anywhere(const c10::OperatorHandle& op) {
  std::string backends;
  for (c10::DispatchKey key : {c10::DispatchKey::CUDA, c10::DispatchKey::XPU, c10::DispatchKey::MPS}) {
    if (op.hasKernelForDispatchKey(key)) backends += (backends.empty() ? "" : ", ") + std::string(c10::toString(key));
  }
  TORCH_CHECK_NOT_IMPLEMENTED(false, "devx: aten::", overload_name(op), " has no devx kernel, and the CPU, which "
                              "devx falls back to, has none either (ATen has it for ",
                              backends.empty() ? std::string("accelerators such as CUDA") : backends,
                              " only). The README's coverage section lists such ops.");
}

void cpu_fallback(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  if (C10_UNLIKELY(!op.hasComputedKernelForDispatchKey(c10::DispatchKey::CPU))) no_kernel_anywhere(op);
  count(op);
  // Moving the arguments to the CPU and the results back is the fallback's own work, part of this op.
  diag::QuietScope quiet;
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  const size_t first = stack->size() - nargs;
  const std::optional<c10::DeviceIndex> of_copy = copy_device(op, *stack, first);
  const c10::DeviceIndex device = of_copy ? *of_copy : device_of_args(schema, *stack, first);
  DevxGuard guard(device);

  if (returns_view(schema)) {
    boxed_compute(op, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), stack);
    return;
  }

  // Originals of the arguments the op writes, to copy results back into.
  std::vector<std::pair<size_t, c10::IValue>> written;
  for (size_t i = 0; i < nargs; ++i) {
    c10::IValue& v = (*stack)[first + i];
    if (argument_written(schema, i)) written.emplace_back(i, v);
    if (v.isDevice() && v.toDevice().type() == kDevx) {
      v = c10::IValue(c10::Device(c10::kCPU));
      continue;
    }
    if (is_generator_arg(schema.arguments()[i])) {
      // Draw from the devx generator, as the native kernel would, not the CPU's.
      std::optional<at::Generator> gen;
      if (v.isGenerator()) gen = v.toGenerator();
      v = c10::IValue(compute_generator_for(gen, device));
      continue;
    }
    map_tensors(v, [](const at::Tensor& t) { return is_devx(t) ? to_cpu(t) : t; });
  }
  // Keep the CPU versions of written arguments: the kernel writes into them.
  std::vector<c10::IValue> written_cpu;
  for (auto& [i, original] : written) written_cpu.push_back((*stack)[first + i]);

  cpu_form(op, stack)->redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);

  for (size_t k = 0; k < written.size(); ++k) {
    c10::IValue& original = written[k].second;
    const c10::IValue& cpu = written_cpu[k];
    if (original.isTensor() && is_devx(original.toTensor())) {
      at::_copy_from_and_resize(cpu.toTensor(), original.toTensor());
    } else if (original.isTensorList()) {
      auto dst = original.toTensorList();
      auto src = cpu.toTensorList();
      for (size_t j = 0; j < dst.size(); ++j) {
        if (is_devx(dst[j])) at::_copy_from_and_resize(src[j], dst[j]);
      }
    }
  }

  const auto& returns = schema.returns();
  const size_t ret_first = stack->size() - returns.size();
  for (size_t r = 0; r < returns.size(); ++r) {
    c10::IValue& v = (*stack)[ret_first + r];
    if (const c10::IValue* original = written_argument_for(schema, returns[r], written)) {
      v = *original;
      continue;
    }
    map_tensors(v, [&](const at::Tensor& t) { return to_devx(t, device); });
  }
}

std::map<std::string, int64_t> fallback_stats() {
  std::lock_guard<std::mutex> lock(g_stats_mutex);
  return {g_stats.begin(), g_stats.end()};
}

void reset_fallback_stats() {
  std::lock_guard<std::mutex> lock(g_stats_mutex);
  g_stats.clear();
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

}  // namespace devx
