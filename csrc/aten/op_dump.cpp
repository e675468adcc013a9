#include "aten/op_dump.h"

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/_to_copy.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <type_traits>

#include "runtime/log.h"

namespace devx::diag {

namespace {

constexpr const char* kIndent = "\n      ";

template <typename T>
void put(std::ostream& os, T v) {
  if constexpr (std::is_same_v<T, bool>) {
    os << (v ? "True" : "False");
  } else if constexpr (std::is_integral_v<T>) {
    os << static_cast<int64_t>(v);  // int8/uint8 as numbers, not characters
  } else if constexpr (std::is_same_v<T, c10::complex<double>>) {
    os << v.real() << (std::signbit(v.imag()) ? "" : "+") << v.imag() << "j";
  } else {
    const double d = static_cast<double>(v);
    if (std::isnan(d)) {
      os << "nan";  // a NaN's sign bit means nothing; "-nan" reads as a different value
    } else {
      os << d;
    }
  }
}

// Values [0, head) and [n - tail, n) of a contiguous host array, in one list.
template <typename T>
void put_values(std::ostream& os, const T* p, int64_t n, int64_t head, int64_t tail) {
  os << "[";
  for (int64_t i = 0; i < head; ++i) {
    if (i) os << ", ";
    put(os, p[i]);
  }
  if (head + tail < n) os << (head ? ", " : "") << "...";
  for (int64_t i = n - tail; i < n; ++i) {
    if (i > 0) os << ", ";
    put(os, p[i]);
  }
  os << "]";
}

// One pass over all elements: the statistics a capped dump prints instead of the elements it
// leaves out. NaNs are counted, not folded into min, max and mean.
template <typename T>
void put_stats(std::ostream& os, const T* p, int64_t n) {
  int64_t nans = 0, infs = 0, counted = 0;
  if constexpr (std::is_same_v<T, c10::complex<double>>) {
    double max_abs = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double re = p[i].real(), im = p[i].imag();
      if (std::isnan(re) || std::isnan(im)) {
        ++nans;
        continue;
      }
      if (std::isinf(re) || std::isinf(im)) ++infs;
      max_abs = std::max(max_abs, std::hypot(re, im));
    }
    os << kIndent << "stats: max |z| " << max_abs << "  nan " << nans << "  inf " << infs;
  } else {
    double lo = std::numeric_limits<double>::infinity(), hi = -lo, sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double v = static_cast<double>(p[i]);
      if constexpr (!std::is_integral_v<T>) {
        if (std::isnan(v)) {
          ++nans;
          continue;
        }
        if (std::isinf(v)) ++infs;
      }
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      sum += v;
      ++counted;
    }
    os << kIndent << "stats: ";
    if (counted) {
      os << "min " << lo << "  max " << hi << "  mean " << sum / static_cast<double>(counted);
    } else {
      os << "min -  max -  mean -";
    }
    os << "  nan " << nans << "  inf " << infs;
  }
}

template <typename T>
void put_tensor_values(std::ostream& os, const at::Tensor& flat, int64_t max_elements) {
  const T* p = flat.const_data_ptr<T>();
  const int64_t n = flat.numel();
  if (n <= max_elements) {
    os << kIndent << "values: ";
    put_values(os, p, n, n, 0);
    return;
  }
  const int64_t tail = max_elements / 2, head = max_elements - tail;
  os << kIndent << "values: ";
  if (max_elements > 0) {
    put_values(os, p, n, head, tail);
    os << " (first " << head << " and last " << tail << " of " << n << ")";
  } else {
    os << n << " elements, not printed (DEVX_DUMP_OP_ARGS_MAX_ELEMENTS=0)";
  }
  put_stats(os, p, n);
}

void put_host_values(std::ostream& os, at::Tensor host, int64_t max_elements) {
  host = host.resolve_conj().resolve_neg();
  switch (host.scalar_type()) {
    case at::kByte: case at::kChar: case at::kShort: case at::kInt: case at::kLong: case at::kFloat:
    case at::kDouble: case at::kHalf: case at::kBFloat16: case at::kBool:
      break;
    default:
      // Complex, float8, unsigned and other rare types are read in the widest type of their kind.
      host = host.to(host.is_complex()        ? at::kComplexDouble
                     : host.is_floating_point() ? at::kDouble
                                                : at::kLong);
  }
  const at::Tensor flat = host.contiguous();
  if (flat.scalar_type() == at::kComplexDouble) {
    put_tensor_values<c10::complex<double>>(os, flat, max_elements);
    return;
  }
  AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, flat.scalar_type(), "dump_values",
                             [&] { put_tensor_values<scalar_t>(os, flat, max_elements); });
}

