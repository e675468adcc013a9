#include "aten/op_dump.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/_to_copy.h>
#include <ATen/ops/view_as_real.h>

#include <sstream>

#include "runtime/log.h"

namespace devx::diag {

namespace {

std::string describe_tensor(const at::Tensor& t, int level) {
  if (!t.defined()) return "undefined Tensor";
  std::ostringstream os;
  os << "Tensor sizes " << t.sizes() << " strides " << t.strides() << " dtype " << t.scalar_type() << " device "
     << t.device() << " storage_offset " << t.storage_offset() << " is_view " << (t.is_view() ? "yes" : "no")
     << " data_ptr " << t.const_data_ptr();
  // A 0-dim CPU tensor is a Python number the op was given: its value is part of the metadata.
  if (t.dim() == 0 && t.device().is_cpu()) os << " value " << t.item();
  if (level >= 3) {
    // The values are read on the CPU; printing the device tensor itself would dispatch more ops
    // (and dump them) in the middle of this one.
    at::Tensor host = t.device().is_cpu() ? t : at::_to_copy(t, t.options().device(c10::kCPU));
    // Printing casts to double, which warns (and, under -W error, raises) for complex values:
    // they are printed as (real, imaginary) pairs.
    os << "\n      values: " << (host.is_complex() ? at::view_as_real(host.resolve_conj()) : host);
  }
  return os.str();
}

void write(const std::string& text) {
  log::write(log::Module::OPS, log::Level::INFO, text);
}

}  // namespace

std::string describe(const c10::IValue& v, int level) {
  if (v.isTensor()) return describe_tensor(v.toTensor(), level);
  if (v.isTensorList()) {
    std::ostringstream os;
    auto list = v.toTensorList();
    os << "TensorList[" << list.size() << "]";
    for (size_t i = 0; i < list.size(); ++i) os << "\n      [" << i << "] " << describe_tensor(list[i], level);
    return os.str();
  }
  if (v.isOptionalTensorList()) {
    std::ostringstream os;
    auto list = v.toOptionalTensorList();
    os << "Tensor?[" << list.size() << "]";
    for (size_t i = 0; i < list.size(); ++i) {
      std::optional<at::Tensor> t = list[i];
      os << "\n      [" << i << "] " << (t.has_value() ? describe_tensor(*t, level) : std::string("None"));
    }
    return os.str();
  }
  std::ostringstream os;
  os << v.tagKind() << " " << v;
  return os.str();
}

void dump_args(const c10::OperatorHandle& op, const torch::jit::Stack& stack, int level, const char* kernel) {
  const auto& schema = op.schema();
  const auto& args = schema.arguments();
  std::ostringstream os;
  os << "op " << schema.operator_name() << "  kernel: " << kernel;
  if (level >= 2) {
    const size_t first = stack.size() - args.size();
    for (size_t i = 0; i < args.size(); ++i) os << "\n    " << args[i].name() << ": " << describe(stack[first + i], level);
  }
  write(os.str());
}

void dump_results(const c10::OperatorHandle& op, const torch::jit::Stack& stack, int level) {
  const auto& returns = op.schema().returns();
  std::ostringstream os;
  os << "op " << op.schema().operator_name() << "  results:";
  const size_t first = stack.size() - returns.size();
  for (size_t i = 0; i < returns.size(); ++i) {
    os << "\n    " << (returns[i].name().empty() ? "result" + std::to_string(i) : returns[i].name()) << ": "
       << describe(stack[first + i], level);
  }
  write(os.str());
}

}  // namespace devx::diag
