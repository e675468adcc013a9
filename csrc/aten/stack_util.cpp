#include "aten/stack_util.h"

#include "aten/compute_scope.h"
#include "runtime/device.h"

namespace devx {

bool is_generator_arg(const c10::Argument& arg) {
  const c10::TypePtr& type = arg.type();
  auto opt = type->cast<c10::OptionalType>();
  return (opt ? opt->getElementType() : type)->kind() == c10::TypeKind::GeneratorType;
}

c10::DeviceIndex device_of_args(const c10::FunctionSchema& schema, const torch::jit::Stack& stack, size_t first) {
  std::optional<c10::DeviceIndex> found;
  bool has_cpu_tensor = false;
  bool written = false;
  c10::Device cpu_device(c10::kCPU);
  auto check = [&](const at::Tensor& t) {
    if (!t.defined()) return;
    if (t.device().type() == kDevx) {
      if (!found) found = t.device().index();
      TORCH_CHECK(*found == t.device().index(), "Expected all tensors to be on the same device, but found at least "
                  "two devices, ", devx_device(*found), " and ", t.device(), "!");
    } else if (t.dim() > 0 || written) {
      // Only inputs may be 0-dim CPU scalars: an op never writes host memory, as on CUDA.
      has_cpu_tensor = true;
      cpu_device = t.device();
    }
  };
  const size_t n = schema.arguments().size();
  for (size_t i = 0; i < n; ++i) {
    const c10::IValue& v = stack[first + i];
    if (v.isDevice()) {
      if (v.toDevice().type() == kDevx && !found) found = v.toDevice().index();
    } else {
      written = argument_written(schema, i);
      for_each_tensor(v, check);
    }
  }
  c10::DeviceIndex device = found.value_or(current_device());
  TORCH_CHECK(!(found && has_cpu_tensor), "Expected all tensors to be on the same device, but found at least two "
              "devices, ", devx_device(device), " and ", cpu_device, "! (only 0-dim CPU tensors may be mixed in)");
  return device;
}


bool argument_written(const c10::FunctionSchema& schema, size_t i) {
  const auto* alias = schema.arguments()[i].alias_info();
  if (alias && alias->isWrite()) return true;
  // native_batch_norm(input, weight, bias, running_mean, running_var, training, ...) updates the
  // running statistics in place when training.
  return schema.name() == "aten::native_batch_norm" && (i == 3 || i == 4);
}

const c10::IValue* written_argument_for(const c10::FunctionSchema& schema, const c10::Argument& ret,
                                        const std::vector<std::pair<size_t, c10::IValue>>& written) {
  const auto* alias = ret.alias_info();
  if (!alias || !alias->isWrite()) return nullptr;
  for (const auto& [index, original] : written) {
    const auto* arg_alias = schema.arguments()[index].alias_info();
    if (arg_alias && arg_alias->beforeSets() == alias->beforeSets()) return &original;
  }
  return nullptr;
}

void redispatch_on_compute(const c10::OperatorHandle& op, c10::DispatchKeySet compute_ks, torch::jit::Stack* stack) {
  try {
    op.redispatchBoxed(compute_ks, stack);
  } catch (c10::NotImplementedError& e) {
    explain_compute_error(e, c10::toString(op.operator_name()).c_str());
    throw;
  }
}

}  // namespace devx