std::string describe_tensor(const at::Tensor& t, const DumpStyle& style) {
  if (!t.defined()) return "undefined Tensor";
  std::ostringstream os;
  // Sparse and nested tensors have no strides or data pointer of their own; their members are
  // dumped as the ops that read them (_values, _indices) run.
  if (t.is_nested()) {
    os << "Tensor nested, dim " << t.dim() << " dtype " << t.scalar_type() << " device " << t.device();
    return os.str();
  }
  if (t.layout() != c10::kStrided) {
    os << "Tensor layout " << t.layout() << " sizes " << t.sizes() << " dtype " << t.scalar_type() << " device "
       << t.device();
    return os.str();
  }
  os << "Tensor sizes " << t.sizes() << " strides " << t.strides() << " dtype " << t.scalar_type() << " device "
     << t.device() << " storage_offset " << t.storage_offset() << " is_view " << (t.is_view() ? "yes" : "no")
     << " data_ptr " << t.const_data_ptr();
  // A 0-dim CPU tensor is a Python number the op was given: its value is part of the metadata.
  if (t.dim() == 0 && t.device().is_cpu()) os << " value " << t.item();
  if (t.is_quantized()) os << " quantized";
  if (style.level >= 3 && !t.is_quantized()) {
    // The values are read on the CPU; printing the device tensor itself would dispatch more ops
    // (and dump them) in the middle of this one.
    put_host_values(os, t.device().is_cpu() ? t : at::_to_copy(t, t.options().device(c10::kCPU)),
                    style.max_elements);
  }
  return os.str();
}

void write(const std::string& text) {
  log::write(log::Module::OPS, log::Level::INFO, text);
}

}  // namespace

std::string describe(const c10::IValue& v, const DumpStyle& style) {
  if (v.isTensor()) return describe_tensor(v.toTensor(), style);
  if (v.isTensorList()) {
    std::ostringstream os;
    auto list = v.toTensorList();
    os << "TensorList[" << list.size() << "]";
    for (size_t i = 0; i < list.size(); ++i) os << "\n      [" << i << "] " << describe_tensor(list[i], style);
    return os.str();
  }
  if (v.isOptionalTensorList()) {
    std::ostringstream os;
    auto list = v.toOptionalTensorList();
    os << "Tensor?[" << list.size() << "]";
    for (size_t i = 0; i < list.size(); ++i) {
      std::optional<at::Tensor> t = list[i];
      os << "\n      [" << i << "] " << (t.has_value() ? describe_tensor(*t, style) : std::string("None"));
    }
    return os.str();
  }
  std::ostringstream os;
  os << v.tagKind() << " " << v;
  return os.str();
}

void dump_args(const c10::OperatorHandle& op, const torch::jit::Stack& stack, const DumpStyle& style,
               const char* kernel, const std::string& site) {
  const auto& schema = op.schema();
  const auto& args = schema.arguments();
  std::ostringstream os;
  os << "op " << schema.operator_name() << "  kernel: " << kernel;
  if (!site.empty()) os << "  at " << site;
  if (style.level >= 2) {
    const size_t first = stack.size() - args.size();
    for (size_t i = 0; i < args.size(); ++i) os << "\n    " << args[i].name() << ": " << describe(stack[first + i], style);
  }
  write(os.str());
}

void dump_results(const c10::OperatorHandle& op, const torch::jit::Stack& stack, const DumpStyle& style) {
  const auto& returns = op.schema().returns();
  std::ostringstream os;
  os << "op " << op.schema().operator_name() << "  results:";
  const size_t first = stack.size() - returns.size();
  for (size_t i = 0; i < returns.size(); ++i) {
    os << "\n    " << (returns[i].name().empty() ? "result" + std::to_string(i) : returns[i].name()) << ": "
       << describe(stack[first + i], style);
  }
  write(os.str());
}

}  // namespace devx::diag
