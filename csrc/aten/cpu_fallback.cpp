#include "aten/cpu_fallback.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/_copy_from_and_resize.h>
#include <ATen/ops/_to_copy.h>
#include <torch/library.h>

#include <mutex>
#include <unordered_map>

#include "aten/compute_scope.h"
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

// Replaces `v` (a tensor, a tensor list or an optional-tensor list) by the same with `f` applied
// to each tensor. Lists are rebuilt, not edited: c10::List shares its elements with every copy,
// and the caller keeps the originals.
template <typename F>
void map_tensors(c10::IValue& v, F f) {
  if (v.isTensor()) {
    v = f(v.toTensor());
  } else if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) out.push_back(f(t));
    v = std::move(out);
  } else if (v.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> out;
    for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) {
      out.push_back(t.has_value() ? std::optional<at::Tensor>(f(*t)) : std::nullopt);
    }
    v = std::move(out);
  }
}

bool is_generator_arg(const c10::Argument& arg) {
  const c10::TypePtr& type = arg.type();
  auto opt = type->cast<c10::OptionalType>();
  return (opt ? opt->getElementType() : type)->kind() == c10::TypeKind::GeneratorType;
}

// The op's devx device; every devx tensor argument must be on it and CPU tensors must be 0-dim
// scalars, the same rule the native path (and CUDA) applies.
c10::DeviceIndex device_of_args(const torch::jit::Stack& stack, size_t first, size_t n) {
  std::optional<c10::DeviceIndex> found;
  bool has_cpu_tensor = false;
  c10::Device cpu_device(c10::kCPU);
  auto check = [&](const at::Tensor& t) {
    if (!t.defined()) return;
    if (is_devx(t)) {
      if (!found) found = t.device().index();
      TORCH_CHECK(*found == t.device().index(), "Expected all tensors to be on the same device, but found at least "
                  "two devices, ", devx_device(*found), " and ", t.device(), "!");
    } else if (t.dim() > 0) {
      has_cpu_tensor = true;
      cpu_device = t.device();
    }
  };
  for (size_t i = first; i < first + n; ++i) {
    const c10::IValue& v = stack[i];
    if (v.isTensor()) {
      check(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) check(t);
    } else if (v.isOptionalTensorList()) {
      for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) {
        if (t.has_value()) check(*t);
      }
    } else if (v.isDevice() && v.toDevice().type() == kDevx && !found) {
      found = v.toDevice().index();
    }
  }
  c10::DeviceIndex device = found.value_or(current_device());
  TORCH_CHECK(!(found && has_cpu_tensor), "Expected all tensors to be on the same device, but found at least two "
              "devices, ", devx_device(device), " and ", cpu_device, "! (only 0-dim CPU tensors may be mixed in)");
  return device;
}

void run_view_on_aliases(const c10::OperatorHandle& op, torch::jit::Stack* stack, size_t first, size_t n,
                         c10::DeviceIndex device) {
  ComputeScope scope;
  for (size_t i = first; i < first + n; ++i) {
    map_tensors((*stack)[i], [&](const at::Tensor& t) { return scope.in(t); });
  }
  op.redispatchBoxed(scope.keyset(), stack);
  size_t nret = op.schema().returns().size();
  for (size_t i = stack->size() - nret; i < stack->size(); ++i) {
    map_tensors((*stack)[i], [&](const at::Tensor& t) { return scope.out(t); });
  }
}

// PyTorch routes PrivateUse1 convolutions to the *_overrideable ops, which have no CPU kernel:
// their CPU form is the plain convolution op (the backward also wants the bias sizes).
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

}  // namespace

void cpu_fallback(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  count(op);
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  const size_t first = stack->size() - nargs;
  const c10::DeviceIndex device = device_of_args(*stack, first, nargs);
  DevxGuard guard(device);

  if (returns_view(schema)) {
    run_view_on_aliases(op, stack, first, nargs, device);
    return;
  }

  // Originals of the arguments the op writes, to copy results back into.
  std::vector<std::pair<size_t, c10::IValue>> written;
  for (size_t i = 0; i < nargs; ++i) {
    c10::IValue& v = (*stack)[first + i];
    const auto* alias = schema.arguments()[i].alias_info();
    if (alias && alias->isWrite()) written.emplace_back(i, v);
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
    const auto* alias = returns[r].alias_info();
    if (alias && alias->isWrite()) {
      // A result that is a written argument is that argument, as the caller holds it.
      for (size_t k = 0; k < written.size(); ++k) {
        const auto* arg_alias = schema.arguments()[written[k].first].alias_info();
        if (arg_alias->beforeSets() == alias->beforeSets()) {
          v = written[k].second;
          break;
        }
      }
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
